"""Code taught by chapter 09, exported from its `#| export` cells.

Generated from solutions/09_modern_attention.ipynb by `make exercises`; do not edit: edit the notebook.
"""

import torch
from torch import nn

__all__ = [
    "padding_mask", "causal_padding_mask", "sliding_window_mask", "kv_bytes_per_token", "rope_angles",
    "apply_rope_interleaved", "apply_rope", "repeat_kv", "GroupedQueryAttention", "gqa_attend_with_cache",
]


def padding_mask(lengths, n, side="right"):
    """(b, n) bool mask, True at real tokens, for texts of the given lengths padded to n tokens."""
    lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1 or lengths.dtype.is_floating_point:
        raise ValueError(f"lengths must be a 1-d list or tensor of integers, got {lengths.tolist()!r}.")
    if side not in ("right", "left"):
        raise ValueError(f"side must be 'right' or 'left', got {side!r}.")
    if int(lengths.max()) > n or int(lengths.min()) < 0:
        raise ValueError(f"every length must lie between 0 and n={n}, got {lengths.tolist()}.")
    positions = torch.arange(n, device=lengths.device)  # (n,)
    if side == "right":
        return positions < lengths[:, None]  # (b, n): the first lengths[i] positions are real
    return positions >= n - lengths[:, None]  # (b, n): the last lengths[i] positions are real


def causal_padding_mask(real):
    """SDPA's convention, True = may attend: (b, 1, n, n) from the (b, n) real-token mask."""
    n = real.shape[-1]
    causal = torch.ones(n, n, dtype=torch.bool, device=real.device).tril()  # (n, n): keys up to the query
    return causal & real[:, None, None, :]  # (b, 1, n, n): and only real keys


def sliding_window_mask(n_queries, n_keys, window, device=None):
    """(n_queries, n_keys) bool, True = may attend: the queries are the last n_queries positions,
    each sees itself and the window - 1 positions before it."""
    query_pos = torch.arange(n_keys - n_queries, n_keys, device=device)[:, None]  # (n_q, 1)
    key_pos = torch.arange(n_keys, device=device)[None, :]  # (1, n_k)
    distance = query_pos - key_pos  # (n_q, n_k): how far back each key is
    return (distance >= 0) & (distance < window)  # (n_q, n_k)


def kv_bytes_per_token(layers, kv_heads, head_dim, bytes_per_value=2):
    """Bytes a KV cache keeps per token: a key and a value in every layer and key/value head."""
    return 2 * layers * kv_heads * head_dim * bytes_per_value


def rope_angles(positions, head_dim, base=10_000.0):
    """(n, head_dim // 2) rotation angles: position p times base ** (-2i / head_dim) for pair i."""
    pairs = torch.arange(0, head_dim, 2, dtype=torch.float32, device=positions.device)  # (hd/2,): 2i
    frequencies = base ** (-pairs / head_dim)  # (hd/2,)
    return positions.to(torch.float32)[:, None] * frequencies[None, :]  # (n, hd/2)


def apply_rope_interleaved(x, positions, base=10_000.0):
    """x (..., n, hd) with pairs (0, 1), (2, 3), ... rotated by their position's angles."""
    angles = rope_angles(positions, x.shape[-1], base)  # (n, hd/2)
    cos, sin = angles.cos(), angles.sin()  # (n, hd/2) each
    even, odd = x[..., 0::2], x[..., 1::2]  # (..., n, hd/2) each: the two members of every pair
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)  # (..., n, hd/2, 2)
    return rotated.flatten(-2)  # (..., n, hd): back to pairs side by side


def apply_rope(x, positions, base=10_000.0):
    """x (..., n, hd) with pairs (i, i + hd/2) rotated by their position's angles (split halves)."""
    angles = rope_angles(positions, x.shape[-1], base)  # (n, hd/2)
    cos, sin = angles.cos(), angles.sin()  # (n, hd/2) each
    first, second = x.chunk(2, dim=-1)  # (..., n, hd/2) each
    return torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)  # (..., n, hd)


def repeat_kv(kv, n_rep):
    """(b, g, n, hd) -> (b, g * n_rep, n, hd): each key/value head copied for its group of query heads."""
    return kv.repeat_interleave(n_rep, dim=1)  # (b, g * n_rep, n, hd)


