"""Wrong answers to chapter 11's exercises 1 to 6, taken from other projects' code and issue threads
by a reviewer who had not seen the checks (a second, fresh collection: none of the sources of
collected_mla.py / collected_recurrent.py). Each is adapted to the exercise's interface and keeps
the source's bug as the source has it; the comment gives the source, the bug in one sentence and
the cause a teacher would name. Exercises 7 and 8: buggy_fresh_sparse_sharing.py.

FRESH: (check name, answer, the cause a teacher would name) for tests/ch11/test_ch11_fresh.py."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from course_utils.chapters import apply_rope, sliding_window_mask


def _per_token(layout):
    if layout.latent_dim:
        return layout.latent_dim + layout.rope_dim
    return 2 * layout.kv_heads * layout.head_dim


# --- Exercise 1: kv_cache_bytes ---------------------------------------------------------------


# jranaraki/vllm-fit src/vllm_fit/estimator.py, issue #2: `(2 * num_layers * num_attention_heads *
# hidden_size * 4) / (8 * 1024**3)` multiplies by the heads twice (hidden_size is already heads *
# head_dim) and hard-codes 4/8 bytes. Cause: an extra factor of the heads; bytes_per_value ignored.
def kv_vllm_fit_heads_squared(layout, context, batch=1, bytes_per_value=2):
    num_attention_heads, hidden_size = layout.kv_heads, layout.kv_heads * layout.head_dim
    per_token = 2 * layout.layers * num_attention_heads * hidden_size * 4 // 8
    return batch * context * per_token


# alvarobartt/hf-mem issue #60: sliding-window layers are left out of the estimate altogether (only
# the full-attention layers are counted). Cause: windowed caches counted as holding nothing.
def kv_hf_mem_drops_windowed_layers(layout, context, batch=1, bytes_per_value=2):
    caches = layout.layers // layout.layers_per_cache
    full = caches - layout.windowed_caches
    return batch * full * context * _per_token(layout) * bytes_per_value


# ai-dynamo/aiconfigurator PR #1201 (review): capacity from `get_kvcache_bytes_per_sequence(1)`
# times the tokens, a per-token constant, "not true for hybrid/sliding-window attention models".
# Cause: the window never caps the count (bytes grow linearly past the window).
def kv_aiconfigurator_per_token_times_context(layout, context, batch=1, bytes_per_value=2):
    caches = layout.layers // layout.layers_per_cache
    per_sequence_of_one = batch * caches * 1 * _per_token(layout) * bytes_per_value
    return per_sequence_of_one * context


# LMCache/LMCache PR #694 (description of the DeepSeek-V3 fix): "KV Cache size = 2 x L x S x d_c x B,
# 2: K and V need to be stored at the same time". Cause: the latent counted twice (as a key and a
# value) and the rotary key left out.
def kv_lmcache_latent_twice(layout, context, batch=1, bytes_per_value=2):
    caches = layout.layers // layout.layers_per_cache
    w = layout.windowed_caches
    tokens = w * min(context, layout.window or context) + (caches - w) * context
    if layout.latent_dim:
        return 2 * tokens * layout.latent_dim * bytes_per_value * batch
    return batch * tokens * 2 * layout.kv_heads * layout.head_dim * bytes_per_value


# NVIDIA/TensorRT-LLM PR #16707: calc_engine_setting "used the plain MHA formula
# (2*layers*kv_heads*head_size) for all models, overestimating KV bytes/token ~25x for MLA".
# Cause: the latent ignored (an MLA cache counted as full keys and values per head).
def kv_trtllm_mha_formula_for_mla(layout, context, batch=1, bytes_per_value=2):
    caches = layout.layers // layout.layers_per_cache
    w = layout.windowed_caches
    tokens = w * min(context, layout.window or context) + (caches - w) * context
    return batch * tokens * 2 * layout.kv_heads * layout.head_dim * bytes_per_value


# WestWaters/pollard-weights PR #80: "Reuse layers were counted as holding KV ... Counting all forty
# overstates the cache by 10x". Cause: layers that read another layer's cache counted as caching.
def kv_pollard_counts_reuse_layers(layout, context, batch=1, bytes_per_value=2):
    caches = layout.layers
    w = layout.windowed_caches
    tokens = w * min(context, layout.window or context) + (caches - w) * context
    return batch * tokens * _per_token(layout) * bytes_per_value


# InternLM/lmdeploy PR #3772: "Gemma3 does not enable sliding window on every layers. The sliding
# window block allocation strategy should not be used here." Cause: the window applied to every
# cache, not only to the windowed_caches.
def kv_lmdeploy_window_on_every_layer(layout, context, batch=1, bytes_per_value=2):
    caches = layout.layers // layout.layers_per_cache
    tokens = caches * (min(context, layout.window) if layout.window else context)
    return batch * tokens * _per_token(layout) * bytes_per_value


# --- Exercises 2 and 3: MLA -------------------------------------------------------------------


def _latent_and_queries(x, w, cache, positions):
    """The parts every fixture below gets right: latent and rotary key appended, queries split."""
    b, n, _ = x.shape
    h, hd, dr = w.heads, w.head_dim, w.rope_dim
    latent = x @ w.w_dkv.T  # (b, n, dc)
    rope_keys = apply_rope(x @ w.w_kr.T, positions)  # (b, n, dr)
    if cache is not None:
        latent = torch.cat([cache[0], latent], dim=1)
        rope_keys = torch.cat([cache[1], rope_keys], dim=1)
    q = (x @ w.w_q.T).view(b, n, h, hd).transpose(1, 2)  # (b, h, n, hd)
    q_rope = apply_rope((x @ w.w_qr.T).view(b, n, h, dr).transpose(1, 2), positions)
    return latent, rope_keys, q, q_rope


def _naive_finish(x, w, q, q_rope, latent, rope_keys, allowed):
    b, n, _ = x.shape
    h, hd, dr, N = w.heads, w.head_dim, w.rope_dim, latent.shape[1]
    k = (latent @ w.w_uk.T).view(b, N, h, hd).transpose(1, 2)
    v = (latent @ w.w_uv.T).view(b, N, h, hd).transpose(1, 2)
    scores = (q @ k.mT + q_rope @ rope_keys[:, None].mT) / math.sqrt(hd + dr)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, -torch.inf)
    context = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, n, h * hd)
    return context @ w.w_o.T


# pytorch/executorch PR #21749: the eager KV-cache reference "declared CAUSAL for every multi-token
# step and attend() applied torch's is_causal, which is upper-left aligned when the query and key
# lengths differ". Cause: causal mask aligned to the first keys, not the last (cached prefix hidden).
def mla_executorch_upper_left_causal(x, w, cache=None):
    b, n, _ = x.shape
    h, hd, dr = w.heads, w.head_dim, w.rope_dim
    start = 0 if cache is None else cache[0].shape[1]
    positions = torch.arange(start, start + n, device=x.device)
    latent, rope_keys, q, q_rope = _latent_and_queries(x, w, cache, positions)
    N = latent.shape[1]
    k = (latent @ w.w_uk.T).view(b, N, h, hd).transpose(1, 2)
    v = (latent @ w.w_uv.T).view(b, N, h, hd).transpose(1, 2)
    keys = torch.cat([k, rope_keys[:, None].expand(b, h, N, dr)], dim=-1)  # (b, h, N, hd + dr)
    out = F.scaled_dot_product_attention(torch.cat([q, q_rope], dim=-1), keys, v, is_causal=True)
    return out.transpose(1, 2).reshape(b, n, h * hd) @ w.w_o.T, (latent, rope_keys)


# NeuraLegion/shainet PR #110 (review): keys are cached already rotated, then "re-applying RoPE to
# the full cached K here will rotate cached keys multiple times" (apply_rope!(k_h, 0), positions
# 0..total_len-1). Cause: the rotary key rotated twice.
def mla_shainet_rerotates_cached_keys(x, w, cache=None):
    n = x.shape[1]
    start = 0 if cache is None else cache[0].shape[1]
    positions = torch.arange(start, start + n, device=x.device)
    latent, rope_keys, q, q_rope = _latent_and_queries(x, w, cache, positions)
    N = latent.shape[1]
    rotated = apply_rope(rope_keys, torch.arange(N, device=x.device))  # cached keys rotated again
    allowed = sliding_window_mask(n, N, N, device=x.device)
    return _naive_finish(x, w, q, q_rope, latent, rotated, allowed), (latent, rope_keys)


# tensorgi/TPA issue #4, "Bug in MLA implementation": heads and tokens transposed before the rotary
# embedding, whose class takes dim 1 as the sequence, so queries turn by their head index and the
# one-head rotary key by position 0. Cause: RoPE at the wrong positions (head index, not token).
def mla_tpa_rope_over_heads(x, w, cache=None):
    b, n, _ = x.shape
    h, hd, dr = w.heads, w.head_dim, w.rope_dim
    latent = x @ w.w_dkv.T
    rope_keys = apply_rope((x @ w.w_kr.T)[:, None], torch.arange(1, device=x.device)).squeeze(1)
    if cache is not None:
        latent = torch.cat([cache[0], latent], dim=1)
        rope_keys = torch.cat([cache[1], rope_keys], dim=1)
    N = latent.shape[1]
    q = (x @ w.w_q.T).view(b, n, h, hd).transpose(1, 2)
    q_rope = (x @ w.w_qr.T).view(b, n, h, dr).transpose(1, 2)  # (b, h, n, dr)
    q_rope = apply_rope(q_rope.transpose(1, 2), torch.arange(h, device=x.device)).transpose(1, 2)
    allowed = sliding_window_mask(n, N, N, device=x.device)
    return _naive_finish(x, w, q, q_rope, latent, rope_keys, allowed), (latent, rope_keys)


# ml-explore/mlx-lm PR #1702 (gemma3n, point 2): the offset is read after the cache's
# update_and_fetch, "so cache.offset is offset + L, not offset" and the queries are rotated at the
# wrong offset. Cause: the rotary queries' positions shifted by n (keys right, queries not).
def mla_mlx_lm_query_offset_after_append(x, w, cache=None):
    n = x.shape[1]
    start = 0 if cache is None else cache[0].shape[1]
    positions = torch.arange(start, start + n, device=x.device)
    latent, rope_keys, q, _ = _latent_and_queries(x, w, cache, positions)
    N = latent.shape[1]
    b, h, dr = x.shape[0], w.heads, w.rope_dim
    offset = N  # the cache's offset after the append
    q_rope = (x @ w.w_qr.T).view(b, n, h, dr).transpose(1, 2)
    q_rope = apply_rope(q_rope, torch.arange(offset, offset + n, device=x.device))
    allowed = sliding_window_mask(n, N, N, device=x.device)
    return _naive_finish(x, w, q, q_rope, latent, rope_keys, allowed), (latent, rope_keys)


def _absorbed(x, w, cache, scale, causal):
    b, n, _ = x.shape
    h, hd = w.heads, w.head_dim
    start = 0 if cache is None else cache[0].shape[1]
    positions = torch.arange(start, start + n, device=x.device)
    latent, rope_keys, q, q_rope = _latent_and_queries(x, w, cache, positions)
    N, dc = latent.shape[1], latent.shape[2]
    q_lat = q @ w.w_uk.view(h, hd, dc)
    scores = (q_lat @ latent[:, None].mT + q_rope @ rope_keys[:, None].mT) * scale
    if causal:
        scores = scores.masked_fill(~sliding_window_mask(n, N, N, device=x.device), -torch.inf)
    mixed = torch.softmax(scores, dim=-1) @ latent[:, None]
    context = mixed @ w.w_uv.view(h, hd, dc).mT
    return context.transpose(1, 2).reshape(b, n, h * hd) @ w.w_o.T, (latent, rope_keys)


# ollama/ollama PR #13893 (glm4moelite): "Use the original key dimension (qkNopeHeadDim +
# qkRopeHeadDim = 256) for the attention scale instead of the MLA absorbed dimension (kvLoraRank +
# qkRopeHeadDim = 576)". Cause: scores scaled by sqrt(dc + dr) instead of sqrt(hd + dr).
def mla_absorbed_ollama_latent_scale(x, w, cache=None):
    dc = w.w_dkv.shape[0]
    return _absorbed(x, w, cache, 1 / math.sqrt(dc + w.rope_dim), causal=True)


# lablup/mlxcel issue #619 (deepseek_v32, MLAAttention): causality is applied "only when the caller
# supplies a mask; there is no causal fallback for mask == None", so "a multi-token prefill attends
# bidirectionally". Cause: no causal mask (the future is visible).
def mla_absorbed_mlxcel_no_causal_fallback(x, w, cache=None):
    mask = None  # what every generation path passes
    return _absorbed(x, w, cache, 1 / math.sqrt(w.head_dim + w.rope_dim), causal=mask is not None)


# --- Exercises 4 and 5: linear attention ------------------------------------------------------


def _phi(x):
    return F.elu(x) + 1


# lucidrains/performer-pytorch issue #40 (fixed in 0.11.2): causal_linear_attention_noncuda computes
# `D_inv = torch.einsum('...nd,...nd->...n', q, k.cumsum(dim=-2))` without the `1. /`, then
# multiplies by it. Cause: multiplies by the normaliser phi(q).z instead of dividing.
def la_performer_missing_reciprocal(q, k, v, state=None):
    q, k = _phi(q), _phi(k)
    S0 = 0 if state is None else state[0][:, :, None]
    z0 = 0 if state is None else state[1][:, :, None]
    k_cumsum = k.cumsum(dim=-2) + z0
    D_inv = torch.einsum("...nd,...nd->...n", q, k_cumsum.type_as(q))
    context = torch.einsum("...nd,...ne->...nde", k, v).cumsum(dim=-3) + S0
    out = torch.einsum("...nde,...nd,...n->...ne", context, q, D_inv)
    return out, (context[:, :, -1], k_cumsum[:, :, -1])


# lucidrains/performer-pytorch issue #21: `context /= k_cumsum.unsqueeze(dim=-1)` then
# `einsum(context, q)`: each row of S divided by its own entry of z. Cause: the normaliser taken
# per feature of the state instead of phi(q).z per query.
def la_performer_divides_state_by_z(q, k, v, state=None):
    q, k = _phi(q), _phi(k)
    S0 = 0 if state is None else state[0][:, :, None]
    z0 = 0 if state is None else state[1][:, :, None]
    k_cumsum = k.cumsum(dim=-2) + z0
    context = torch.einsum("...nd,...ne->...nde", k, v).cumsum(dim=-3) + S0
    S_last = context[:, :, -1]
    context = context / k_cumsum.unsqueeze(dim=-1)
    out = torch.einsum("...nde,...nd->...ne", context, q)
    return out, (S_last, k_cumsum[:, :, -1])


# fla-org/flash-linear-attention PR #268: with normalize=True and a state from an earlier call, the
# normaliser is `k.cumsum(-2)` of this call only, "Q@sum(K) is missing earlier Keys" (S is carried,
# z is not). Cause: z restarted at zero for each call while S continues.
def la_fla_normaliser_forgets_earlier_keys(q, k, v, state=None):
    b, h, n, dk = q.shape
    fq, fk = _phi(q), _phi(k)
    S = q.new_zeros(b, h, dk, v.shape[-1]) if state is None else state[0]
    z = q.new_zeros(b, h, dk)  # normalize_output(q, k, o): this call's keys only
    outs = []
    for t in range(n):
        S = S + fk[:, :, t, :, None] * v[:, :, t, None, :]
        z = z + fk[:, :, t]
        outs.append(
            (fq[:, :, t, None, :] @ S).squeeze(-2) / (fq[:, :, t] * z).sum(-1, keepdim=True)
        )
    return torch.stack(outs, dim=2), (S, z)


# open-lm-engine/lm-engine PR #496 (review, Major): the reference loop reads before it writes,
# `y[:, s] = q[:, s] @ h0` then `h0 = h0 + k[:, s] v[:, s]^T`. Cause: output read from the state
# before the token's own key and value are added (o_t from S_{t-1}).
def la_lm_engine_read_before_write(q, k, v, state=None):
    b, h, n, dk = q.shape
    fq, fk = _phi(q), _phi(k)
    S = q.new_zeros(b, h, dk, v.shape[-1]) if state is None else state[0]
    z = q.new_zeros(b, h, dk) if state is None else state[1]
    outs = []
    for t in range(n):
        outs.append(
            (fq[:, :, t, None, :] @ S).squeeze(-2) / (fq[:, :, t] * z).sum(-1, keepdim=True)
        )
        S = S + fk[:, :, t, :, None] * v[:, :, t, None, :]
        z = z + fk[:, :, t]
    return torch.stack(outs, dim=2), (S, z)


# tile-ai/TileOPs PR #6 (review, high): `NT = S // chunk_size`, "if the sequence length S is not
# perfectly divisible by chunk_size ... parts of the input tensors might be silently ignored".
# Cause: the last, shorter chunk is dropped (its outputs never written).
def chunked_tileops_drops_partial_chunk(q, k, v, chunk):
    b, h, n, dk = q.shape
    fq, fk = _phi(q), _phi(k)
    S, z = q.new_zeros(b, h, dk, v.shape[-1]), q.new_zeros(b, h, dk)
    out = v.new_zeros(b, h, n, v.shape[-1])  # the kernel's output buffer
    for i in range(n // chunk):
        lo, hi = i * chunk, (i + 1) * chunk
        cq, ck, cv = fq[:, :, lo:hi], fk[:, :, lo:hi], v[:, :, lo:hi]
        scores = (cq @ ck.mT).tril()
        out[:, :, lo:hi] = (scores @ cv + cq @ S) / (
            scores.sum(-1, keepdim=True) + cq @ z[..., None]
        )
        S, z = S + ck.mT @ cv, z + ck.sum(dim=2)
    return out


# open-lm-engine/accelerated-model-architectures PR #480: the intra-chunk mask was
# `causal_row_ids > causal_col_ids` (fixed to `>=`). Cause: the diagonal masked out, so a token
# does not see its own key and value inside its chunk.
def chunked_lm_engine_strict_mask(q, k, v, chunk):
    b, h, n, dk = q.shape
    fq, fk = _phi(q), _phi(k)
    S, z = q.new_zeros(b, h, dk, v.shape[-1]), q.new_zeros(b, h, dk)
    outs = []
    for lo in range(0, n, chunk):
        hi = min(lo + chunk, n)
        cq, ck, cv = fq[:, :, lo:hi], fk[:, :, lo:hi], v[:, :, lo:hi]
        ids = torch.arange(hi - lo, device=q.device)
        causal_mask = ids[:, None] > ids[None, :]
        scores = (cq @ ck.mT) * causal_mask
        outs.append((scores @ cv + cq @ S) / (scores.sum(-1, keepdim=True) + cq @ z[..., None]))
        S, z = S + ck.mT @ cv, z + ck.sum(dim=2)
    return torch.cat(outs, dim=2)


# --- Exercise 6: the gated delta rule ---------------------------------------------------------


# fla-org/flash-linear-attention issue #885: the "traditional formulation" the reporter proposes,
# `e = v - h @ k; h = g * h + k @ e.T`, "where the error is computed using the pre-decay state";
# the maintainer answers that decay-before-error is the Gated DeltaNet rule. Cause: the error
# v - S k computed from the memory before the decay alpha.
def gdr_fla_885_error_before_decay(q, k, v, alpha, beta, state=None):
    b, h, n, dk = k.shape
    S = k.new_zeros(b, h, v.shape[-1], dk) if state is None else state
    outs = []
    for t in range(n):
        kt, vt = k[:, :, t], v[:, :, t]
        e = vt - (S @ kt[..., None]).squeeze(-1)  # pre-decay state
        S = (
            alpha[:, :, t, None, None] * S
            + beta[:, :, t, None, None] * e[..., None] * kt[:, :, None]
        )
        outs.append((S @ q[:, :, t, :, None]).squeeze(-1))
    return torch.stack(outs, dim=2), S


# huggingface/transformers src/transformers/models/qwen3_next/modeling_qwen3_next.py,
# torch_recurrent_gated_delta_rule: `scale = 1 / (query.shape[-1] ** 0.5); query = query * scale`
# (g in log space, state (dk, dv); both adapted). Cause: the read S q scaled by 1/sqrt(dk), which
# the exercise's o_t = S_t q_t does not have.
def gdr_hf_qwen3_next_scaled_query(q, k, v, alpha, beta, state=None):
    query, key, value, g = q.float(), k.float(), v.float(), alpha.log()
    batch_size, num_heads, sequence_length, k_head_dim = key.shape
    query = query * (1 / (query.shape[-1] ** 0.5))
    core_attn_out = torch.zeros(batch_size, num_heads, sequence_length, value.shape[-1]).to(value)
    last_recurrent_state = (
        torch.zeros(batch_size, num_heads, k_head_dim, value.shape[-1]).to(value)
        if state is None
        else state.mT.to(value)
    )
    for i in range(sequence_length):
        q_t, k_t, v_t = query[:, :, i], key[:, :, i], value[:, :, i]
        g_t = g[:, :, i].exp().unsqueeze(-1).unsqueeze(-1)
        beta_t = beta[:, :, i].unsqueeze(-1)
        last_recurrent_state = last_recurrent_state * g_t
        kv_mem = (last_recurrent_state * k_t.unsqueeze(-1)).sum(dim=-2)
        delta = (v_t - kv_mem) * beta_t
        last_recurrent_state = last_recurrent_state + k_t.unsqueeze(-1) * delta.unsqueeze(-2)
        core_attn_out[:, :, i] = (last_recurrent_state * q_t.unsqueeze(-1)).sum(dim=-2)
    return core_attn_out.to(q.dtype), last_recurrent_state.mT.to(q.dtype)


# NikolasMarkou/dl_techniques src/dl_techniques/layers/gated_delta_net.py, delta_rule_update:
# `current_state = alpha_t * prev_state + beta_t * (k_t v_t^T)` (the value's residual half
# dropped). Cause: no delta: nothing is erased (S k never subtracted), a gated linear sum.
def gdr_dl_techniques_no_erase(q, k, v, alpha, beta, state=None):
    b, h, n, dk = k.shape
    prev_state = k.new_zeros(b, h, dk, v.shape[-1]) if state is None else state.mT
    outs = []
    for t in range(n):
        delta_update = k[:, :, t, :, None] @ v[:, :, t, None, :]  # (b, h, dk, dv)
        scaled_delta = beta[:, :, t, None, None] * delta_update
        prev_state = alpha[:, :, t, None, None] * prev_state + scaled_delta
        outs.append((q[:, :, t, None, :] @ prev_state).squeeze(-2))
    return torch.stack(outs, dim=2), prev_state.mT


FRESH = [
    ("check_kv_cache_bytes", kv_vllm_fit_heads_squared, "extra factor of heads / bytes ignored"),
    ("check_kv_cache_bytes", kv_hf_mem_drops_windowed_layers, "windowed caches counted as empty"),
    ("check_kv_cache_bytes", kv_aiconfigurator_per_token_times_context, "window never caps"),
    ("check_kv_cache_bytes", kv_lmcache_latent_twice, "latent counted twice, rotary key left out"),
    ("check_kv_cache_bytes", kv_trtllm_mha_formula_for_mla, "latent ignored (MHA formula)"),
    ("check_kv_cache_bytes", kv_pollard_counts_reuse_layers, "layers_per_cache ignored"),
    ("check_kv_cache_bytes", kv_lmdeploy_window_on_every_layer, "window on every cache"),
    ("check_mla_attention", mla_executorch_upper_left_causal, "causal mask top-left with a cache"),
    ("check_mla_attention", mla_shainet_rerotates_cached_keys, "rotary key rotated twice"),
    ("check_mla_attention", mla_tpa_rope_over_heads, "RoPE by head index, key unrotated"),
    ("check_mla_attention", mla_mlx_lm_query_offset_after_append, "query positions shifted by n"),
    ("check_mla_absorbed", mla_absorbed_ollama_latent_scale, "scale sqrt(dc + dr)"),
    ("check_mla_absorbed", mla_absorbed_mlxcel_no_causal_fallback, "no causal mask"),
    (
        "check_linear_attention_recurrent",
        la_performer_missing_reciprocal,
        "multiplies by normaliser",
    ),
    ("check_linear_attention_recurrent", la_performer_divides_state_by_z, "S divided by z per row"),
    ("check_linear_attention_recurrent", la_fla_normaliser_forgets_earlier_keys, "z restarts"),
    ("check_linear_attention_recurrent", la_lm_engine_read_before_write, "read before write"),
    ("check_linear_attention_chunked", chunked_tileops_drops_partial_chunk, "last chunk dropped"),
    ("check_linear_attention_chunked", chunked_lm_engine_strict_mask, "diagonal masked in chunk"),
    ("check_gated_delta_rule", gdr_fla_885_error_before_decay, "error from undecayed memory"),
    ("check_gated_delta_rule", gdr_hf_qwen3_next_scaled_query, "query scaled by 1/sqrt(dk)"),
    ("check_gated_delta_rule", gdr_dl_techniques_no_erase, "no erase term (linear sum)"),
]
