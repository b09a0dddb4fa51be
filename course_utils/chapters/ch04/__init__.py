"""Code taught by chapter 04, exported from its `#| export` cells.

Generated from solutions/04_dropout.ipynb by `make exercises`; do not edit: edit the notebook.
"""

import torch
from torch import nn

__all__ = ["CausalAttention"]


class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.context_length = context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        ones = torch.ones(context_length, context_length, dtype=torch.bool)  # (c, c)
        self.register_buffer("mask", torch.triu(ones, diagonal=1))  # (c, c): True = future

    def forward(self, x):
        """x: (b, n, d_in) -> context vectors (b, n, d_out)."""
        n_tokens = x.shape[1]
        if n_tokens > self.context_length:
            raise ValueError(f"the input has {n_tokens} tokens, but this layer was built for "
                             f"context_length={self.context_length}")
        q = self.W_query(x)  # (b, n, d_out)
        k = self.W_key(x)  # (b, n, d_out)
        v = self.W_value(x)  # (b, n, d_out)
        attn_scores = q @ k.transpose(1, 2)  # (b, n, n)
        attn_scores = attn_scores.masked_fill(self.mask[:n_tokens, :n_tokens], -torch.inf)  # (b, n, n)
        attn_weights = torch.softmax(attn_scores / k.shape[-1] ** 0.5, dim=-1)  # (b, n, n)
        attn_weights = self.dropout(attn_weights)  # (b, n, n)
        return attn_weights @ v  # (b, n, d_out)
