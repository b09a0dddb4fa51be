"""The second fresh set, exercises 7 (top-k sparse attention) and 8 (layers that share a cache):
wrong answers from public repositories and issue threads, adapted minimally to the exercise's
interface, the bug kept as the source has it. Each docstring: the source, the bug in one sentence,
the cause a teacher would name. The verdicts: ``cases_fresh2.py``."""

import math

import torch

import course_utils as cu

sliding_window_mask = cu.chapters.sliding_window_mask
split_heads = cu.chapters.split_heads
merge_heads = cu.chapters.merge_heads
attend = cu.chapters.attend


# ---------------------------------------------------------------- exercise 7: sparse attention


def sparse_future_removed_after_topk(q, k, v, index_scores, topk):
    """XunhaoLai/native-sparse-attention-triton, issue #25 "Questions about topk_idx calculation":
    ``topk_idx = score.topk(topk, dim=-1).indices.sort(-1).values; topk_idx[topk_idx >
    q_idx[None, :, None]] = -1``, the later keys are dropped only after the top k are chosen.
    Cause: the future competes in the top-k, so a query near the start keeps fewer than min(k, t + 1)
    keys (the causal mask applied after choosing, not before)."""
    n, N = q.shape[-2], k.shape[-2]
    chosen = index_scores.topk(min(topk, N), dim=-1).indices  # (b, n, k)
    q_idx = torch.arange(N - n, N, device=q.device)  # the queries' positions
    valid = chosen <= q_idx[None, :, None]
    keep = torch.zeros_like(index_scores, dtype=torch.bool)
    keep.scatter_(-1, chosen, valid)
    return attend(q, k, v, keep[:, None])


def sparse_causal_only_with_mask(q, k, v, index_scores, topk, attn_mask=None):
    """facebookresearch/xformers, issue #103 "Causal mask is skipped if no att_mask is passed"
    (scaled_dot_product.py: "if no att_mask is passed, then an hypothetical causal mask is completely
    skipped"; the maintainer: "This was pretty wrong"). Adapted: the top-k chooses among the keys a
    mask allows, and no mask is passed. Cause: no causal mask at all, a query chooses and attends to
    later keys."""
    N = k.shape[-2]
    scores = index_scores if attn_mask is None else index_scores.masked_fill(~attn_mask, -torch.inf)
    chosen = scores.topk(min(topk, N), dim=-1).indices
    keep = torch.zeros_like(index_scores, dtype=torch.bool).scatter(-1, chosen, True)
    if attn_mask is not None:
        keep = keep & attn_mask
    return attend(q, k, v, keep[:, None])


def sparse_topk_by_attention_scores(q, k, v, index_scores, topk):
    """AnswerDotAI/cold-compress, PR #12 "Naive implementation of sparse Top-K attention
    approximation from FlexGen": "After computing the attention matrices, for each query, we
    calculate the indices of its Top-K tokens from the K cache", per head. Ported to the exercise,
    the index scores go unused. Cause: keys chosen by each head's own q . k instead of the indexer's
    scores (and differently per head)."""
    n, N = q.shape[-2], k.shape[-2]
    causal = sliding_window_mask(n, N, N, device=q.device)
    scores = (q @ k.mT / math.sqrt(q.shape[-1])).masked_fill(~causal, -torch.inf)  # (b, h, n, N)
    chosen = scores.topk(min(topk, N), dim=-1).indices
    keep = torch.zeros_like(scores, dtype=torch.bool).scatter(-1, chosen, True) & causal
    return attend(q, k, v, keep)


def sparse_topk_not_clamped(q, k, v, index_scores, topk):
    """XunhaoLai/native-sparse-attention-triton, the same line (issue #25): ``score.topk(topk,
    dim=-1)`` with topk as configured (lucidrains/native-sparse-attention-pytorch had the same crash,
    "selected index k out of range", not used as a source here). The future is masked before
    choosing. Cause: when a text has fewer keys than topk, torch.topk raises (keep all of them)."""
    n, N = q.shape[-2], k.shape[-2]
    causal = sliding_window_mask(n, N, N, device=q.device)
    ranked = index_scores.masked_fill(~causal, -torch.inf)
    chosen = ranked.topk(topk, dim=-1).indices
    keep = torch.zeros_like(ranked, dtype=torch.bool).scatter(-1, chosen, True) & causal
    return attend(q, k, v, keep[:, None])


# ---------------------------------------------------------------- exercise 8: shared cache


