"""Right but unusual answers to chapter 11's sparse-attention and KV-sharing exercises."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from course_utils.chapters import sliding_window_mask, split_heads


def sparse_by_gather(q, k, v, index_scores, topk):
    """Gathers each query's chosen keys and values, (b, h, n, topk, d), and masks the places a
    short prefix leaves empty; ties go to torch.topk's order."""
    n, N = q.shape[-2], k.shape[-2]
    causal = sliding_window_mask(n, N, N, device=q.device)  # (n, N)
    top = index_scores.masked_fill(~causal, -torch.inf).topk(min(topk, N), dim=-1)
    idx = top.indices[:, None, :, :, None]  # (b, 1, n, k, 1)
    b, h = q.shape[:2]
    pick = lambda t: (
        t[:, :, None]
        .expand(b, h, n, N, t.shape[-1])
        .gather(  # noqa: E731
            3, idx.expand(b, h, n, idx.shape[3], t.shape[-1])
        )
    )
    scores = (pick(k) @ q[..., None]).squeeze(-1) / math.sqrt(q.shape[-1])  # (b, h, n, k)
    scores = scores.masked_fill(top.values[:, None] == -torch.inf, -torch.inf)
    return (torch.softmax(scores, -1)[..., None] * pick(v)).sum(3)  # (b, h, n, dv)


def sparse_latest_ties_loop(q, k, v, index_scores, topk):
    """Query by query in Python, ties broken towards the latest key, through F.scaled_dot_product_attention."""
    n, N = q.shape[-2], k.shape[-2]
    rows = []
    for t in range(n):
        pos = N - n + t  # this query's position
        prefix = index_scores[:, t, : pos + 1].flip(-1)  # (b, pos + 1): latest first
        order = pos - prefix.sort(dim=-1, descending=True, stable=True).indices[:, :topk]
        keep = torch.zeros(index_scores.shape[0], N, dtype=torch.bool, device=q.device)
        keep.scatter_(-1, order, True)
        rows.append(
            F.scaled_dot_product_attention(q[:, :, t : t + 1], k, v, attn_mask=keep[:, None, None])
        )
    return torch.cat(rows, dim=2)


def shared_by_handing_along(x, layers, kv_source, heads, cache=None):
    """Keys and values handed to the layers that read them through a list; the cache's pairs are
    lists, its keys rebuilt at the end; attention by F.scaled_dot_product_attention."""
    b, n, d = x.shape
    kv = [None] * len(layers)
    for i, w in enumerate(layers):
        if kv_source[i] == i:
            new = [split_heads(x @ w[m].T, heads) for m in ("w_k", "w_v")]
            old = None if cache is None else cache[i]
            kv[i] = new if old is None else [torch.cat([o, t], dim=2) for o, t in zip(old, new)]
        k, v = kv[kv_source[i]]
        N = k.shape[2]
        mask = sliding_window_mask(n, N, N, device=x.device)
        out = F.scaled_dot_product_attention(
            split_heads(x @ w["w_q"].T, heads), k, v, attn_mask=mask
        )
        x = x + out.transpose(1, 2).reshape(b, n, d) @ w["w_o"].T
    return x, {i: pair for i, pair in enumerate(kv) if pair is not None}


def sparse_float_masks(q, k, v, index_scores, topk):
    """The way of ch04/09_dsa/gpt_with_kv_dsa.py in rasbt/LLMs-from-scratch pull request #1014 (not
    on its main branch): a float causal mask (-inf in the future) added to the index scores before
    topk(min(topk, N)), a sparse mask of -inf with 0 scattered at the chosen keys, both added to the
    scaled scores."""
    n, N = q.shape[-2], k.shape[-2]
    q_pos = torch.arange(N - n, N, device=q.device)
    causal = torch.zeros(n, N, device=q.device).masked_fill(
        q_pos[:, None] < torch.arange(N, device=q.device), float("-inf")
    )
    chosen = (index_scores + causal).topk(min(topk, N), dim=-1).indices  # (b, n, k)
    sparse = torch.full(index_scores.shape, float("-inf"), device=q.device).scatter(-1, chosen, 0.0)
    scores = q @ k.mT / math.sqrt(q.shape[-1]) + (causal + sparse)[:, None]
    return torch.softmax(scores, dim=-1) @ v


SPARSE_RIGHT = [sparse_by_gather, sparse_latest_ties_loop, sparse_float_masks]
SHARE_RIGHT = [shared_by_handing_along]
