"""A grader's probes of chapter 11's checks, written by the fresh reviewer (no source: each is a
plausible student slip built to test one behaviour the brief asks a check to watch): a second call,
training (gradients), another device, the caller's tensors changed in place, extreme and short
inputs, wrong return types. PROBES: (check name, answer, what a right check does with it)."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from course_utils.chapters import apply_rope, attend, merge_heads, sliding_window_mask, split_heads

from .correct_fresh import (
    gdr_hf_loop_unscaled,
    kv_loop_over_caches,
    la_cumsum_performer_fixed,
    mla_absorbed_latent_mqa,
    mla_fused_nope_rope_sdpa,
    shared_aliased_sdpa,
    sparse_topk_bool_mask,
)


def kv_returns_float(layout, context, batch=1, bytes_per_value=2):
    return kv_loop_over_caches(layout, context, batch, bytes_per_value) / 1  # "as an int"


def kv_numpy_int32(layout, context, batch=1, bytes_per_value=2):
    per = np.int32(layout.latent_dim + layout.rope_dim or 2 * layout.kv_heads * layout.head_dim)
    caches, w = layout.layers // layout.layers_per_cache, layout.windowed_caches
    tokens = np.int32(w * min(context, layout.window or context) + (caches - w) * context)
    return tokens * per * np.int32(batch * bytes_per_value)  # wraps past 2**31


def kv_returns_none(layout, context, batch=1, bytes_per_value=2):
    kv_loop_over_caches(layout, context, batch, bytes_per_value)  # forgot the return


def mla_positions_without_device(x, w, cache=None):
    b, n, _ = x.shape
    h, hd, dr = w.heads, w.head_dim, w.rope_dim
    start = 0 if cache is None else cache[0].shape[1]
    positions = torch.arange(start, start + n)  # on the CPU whatever x's device
    latent, rope_keys = x @ w.w_dkv.T, apply_rope(x @ w.w_kr.T, positions)
    if cache is not None:
        latent, rope_keys = torch.cat([cache[0], latent], 1), torch.cat([cache[1], rope_keys], 1)
    N = latent.shape[1]
    q = (x @ w.w_q.T).view(b, n, h, hd).transpose(1, 2)
    q_rope = apply_rope((x @ w.w_qr.T).view(b, n, h, dr).transpose(1, 2), positions)
    k = (latent @ w.w_uk.T).view(b, N, h, hd).transpose(1, 2)
    v = (latent @ w.w_uv.T).view(b, N, h, hd).transpose(1, 2)
    s = (q @ k.mT + q_rope @ rope_keys[:, None].mT) / math.sqrt(hd + dr)
    s = s.masked_fill(~torch.ones(n, N, dtype=torch.bool).tril(N - n), -torch.inf)
    out = (s.softmax(-1) @ v).transpose(1, 2).reshape(b, n, h * hd) @ w.w_o.T
    return out, (latent, rope_keys)


def mla_latent_under_no_grad(x, w, cache=None):
    with torch.no_grad():  # "the cache needs no gradient"
        out, (latent, rope_keys) = mla_fused_nope_rope_sdpa(x, w, cache)
    return out, (latent, rope_keys)


def mla_absorbed_returns_list_cache(x, w, cache=None):
    out, (latent, rope_keys) = mla_absorbed_latent_mqa(
        x, w, None if cache is None else tuple(cache)
    )
    return out, [latent, rope_keys]  # a list, not a tuple: still a pair


def la_mutates_caller_state(q, k, v, state=None):
    out, (S, z) = la_cumsum_performer_fixed(q, k, v, state)
    if state is not None:
        state[0].copy_(S)  # "update the state in place, it saves memory"
        state[1].copy_(z)
        return out, state
    return out, (S, z)


_LEFT_OVER = {}


def la_keeps_state_between_calls(q, k, v, state=None):
    if state is None and q.shape in _LEFT_OVER:
        state = _LEFT_OVER[q.shape]  # "resume where we stopped"
    out, new = la_cumsum_performer_fixed(q, k, v, state)
    _LEFT_OVER[q.shape] = new
    return out, new


def la_elu_inplace_on_inputs(q, k, v, state=None):
    F.elu_(q), F.elu_(k)  # the caller's q and k changed
    return la_cumsum_performer_fixed(q.add_(0), k, v, state)


def chunked_detached_state(q, k, v, chunk):
    b, h, n, dk = q.shape
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    S, z, outs = q.new_zeros(b, h, dk, v.shape[-1]), q.new_zeros(b, h, dk), []
    for lo in range(0, n, chunk):
        cq, ck, cv = fq[:, :, lo : lo + chunk], fk[:, :, lo : lo + chunk], v[:, :, lo : lo + chunk]
        a = (cq @ ck.mT).tril()
        outs.append((a @ cv + cq @ S) / (a.sum(-1, keepdim=True) + cq @ z[..., None]))
        S, z = (S + ck.mT @ cv).detach(), (z + ck.sum(2)).detach()  # "truncated BPTT"
    return torch.cat(outs, dim=2)


def chunked_pad_after_feature_map(q, k, v, chunk):
    b, h, n, dk = q.shape
    pad = (chunk - n % chunk) % chunk
    fq, fk = (F.pad(F.elu(t) + 1, (0, 0, 0, pad)) for t in (q, k))  # padded rows: 0 / 0
    fq, fk, vv = (t.view(b, h, -1, chunk, t.shape[-1]) for t in (fq, fk, F.pad(v, (0, 0, 0, pad))))
    S, z, out = q.new_zeros(b, h, dk, v.shape[-1]), q.new_zeros(b, h, dk), []
    for i in range(fq.shape[2]):
        cq, ck, cv = fq[:, :, i], fk[:, :, i], vv[:, :, i]
        a = (cq @ ck.mT).tril()
        out.append((a @ cv + cq @ S) / (a.sum(-1, keepdim=True) + cq @ z[..., None]))
        S, z = S + ck.mT @ cv, z + ck.sum(2)
    return torch.cat(out, dim=2)[:, :, :n]  # right outputs, NaN gradients for k and v


def gdr_zeros_without_device(q, k, v, alpha, beta, state=None):
    b, h, n, dk = k.shape
    S0 = torch.zeros(b, h, v.shape[-1], dk, dtype=k.dtype) if state is None else state
    return gdr_hf_loop_unscaled(q, k, v, alpha, beta, S0)


def gdr_writes_caller_state(q, k, v, alpha, beta, state=None):
    out, S = gdr_hf_loop_unscaled(q, k, v, alpha, beta, state)
    if state is not None:
        state.copy_(S)  # "reuse the buffer"
        return out, state
    return out, S


def gdr_detached_each_step(q, k, v, alpha, beta, state=None):
    b, h, n, dk = k.shape
    S = k.new_zeros(b, h, v.shape[-1], dk) if state is None else state
    outs = []
    for t in range(n):
        kt = k[:, :, t]
        S = alpha[:, :, t, None, None] * S.detach()  # "truncated backpropagation through time"
        e = v[:, :, t] - (S @ kt[..., None]).squeeze(-1)
        S = S + beta[:, :, t, None, None] * e[..., None] * kt[:, :, None]
        outs.append((S @ q[:, :, t, :, None]).squeeze(-1))
    return torch.stack(outs, dim=2), S


def la_eps_in_denominator(q, k, v, state=None):
    b, h, n, dk = q.shape
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    S = q.new_zeros(b, h, dk, v.shape[-1]) if state is None else state[0]
    z = q.new_zeros(b, h, dk) if state is None else state[1]
    outs = []
    for t in range(n):
        S, z = S + fk[:, :, t, :, None] * v[:, :, t, None, :], z + fk[:, :, t]
        outs.append(
            (fq[:, :, t, None, :] @ S).squeeze(-2)
            / ((fq[:, :, t] * z).sum(-1, keepdim=True) + 1e-6)
        )
    return torch.stack(outs, dim=2), (S, z)


def la_float32_inside(q, k, v, state=None):
    state = None if state is None else tuple(t.float() for t in state)
    out, (S, z) = la_cumsum_performer_fixed(q.float(), k.float(), v.float(), state)
    return out, (S, z)  # float32 whatever came in


def mla_float32_inside(x, w, cache=None):
    return mla_fused_nope_rope_sdpa(
        x.float(), w.to(torch.float32), cache and tuple(c.float() for c in cache)
    )


def mla_softmax_without_max(x, w, cache=None):
    b, n, _ = x.shape
    h, hd, dr = w.heads, w.head_dim, w.rope_dim
    start = 0 if cache is None else cache[0].shape[1]
    positions = torch.arange(start, start + n, device=x.device)
    latent, rope_keys = x @ w.w_dkv.T, apply_rope(x @ w.w_kr.T, positions)
    if cache is not None:
        latent, rope_keys = torch.cat([cache[0], latent], 1), torch.cat([cache[1], rope_keys], 1)
    N = latent.shape[1]
    q = (x @ w.w_q.T).view(b, n, h, hd).transpose(1, 2)
    q_rope = apply_rope((x @ w.w_qr.T).view(b, n, h, dr).transpose(1, 2), positions)
    k = (latent @ w.w_uk.T).view(b, N, h, hd).transpose(1, 2)
    v = (latent @ w.w_uv.T).view(b, N, h, hd).transpose(1, 2)
    s = ((q @ k.mT + q_rope @ rope_keys[:, None].mT) / math.sqrt(hd + dr)).exp()
    s = s * sliding_window_mask(n, N, N, device=x.device)
    out = ((s / s.sum(-1, keepdim=True)) @ v).transpose(1, 2).reshape(b, n, h * hd) @ w.w_o.T
    return out, (latent, rope_keys)


def mla_rope_key_detached(x, w, cache=None):
    out, (latent, rope_keys) = mla_fused_nope_rope_sdpa(x, w, cache)
    return out, (latent, rope_keys.detach())  # "the cache is inference-only"


def shared_source_detached(x, layers, kv_source, heads, cache=None):
    n, cache = x.shape[1], {} if cache is None else dict(cache)
    for i, w in enumerate(layers):
        q = split_heads(x @ w["w_q"].T, heads)
        if kv_source[i] == i:
            k, v = split_heads(x @ w["w_k"].T, heads), split_heads(x @ w["w_v"].T, heads)
            if i in cache:
                k, v = torch.cat([cache[i][0], k], 2), torch.cat([cache[i][1], v], 2)
            cache[i] = (k, v)
        k, v = cache[kv_source[i]]
        if kv_source[i] != i:
            k, v = k.detach(), v.detach()  # "a reused cache is a constant"
        mask = sliding_window_mask(n, k.shape[2], k.shape[2], device=x.device)
        x = x + merge_heads(attend(q, k, v, mask)) @ w["w_o"].T
    return x, cache


_LAST = {}


def mla_ignores_handed_cache(x, w, cache=None):
    if cache is not None:
        cache = _LAST["mla"]  # "the cache is the one I returned last time anyway"
    out, new = mla_fused_nope_rope_sdpa(x, w, cache)
    _LAST["mla"] = new
    return out, new


def shared_ignores_handed_cache(x, layers, kv_source, heads, cache=None):
    if cache is not None:
        cache = _LAST["shared"]
    out, new = shared_aliased_sdpa(x, layers, kv_source, heads, cache)
    _LAST["shared"] = new
    return out, new


def sparse_float32_inside(q, k, v, index_scores, topk):
    return sparse_topk_bool_mask(q.float(), k.float(), v.float(), index_scores.float(), topk)


def gdr_float32_state(q, k, v, alpha, beta, state=None):
    b, h, n, dk = k.shape
    S0 = k.new_zeros(b, h, v.shape[-1], dk, dtype=torch.float32) if state is None else state
    out, S = gdr_hf_loop_unscaled(q, k, v, alpha, beta, S0)
    return out.float(), S.float()  # float32 whatever the inputs


def sparse_masks_caller_scores(q, k, v, index_scores, topk):
    n, N = q.shape[-2], k.shape[-2]
    index_scores.masked_fill_(~sliding_window_mask(n, N, N, device=q.device), -torch.inf)
    return sparse_topk_bool_mask(q, k, v, index_scores, topk)


def sparse_seeds_the_rng(q, k, v, index_scores, topk):
    torch.manual_seed(0)  # "for reproducible ties"
    return sparse_topk_bool_mask(q, k, v, index_scores, topk)


def sparse_mask_without_device(q, k, v, index_scores, topk):
    n, N = q.shape[-2], k.shape[-2]
    causal = torch.ones(n, N, dtype=torch.bool).tril(N - n)
    chosen = index_scores.masked_fill(~causal, -torch.inf).topk(min(topk, N), -1).indices
    keep = torch.zeros_like(index_scores, dtype=torch.bool).scatter(-1, chosen, True) & causal
    return attend(q, k, v, keep[:, None])


def shared_mutates_caller_cache(x, layers, kv_source, heads, cache=None):
    out, new = shared_aliased_sdpa(x, layers, kv_source, heads, cache)
    if cache is not None:
        cache.update(new)  # the caller's dict now holds the longer cache
        return out, cache
    return out, new


def shared_residual_in_place(x, layers, kv_source, heads, cache=None):
    n, cache = x.shape[1], {} if cache is None else dict(cache)
    for i, w in enumerate(layers):
        q = split_heads(x @ w["w_q"].T, heads)
        if kv_source[i] == i:
            k, v = split_heads(x @ w["w_k"].T, heads), split_heads(x @ w["w_v"].T, heads)
            if i in cache:
                k, v = torch.cat([cache[i][0], k], 2), torch.cat([cache[i][1], v], 2)
            cache[i] = (k, v)
        k, v = cache[kv_source[i]]
        x += (
            merge_heads(
                attend(q, k, v, sliding_window_mask(n, k.shape[2], k.shape[2], device=x.device))
            )
            @ w["w_o"].T
        )
    return x, cache


def shared_returns_only_output(x, layers, kv_source, heads, cache=None):
    return shared_aliased_sdpa(x, layers, kv_source, heads, cache)[0]  # forgot the cache


PROBES = [
    ("check_kv_cache_bytes", kv_returns_float, "say an int is expected, got a float"),
    ("check_kv_cache_bytes", kv_numpy_int32, "name the overflow (int32) at long contexts"),
    ("check_kv_cache_bytes", kv_returns_none, "say it returned None"),
    ("check_mla_attention", mla_positions_without_device, "name the CPU tensor on another device"),
    ("check_mla_attention", mla_latent_under_no_grad, "name the missing gradient"),
    ("check_mla_absorbed", mla_absorbed_returns_list_cache, "accept or name the list (either)"),
    ("check_linear_attention_recurrent", la_mutates_caller_state, "name the in-place change"),
    ("check_linear_attention_recurrent", la_keeps_state_between_calls, "name the leaked state"),
    ("check_linear_attention_recurrent", la_elu_inplace_on_inputs, "name the changed inputs"),
    ("check_linear_attention_chunked", chunked_detached_state, "name the cut gradient"),
    ("check_linear_attention_chunked", chunked_pad_after_feature_map, "name NaN grads of 0/0"),
    ("check_gated_delta_rule", gdr_zeros_without_device, "name the CPU tensor"),
    ("check_gated_delta_rule", gdr_writes_caller_state, "name the in-place write"),
    ("check_gated_delta_rule", gdr_detached_each_step, "name the cut gradient through the state"),
    ("check_linear_attention_recurrent", la_eps_in_denominator, "accept (1e-6 in the denominator)"),
    ("check_linear_attention_recurrent", la_float32_inside, "name the dtype (float64 in)"),
    ("check_mla_attention", mla_float32_inside, "name the dtype (float64 in)"),
    ("check_mla_attention", mla_softmax_without_max, "name the overflow at large scores"),
    ("check_mla_attention", mla_rope_key_detached, "accept or name (the cache is returned)"),
    ("check_shared_kv_forward", shared_source_detached, "name the cut gradient to the source"),
    ("check_sparse_attention", sparse_float32_inside, "name the dtype (float64 in)"),
    ("check_mla_attention", mla_ignores_handed_cache, "name the cache kept between calls"),
    ("check_shared_kv_forward", shared_ignores_handed_cache, "name the cache kept between calls"),
    ("check_gated_delta_rule", gdr_float32_state, "name the dtype (float64 in, float32 out)"),
    ("check_sparse_attention", sparse_masks_caller_scores, "name the changed index_scores"),
    ("check_sparse_attention", sparse_seeds_the_rng, "name the reseeded generator"),
    ("check_sparse_attention", sparse_mask_without_device, "name the CPU tensor"),
    ("check_shared_kv_forward", shared_mutates_caller_cache, "name the changed cache dict"),
    ("check_shared_kv_forward", shared_residual_in_place, "name the changed x"),
    ("check_shared_kv_forward", shared_returns_only_output, "say a pair (x, cache) is expected"),
]
