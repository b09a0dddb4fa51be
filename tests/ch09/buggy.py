"""Wrong answers to chapter 09's exercises, one per known bug, each with where it comes from.

Each list holds (function, mistake id the check must name). tests/test_checks_ch09.py runs them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _distance(n_queries, n_keys, device=None, top_left=False):
    first = 0 if top_left else n_keys - n_queries
    q = torch.arange(first, first + n_queries, device=device)[:, None]  # (n_q, 1)
    return q - torch.arange(n_keys, device=device)[None, :]  # (n_q, n_k)


# --------------------------------------------------------------------------- sliding_window_mask
def window_cut_short(n_queries, n_keys, window, device=None):
    # The mirror image of huggingface/transformers#29623 (one key too many): window - 1 keys, one
    # short, the slip of writing `i - j < window - 1` for `i - j < window`.
    d = _distance(n_queries, n_keys, device)
    return (d >= 0) & (d < window - 1)


def window_one_too_many(n_queries, n_keys, window, device=None):
    # huggingface/transformers#29623: Mistral's Flash Attention path saw window + 1 keys (also ml-explore/mlx-lm#390).
    d = _distance(n_queries, n_keys, device)
    return (d >= 0) & (d <= window)


def window_inverted(n_queries, n_keys, window, device=None):
    # typical slip: nn.MultiheadAttention's convention (True = hidden) returned for SDPA.
    d = _distance(n_queries, n_keys, device)
    return (d < 0) | (d >= window)


def window_symmetric(n_queries, n_keys, window, device=None):
    # typical slip: Longformer-style local attention |i - j| < window, which is not causal.
    return _distance(n_queries, n_keys, device).abs() < window


def window_top_left(n_queries, n_keys, window, device=None):
    # pytorch/pytorch#103082 in mask form: queries numbered from 0, as is_causal=True does.
    d = _distance(n_queries, n_keys, device, top_left=True)
    return (d >= 0) & (d < window)


def window_float(n_queries, n_keys, window, device=None):
    # typical slip: a 0/1 float mask, which SDPA would add to the scores instead of masking.
    d = _distance(n_queries, n_keys, device)
    return ((d >= 0) & (d < window)).float()


def window_device_ignored(n_queries, n_keys, window, device=None):
    # issue 11's device category: the mask is always built on the CPU.
    d = _distance(n_queries, n_keys)
    return (d >= 0) & (d < window)


def window_back_to_cpu(n_queries, n_keys, window, device=None):
    # typical slip: the device argument ignored and the mask sent .to("cpu") "to be safe" (a .to call
    # that the old check took for a move to the device).
    d = _distance(n_queries, n_keys)
    return ((d >= 0) & (d < window)).to("cpu")


def window_device_on_one_side(n_queries, n_keys, window, device=None):
    # typical slip: device= passed to the query positions' arange but not to the keys'.
    d = (
        torch.arange(n_keys - n_queries, n_keys, device=device)[:, None]
        - torch.arange(n_keys)[None, :]
    )
    return (d >= 0) & (d < window)


def window_as_list(n_queries, n_keys, window, device=None):
    # typical slip: nested Python lists instead of a tensor.
    return [[0 <= i - j < window for j in range(n_keys)] for i in range(n_keys - n_queries, n_keys)]


WINDOW_BUGS = [
    (window_cut_short, "window_cut_short"),
    (window_one_too_many, "window_one_too_many"),
    (window_inverted, "window_inverted"),
    (window_symmetric, "window_not_causal"),
    (window_top_left, "window_top_left"),
    (window_float, "window_not_bool"),
    (window_device_ignored, "mask_device_ignored"),
    (window_back_to_cpu, "mask_device_ignored"),
    (window_device_on_one_side, "mask_device_ignored"),
    (window_as_list, "not_a_tensor"),
]


# --------------------------------------------------------------------------- attend_new_tokens
def cache_is_causal(q, k, v):
    # pytorch/pytorch#103082: is_causal=True is aligned to the top left.
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def cache_tril_top_left(q, k, v):
    # the same trap written by hand: ones(n_q, n_k).tril() as in a full-sequence layer.
    mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def cache_no_mask(q, k, v):
    # KV-cache tutorials written for one new token at a time: no mask at all.
    return F.scaled_dot_product_attention(q, k, v)


def cache_scales_in_place(q, k, v):
    # issue 11's side-effect category: the caller's queries are scaled in place.
    q /= q.shape[-1] ** 0.5
    mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril(k.shape[-2] - q.shape[-2])
    return torch.softmax((q @ k.transpose(-2, -1)).masked_fill(~mask, -torch.inf), dim=-1) @ v


def cache_cpu_mask(q, k, v):
    # typical slip: the right bottom-right mask, built without device= (runs on the CPU, and on a GPU
    # SDPA fails with 'Expected all tensors to be on the same device').
    n_q, n_k = q.shape[-2], k.shape[-2]
    keep = torch.ones(n_q, n_k, dtype=torch.bool).tril(n_k - n_q)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)


def cache_float64(q, k, v):
    # typical slip: scores in float64 "for accuracy", the result never converted back to q's dtype.
    n_q, n_k = q.shape[-2], k.shape[-2]
    keep = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device).tril(n_k - n_q)
    scores = q.double() @ k.double().transpose(-2, -1) / q.shape[-1] ** 0.5
    return scores.masked_fill(~keep, -torch.inf).softmax(-1) @ v.double()


CACHE_BUGS = [
    (cache_is_causal, "is_causal_top_left"),
    (cache_tril_top_left, "is_causal_top_left"),
    (cache_no_mask, "cache_mask_missing"),
    (cache_scales_in_place, "input_modified"),
    (cache_cpu_mask, "cpu_tensor_in_forward"),
    (cache_float64, "output_dtype_changed"),
]


# --------------------------------------------------------------------------- padded_causal_attention
def _allowed(real):
    n = real.shape[-1]
    return torch.ones(n, n, dtype=torch.bool).tril() & real[:, None, None, :]  # (b, 1, n, n)


def padded_nan_rows(q, k, v, real):
    # pytorch/pytorch#103749, #110213: a fully masked row gives softmax 0/0 = NaN.
    scores = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).masked_fill(~_allowed(real), -torch.inf)
    return torch.softmax(scores, dim=-1) @ v


def padded_mha_convention(q, k, v, real):
    # chapter 06's torch_mask_inverted: nn.MultiheadAttention's True = hidden mask given to SDPA.
    return F.scaled_dot_product_attention(q, k, v, attn_mask=~_allowed(real)).nan_to_num()


def padded_causal_only(q, k, v, real):
    # typical slip: is_causal=True and the padding forgotten (harmless with right padding only).
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def padded_on_queries(q, k, v, real):
    # typical slip: the padding mask broadcast over the query axis instead of the key axis.
    n = real.shape[-1]
    mask = torch.ones(n, n, dtype=torch.bool).tril() & real[:, None, :, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask | torch.eye(n, dtype=torch.bool))


def padded_not_causal(q, k, v, real):
    # typical slip from encoder code (BERT-style): key padding only, no causal mask.
    return F.scaled_dot_product_attention(q, k, v, attn_mask=real[:, None, None, :])


def padded_returns_tuple(q, k, v, real):
    # typical slip: returns (context, weights) like nn.MultiheadAttention.
    return padded_nan_rows(q, k, v, real).nan_to_num(), None


def padded_cpu_causal(q, k, v, real):
    # typical slip: the causal half made without device=, then combined with the padding mask (on the GPU
    # with the batch): 'Expected all tensors to be on the same device'.
    n = real.shape[-1]
    keep = torch.ones(n, n, dtype=torch.bool).tril() & real[:, None, None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep).nan_to_num(0.0)


PADDING_BUGS = [
    (padded_nan_rows, "padding_nan_rows"),
    (padded_mha_convention, "padding_mask_inverted"),
    (padded_cpu_causal, "cpu_tensor_in_forward"),
    (padded_causal_only, "padding_ignored"),
    (padded_on_queries, "padding_ignored"),
    (padded_not_causal, "padding_not_causal"),
    (padded_returns_tuple, "not_a_tensor"),
]


# --------------------------------------------------------------------------- apply_rope
def _angles(positions, hd, base, step=2):
    return positions.float()[:, None] * base ** (
        -torch.arange(0, hd // 2).float() * step / hd
    )  # (n, hd/2)


def rope_interleaved(x, positions, base=10_000.0):
    # Meta's original Llama / RoFormer layout where Hugging Face's split halves are expected.
    a = _angles(positions, x.shape[-1], base)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack(
        (even * a.cos() - odd * a.sin(), even * a.sin() + odd * a.cos()), -1
    ).flatten(-2)


def rope_reversed(x, positions, base=10_000.0):
    # typical slip: the sin terms' signs swapped, a rotation by minus the angle.
    a = _angles(positions, x.shape[-1], base)
    first, second = x.chunk(2, dim=-1)
    return torch.cat((first * a.cos() + second * a.sin(), -first * a.sin() + second * a.cos()), -1)


def _halves(x, a):
    first, second = x.chunk(2, dim=-1)
    return torch.cat((first * a.cos() - second * a.sin(), first * a.sin() + second * a.cos()), -1)


def rope_frequency_no_two(x, positions, base=10_000.0):
    # typical slip seen in tutorials: base ** (-i / hd) with i = 0, 1, 2, ... (the 2 forgotten).
    return _halves(x, _angles(positions, x.shape[-1], base, step=1))


def rope_positions_ignored(x, positions, base=10_000.0):
    # typical slip when moving to cached generation: positions 0 .. n-1 whatever was passed.
    return _halves(x, _angles(torch.arange(x.shape[-2]), x.shape[-1], base))


def rope_base_ignored(x, positions, base=10_000.0):
    # Llama 3 ports that kept 10,000 although its config says rope_theta = 500,000.
    return _halves(x, _angles(positions, x.shape[-1], 10_000.0))


def rope_in_place(x, positions, base=10_000.0):
    # issue 11's side-effect category: the rotation written into the caller's tensor.
    x.copy_(_halves(x, _angles(positions, x.shape[-1], base)))
    return x


def rope_cpu_frequencies(x, positions, base=10_000.0):
    # the from-scratch line inv_freq = 1 / base ** (torch.arange(0, hd, 2).float() / hd): Hugging Face's
    # rotary embedding registers it as a buffer that model.to(device) moves; in a plain function it stays
    # on the CPU.
    hd = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, hd, 2).float() / hd))
    return _halves(x, positions.float()[:, None] * inv_freq[None, :])


def rope_float64(x, positions, base=10_000.0):
    # Meta's Llama ends apply_rotary_emb with .type_as(xq); without it the float64 angles make the
    # result float64, and the next nn.Linear (float32 or bfloat16 weights) refuses it.
    hd = x.shape[-1]
    freqs = base ** (-torch.arange(0, hd, 2, dtype=torch.float64, device=x.device) / hd)
    return _halves(x.double(), positions.double()[:, None] * freqs)


def _rotate_half(x):
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def rope_rotate_half_interleaved_freqs(x, positions, base=10_000.0):
    # raiyanyahya/how-to-train-your-gpt#6 (fixed in #7): emb = freqs.repeat_interleave(2, dim=-1)
    # ([f0, f0, f1, f1, ...], the adjacent-pair layout) with the split-halves rotate_half.
    emb = _angles(positions, x.shape[-1], base).repeat_interleave(2, dim=-1)  # (n, hd)
    return x * emb.cos() + _rotate_half(x) * emb.sin()


def rope_interleaved_pairs_half_freqs(x, positions, base=10_000.0):
    # huggingface/transformers#47328: Qwen2.5-Omni's DiT paired neighbours (0, 1), (2, 3) in its
    # rotation while cos/sin came in the half-split layout torch.cat((freqs, freqs), -1).
    emb = torch.cat([_angles(positions, x.shape[-1], base)] * 2, dim=-1)  # (n, hd)
    turned = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    return x * emb.cos() + turned * emb.sin()


def rope_linspace(x, positions, base=10_000.0):
    # microsoft/torchscale#80: RetNet's angles came from torch.linspace(0, 1, dim // 2) instead of
    # torch.arange(0, dim, 2) / dim, so the exponents end at 1.
    hd = x.shape[-1]
    freqs = base ** -torch.linspace(0, 1, hd // 2)  # (hd/2,)
    return _halves(x, positions.float()[:, None] * freqs)


def rope_positions_from_one(x, positions, base=10_000.0):
    # written to the pattern of 1-based position counters (positions + 1): the first token turns.
    return _halves(x, _angles(positions + 1, x.shape[-1], base))


def rope_half_width_cos(x, positions, base=10_000.0):
    # written to the pattern of Hugging Face's x * cos + rotate_half(x) * sin fed the (n, hd/2) angles
    # of a split-halves function: the widths do not match and it crashes.
    a = _angles(positions, x.shape[-1], base)  # (n, hd/2)
    return x * a.cos() + _rotate_half(x) * a.sin()


ROPE_BUGS = [
    (rope_rotate_half_interleaved_freqs, "rope_frequencies_mismatched"),
    (rope_interleaved_pairs_half_freqs, "rope_frequencies_mismatched"),
    (rope_linspace, "rope_frequencies_linspace"),
    (rope_positions_from_one, "rope_positions_shifted"),
    (rope_half_width_cos, "rope_half_width"),
    (rope_cpu_frequencies, "cpu_tensor_in_forward"),
    (rope_float64, "output_dtype_changed"),
    (rope_interleaved, "rope_layout_mixed"),
    (rope_reversed, "rope_rotation_reversed"),
    (rope_frequency_no_two, "rope_frequency_exponent"),
    (rope_positions_ignored, "rope_positions_ignored"),
    (rope_base_ignored, "rope_base_ignored"),
    (rope_in_place, "input_modified"),
]


# --------------------------------------------------------------------------- repeat_kv
def repeat_tiles(kv, n_rep):
    # GQA ports that used repeat: query head j reads group j % g (the wrong one).
    return kv.repeat(1, n_rep, 1, 1)


def repeat_expand_wrong_order(kv, n_rep):
    # the expand idiom with the new axis in front of the groups: the same tiling as repeat.
    b, g, n, hd = kv.shape
    return kv[:, None].expand(b, n_rep, g, n, hd).reshape(b, g * n_rep, n, hd)


def repeat_over_tokens(kv, n_rep):
    # typical slip: repeat_interleave along the tokens (dim=2).
    return kv.repeat_interleave(n_rep, dim=2)


def repeat_cpu_index(kv, n_rep):
    # typical slip: index_select with an index made on the CPU; on a GPU index_select refuses it
    # ('Expected all tensors to be on the same device ... argument index').
    return kv.index_select(1, torch.arange(kv.shape[1] * n_rep) // n_rep)


REPEAT_BUGS = [
    (repeat_tiles, "gqa_repeat_not_interleave"),
    (repeat_expand_wrong_order, "gqa_repeat_not_interleave"),
    (repeat_over_tokens, "gqa_repeat_wrong_axis"),
    (repeat_cpu_index, "cpu_tensor_in_forward"),
]
