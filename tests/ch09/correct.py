"""Right but unusual answers to chapter 09's exercises: every one must pass its check."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from course_utils.chapters.ch09 import sliding_window_mask


# --------------------------------------------------------------------------- sliding_window_mask
def window_from_tril(n_queries, n_keys, window, device=None):
    """Two shifted triangles: tril at offset n_k - n_q minus tril at offset n_k - n_q - window."""
    ones = torch.ones(n_queries, n_keys, dtype=torch.bool, device=device)
    return ones.tril(n_keys - n_queries) & ~ones.tril(n_keys - n_queries - window)


def window_by_loops(n_queries, n_keys, window, device=None):
    """Python loops filling a tensor made on the device."""
    mask = torch.zeros(n_queries, n_keys, dtype=torch.bool, device=device)
    for row in range(n_queries):
        i = n_keys - n_queries + row
        mask[row, max(0, i - window + 1) : i + 1] = True
    return mask


def window_mask_mod_style(n_queries, n_keys, window, device=None):
    """FlexAttention-style predicate on broadcast index tensors."""
    q_idx = torch.arange(n_queries, device=device).view(-1, 1) + (n_keys - n_queries)
    kv_idx = torch.arange(n_keys, device=device).view(1, -1)
    return (q_idx >= kv_idx) & (q_idx - kv_idx < window)


WINDOW_CORRECT = [window_from_tril, window_by_loops, window_mask_mod_style]


# --------------------------------------------------------------------------- attend_new_tokens
def cache_manual_softmax(q, k, v):
    n_q, n_k = q.shape[-2], k.shape[-2]
    future = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device).triu(n_k - n_q + 1)
    scores = (q @ k.transpose(-2, -1)).masked_fill(future, -math.inf) / math.sqrt(q.shape[-1])
    return scores.softmax(dim=-1) @ v


def cache_additive_mask(q, k, v):
    n_q, n_k = q.shape[-2], k.shape[-2]
    bias = torch.full((n_q, n_k), float("-inf"), device=q.device).triu(n_k - n_q + 1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)


def cache_full_then_slice(q, k, v):
    """Pads the queries to all positions, runs is_causal on the square, keeps the last rows
    (the padding made with q.new_zeros, so on q's device and in q's dtype)."""
    n_q, n_k = q.shape[-2], k.shape[-2]
    padded = torch.cat((q.new_zeros(*q.shape[:-2], n_k - n_q, q.shape[-1]), q), dim=-2)
    return F.scaled_dot_product_attention(padded, k, v, is_causal=True)[..., n_k - n_q :, :]


def cache_chapter_mask(q, k, v):
    """The hint's answer: the chapter's sliding_window_mask with a window of every key, on q's device."""
    mask = sliding_window_mask(q.shape[-2], k.shape[-2], k.shape[-2], device=q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def cache_by_case(q, k, v):
    """No mask for one new token, is_causal when queries and keys are as many, a mask otherwise."""
    n_q, n_k = q.shape[-2], k.shape[-2]
    if n_q == 1:
        return F.scaled_dot_product_attention(q, k, v)
    if n_q == n_k:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    keep = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device).tril(n_k - n_q)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)


def cache_causal_lower_right(q, k, v):
    """PyTorch's own bottom-right causal bias: it has no device, SDPA builds it on q's device."""
    from torch.nn.attention.bias import causal_lower_right

    bias = causal_lower_right(q.shape[-2], k.shape[-2])
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)


CACHE_CORRECT = [
    cache_causal_lower_right,
    cache_manual_softmax,
    cache_additive_mask,
    cache_full_then_slice,
    cache_chapter_mask,
    cache_by_case,
]


# --------------------------------------------------------------------------- padded_causal_attention
def padded_where_after(q, k, v, real):
    """Manual softmax, NaN rows replaced afterwards."""
    n = real.shape[-1]
    allowed = torch.ones(n, n, dtype=torch.bool, device=q.device).tril() & real[:, None, None, :]
    scores = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).masked_fill(~allowed, -torch.inf)
    return (scores.softmax(-1) @ v).nan_to_num(0.0)


def padded_large_negative(q, k, v, real):
    """A large finite negative number instead of -inf (the Hugging Face style); padded rows get
    a uniform average, which is finite."""
    n = real.shape[-1]
    allowed = torch.tril(
        real[:, None, None, :].expand(-1, 1, n, n)
    )  # the causal cut made from real itself
    scores = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).masked_fill(
        ~allowed, torch.finfo(q.dtype).min
    )
    return scores.softmax(-1) @ v