def shared_target_writes_producer_cache(x, layers, kv_source, heads, cache=None):
    """vllm-project/vllm-ascend, PR #11791 "[Feature] Gemma4 E2B and E4B": "reshape_and_cache was
    unconditionally writing K/V for every layer, so a KV-sharing target layer would overwrite the
    producer's shared slots with its own (dummy/current) K/V, corrupting the shared cache". Adapted:
    a sharing layer projects its own keys and values and writes them over the producer's entry for
    the new tokens. Cause: a layer that reads another's cache writes into it."""
    n = x.shape[1]
    cache = {} if cache is None else dict(cache)
    for i, w in enumerate(layers):
        q = split_heads(x @ w["w_q"].T, heads)
        src = kv_source[i]
        k_new, v_new = split_heads(x @ w["w_k"].T, heads), split_heads(x @ w["w_v"].T, heads)
        if src == i:
            if i in cache:
                cache[i] = (torch.cat([cache[i][0], k_new], 2), torch.cat([cache[i][1], v_new], 2))
            else:
                cache[i] = (k_new, v_new)
        else:  # the write the fix removes: over the producer's slots for these tokens
            k_old, v_old = cache[src]
            cache[src] = (
                torch.cat([k_old[:, :, :-n], k_new], 2),
                torch.cat([v_old[:, :, :-n], v_new], 2),
            )
        k, v = cache[src]
        allowed = sliding_window_mask(n, k.shape[2], k.shape[2], device=x.device)
        x = x + merge_heads(attend(q, k, v, allowed)) @ w["w_o"].T
    return x, cache


_PREV_KV = {}


def shared_kv_kept_on_layer(x, layers, kv_source, heads, cache=None):
    """JerryYin777/Cross-Layer-Attention, Cross-Layer_Attention.py (CLAEncoderLayer.forward): ``if
    self.prev_kv is None ...: src2, self.prev_kv = self.self_attn(src) else: src2, _ =
    self.self_attn(src, prev_kv=self.prev_kv)``: each layer keeps the keys and values of its first
    call and reuses them on every later call; no layer reads another's. Adapted: the keys and values
    kept per layer between calls (kv_source not consulted), the cache returned as asked. Cause: keys
    and values from an earlier call reused (sharing across calls instead of across layers)."""
    n = x.shape[1]
    cache = {} if cache is None else dict(cache)
    for i, w in enumerate(layers):
        q = split_heads(x @ w["w_q"].T, heads)
        if i not in _PREV_KV:
            _PREV_KV[i] = (split_heads(x @ w["w_k"].T, heads), split_heads(x @ w["w_v"].T, heads))
        k, v = _PREV_KV[i]
        if kv_source[i] == i:
            cache[i] = (k, v)
        allowed = sliding_window_mask(n, k.shape[2], k.shape[2], device=x.device)
        x = x + merge_heads(attend(q, k, v, allowed)) @ w["w_o"].T
    return x, cache


_FIRST_KV = {}


def shared_producer_kv_kept_between_calls(x, layers, kv_source, heads, cache=None):
    """JerryYin777/Cross-Layer-Attention (the same ``self.prev_kv``), with the sharing itself right:
    a producing layer stores the keys and values of its first prompt on the side and, on a later call
    without a cache, reuses them instead of projecting the new text. Cause: keys and values kept
    between calls (a new text must start from its own, or from the cache it is handed)."""
    n = x.shape[1]
    fresh = cache is None
    cache = {} if cache is None else dict(cache)
    for i, w in enumerate(layers):
        q = split_heads(x @ w["w_q"].T, heads)
        if kv_source[i] == i:
            if fresh and i in _FIRST_KV and _FIRST_KV[i][0].shape[2] == n:
                k, v = _FIRST_KV[i]
            else:
                k, v = split_heads(x @ w["w_k"].T, heads), split_heads(x @ w["w_v"].T, heads)
                if fresh:
                    _FIRST_KV[i] = (k, v)
            if i in cache:
                k, v = torch.cat([cache[i][0], k], 2), torch.cat([cache[i][1], v], 2)
            cache[i] = (k, v)
        k, v = cache[kv_source[i]]
        allowed = sliding_window_mask(n, k.shape[2], k.shape[2], device=x.device)
        x = x + merge_heads(attend(q, k, v, allowed)) @ w["w_o"].T
    return x, cache


