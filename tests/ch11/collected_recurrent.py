"""Wrong answers to chapter 11's exercises 4-8 (linear attention as a recurrence and in chunks, the
gated delta rule, top-k sparse attention, layers sharing a cache) found in public repositories and
issue threads, adapted to the exercise's interface as little as possible. Each comment names the
repository and file (or the issue) and the slip; COLLECTED as in collected_mla.py."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from course_utils.chapters import attend, merge_heads, sliding_window_mask, split_heads

_SLOTS: dict = {}  # kv_state_slot_reused's state pool


def phi(t):
    return F.elu(t) + 1


# --------------------------------------------------------------------------- exercise 4: recurrence
def linear_fla_naive_unnormalised(q, k, v, state=None):
    # fla-org/flash-linear-attention, fla/ops/linear_attn/naive.py, naive_recurrent_linear_attn with
    # its default normalize=False: S += k v^T, o = S^T (q * K ** -0.5), no denominator; the feature
    # map is the layer's job there, so the op applies none. Adapted: (b, h, n, d) and the state (S, z).
    scale = q.shape[-1] ** -0.5
    b, h, n, dk = q.shape
    S = torch.zeros(b, h, dk, v.shape[-1], dtype=q.dtype)
    if state is not None:
        S = S + state[0]
    o = torch.empty_like(v)
    for t in range(n):
        S = S + torch.einsum("bhk,bhv->bhkv", k[:, :, t], v[:, :, t])
        o[:, :, t] = torch.einsum("bhkv,bhk->bhv", S, q[:, :, t] * scale)
    z = k.sum(2) + (0 if state is None else state[1])
    return o, (S, z)


def linear_fla_naive_normalised(q, k, v, state=None):
    # The same function with normalize=True: o / ((q * scale * k_cum).sum(-1) + 1e-10), z kept as
    # k_cum[:, -1:] (with its token axis), and still no feature map (q and k used as they are).
    scale = q.shape[-1] ** -0.5
    b, h, n, dk = q.shape
    S = torch.zeros(b, h, dk, v.shape[-1], dtype=q.dtype) + (0 if state is None else state[0])
    o = torch.empty_like(v)
    for t in range(n):
        S = S + torch.einsum("bhk,bhv->bhkv", k[:, :, t], v[:, :, t])
        o[:, :, t] = torch.einsum("bhkv,bhk->bhv", S, q[:, :, t] * scale)
    k_cum = k.cumsum(2) if state is None else k.cumsum(2) + state[1]
    o = o / ((q * scale * k_cum).sum(-1, keepdim=True) + 1e-10)
    return o, (S, k_cum[:, :, -1:])


def linear_state_slot_reused(q, k, v, state=None):
    # vllm-project/tpu-inference#2431 "Honor has_initial_state in fused GDN kernel": a new sequence
    # placed in a freed state slot "silently consumes a freed slot's prior state". Adapted: a pool of
    # slots, one per batch shape, read when no state is given.
    fq, fk = phi(q), phi(k)
    b, h, n, dk = q.shape
    zeros = (q.new_zeros(b, h, dk, v.shape[-1]), q.new_zeros(b, h, dk))
    S, z = state if state is not None else _SLOTS.get((q.shape, v.shape), zeros)
    outs = []
    for t in range(n):
        S, z = S + fk[:, :, t, :, None] * v[:, :, t, None, :], z + fk[:, :, t]
        outs.append((fq[:, :, t, None] @ S).squeeze(-2) / (fq[:, :, t] * z).sum(-1, keepdim=True))
    _SLOTS[(q.shape, v.shape)] = (S, z)
    return torch.stack(outs, 2), (S, z)


def linear_final_state_in_place(q, k, v, state=None):
    # Modelled on vllm-project/vllm, vllm/model_executor/layers/fla/ops/fused_recurrent.py,
    # fused_recurrent_gated_delta_rule_fwd: inplace_final_state=True (the default) makes
    # final_state = initial_state, so the kernel writes the new state into the caller's tensor.
    # Here: S += ... and z += ... on the state given.
    fq, fk = phi(q), phi(k)
    b, h, n, dk = q.shape
    S, z = (
        state if state is not None else (q.new_zeros(b, h, dk, v.shape[-1]), q.new_zeros(b, h, dk))
    )
    outs = []
    for t in range(n):
        S += fk[:, :, t, :, None] * v[:, :, t, None, :]
        z += fk[:, :, t]
        outs.append((fq[:, :, t, None] @ S).squeeze(-2) / (fq[:, :, t] * z).sum(-1, keepdim=True))
    return torch.stack(outs, 2), (S, z)


def linear_keras_initial_state_overwritten(q, k, v, state=None):
    # keras-team/keras#5828 "Initial states overwritten in Recurrent.call()": initial states passed
    # by keyword "get overwritten ... anyway" by the zero states. Adapted: zeros whatever is given.
    fq, fk = phi(q), phi(k)
    b, h, n, dk = q.shape
    S, z = q.new_zeros(b, h, dk, v.shape[-1]), q.new_zeros(b, h, dk)
    outs = []
    for t in range(n):
        S, z = S + fk[:, :, t, :, None] * v[:, :, t, None, :], z + fk[:, :, t]
        outs.append((fq[:, :, t, None] @ S).squeeze(-2) / (fq[:, :, t] * z).sum(-1, keepdim=True))
    return torch.stack(outs, 2), (S, z)


# --------------------------------------------------------------------------- exercise 5: chunks
def chunk_tileops_floor(q, k, v, chunk):
    # tile-ai/TileOPs#6 (review of its fused chunk linear attention): NT = S // chunk_size, so "if
    # the sequence length S is not perfectly divisible by chunk_size, parts of the input tensors might
    # be silently ignored". Adapted: the chunks' loop over n // chunk, the output preallocated.
    fq, fk = phi(q), phi(k)
    b, h, n, dk = q.shape
    S, z, o = q.new_zeros(b, h, dk, v.shape[-1]), q.new_zeros(b, h, dk), torch.zeros_like(v)
    for i in range(n // chunk):
        lo, hi = i * chunk, (i + 1) * chunk
        cq, ck, cv = fq[:, :, lo:hi], fk[:, :, lo:hi], v[:, :, lo:hi]
        scores = (cq @ ck.mT).tril()
        o[:, :, lo:hi] = (scores @ cv + cq @ S) / (scores.sum(-1, keepdim=True) + cq @ z[..., None])
        S, z = S + ck.mT @ cv, z + ck.sum(2)
    return o


def _fla_chunks(q, k, v, chunk, shift=True):
    """fla-org/flash-linear-attention, fla/ops/linear_attn/naive.py, naive_chunk_linear_attn with
    normalize=True (its rearrange 'b h (n c) d -> b h n c d' written as a view, the feature map
    applied first as the exercise asks): kv per chunk, cumsum over chunks, shifted by one chunk."""
    q, k = phi(q), phi(k)
    b, h, n, d = q.shape
    split = lambda t: t.view(b, h, n // chunk, chunk, t.shape[-1])  # noqa: E731
    qc, kc, vc = split(q), split(k), split(v)
    kv = (kc.transpose(-1, -2) @ vc).cumsum(2)
    if shift:
        kv = torch.cat([torch.zeros_like(kv[:, :, :1]), kv[:, :, :-1]], dim=2)
    inter = qc @ kv
    future = torch.triu(torch.ones(chunk, chunk, dtype=torch.bool, device=q.device), diagonal=1)
    intra = (qc @ kc.transpose(-1, -2)).masked_fill_(future, 0) @ vc
    o = (inter + intra).reshape(b, h, n, v.shape[-1])
    return o / ((q * k.cumsum(2)).sum(-1, keepdim=True) + 1e-10)


def chunk_fla_divisible_only(q, k, v, chunk):
    # fla-org/flash-linear-attention, fla/ops/linear_attn/naive.py, naive_chunk_linear_attn: the
    # rearrange into (n c) chunks needs n divisible by the chunk (its delta_rule_chunkwise asserts
    # l % chunk_size == 0): a shorter last chunk is an error.
    return _fla_chunks(q, k, v, chunk)


def chunk_fla_unshifted_cumsum(q, k, v, chunk):
    # The same function without its shift, kv = torch.cat([zeros, kv[:, :, :-1]]): the inclusive
    # cumsum puts each chunk's own keys and values in the state it reads, beside the intra-chunk part.
    return _fla_chunks(q, k, v, chunk, shift=False)


def chunk_fla_strict_mask(q, k, v, chunk):
    # fla-org/flash-linear-attention, fla/ops/delta_rule/naive.py, delta_rule_chunkwise: its first mask,
    # triu(ones(c, c), diagonal=0), hides the diagonal (right for its strictly-lower matrix); used for
    # the output's intra-chunk scores it drops each token's own key.
    fq, fk = phi(q), phi(k)
    b, h, n, dk = q.shape
    S, z, outs = q.new_zeros(b, h, dk, v.shape[-1]), q.new_zeros(b, h, dk), []
    for lo in range(0, n, chunk):
        cq, ck, cv = fq[:, :, lo : lo + chunk], fk[:, :, lo : lo + chunk], v[:, :, lo : lo + chunk]
        c = cq.shape[2]
        mask = torch.triu(torch.ones(c, c, dtype=torch.bool, device=q.device), diagonal=0)
        scores = (cq @ ck.mT).masked_fill(mask, 0)
        outs.append((scores @ cv + cq @ S) / (scores.sum(-1, keepdim=True) + cq @ z[..., None]))
        S, z = S + ck.mT @ cv, z + ck.sum(2)
    return torch.cat(outs, 2)


# --------------------------------------------------------------------------- exercise 6: delta rule
def _fla_gated_delta(q, k, v, gate, beta, state, scale=True):
    """fla-org/flash-linear-attention, fla/ops/gated_delta_rule/naive.py,
    naive_recurrent_gated_delta_rule in its (K, V) state layout: h = h * gate; v' = (v - (h k)) beta;
    h = h + k v'^T; o = q^T h, with q * K ** -0.5 unless scale is False."""
    b, h_, n, dk = k.shape
    o = torch.zeros(b, h_, n, v.shape[-1], dtype=v.dtype)
    h = torch.zeros(b, h_, dk, v.shape[-1], dtype=v.dtype) if state is None else state
    q = q * (1 / dk**0.5) if scale else q
    for i in range(n):
        h = h.clone() * gate[:, :, i, None, None]
        b_v = (v[:, :, i] - (h.clone() * k[:, :, i, :, None]).sum(-2)) * beta[:, :, i, None]
        h = h.clone() + k[:, :, i].unsqueeze(-1) * b_v.unsqueeze(-2)
        o[:, :, i] = torch.einsum("bhd,bhdm->bhm", q[:, :, i], h)
    return o, h


