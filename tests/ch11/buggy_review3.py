"""Wrong answers of ch11-REVIEW.md section 3 (items 2 to 5) that no check named before, each written
out by hand, and unusual right answers beside them; BUGS pairs each wrong one with its mistake id.

Sources: items 2 to 5 are from the course's review, a student's attempt in JupyterLab. A search of the
code and issues corpora (2026-11-28: masked_fill with 0 before topk, a normaliser without z, beta on
the value only) found no public repository with the same three slips; the real code found is cited
where it is used: NVIDIA-NeMo/Automodel#2633 and tile-ai/TileOPs for right answers, and
hyunwoongko/transformer#10 for the 0 in place of -inf before the softmax."""

from __future__ import annotations

import math

import torch

from course_utils.chapters import attend, feature_map, sliding_window_mask


def _keep(chosen, shape):
    return torch.zeros(shape, dtype=torch.bool, device=chosen.device).scatter(-1, chosen, True)


# ---------------------------------------------------------------- exercise 7: sparse attention


def sparse_future_filled_with_zero(q, k, v, index_scores, topk):
    """From the course's review (section 3, item 2), a student's attempt: the future hidden in the
    index scores with 0 before the top-k, the causal mask applied again afterwards. Query 0 keeps no
    key when its one earlier key scores below 0: NaN."""
    n, N = q.shape[-2], k.shape[-2]
    causal = sliding_window_mask(n, N, N, device=q.device)
    ranked = index_scores.masked_fill(~causal, 0.0)
    keep = _keep(ranked.topk(min(topk, N), dim=-1).indices, ranked.shape)
    return attend(q, k, v, keep[:, None] & causal)


def sparse_index_times_causal(q, k, v, index_scores, topk):
    """The same slip written as a product (review, item 2: "multiplying with 0"): index_scores *
    causal zeroes the future's scores instead of hiding them."""
    n, N = q.shape[-2], k.shape[-2]
    causal = sliding_window_mask(n, N, N, device=q.device)
    keep = _keep((index_scores * causal).topk(min(topk, N), dim=-1).indices, index_scores.shape)
    return attend(q, k, v, keep[:, None] & causal)


def sparse_zero_filled_not_masked_again(q, k, v, index_scores, topk):
    """The review's slip without the causal mask applied again: the later keys that won places with
    their 0 are attended to."""
    n, N = q.shape[-2], k.shape[-2]
    ranked = index_scores.masked_fill(~sliding_window_mask(n, N, N, device=q.device), 0.0)
    return attend(q, k, v, _keep(ranked.topk(min(topk, N), dim=-1).indices, ranked.shape)[:, None])


def sparse_scores_times_keep(q, k, v, index_scores, topk):
    """The 0 in place of -inf moved to the attention scores: hyunwoongko/transformer#10 ("shouldn't
    the masked inputs be set to -inf rather than 0?") reported a fill of the masked scores with a
    finite value before the softmax; here the kept-key mask multiplies the scores (0 where hidden)."""
    n, N = q.shape[-2], k.shape[-2]
    causal = sliding_window_mask(n, N, N, device=q.device)
    ranked = index_scores.masked_fill(~causal, -torch.inf)
    keep = _keep(ranked.topk(min(topk, N), dim=-1).indices, ranked.shape) & causal
    scores = q @ k.mT / math.sqrt(q.shape[-1]) * keep[:, None]
    return torch.softmax(scores, dim=-1) @ v


def sparse_future_at_finfo_min(q, k, v, index_scores, topk):
    """Right: the future hidden with the dtype's most negative finite number, not -inf, as
    NVIDIA-NeMo/Automodel#2633's DSA indexer does (its additive key mask, "kept -> 0, padding ->
    finfo.min", before topk). Finite, yet below any real score; the causal mask is applied again."""
    n, N = q.shape[-2], k.shape[-2]
    causal = sliding_window_mask(n, N, N, device=q.device)
    ranked = index_scores.masked_fill(~causal, torch.finfo(index_scores.dtype).min)
    keep = _keep(ranked.topk(min(topk, N), dim=-1).indices, ranked.shape)
    return attend(q, k, v, keep[:, None] & causal)


# ---------------------------------------------------------------- exercise 5: chunk by chunk


def linchunk_normaliser_without_z(q, k, v, chunk):
    """From the course's review (section 3, item 3), a student's attempt: the chunk's row sums alone
    below, phi(q) . z left out; the first chunk is right, the later ones are not."""
    b, h, n, dk = q.shape
    fq, fk = feature_map(q), feature_map(k)
    S, outs = q.new_zeros(b, h, dk, v.shape[-1]), []
    for lo in range(0, n, chunk):
        cq, ck, cv = (t[:, :, lo : lo + chunk] for t in (fq, fk, v))
        scores = (cq @ ck.mT).tril()
        outs.append((scores @ cv + cq @ S) / scores.sum(-1, keepdim=True))
        S = S + ck.mT @ cv
    return torch.cat(outs, dim=2)


