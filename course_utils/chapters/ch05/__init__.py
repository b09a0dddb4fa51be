"""Code taught by chapter 05, exported from its `#| export` cells.

Generated from solutions/05_multihead.ipynb by `make exercises`; do not edit: edit the notebook.
"""

import torch
from torch import nn

import course_utils as cu

__all__ = ["head_weights", "MultiHeadAttentionWrapper", "MultiHeadAttention"]


def head_weights(head, x):
    """One head's causal attention weights for one sequence x of shape (n, d_in): (n, n)."""
    n = x.shape[0]
    with torch.no_grad():
        q, k = head.W_query(x), head.W_key(x)  # (n, d_out) each
    scores = (q @ k.T).masked_fill(head.mask[:n, :n], -torch.inf)  # (n, n)
    return torch.softmax(scores / k.shape[-1] ** 0.5, dim=-1)  # (n, n)


class MultiHeadAttentionWrapper(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList(
            cu.chapters.CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)
            for _ in range(num_heads)
        )

    def forward(self, x):
        """x: (b, n, d_in) -> (b, n, num_heads * d_out): the heads' outputs side by side."""
        per_head = [head(x) for head in self.heads]  # num_heads tensors of shape (b, n, d_out)
        return torch.cat(per_head, dim=-1)  # (b, n, num_heads * d_out)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if d_out % num_heads != 0:
            raise ValueError(f"d_out={d_out} cannot be split into num_heads={num_heads} equal heads: "
                             "d_out must be divisible by num_heads")
        self.context_length = context_length
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)  # mixes the heads' columns
        self.dropout = nn.Dropout(dropout)
        causal = torch.ones(context_length, context_length, dtype=torch.bool).triu(diagonal=1)  # (c, c)
        self.register_buffer("mask", causal)

    def forward(self, x):
        """x: (b, n, d_in) -> (b, n, d_out)."""
        b, n, _ = x.shape
        if n > self.context_length:
            raise ValueError(f"the input has {n} tokens, but this layer was built for "
                             f"context_length={self.context_length}")
        per_head = (b, n, self.num_heads, self.head_dim)
        q = self.W_query(x).view(per_head).transpose(1, 2)  # (b, h, n, hd)
        k = self.W_key(x).view(per_head).transpose(1, 2)  # (b, h, n, hd)
        v = self.W_value(x).view(per_head).transpose(1, 2)  # (b, h, n, hd)
        attn_scores = q @ k.transpose(2, 3)  # (b, h, n, n): all heads in one product
        attn_scores = attn_scores.masked_fill(self.mask[:n, :n], -torch.inf)  # (b, h, n, n)
        attn_weights = self.dropout(torch.softmax(attn_scores / self.head_dim**0.5, dim=-1))  # (b, h, n, n)
        heads_out = (attn_weights @ v).transpose(1, 2)  # (b, n, h, hd)
        heads_out = heads_out.contiguous().view(b, n, self.num_heads * self.head_dim)  # (b, n, d_out)
        return self.out_proj(heads_out)  # (b, n, d_out)