class GroupedQueryAttention(nn.Module):
    """Causal attention with num_heads query heads sharing n_kv_heads key/value heads;
    optionally a sliding window (each token sees `window` keys) and RoPE on queries and keys."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, n_kv_heads=None,
                 qkv_bias=False, window=None, rope=False, rope_base=10_000.0):
        super().__init__()
        n_kv_heads = num_heads if n_kv_heads is None else n_kv_heads
        if not 1 <= n_kv_heads <= num_heads or d_out % num_heads or num_heads % n_kv_heads:
            raise ValueError(f"d_out must be divisible by num_heads and num_heads by n_kv_heads, got "
                             f"d_out={d_out}, num_heads={num_heads}, n_kv_heads={n_kv_heads}.")
        self.d_out, self.context_length, self.window = d_out, context_length, window
        self.num_heads, self.n_kv_heads, self.head_dim = num_heads, n_kv_heads, d_out // num_heads
        self.rope, self.rope_base = rope, rope_base
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, n_kv_heads * self.head_dim, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, n_kv_heads * self.head_dim, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        b, n, _ = x.shape
        if n > self.context_length:
            raise ValueError(f"the input has {n} tokens, more than context_length={self.context_length}.")
        q = self.W_query(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        k = self.W_key(x).view(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (b, g, n, hd)
        v = self.W_value(x).view(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (b, g, n, hd)
        if self.rope:
            positions = torch.arange(n, device=x.device)  # (n,)
            q, k = apply_rope(q, positions, self.rope_base), apply_rope(k, positions, self.rope_base)
        n_rep = self.num_heads // self.n_kv_heads
        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)  # (b, h, n, hd) each
        allowed = sliding_window_mask(n, n, self.window or n, device=x.device)  # (n, n)
        scores = (q @ k.transpose(2, 3)).masked_fill(~allowed, -torch.inf)  # (b, h, n, n)
        weights = self.dropout(torch.softmax(scores / self.head_dim**0.5, dim=-1))  # (b, h, n, n)
        context = (weights @ v).transpose(1, 2).reshape(b, n, self.d_out)  # (b, n, d_out)
        return self.out_proj(context)  # (b, n, d_out)


def gqa_attend_with_cache(attn, x_new, cache=None):
    """GroupedQueryAttention for the m newest tokens x_new (b, m, d_in), given the cache
    (keys, values, seen) of earlier tokens; returns the output (b, m, d_out) and the new cache."""
    b, m, _ = x_new.shape
    keys, values, seen = cache if cache is not None else (None, None, 0)
    q = attn.W_query(x_new).view(b, m, attn.num_heads, attn.head_dim).transpose(1, 2)  # (b, h, m, hd)
    k = attn.W_key(x_new).view(b, m, attn.n_kv_heads, attn.head_dim).transpose(1, 2)  # (b, g, m, hd)
    v = attn.W_value(x_new).view(b, m, attn.n_kv_heads, attn.head_dim).transpose(1, 2)  # (b, g, m, hd)
    if attn.rope:
        positions = torch.arange(seen, seen + m, device=x_new.device)  # (m,): continuing the text
        q, k = apply_rope(q, positions, attn.rope_base), apply_rope(k, positions, attn.rope_base)
    if keys is not None:
        k, v = torch.cat([keys, k], dim=2), torch.cat([values, v], dim=2)  # (b, g, cached + m, hd)
    n_k, n_rep = k.shape[2], attn.num_heads // attn.n_kv_heads
    allowed = sliding_window_mask(m, n_k, attn.window or n_k, device=x_new.device)  # (m, n_k): bottom-right
    scores = q @ repeat_kv(k, n_rep).transpose(2, 3) / attn.head_dim**0.5  # (b, h, m, n_k)
    weights = torch.softmax(scores.masked_fill(~allowed, -torch.inf), dim=-1)  # (b, h, m, n_k)
    context = (weights @ repeat_kv(v, n_rep)).transpose(1, 2).reshape(b, m, attn.d_out)  # (b, m, d_out)
    if attn.window:
        k, v = k[:, :, -attn.window :], v[:, :, -attn.window :]  # (b, g, <= window, hd): the newest only
    return attn.out_proj(context), (k, v, seen + m)