def linchunk_returns_state(q, k, v, chunk):
    """From the course's review (section 3, item 5), a student's attempt: the right outputs, returned
    with the final state as the recurrent form does, (out, (S, z))."""
    b, h, n, dk = q.shape
    fq, fk = feature_map(q), feature_map(k)
    S, z, outs = q.new_zeros(b, h, dk, v.shape[-1]), q.new_zeros(b, h, dk), []
    for lo in range(0, n, chunk):
        cq, ck, cv = (t[:, :, lo : lo + chunk] for t in (fq, fk, v))
        scores = (cq @ ck.mT).tril()
        top = scores @ cv + cq @ S
        outs.append(top / (scores.sum(-1, keepdim=True) + cq @ z[..., None]))
        S, z = S + ck.mT @ cv, z + ck.sum(2)
    return torch.cat(outs, dim=2), (S, z)


def linchunk_z_by_global_cumsum(q, k, v, chunk):
    """Right: the numerator chunk by chunk, the normaliser for every token at once from a cumulative
    sum of phi(k) over the whole text (z by cumsum, not carried chunk to chunk)."""
    b, h, n, dk = q.shape
    fq, fk = feature_map(q), feature_map(k)
    bottom = (fq * fk.cumsum(dim=2)).sum(-1, keepdim=True)  # (b, h, n, 1)
    S, tops = q.new_zeros(b, h, dk, v.shape[-1]), []
    for lo in range(0, n, chunk):
        cq, ck, cv = (t[:, :, lo : lo + chunk] for t in (fq, fk, v))
        tops.append((cq @ ck.mT).tril() @ cv + cq @ S)
        S = S + ck.mT @ cv
    return torch.cat(tops, dim=2) / bottom


# ---------------------------------------------------------------- exercise 6: the gated delta rule


def delta_beta_on_value_only(q, k, v, alpha, beta, state=None):
    """From the course's review (section 3, item 4), a student's attempt: S + (beta v - S k) k^T,
    beta on the new value only, the erase term unscaled."""
    b, h, n, dk = k.shape
    S = k.new_zeros(b, h, v.shape[-1], dk) if state is None else state
    outs = []
    for t in range(n):
        kt = k[:, :, t]
        S = alpha[:, :, t, None, None] * S
        error = beta[:, :, t, None] * v[:, :, t] - (S @ kt[..., None]).squeeze(-1)
        S = S + error[..., None] * kt[:, :, None, :]
        outs.append((S @ q[:, :, t, :, None]).squeeze(-1))
    return torch.stack(outs, dim=2), S


def delta_decode_fused(q, k, v, alpha, beta, state=None):
    """Right: the form of tile-ai/TileOPs's Gated DeltaNet decode kernel (GatedDeltaNetDecodeKernel,
    found with the search tool), which reads the memory before its decay and folds alpha and beta in:
    v_new = beta v - alpha beta (S_(t-1) k), S_t = alpha S_(t-1) + v_new k^T, o_t = S_t q (its memory
    is (dk, dv) and its gate exp(g); here the exercise's (dv, dk) and alpha)."""
    b, h, n, dk = k.shape
    S = k.new_zeros(b, h, v.shape[-1], dk) if state is None else state
    outs = []
    for t in range(n):
        kt, a, bt = k[:, :, t], alpha[:, :, t, None], beta[:, :, t, None]
        v_new = bt * v[:, :, t] - a * bt * (S @ kt[..., None]).squeeze(-1)  # (b, h, dv)
        S = a[..., None] * S + v_new[..., None] * kt[:, :, None, :]
        outs.append((S @ q[:, :, t, :, None]).squeeze(-1))
    return torch.stack(outs, dim=2), S


BUGS = [
    ("check_sparse_attention", sparse_future_filled_with_zero, "sparse_future_hidden_with_zero"),
    ("check_sparse_attention", sparse_index_times_causal, "sparse_future_hidden_with_zero"),
    (
        "check_sparse_attention",
        sparse_zero_filled_not_masked_again,
        "sparse_future_hidden_with_zero",
    ),
    ("check_sparse_attention", sparse_scores_times_keep, "sparse_scores_hidden_with_zero"),
    (
        "check_linear_attention_chunked",
        linchunk_normaliser_without_z,
        "chunk_normaliser_without_state",
    ),
    ("check_linear_attention_chunked", linchunk_returns_state, "chunk_returns_state"),
    ("check_gated_delta_rule", delta_beta_on_value_only, "delta_beta_on_value_only"),
]
RIGHT = [
    ("check_sparse_attention", sparse_future_at_finfo_min),
    ("check_linear_attention_chunked", linchunk_z_by_global_cumsum),
    ("check_gated_delta_rule", delta_decode_fused),
]
