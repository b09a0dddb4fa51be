"""Reference attention layers, as the chapters build them.

Chapters 04 and 05 derive these classes step by step (students write them as
exercises); later chapters, the explorers and the benchmark import them from here.
``tests/test_models_sync.py`` keeps the notebook versions and these in step.

Constructor signatures follow the book, so weights and printed values can be compared:
``(d_in, d_out, context_length, dropout, qkv_bias=False)`` and
``(d_in, d_out, context_length, dropout, num_heads, qkv_bias=False)``.
Parameters are created in the order query, key, value (then out_proj), which fixes
the values a given seed produces.
"""

from __future__ import annotations

import torch
from torch import nn

from .validation import CourseInputError, expect_int, expect_probability, expect_tensor


def _check_sizes(d_in: int, d_out: int, context_length: int, dropout: float) -> None:
    expect_int(d_in, "d_in", minimum=1)
    expect_int(d_out, "d_out", minimum=1)
    expect_int(context_length, "context_length", minimum=1)
    expect_probability(dropout, "dropout")


def _check_input(x: object, d_in: int, context_length: int) -> tuple[int, int]:
    expect_tensor(x, "x", ndim=3, floating=True)
    batch, n_tokens, width = x.shape  # type: ignore[union-attr]
    if width != d_in:
        raise CourseInputError(
            f"x must have d_in={d_in} features in its last dimension, but x has shape "
            f"{tuple(x.shape)} ({width} features)."  # type: ignore[union-attr]
        )
    if n_tokens > context_length:
        raise CourseInputError(
            f"x has {n_tokens} tokens, but this layer was built with context_length="
            f"{context_length}; the causal mask only covers {context_length} tokens. "
            f"Shorten the input or build the layer with a larger context_length."
        )
    return batch, n_tokens


def causal_mask(context_length: int) -> torch.Tensor:
    """(context_length, context_length) bool matrix, True above the diagonal (the future)."""
    expect_int(context_length, "context_length", minimum=1)
    ones = torch.ones(context_length, context_length, dtype=torch.bool)
    return torch.triu(ones, diagonal=1)


class CausalAttention(nn.Module):
    """Single-head causal self-attention with dropout on the attention weights."""

    def __init__(self, d_in: int, d_out: int, context_length: int, dropout: float,
                 qkv_bias: bool = False) -> None:
        super().__init__()
        _check_sizes(d_in, d_out, context_length, dropout)
        self.d_in, self.d_out, self.context_length = d_in, d_out, context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        # A buffer: saved in state_dict and moved by .to(device), but never trained.
        self.register_buffer("mask", causal_mask(context_length))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, n = _check_input(x, self.d_in, self.context_length)
        q = self.W_query(x)                                   # (b, n, d_out)
        k = self.W_key(x)                                     # (b, n, d_out)
        v = self.W_value(x)                                   # (b, n, d_out)
        scores = q @ k.transpose(1, 2)                        # (b, n, n)
        scores = scores.masked_fill(self.mask[:n, :n], float("-inf"))
        weights = torch.softmax(scores / k.shape[-1] ** 0.5, dim=-1)  # (b, n, n)
        weights = self.dropout(weights)
        return weights @ v                                    # (b, n, d_out)


class MultiHeadAttentionWrapper(nn.Module):
    """``num_heads`` independent causal heads, outputs concatenated: width num_heads * d_out."""

    def __init__(self, d_in: int, d_out: int, context_length: int, dropout: float,
                 num_heads: int, qkv_bias: bool = False) -> None:
        super().__init__()
        expect_int(num_heads, "num_heads", minimum=1)
        self.heads = nn.ModuleList(
            CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([head(x) for head in self.heads], dim=-1)  # (b, n, num_heads * d_out)


class MultiHeadAttention(nn.Module):
    """Multi-head causal attention with one projection per Q/K/V, split into heads by view."""

    def __init__(self, d_in: int, d_out: int, context_length: int, dropout: float,
                 num_heads: int, qkv_bias: bool = False) -> None:
        super().__init__()
        _check_sizes(d_in, d_out, context_length, dropout)
        expect_int(num_heads, "num_heads", minimum=1)
        if d_out % num_heads != 0:
            raise CourseInputError(
                f"d_out must be divisible by num_heads so every head gets the same width, "
                f"but d_out={d_out} and num_heads={num_heads} (remainder {d_out % num_heads})."
            )
        self.d_in, self.d_out, self.context_length = d_in, d_out, context_length
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", causal_mask(context_length))

    def _split(self, t: torch.Tensor) -> torch.Tensor:
        b, n, _ = t.shape
        # (b, n, d_out) -> (b, n, heads, head_dim) -> (b, heads, n, head_dim)
        return t.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n = _check_input(x, self.d_in, self.context_length)
        q = self._split(self.W_query(x))                      # (b, h, n, hd)
        k = self._split(self.W_key(x))                        # (b, h, n, hd)
        v = self._split(self.W_value(x))                      # (b, h, n, hd)
        scores = q @ k.transpose(2, 3)                        # (b, h, n, n)
        scores = scores.masked_fill(self.mask[:n, :n], float("-inf"))
        weights = torch.softmax(scores / self.head_dim ** 0.5, dim=-1)
        weights = self.dropout(weights)
        context = (weights @ v).transpose(1, 2)               # (b, n, h, hd)
        context = context.contiguous().view(b, n, self.d_out)  # (b, n, d_out)
        return self.out_proj(context)
