"""Wrong answers to chapter 11's sparse-attention exercise; each says where it comes from."""

from __future__ import annotations

import torch

from course_utils.chapters import attend, sliding_window_mask


def _keep(chosen, shape):
    return torch.zeros(shape, dtype=torch.bool, device=chosen.device).scatter(-1, chosen, True)


def topk_then_mask(q, k, v, index_scores, topk):
    """Top-k over every key, the causal mask applied only to the attention: the selection of
    HKUSTDial/flash-sparse-attention#146 ("the causal mask is missing here ... reduced attention
    range for earlier tokens")."""
    n, N = q.shape[-2], k.shape[-2]
    keep = _keep(index_scores.topk(min(topk, N), dim=-1).indices, index_scores.shape)  # (b, n, N)
    return attend(q, k, v, keep[:, None] & sliding_window_mask(n, N, N, device=q.device))


def no_causal_mask(q, k, v, index_scores, topk):
    """Top-k over every key and no causal mask at all: the bidirectional prefill of
    osaurus-ai/vmlx-swift#429 (no mask reached the attention)."""
    keep = _keep(index_scores.topk(min(topk, k.shape[-2]), dim=-1).indices, index_scores.shape)
    return attend(q, k, v, keep[:, None])


def gather_fills_future(q, k, v, index_scores, topk):
    """Constructed: a gather of the top-k of the masked scores that attends to every gathered key;
    a query with fewer than topk earlier keys gets later ones in its spare places."""
    n, N = q.shape[-2], k.shape[-2]
    ranked = index_scores.masked_fill(~sliding_window_mask(n, N, N, device=q.device), -torch.inf)
    chosen = ranked.topk(min(topk, N), dim=-1).indices  # (b, n, k)
    return attend(q, k, v, _keep(chosen, index_scores.shape)[:, None])


def by_attention_scores(q, k, v, index_scores, topk):
    """Constructed: each head picks its own keys by q . k, as mlx-lm's first DeepSeek-V3.2 port let
    every head select different tokens (ml-explore/mlx-lm#531)."""
    n, N = q.shape[-2], k.shape[-2]
    causal = sliding_window_mask(n, N, N, device=q.device)  # (n, N)
    ranked = (q @ k.mT).masked_fill(~causal, -torch.inf)  # (b, h, n, N)
    return attend(q, k, v, _keep(ranked.topk(min(topk, N), dim=-1).indices, ranked.shape) & causal)


def top_left(q, k, v, index_scores, topk):
    """Constructed: the causal mask of a square prompt, tril of (n, N), which puts the queries at
    positions 0 .. n-1 (the top-left alignment of pytorch/pytorch#103082)."""
    n, N = q.shape[-2], k.shape[-2]
    causal = torch.ones(n, N, dtype=torch.bool, device=q.device).tril()  # (n, N)
    ranked = index_scores.masked_fill(~causal, -torch.inf)
    return attend(
        q, k, v, _keep(ranked.topk(min(topk, N), dim=-1).indices, ranked.shape)[:, None] & causal
    )


def strictly_above_kth(q, k, v, index_scores, topk):
    """Constructed: keep the scores above the k-th best, `>` where `>=` was meant: one key too few."""
    n, N = q.shape[-2], k.shape[-2]
    causal = sliding_window_mask(n, N, N, device=q.device)
    ranked = index_scores.masked_fill(~causal, -torch.inf)
    kth = ranked.topk(min(topk, N), dim=-1).values[..., -1:]  # (b, n, 1)
    return attend(q, k, v, (ranked > kth)[:, None])


def one_too_many(q, k, v, index_scores, topk):
    """Constructed: topk + 1 keys (the query's own key added to the k chosen ones, counted twice)."""
    n, N = q.shape[-2], k.shape[-2]
    causal = sliding_window_mask(n, N, N, device=q.device)
    ranked = index_scores.masked_fill(~causal, -torch.inf)
    keep = _keep(ranked.topk(min(topk + 1, N), dim=-1).indices, ranked.shape) & causal
    return attend(q, k, v, keep[:, None])


SPARSE_BUGS = [
    (topk_then_mask, "sparse_topk_over_future"),
    (no_causal_mask, "sparse_sees_future"),
    (gather_fills_future, "sparse_topk_takes_future"),
    (by_attention_scores, "sparse_selects_by_attention"),
    (top_left, "sparse_queries_top_left"),
    (strictly_above_kth, "sparse_keeps_wrong_count"),
    (one_too_many, "sparse_keeps_wrong_count"),
]


def index_scores_masked_in_place(q, k, v, index_scores, topk):
    """Constructed: masked_fill_ on the caller's index scores (the in-place twin of the right
    masked_fill), which changes the scores a later layer or step would read."""
    n, N = q.shape[-2], k.shape[-2]
    causal = sliding_window_mask(n, N, N, device=q.device)
    index_scores.masked_fill_(~causal, -torch.inf)
    keep = _keep(index_scores.topk(min(topk, N), dim=-1).indices, index_scores.shape) & causal
    return attend(q, k, v, keep[:, None])


SPARSE_BUGS.append((index_scores_masked_in_place, "input_modified"))


def topk_unclamped(q, k, v, index_scores, topk):
    """Issue 38 (the check must include texts shorter than k): torch.topk(scores, topk) without
    min(topk, N), the crash NVIDIA-NeMo/Automodel#3035 fixed in a DSA indexer."""
    n, N = q.shape[-2], k.shape[-2]
    causal = sliding_window_mask(n, N, N, device=q.device)
    ranked = index_scores.masked_fill(~causal, -torch.inf)
    return attend(q, k, v, _keep(ranked.topk(topk, dim=-1).indices, ranked.shape)[:, None] & causal)


def weights_zeroed_after_softmax(q, k, v, index_scores, topk):
    """Constructed: softmax over every key, then the keys not chosen multiplied by 0 (the mask after
    the softmax of chapter 03, here for the sparse choice)."""
    n, N = q.shape[-2], k.shape[-2]
    causal = sliding_window_mask(n, N, N, device=q.device)
    ranked = index_scores.masked_fill(~causal, -torch.inf)
    keep = _keep(ranked.topk(min(topk, N), dim=-1).indices, ranked.shape) & causal
    weights = torch.softmax(q @ k.mT / q.shape[-1] ** 0.5, dim=-1) * keep[:, None]
    return weights @ v


SPARSE_BUGS += [
    (topk_unclamped, "sparse_topk_over_length"),
    (weights_zeroed_after_softmax, "sparse_mask_after_softmax"),
]