def delta_fla_naive_scaled(q, k, v, alpha, beta, state=None):
    # fla-org/flash-linear-attention, fla/ops/gated_delta_rule/naive.py: "if scale is None: scale =
    # 1 / (q.shape[-1] ** 0.5); q = q * scale" (the attention convention); the exercise reads S q.
    # Adapted: the gate alpha used where fla takes g.exp().
    return _fla_gated_delta(q, k, v, alpha, beta, None if state is None else state.mT)


def delta_fla_log_gate(q, k, v, alpha, beta, state=None):
    # The same file, its gate kept: fla's g is the log of the decay (h * g.exp()); given the
    # exercise's alpha in (0, 1) as g, the memory is multiplied by exp(alpha) > 1.
    return _fla_gated_delta(q, k, v, alpha.exp(), beta, None if state is None else state.mT)


def delta_fla_state_layout(q, k, v, alpha, beta, state=None):
    # The same file with the exercise's scale and gate: right outputs, but the state stays in fla's
    # [B, H, K, V] layout, the transpose of the exercise's (b, h, dv, dk) memory.
    return _fla_gated_delta(q, k, v, alpha, beta, state, scale=False)


def delta_fla_deltanet(q, k, v, alpha, beta, state=None):
    # fla-org/flash-linear-attention, fla/ops/delta_rule/naive.py, delta_rule_recurrence: DeltaNet,
    # no gate (alpha unused), q * d_k ** -0.5, S += initial_state; returned in the exercise's layout.
    b, h, n, dk = q.shape
    q = q * dk**-0.5
    S = torch.zeros(b, h, dk, v.shape[-1], dtype=v.dtype)
    if state is not None:
        S += state.mT
    o = torch.zeros_like(v)
    for i in range(n):
        _v = (v[:, :, i].clone() - (S.clone() * k[:, :, i, :, None]).sum(-2)) * beta[:, :, i, None]
        S = S.clone() + k[:, :, i].unsqueeze(-1) * _v.unsqueeze(-2)
        o[:, :, i] = torch.einsum("bhd,bhdm->bhm", q[:, :, i], S)
    return o, S.mT