def shared_layers_cache_their_own(x, layers, kv_source, heads, cache=None):
    """vllm-project/vllm-metal, PR #269 "Reduce KV cache allocation for YOCO shared layers" (fixes
    #264): before it, Gemma4's shared layers (the last 20 of 35) allocated and wrote a paged cache of
    their own beside the reference layer's ("reuse the reference layer's paged cache instead of
    allocating and writing their own"). Adapted: a sharing layer attends to its source's keys and
    values but also stores them as an entry of its own. Cause: the cache keeps entries for layers
    that make none (the bytes of an unshared cache)."""
    n = x.shape[1]
    cache = {} if cache is None else dict(cache)
    for i, w in enumerate(layers):
        q = split_heads(x @ w["w_q"].T, heads)
        if kv_source[i] == i:
            k, v = split_heads(x @ w["w_k"].T, heads), split_heads(x @ w["w_v"].T, heads)
            if i in cache:
                k, v = torch.cat([cache[i][0], k], 2), torch.cat([cache[i][1], v], 2)
            cache[i] = (k, v)
        else:
            cache[i] = cache[kv_source[i]]  # the shared layer's own allocation
        k, v = cache[i]
        allowed = sliding_window_mask(n, k.shape[2], k.shape[2], device=x.device)
        x = x + merge_heads(attend(q, k, v, allowed)) @ w["w_o"].T
    return x, cache


def shared_no_causal_mask(x, layers, kv_source, heads, cache=None):
    """JerryYin777/Cross-Layer-Attention, Cross-Layer_Attention.py (CLAAttention.forward):
    ``attn_output, _ = self.attn(q, k, v)``, nn.MultiheadAttention called without attn_mask, in a
    model used as a language model. Adapted: the sharing right, the attention without a mask. Cause:
    no causal mask (a prompt's tokens see later ones; one cached token at a time hides it)."""
    cache = {} if cache is None else dict(cache)
    for i, w in enumerate(layers):
        q = split_heads(x @ w["w_q"].T, heads)
        if kv_source[i] == i:
            k, v = split_heads(x @ w["w_k"].T, heads), split_heads(x @ w["w_v"].T, heads)
            if i in cache:
                k, v = torch.cat([cache[i][0], k], 2), torch.cat([cache[i][1], v], 2)
            cache[i] = (k, v)
        k, v = cache[kv_source[i]]
        scores = q @ k.mT / math.sqrt(q.shape[-1])
        x = x + merge_heads(torch.softmax(scores, dim=-1) @ v) @ w["w_o"].T
    return x, cache


def shared_mask_minus_ten_thousand(x, layers, kv_source, heads, cache=None):
    """google-research/bert, modeling.py (attention_layer): ``adder = (1.0 - attention_mask) *
    -10000.0`` added to the scores. Adapted to the shared stack's causal mask, the sharing right.
    Cause: the future hidden by -1e4 instead of -inf (a later token leaks in once scores exceed
    about 1e4); exact on small inputs."""
    n = x.shape[1]
    cache = {} if cache is None else dict(cache)
    for i, w in enumerate(layers):
        q = split_heads(x @ w["w_q"].T, heads)
        if kv_source[i] == i:
            k, v = split_heads(x @ w["w_k"].T, heads), split_heads(x @ w["w_v"].T, heads)
            if i in cache:
                k, v = torch.cat([cache[i][0], k], 2), torch.cat([cache[i][1], v], 2)
            cache[i] = (k, v)
        k, v = cache[kv_source[i]]
        N = k.shape[2]
        allowed = sliding_window_mask(n, N, N, device=x.device).to(x.dtype)
        scores = q @ k.mT / math.sqrt(q.shape[-1]) + (1.0 - allowed) * -10000.0
        x = x + merge_heads(torch.softmax(scores, dim=-1) @ v) @ w["w_o"].T
    return x, cache


CHECK = {
    **dict.fromkeys(
        [
            "sparse_future_removed_after_topk",
            "sparse_causal_only_with_mask",
            "sparse_topk_by_attention_scores",
            "sparse_topk_not_clamped",
        ],
        "check_sparse_attention",
    ),
    **dict.fromkeys(
        [
            "shared_target_writes_producer_cache",
            "shared_kv_kept_on_layer",
            "shared_producer_kv_kept_between_calls",
            "shared_layers_cache_their_own",
            "shared_no_causal_mask",
            "shared_mask_minus_ten_thousand",
        ],
        "check_shared_kv_forward",
    ),
}
