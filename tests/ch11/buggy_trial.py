"""Wrong answers to chapter 11's exercises that a student's trial in JupyterLab (issue 38) saw
accepted or left unnamed, and the mistakes no other fixture reaches; each comment names the public code
with the same slip (tests/ch11/collected_*.py adapts those)."""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F

from course_utils.chapters import apply_rope, mla_attention, sliding_window_mask
from tests.ch11.buggy import _chunked, _delta, _linear, _mla


def absorbed_calls_naive(x, w, cache=None):
    # Where from: issue 38, "an 'absorbed' MLA that simply calls the naive one" (the right numbers,
    # every key and value rebuilt at each step), as Hugging Face's DeepseekV3Attention computes
    # attention from up-projected keys and values.
    return mla_attention(x, w, cache)


def absorbed_scale_latent_width(x, w, cache=None):
    # Where from: issue 38 ("the absorbed scale sqrt(dc+dr)"); deepseek-ai/FlashMLA's
    # flash_mla_with_kvcache divides by the absorbed query's width dc + dr unless softmax_scale is given.
    return _mla(x, w, cache, latent_scale=True)


def w_uk_heads_interleaved(x, w, cache=None):
    # Where from: issue 38 ("a wrong W_uk reshape"): W_uk read as w.w_uk.view(hd, h, dc) with the
    # heads as the second axis, as if row r belonged to head r % h.
    return _mla(x, w, cache, uk_view=lambda m, h, hd, dc: m.view(hd, h, dc).transpose(0, 1))


def w_uk_transposed_then_reshaped(x, w, cache=None):
    # Where from: issue 38's wrong reshape, the other way it is written: w.w_uk.T (dc, h * hd), the
    # matrix of latent @ w.w_uk.T, reshaped into heads, (h, dc, hd), and each block transposed.
    return _mla(x, w, cache, uk_view=lambda m, h, hd, dc: m.T.reshape(h, dc, hd).mT)


ABSORBED_BUGS = [(absorbed_calls_naive, "mla_absorbed_builds_keys")]
MLA_BUGS = [
    (absorbed_scale_latent_width, "mla_scale_latent_width"),
    (w_uk_heads_interleaved, "mla_head_blocks_interleaved"),
    (w_uk_transposed_then_reshaped, "mla_weight_transposed_before_view"),
]


def linear_state_updated_in_place(q, k, v, state=None):
    # Where from: issue 38 ("a recurrence that updates the caller's state in place"), S += ... on the
    # state given; vllm-project/vllm's fused_recurrent_gated_delta_rule does it by default
    # (inplace_final_state=True).
    return _linear(q, k, v, state, in_place=True)


def delta_state_updated_in_place(q, k, v, alpha, beta, state=None):
    # Where from: the same slip in the delta rule, state.copy_(S) at the end, as vLLM's
    # inplace_final_state=True stores the final state into initial_state.
    return _delta(q, k, v, alpha, beta, state, in_place=True)


def chunk_last_partial_dropped(q, k, v, chunk):
    # Where from: issue 38 ("a dropped last partial chunk"); tile-ai/TileOPs#6: NT = S // chunk_size,
    # "parts of the input tensors might be silently ignored".
    return _chunked(q, k, v, chunk, floor=True)


def chunk_state_updated_before_reading(q, k, v, chunk):
    # Where from: issue 38 ("state updated before reading in the chunked form"): S and z take the
    # chunk at the top of the loop, the intra-chunk part kept; flash-linear-attention's
    # naive_chunk_linear_attn without its shift of the chunk cumsum makes the same double count.
    return _chunked(q, k, v, chunk, first=True)


LINEAR_BUGS = [(linear_state_updated_in_place, "recurrence_state_modified")]
DELTA_BUGS = [(delta_state_updated_in_place, "recurrence_state_modified")]
CHUNK_BUGS = [
    (chunk_last_partial_dropped, "chunk_last_partial"),
    (chunk_state_updated_before_reading, "chunk_state_includes_chunk"),
]


def mla_masked_only_without_cache(x, w, cache=None):
    # Constructed: the mask built for the prompt only ("a cached step has one new token"), so a step
    # of two new tokens with a cache attends unmasked (chapter 08's cache_chunk_unmasked, in MLA).
    b, n, _ = x.shape
    h, hd, dr = w.heads, w.head_dim, w.rope_dim
    start = 0 if cache is None else cache[0].shape[1]
    pos = torch.arange(start, start + n, device=x.device)
    latent, rk = x @ w.w_dkv.T, apply_rope(x @ w.w_kr.T, pos)
    if cache is not None:
        latent, rk = torch.cat([cache[0], latent], 1), torch.cat([cache[1], rk], 1)
    N = latent.shape[1]
    q = (x @ w.w_q.T).view(b, n, h, hd).transpose(1, 2)
    q_rope = apply_rope((x @ w.w_qr.T).view(b, n, h, dr).transpose(1, 2), pos)
    k, v = ((latent @ m.T).view(b, N, h, hd).transpose(1, 2) for m in (w.w_uk, w.w_uv))
    scores = (q @ k.mT + q_rope @ rk[:, None].mT) / (hd + dr) ** 0.5
    if cache is None:
        scores = scores.masked_fill(~sliding_window_mask(n, N, N, x.device), -torch.inf)
    out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, h * hd) @ w.w_o.T
    return out, (latent, rk)


def linear_z_with_token_axis(q, k, v, state=None):
    # Where from: fla-org/flash-linear-attention, fla/ops/linear_attn/naive.py, naive_recurrent_linear_attn
    # with normalize=True returns (S, k_cum[:, -1:]): z keeps a token axis, (b, h, 1, dk) here.
    out, (S, z) = _linear(q, k, v, state if state is None else (state[0], state[1][:, :, 0]))
    return out, (S, z[:, :, None])


MLA_BUGS.append((mla_masked_only_without_cache, "mla_not_causal"))
LINEAR_BUGS.append((linear_z_with_token_axis, "recurrence_state_wrong"))


def linear_state_copied_then_in_place(q, k, v, state=None):
    # Constructed, a first version of correct.py's unusual answers: in-place updates (S += ...) on a
    # copy of the state. The numbers are right, but the matmul that read S needs it for backward():
    # training fails. fla-org/flash-linear-attention's naive references write h = h.clone() + ... for
    # exactly this reason.
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    b, h, n, dk = q.shape
    S, z = (q.new_zeros(b, h, dk, v.shape[-1]), q.new_zeros(b, h, dk)) if state is None else state
    S, z, outs = S.clone(), z.clone(), []
    for t in range(n):
        S += fk[:, :, t, :, None] * v[:, :, t, None, :]
        z += fk[:, :, t]
        outs.append((fq[:, :, t, None] @ S).squeeze(-2) / (fq[:, :, t] * z).sum(-1, keepdim=True))
    return torch.stack(outs, 2), (S, z)


def absorbed_weights_folded_once(x, w, cache=None):
    # Modelled on vllm-project/vllm's MLA backends, whose process_weights_after_loading splits
    # kv_b_proj into W_UK_T and W_UV once, as inference-only tensors: here the heads' blocks are taken
    # from detached weights, so w_uk and w_uv get no gradient when the layer is trained.
    return _mla(x, replace(w, w_uk=w.w_uk.detach(), w_uv=w.w_uv.detach()), cache)


LINEAR_BUGS.append((linear_state_copied_then_in_place, "backward_fails"))
ABSORBED_BUGS.append((absorbed_weights_folded_once, "gradient_missing"))
