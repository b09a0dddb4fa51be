"""Code taught by chapter 02, exported from its `#| export` cells.

Generated from solutions/02_trainable_qkv.ipynb by `make exercises`; do not edit: edit the notebook.
"""

import torch
from torch import nn

__all__ = ["SelfAttention_v1", "SelfAttention_v2"]


class SelfAttention_v1(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        """x: (n, d_in) -> context vectors (n, d_out)."""
        q = x @ self.W_query  # (n, d_in) @ (d_in, d_out) -> (n, d_out)
        k = x @ self.W_key  # (n, d_in) @ (d_in, d_out) -> (n, d_out)
        v = x @ self.W_value  # (n, d_in) @ (d_in, d_out) -> (n, d_out)
        attn = torch.softmax(q @ k.T / k.shape[-1] ** 0.5, dim=-1)  # (n, n)
        return attn @ v  # (n, n) @ (n, d_out) -> (n, d_out)


class SelfAttention_v2(nn.Module):
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        queries = self.W_query(x)  # (n, d_out)
        keys = self.W_key(x)  # (n, d_out)
        values = self.W_value(x)  # (n, d_out)
        scores = queries @ keys.T  # (n, n)
        weights = torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1)  # (n, n)
        return weights @ values  # (n, d_out)