def padded_per_text_loop(q, k, v, real):
    """Each text alone, its real tokens only, written back into a zero tensor."""
    out = torch.zeros_like(q)
    for i in range(q.shape[0]):
        cols = real[i].nonzero().squeeze(1)
        out[i, :, cols] = F.scaled_dot_product_attention(
            q[i, :, cols], k[i, :, cols], v[i, :, cols], is_causal=True
        )
    return out


def padded_rows_see_all(q, k, v, real):
    """Hugging Face style: padded query rows may see every key (finite, ignored anyway); the causal
    mask made on the CPU and moved to real's device."""
    n = real.shape[-1]
    keep = torch.ones(n, n, dtype=torch.bool).tril().to(real.device) & real[:, None, None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep | ~real[:, None, :, None])


PADDING_CORRECT = [
    padded_where_after,
    padded_large_negative,
    padded_per_text_loop,
    padded_rows_see_all,
]


# --------------------------------------------------------------------------- apply_rope
def rope_complex(x, positions, base=10_000.0):
    """Complex multiplication on (first half + i * second half)."""
    hd = x.shape[-1]
    freqs = base ** (-torch.arange(0, hd, 2, dtype=torch.float64, device=x.device) / hd)
    angles = positions.double()[:, None] * freqs  # (n, hd/2)
    turn = torch.polar(torch.ones_like(angles), angles)
    first, second = x.double().chunk(2, dim=-1)
    z = torch.complex(first, second) * turn
    return torch.cat((z.real, z.imag), dim=-1).to(x.dtype)


def rope_rotate_half(x, positions, base=10_000.0):
    """Hugging Face's form: x * cos + rotate_half(x) * sin, with cos and sin repeated to hd."""
    hd = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, hd, 2, device=x.device).float() / hd))
    angles = torch.einsum("n,f->nf", positions.float(), inv_freq)
    emb = torch.cat((angles, angles), dim=-1)
    first, second = x[..., : hd // 2], x[..., hd // 2 :]
    rotated = torch.cat((-second, first), dim=-1)
    return x * emb.cos() + rotated * emb.sin()


def rope_matrix(x, positions, base=10_000.0):
    """An explicit (n, hd, hd) block rotation matrix per position."""
    hd, half = x.shape[-1], x.shape[-1] // 2
    angles = positions.double()[:, None] * base ** (
        -torch.arange(0, hd, 2, dtype=torch.float64, device=x.device) / hd
    )
    rot = torch.zeros(len(positions), hd, hd, dtype=torch.float64, device=x.device)
    idx = torch.arange(half, device=x.device)
    rot[:, idx, idx] = angles.cos()
    rot[:, idx + half, idx + half] = angles.cos()
    rot[:, idx, idx + half] = -angles.sin()
    rot[:, idx + half, idx] = angles.sin()
    return torch.einsum("nij,...nj->...ni", rot, x.double()).to(x.dtype)


ROPE_CORRECT = [rope_complex, rope_rotate_half, rope_matrix]


# --------------------------------------------------------------------------- repeat_kv
def repeat_expand(kv, n_rep):
    """Hugging Face's repeat_kv: a new axis after the groups, expanded, then merged."""
    b, g, n, hd = kv.shape
    return kv[:, :, None].expand(b, g, n_rep, n, hd).reshape(b, g * n_rep, n, hd)


def repeat_index_select(kv, n_rep):
    return kv.index_select(1, torch.arange(kv.shape[1] * n_rep, device=kv.device) // n_rep)


def repeat_cat(kv, n_rep):
    return torch.cat([kv[:, i : i + 1] for i in range(kv.shape[1]) for _ in range(n_rep)], dim=1)


def repeat_none_when_one(kv, n_rep):
    """n_rep = 1 (plain multi-head attention) hands kv back itself."""
    return kv if n_rep == 1 else kv.repeat_interleave(n_rep, dim=1)


REPEAT_CORRECT = [repeat_expand, repeat_index_select, repeat_cat, repeat_none_when_one]


def window_moved_after(n_queries, n_keys, window, device=None):
    """Built on the CPU, then moved: also lands on the requested device."""
    distance = torch.arange(n_keys - n_queries, n_keys)[:, None] - torch.arange(n_keys)
    return ((distance >= 0) & (distance < window)).to(device)


def window_moved_if_asked(n_queries, n_keys, window, device=None):
    """Built on the CPU, moved only when a device is given."""
    distance = torch.arange(n_keys - n_queries, n_keys)[:, None] - torch.arange(n_keys)
    mask = (distance >= 0) & (distance < window)
    return mask if device is None else mask.to(device)


WINDOW_CORRECT += [window_moved_after, window_moved_if_asked]
