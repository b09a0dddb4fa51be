"""Wrong answers to chapter 11's exercises 7 (top-k sparse attention) and 8 (cross-layer KV
sharing) from other projects' code and issue threads, collected without seeing the checks; see
buggy_fresh.py for exercises 1 to 6 and the conventions (source, bug, the cause to be named)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from course_utils.chapters import attend, merge_heads, sliding_window_mask, split_heads

# --- Exercise 7: sparse_attention -------------------------------------------------------------


# HKUSTDial/flash-sparse-attention issue #146 (examples/modeling/modeling_doge.py): the scores the
# top-k is taken over are "based on the whole sequence instead of causal sequence ... the causal
# mask is missing here", the causal mask comes later, in the attention. Cause: future keys compete
# in the top-k (causal mask only after the choice), so early queries keep fewer than k keys.
def sparse_doge_topk_before_causal(q, k, v, index_scores, topk):
    n, N = q.shape[-2], k.shape[-2]
    chosen = index_scores.topk(min(topk, N), dim=-1).indices  # over all N keys
    keep = torch.zeros_like(index_scores, dtype=torch.bool).scatter(-1, chosen, True)
    causal = sliding_window_mask(n, N, N, device=q.device)
    return attend(q, k, v, keep[:, None] & causal)


# osaurus-ai/vmlx-swift PR #429 (Glm5NextSparseAttention): "Below index_topk the selection is skipped
# on purpose ... But on that path effectiveMask stays exactly what arrived, which is always nil ...
# Prefill below index_topk was therefore bidirectional". Cause: no causal mask when k covers all
# the keys (the future is attended). The selecting path keeps only causal keys (& causal), as the
# thread reports no defect there; without it this answer also filled short rows with later keys
# (sparse_lattice_finite_sentinel's bug), and behaved exactly like that one.
def sparse_vmlx_skip_selection_without_mask(q, k, v, index_scores, topk):
    n, N = q.shape[-2], k.shape[-2]
    if N <= topk:  # the selection is skipped: every key is kept
        return torch.softmax(q @ k.mT / q.shape[-1] ** 0.5, dim=-1) @ v
    causal = sliding_window_mask(n, N, N, device=q.device)
    chosen = index_scores.masked_fill(~causal, -torch.inf).topk(topk, dim=-1).indices
    keep = torch.zeros_like(index_scores, dtype=torch.bool).scatter(-1, chosen, True) & causal
    return attend(q, k, v, keep[:, None])


# ohdearquant/lattice PR #6 (review round 2): "Selection causal leak (blocker) - future tokens were
# soft-masked with a finite sentinel (-10000)". Cause: a finite mask value lets future keys win the
# top-k (always once a query has fewer than k earlier keys; and whenever scores fall below it).
def sparse_lattice_finite_sentinel(q, k, v, index_scores, topk):
    n, N = q.shape[-2], k.shape[-2]
    causal = sliding_window_mask(n, N, N, device=q.device)
    ranked = index_scores.masked_fill(~causal, -10000.0)
    chosen = ranked.topk(min(topk, N), dim=-1).indices
    keep = torch.zeros_like(index_scores, dtype=torch.bool).scatter(-1, chosen, True)
    return attend(q, k, v, keep[:, None])


# lucidrains/native-sparse-attention-pytorch PR #18: "if the number of blocks available for fine
# attention is less than the number to select with topk, there will be an error: RuntimeError:
# selected index k out of range". Cause: topk asked for more keys than the text has (k > N).
def sparse_nsa_topk_out_of_range(q, k, v, index_scores, topk):
    n, N = q.shape[-2], k.shape[-2]
    causal = sliding_window_mask(n, N, N, device=q.device)
    chosen = index_scores.masked_fill(~causal, -torch.inf).topk(topk, dim=-1).indices
    keep = torch.zeros_like(index_scores, dtype=torch.bool).scatter(-1, chosen, True) & causal
    return attend(q, k, v, keep[:, None])


# ml-explore/mlx-lm PR #531 (deepseek_v32): the sparse masking "assum[ed] square masks"; the fix
# makes it "always use k_seq = keys.shape[2]" so chunked prefill works. Cause: a causal mask of n by
# n, which fits only without a cache (with one it does not match the N keys: a crash).
def sparse_mlx_lm_square_mask(q, k, v, index_scores, topk):
    n, N = q.shape[-2], k.shape[-2]
    causal = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()  # (L, L)
    chosen = index_scores.masked_fill(~causal, -torch.inf).topk(min(topk, N), dim=-1).indices
    keep = torch.zeros_like(index_scores, dtype=torch.bool).scatter(-1, chosen, True) & causal
    return attend(q, k, v, keep[:, None])


# --- Exercise 8: shared_kv_forward -------------------------------------------------------------


def _own_kv(x, w, heads):
    return split_heads(x @ w["w_k"].T, heads), split_heads(x @ w["w_v"].T, heads)


# ml-explore/mlx-lm issue #1674 (gemma3n): "the KV-shared decoder layers only reuse the source
# layer's keys/values when a cache is present. Without a cache they fall through and compute their
# own k_proj/v_proj". Cause: no sharing in a pass without a cache (layers use their own keys).
def shared_mlx_lm_only_with_cache(x, layers, kv_source, heads, cache=None):
    n = x.shape[1]
    given = cache is not None
    cache = {} if cache is None else dict(cache)
    for i, w in enumerate(layers):
        q = split_heads(x @ w["w_q"].T, heads)
        if kv_source[i] != i and given:
            k, v = cache[kv_source[i]]
        else:
            k, v = _own_kv(x, w, heads)
            if kv_source[i] == i:
                if i in cache:
                    k = torch.cat([cache[i][0], k], dim=2)
                    v = torch.cat([cache[i][1], v], dim=2)
                cache[i] = (k, v)
        allowed = sliding_window_mask(n, k.shape[2], k.shape[2], device=x.device)
        x = x + merge_heads(attend(q, k, v, allowed)) @ w["w_o"].T
    return x, cache


# trymirai/lalamo PR #291: "KV-sharing layers didn't reuse the source cache verbatim, they ran the
# full QKV projection and used the post-append length as the prefix boundary. So queries attended to
# their own keys". Cause: a sharing layer makes and appends its own keys and values instead of
# reading the source's as they are.
def shared_lalamo_projects_and_appends(x, layers, kv_source, heads, cache=None):
    n = x.shape[1]
    cache = {} if cache is None else dict(cache)
    for i, w in enumerate(layers):
        q = split_heads(x @ w["w_q"].T, heads)
        k, v = _own_kv(x, w, heads)
        src = kv_source[i]
        if src in cache:
            k = torch.cat([cache[src][0], k], dim=2)
            v = torch.cat([cache[src][1], v], dim=2)
        cache[src] = (k, v)
        allowed = sliding_window_mask(n, k.shape[2], k.shape[2], device=x.device)
        x = x + merge_heads(attend(q, k, v, allowed)) @ w["w_o"].T
    return x, cache


# vllm-project/vllm-ascend PR #11791: "reshape_and_cache was unconditionally writing K/V for every
# layer, so a KV-sharing target layer would overwrite the producer's shared slots with its own".
# Cause: a sharing layer writes its own keys and values over the source layer's new entries.
def shared_ascend_overwrites_producer(x, layers, kv_source, heads, cache=None):
    n = x.shape[1]
    cache = {} if cache is None else dict(cache)
    for i, w in enumerate(layers):
        q = split_heads(x @ w["w_q"].T, heads)
        k, v = _own_kv(x, w, heads)  # every layer writes its slots
        src = kv_source[i]
        if src == i:
            if i in cache:
                k = torch.cat([cache[i][0], k], dim=2)
                v = torch.cat([cache[i][1], v], dim=2)
            cache[i] = (k, v)
        else:
            old_k, old_v = cache[src]
            cache[src] = (torch.cat([old_k[:, :, :-n], k], 2), torch.cat([old_v[:, :, :-n], v], 2))
        k, v = cache[src]
        allowed = sliding_window_mask(n, k.shape[2], k.shape[2], device=x.device)
        x = x + merge_heads(attend(q, k, v, allowed)) @ w["w_o"].T
    return x, cache


# pytorch/pytorch issue #103082: with is_causal=True and a KV cache (L=1 query, S keys) SDPA's mask
# is `ones(L, S).tril()`, "[True, False, ..., False]. However, the correct attn_mask in this
# scenario should be [True, True, ..., True]". Cause: causal mask aligned top-left, so a cached
# step sees only the first keys.
def shared_sdpa_is_causal_with_cache(x, layers, kv_source, heads, cache=None):
    cache = {} if cache is None else dict(cache)
    for i, w in enumerate(layers):
        q = split_heads(x @ w["w_q"].T, heads)
        if kv_source[i] == i:
            k, v = _own_kv(x, w, heads)
            if i in cache:
                k = torch.cat([cache[i][0], k], dim=2)
                v = torch.cat([cache[i][1], v], dim=2)
            cache[i] = (k, v)
        k, v = cache[kv_source[i]]
        x = x + merge_heads(F.scaled_dot_product_attention(q, k, v, is_causal=True)) @ w["w_o"].T
    return x, cache


FRESH = [
    ("check_sparse_attention", sparse_doge_topk_before_causal, "future competes in the top-k"),
    ("check_sparse_attention", sparse_vmlx_skip_selection_without_mask, "no causal mask if N<=k"),
    ("check_sparse_attention", sparse_lattice_finite_sentinel, "finite mask lets future win"),
    ("check_sparse_attention", sparse_nsa_topk_out_of_range, "topk > N crashes"),
    ("check_sparse_attention", sparse_mlx_lm_square_mask, "square (n, n) causal mask"),
    ("check_shared_kv_forward", shared_mlx_lm_only_with_cache, "no sharing without a cache"),
    ("check_shared_kv_forward", shared_lalamo_projects_and_appends, "sharer appends own keys"),
    ("check_shared_kv_forward", shared_ascend_overwrites_producer, "sharer overwrites source"),
    ("check_shared_kv_forward", shared_sdpa_is_causal_with_cache, "top-left causal with cache"),
]