def delta_vllm_inplace_final_state(q, k, v, alpha, beta, state=None):
    # vllm-project/vllm, vllm/model_executor/layers/fla/ops/fused_recurrent.py: with
    # inplace_final_state=True (the default) final_state = initial_state, and the kernel stores the
    # new state there. Adapted: the recurrence of the exercise, the result copied into the state given.
    b, h, n, dk = k.shape
    S = k.new_zeros(b, h, v.shape[-1], dk) if state is None else state.clone()
    outs = []
    for t in range(n):
        S = alpha[:, :, t, None, None] * S
        error = v[:, :, t] - (S @ k[:, :, t, :, None]).squeeze(-1)
        S = S + beta[:, :, t, None, None] * error[..., None] * k[:, :, t, None, :]
        outs.append((S @ q[:, :, t, :, None]).squeeze(-1))
    final_state = S if state is None else state.copy_(S)
    return torch.stack(outs, 2), final_state


# --------------------------------------------------------------------------- exercise 7: sparse
def sparse_osil_minus_1e9(q, k, v, index_scores, topk):
    # Open-Superintelligence-Lab/deepseek-sparse-attention-research,
    # experiments/exp3_adaptive_per_layer_sparsity/adaptive_sparse_attention.py, AdaptiveTopKSelector:
    # the future is filled with -1e9 (not -inf) by triu(ones(seq_len_q, seq_len_k), diagonal=1), the
    # top min(k, seq_len_k) taken, and the attention mask is the top-k mask alone: a query with fewer
    # than k earlier keys gets later ones.
    n, N = q.shape[-2], k.shape[-2]
    causal_mask = torch.triu(torch.ones(n, N, device=q.device), diagonal=1).bool()
    scores = index_scores.masked_fill(causal_mask.unsqueeze(0), -1e9)
    top = torch.topk(scores, k=min(topk, N), dim=-1, largest=True).indices
    keep = torch.zeros_like(scores, dtype=torch.bool).scatter_(2, top, True)
    mask = torch.zeros(q.shape[0], 1, n, N, device=q.device).masked_fill(~keep[:, None], -torch.inf)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def sparse_fla_padding_as_index(q, k, v, index_scores, topk):
    # fla-org/flash-linear-attention, fla/ops/dsa/naive.py, naive_dsa_indexer: the selection is padded
    # with -1 up to topk ("drop slots backed by invisible (-inf) positions"); its attend() sends -1 to
    # a dummy column. Adapted: the keys gathered by those indices directly, where -1 is the last key.
    n, N = q.shape[-2], k.shape[-2]
    logits = index_scores.masked_fill(~sliding_window_mask(n, N, N, device=q.device), -torch.inf)
    values, indices = torch.topk(logits, min(topk, N), dim=-1)
    indices = indices.masked_fill(torch.isinf(values), -1)
    if topk > N:
        indices = torch.cat([indices, indices.new_full((*indices.shape[:-1], topk - N), -1)], -1)
    chosen = indices % N  # (b, n, topk): Python's meaning of -1
    b, h = q.shape[:2]
    pick = lambda t: t[torch.arange(b)[:, None, None, None], torch.arange(h)[None, :, None, None],
                       chosen[:, None]]  # fmt: skip  # noqa: E731
    scores = (pick(k) @ q[..., None]).squeeze(-1) / q.shape[-1] ** 0.5  # (b, h, n, topk)
    return (torch.softmax(scores, -1)[..., None] * pick(v)).sum(3)


