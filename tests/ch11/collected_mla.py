"""Wrong answers to chapter 11's exercises 1-3 (the cache's bytes, MLA, its absorbed form) found in
public repositories and issue threads, each adapted to the exercise's interface as little as possible
(the source's way of computing kept, its slip kept). Each comment names the repository and file (or
the issue) and the slip; COLLECTED lists (check name, answer, the mistake ids that name its cause).
tests/ch11/test_ch11_collection.py measures how many the checks reject and name."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from course_utils.chapters import apply_rope, sliding_window_mask


# --------------------------------------------------------------------------- exercise 1: bytes
def kv_neurips_rampup(layout, context, batch=1, bytes_per_value=2):
    # ksenthilnathan02/neurips-2025-systems-rampup, inference/kv_cache_memory_estimator.py,
    # kv_cache_bytes: batch * seq_len * num_layers * (num_kv_heads * head_dim * 2 * dtype_bytes).
    # Every layer keeps K and V of every token: no window, no sharing, no latent.
    per_token = layout.kv_heads * layout.head_dim * 2 * bytes_per_value
    return batch * context * layout.layers * per_token


def kv_ollama_one_layer(layout, context, batch=1, bytes_per_value=2):
    # ollama/ollama, internal/server/model.go (stored version 984564f), ComputeKVCacheSize:
    # contextLength * KVHeads * HeadDim * 2, "2 bytes per element (fp16)": one layer, keys only,
    # one text, and 2 bytes whatever the dtype.
    elements = context * layout.kv_heads
    return elements * layout.head_dim * 2


def kv_hsliuustc_gib(layout, context, batch=1, bytes_per_value=2):
    # hsliuustc/kv_cache_calculator, src/kv_cache_calculator/calculator.py, calculate_kv_cache_size:
    # hidden_size * seq_len * 2 * num_attention_heads * precision_bits / 8 per layer, times layers and
    # batch, returned in GB (total / 1024 ** 3). Adapted: hidden_size is kv_heads * head_dim, the
    # heads are the key/value heads, precision_bits = 8 * bytes_per_value.
    bytes_per_element = (8 * bytes_per_value) / 8
    size_per_layer = (
        layout.kv_heads * layout.head_dim * context * 2 * layout.kv_heads * bytes_per_element
    )
    return size_per_layer * layout.layers * batch / (1024**3)


def kv_rasbt_swa_default_ratio(layout, context, batch=1, bytes_per_value=2):
    # rasbt/LLMs-from-scratch, ch04/06_swa/memory_estimator_swa.py, estimate_totals with its default
    # --swa_ratio "1:0" ("all SWA"): every layer keeps min(context, window) tokens (Gemma 3's five
    # windowed layers per full one are not in the layout it reads); no sharing, no latent.
    eff_w = min(context, layout.window) if layout.window else context
    per_layer = batch * eff_w * layout.head_dim * layout.kv_heads * 2 * bytes_per_value
    return per_layer * layout.layers


# --------------------------------------------------------------------------- exercises 2 and 3: MLA
def _extend(x, w, cache, rope_keys):
    """The new tokens' latent and rotary keys (rope_keys(x, positions)) appended to the cache."""
    start = 0 if cache is None else cache[0].shape[1]
    positions = torch.arange(start, start + x.shape[1], device=x.device)  # (n,)
    latent, rk = x @ w.w_dkv.T, rope_keys(x @ w.w_kr.T, positions)  # (b, n, dc), (b, n, dr)
    if cache is not None:
        latent, rk = torch.cat([cache[0], latent], 1), torch.cat([cache[1], rk], 1)
    return latent, rk, positions