def sparse_topk_unclamped(q, k, v, index_scores, topk):
    # NVIDIA-NeMo/Automodel#3035 "clamp DSA indexer top-k for short sequences": the fused path called
    # torch.topk(logits, index_topk, dim=-1) and crashed with "selected index k out of range" when
    # fewer keys than index_topk exist (also hpcgroup/loki#1, idiap/fast-transformers#64).
    n, N = q.shape[-2], k.shape[-2]
    causal = sliding_window_mask(n, N, N, device=q.device)
    logits = index_scores.masked_fill(~causal, -torch.inf)
    chosen = torch.topk(logits, topk, dim=-1).indices
    keep = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, chosen, True) & causal
    return attend(q, k, v, keep[:, None])


# --------------------------------------------------------------------------- exercise 8: sharing
def share_sdpa_is_causal(x, layers, kv_source, heads, cache=None):
    # The is_causal=True of F.scaled_dot_product_attention with cached keys, aligned top left
    # (pytorch/pytorch#103082): with n new tokens and N > n keys, query i sees keys 0..i.
    cache = {} if cache is None else dict(cache)
    for i, w in enumerate(layers):
        q = split_heads(x @ w["w_q"].T, heads)
        if kv_source[i] == i:
            k, v = split_heads(x @ w["w_k"].T, heads), split_heads(x @ w["w_v"].T, heads)
            if i in cache:
                k, v = torch.cat([cache[i][0], k], 2), torch.cat([cache[i][1], v], 2)
            cache[i] = (k, v)
        k, v = cache[kv_source[i]]
        x = x + merge_heads(F.scaled_dot_product_attention(q, k, v, is_causal=True)) @ w["w_o"].T
    return x, cache