def _rotate_half(t):
    first, second = t.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def mla_ambisinister_rope_width(x, w, cache=None):
    # ambisinister/mla-experiments, modeling/attention/mla.py, class MLA: "we do self.dh here instead
    # of self.qk_rope_dim because its better": the cos/sin table is built for the full head width dh,
    # freqs = 1 / theta ** (arange(0, dh, 2) / dh), and cut to its first rope_dim / 2 columns, so the
    # rotary parts turn at a dh-wide head's frequencies. Kept: its cache of latents and unrotated
    # rotary keys, rotated at use with x * cos + rotate_half(x) * sin, its tril(diagonal=past) mask and
    # SDPA over [nope | rope] heads.
    b, n, _ = x.shape
    h, hd, dr = w.heads, w.head_dim, w.rope_dim
    latent, raw, _ = _extend(x, w, cache, lambda t, p: t)
    N = latent.shape[1]
    freqs = 1.0 / (10_000.0 ** (torch.arange(0, hd, 2, device=x.device).float() / hd))
    emb = torch.outer(torch.arange(N, device=x.device).float(), freqs)[:, : dr // 2].repeat(1, 2)
    cos, sin = emb.cos(), emb.sin()  # (N, dr)
    q_rope = (x @ w.w_qr.T).view(b, n, h, dr).transpose(1, 2)
    q_rope = q_rope * cos[N - n :] + _rotate_half(q_rope) * sin[N - n :]
    k_rope = (raw * cos + _rotate_half(raw) * sin)[:, None].expand(b, h, N, dr)
    q = torch.cat([(x @ w.w_q.T).view(b, n, h, hd).transpose(1, 2), q_rope], dim=-1)
    k = torch.cat([(latent @ w.w_uk.T).view(b, N, h, hd).transpose(1, 2), k_rope], dim=-1)
    v = (latent @ w.w_uv.T).view(b, N, h, hd).transpose(1, 2)
    mask = torch.tril(torch.ones(n, N, device=x.device), diagonal=N - n) == 1
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out.transpose(1, 2).reshape(b, n, h * hd) @ w.w_o.T, (latent, raw)


def mla_ambisinister_ropeless(x, w, cache=None):
    # ambisinister/mla-experiments, modeling/attention/mla.py, class RopelessMLA: keys and values are
    # up-projections of the cached latent and the scores have no rotary part (SDPA's default scale,
    # 1 / sqrt(dh)). Adapted: the rotary keys are still cached, as the exercise's cache asks.
    b, n, _ = x.shape
    h, hd = w.heads, w.head_dim
    latent, rk, _ = _extend(x, w, cache, apply_rope)
    N = latent.shape[1]
    q = (x @ w.w_q.T).view(b, n, h, hd).transpose(1, 2)
    k = (latent @ w.w_uk.T).view(b, N, h, hd).transpose(1, 2)
    v = (latent @ w.w_uv.T).view(b, N, h, hd).transpose(1, 2)
    mask = torch.tril(torch.ones(n, N, device=x.device), diagonal=N - n) == 1
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out.transpose(1, 2).reshape(b, n, h * hd) @ w.w_o.T, (latent, rk)


def mla_ambisinister_uncompressed(x, w, cache=None):
    # ambisinister/mla-experiments, modeling/attention/mla.py, class RopelessMLA_Uncompressed: the
    # cache holds the per-head keys and values after the up-projection, (k_heads, v_heads).
    b, n, _ = x.shape
    h, hd = w.heads, w.head_dim
    latent = x @ w.w_dkv.T  # (b, n, dc)
    k = (latent @ w.w_uk.T).view(b, n, h, hd).transpose(1, 2)  # (b, h, n, hd)
    v = (latent @ w.w_uv.T).view(b, n, h, hd).transpose(1, 2)
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    N = k.shape[2]
    q = (x @ w.w_q.T).view(b, n, h, hd).transpose(1, 2)
    mask = torch.tril(torch.ones(n, N, device=x.device), diagonal=N - n) == 1
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out.transpose(1, 2).reshape(b, n, h * hd) @ w.w_o.T, (k, v)


def _complex_rope(t, positions):
    """deepseek-ai/DeepSeek-V3 inference/model.py, apply_rotary_emb: view_as_complex on pairs of
    neighbours (0, 1), (2, 3), ..., times freqs_cis = polar(1, positions * freqs)."""
    dim = t.shape[-1]
    freqs = 1.0 / (10_000.0 ** (torch.arange(0, dim, 2, device=t.device).float() / dim))
    freqs_cis = torch.polar(torch.ones(len(positions), dim // 2, device=t.device),
                            torch.outer(positions.float(), freqs))  # fmt: skip
    z = torch.view_as_complex(t.float().reshape(*t.shape[:-1], -1, 2))
    return torch.view_as_real(z * freqs_cis).flatten(-2).to(t.dtype)


def _naive(x, w, cache, rope=apply_rope, scale=None, q_rope_fn=None):
    """Naive MLA as the exercise writes it, with its rotation and its scale replaceable."""
    b, n, _ = x.shape
    h, hd, dr = w.heads, w.head_dim, w.rope_dim
    latent, rk, positions = _extend(x, w, cache, rope)
    N = latent.shape[1]
    q = (x @ w.w_q.T).view(b, n, h, hd).transpose(1, 2)
    q_rope = rope((x @ w.w_qr.T).view(b, n, h, dr).transpose(1, 2), positions)
    k = (latent @ w.w_uk.T).view(b, N, h, hd).transpose(1, 2)
    v = (latent @ w.w_uv.T).view(b, N, h, hd).transpose(1, 2)
    scores = (q @ k.mT + q_rope @ rk[:, None].mT) * (scale or (hd + dr) ** -0.5)
    scores = scores.masked_fill(~sliding_window_mask(n, N, N, x.device), -torch.inf)
    context = (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(b, n, h * hd)
    return context @ w.w_o.T, (latent, rk)


def mla_deepseek_complex_rope(x, w, cache=None):
    # deepseek-ai/DeepSeek-V3, inference/model.py, apply_rotary_emb: the rotation of DeepSeek's own
    # code turns neighbouring pairs (view_as_complex), not the chapter's split halves (apply_rope).
    return _naive(x, w, cache, rope=_complex_rope)


def mla_deepseek_v2_permuted_rope(x, w, cache=None):
    # deepseek-ai/DeepSeek-V2 on the Hugging Face hub, modeling_deepseek.py, apply_rotary_pos_emb
    # (linked from NVIDIA/Megatron-LM#1501): q.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(...)
    # before rotate_half, which reorders weights trained for neighbouring pairs; here, on the
    # chapter's apply_rope, it turns neighbouring pairs of the rotary parts.
    def permuted(t, positions):
        d = t.shape[-1]
        return apply_rope(
            t.reshape(*t.shape[:-1], d // 2, 2).transpose(-1, -2).reshape(t.shape), positions
        )

    return _naive(x, w, cache, rope=permuted)


def mla_megatron_kv_channels(x, w, cache=None):
    # NVIDIA/Megatron-LM#1501 "[BUG] kv_channels get wrong for MLA": kv_channels = hidden_size //
    # num_attention_heads, so SDPA's scale is 1 / sqrt(d / h) instead of 1 / sqrt(nope + rope)
    # (DeepSeek's softmax_scale = q_head_dim ** -0.5).
    return _naive(x, w, cache, scale=(x.shape[-1] // w.heads) ** -0.5)


def mla_flashmla_default_scale(x, w, cache=None):
    # deepseek-ai/FlashMLA, flash_mla/flash_mla_interface.py, flash_mla_with_kvcache: softmax_scale
    # defaults to q.shape[-1] ** -0.5, and the absorbed decode's query is [q_lat | q_rope], dc + dr
    # wide (576 in DeepSeek-V3): called without softmax_scale, the scores are divided by
    # sqrt(dc + dr). Adapted: the same call shape, [latent | rotary key] as the single key head.
    b, n, _ = x.shape
    h, hd, dr = w.heads, w.head_dim, w.rope_dim
    latent, rk, positions = _extend(x, w, cache, apply_rope)
    N, dc = latent.shape[1:]
    q = (x @ w.w_q.T).view(b, n, h, hd).transpose(1, 2)
    q_rope = apply_rope((x @ w.w_qr.T).view(b, n, h, dr).transpose(1, 2), positions)
    q_full = torch.cat([q @ w.w_uk.view(h, hd, dc), q_rope], dim=-1)  # (b, h, n, dc + dr)
    k_full = torch.cat([latent, rk], dim=-1)[:, None]  # (b, 1, N, dc + dr)
    scores = q_full @ k_full.mT * q_full.shape[-1] ** (-0.5)
    scores = scores.masked_fill(~sliding_window_mask(n, N, N, x.device), -torch.inf)
    mixed = torch.softmax(scores, -1) @ latent[:, None]  # (b, h, n, dc)
    context = mixed @ w.w_uv.view(h, hd, dc).mT  # (b, h, n, hd)
    return context.transpose(1, 2).reshape(b, n, h * hd) @ w.w_o.T, (latent, rk)


BYTES = "check_kv_cache_bytes"
MLA, ABSORBED = "check_mla_attention", "check_mla_absorbed"
LAYOUT_SLIPS = ("kv_window_ignored", "kv_sharing_ignored", "kv_latent_ignored")
COLLECTED = [
    (BYTES, kv_neurips_rampup, LAYOUT_SLIPS),
    (
        BYTES,
        kv_ollama_one_layer,
        (
            "kv_batch_ignored",
            "kv_bytes_per_value_ignored",
            "kv_layers_ignored",
            "kv_values_forgotten",
        ),
    ),  # fmt: skip
    (BYTES, kv_hsliuustc_gib, ("kv_in_gib",)),
    (BYTES, kv_rasbt_swa_default_ratio, ("kv_window_everywhere", *LAYOUT_SLIPS[1:])),
    (MLA, mla_ambisinister_rope_width, ("mla_rope_frequencies_of_head_width",)),
    (MLA, mla_ambisinister_ropeless, ("mla_rope_part_missing", "mla_scale_without_rope")),
    (MLA, mla_ambisinister_uncompressed, ("mla_cache_after_up_projection",)),
    (MLA, mla_deepseek_complex_rope, ("mla_rope_interleaved",)),
    (MLA, mla_deepseek_v2_permuted_rope, ("mla_rope_interleaved",)),
    (MLA, mla_megatron_kv_channels, ("mla_scale_model_width",)),
    (ABSORBED, mla_flashmla_default_scale, ("mla_scale_latent_width",)),
]