LINEAR, CHUNKED = "check_linear_attention_recurrent", "check_linear_attention_chunked"
DELTA, SPARSE, SHARE = "check_gated_delta_rule", "check_sparse_attention", "check_shared_kv_forward"
COLLECTED = [
    (LINEAR, linear_fla_naive_unnormalised, ("linear_no_normaliser", "linear_feature_map_wrong")),
    (LINEAR, linear_fla_naive_normalised, ("linear_feature_map_wrong",)),
    (LINEAR, linear_state_slot_reused, ("recurrence_state_not_reset",)),
    (LINEAR, linear_final_state_in_place, ("recurrence_state_modified",)),
    (LINEAR, linear_keras_initial_state_overwritten, ("recurrence_state_ignored",)),
    (CHUNKED, chunk_tileops_floor, ("chunk_last_partial",)),
    (CHUNKED, chunk_fla_divisible_only, ("chunk_last_partial",)),
    (CHUNKED, chunk_fla_unshifted_cumsum, ("chunk_state_includes_chunk",)),
    (CHUNKED, chunk_fla_strict_mask, ("chunk_diagonal_dropped",)),
    (DELTA, delta_fla_naive_scaled, ("delta_query_scaled",)),
    (DELTA, delta_fla_log_gate, ("delta_gate_exponentiated", "delta_query_scaled")),
    (DELTA, delta_fla_state_layout, ("recurrence_state_transposed",)),
    (DELTA, delta_fla_deltanet, ("delta_gate_ignored", "delta_query_scaled")),
    (DELTA, delta_vllm_inplace_final_state, ("recurrence_state_modified",)),
    (SPARSE, sparse_osil_minus_1e9, ("sparse_topk_takes_future",)),
    (SPARSE, sparse_fla_padding_as_index, ("sparse_topk_takes_future",)),
    (SPARSE, sparse_topk_unclamped, ("sparse_topk_over_length",)),
    (SHARE, share_sdpa_is_causal, ("is_causal_top_left",)),
]
