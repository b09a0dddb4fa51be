"""Right but unusual answers to chapter 05's exercises: every one must pass its check."""

import torch
import torch.nn.functional as F
from torch import nn

import course_utils as cu


class WrapperConcat(nn.Module):
    """The chapter's own CausalAttention heads, joined with torch.concat on the last axis."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList(
            [
                cu.chapters.CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)
                for _ in range(num_heads)
            ]
        )

    def forward(self, x):
        return torch.concat([head(x) for head in self.heads], dim=2)


class _Split(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if d_out % num_heads:
            raise ValueError("d_out must be divisible by num_heads")
        self.num_heads, self.head_dim, self.context_length = (
            num_heads,
            d_out // num_heads,
            context_length,
        )
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer(
            "mask", torch.ones(context_length, context_length, dtype=torch.bool).triu(1)
        )

    def heads(self, t):  # (b, n, d_out) -> (b, h, n, hd), with unflatten and permute
        return t.unflatten(-1, (self.num_heads, self.head_dim)).permute(0, 2, 1, 3)

    def too_long(self, x):
        if x.shape[1] > self.context_length:
            raise ValueError(f"{x.shape[1]} tokens, context_length {self.context_length}")


class SplitSdpa(_Split):
    """scaled_dot_product_attention over the heads, is_causal=True, dropout_p from self.training."""

    def forward(self, x):
        self.too_long(x)
        q, k, v = (self.heads(layer(x)) for layer in (self.W_query, self.W_key, self.W_value))
        out = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout.p if self.training else 0.0
        )
        return self.out_proj(out.transpose(1, 2).flatten(2))


class SplitEinsumWhere(_Split):
    """einsum with named axes, torch.where for the mask, flatten to merge the heads."""

    def forward(self, x):
        self.too_long(x)
        n = x.shape[1]
        q, k, v = (self.heads(layer(x)) for layer in (self.W_query, self.W_key, self.W_value))
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / self.head_dim**0.5
        scores = torch.where(self.mask[:n, :n], float("-inf"), scores)
        weights = self.dropout(scores.softmax(dim=-1))
        return self.out_proj(torch.einsum("bhqk,bhkd->bqhd", weights, v).flatten(2))


class SplitPerHeadLoop(_Split):
    """One weight matrix per projection, but a Python loop over the heads (dropout per head is right)."""

    def forward(self, x):
        self.too_long(x)
        n = x.shape[1]
        q, k, v = (self.heads(layer(x)) for layer in (self.W_query, self.W_key, self.W_value))
        outs = []
        for h in range(self.num_heads):
            scores = (q[:, h] @ k[:, h].transpose(1, 2)).masked_fill(
                self.mask[:n, :n], float("-inf")
            )
            outs.append(self.dropout(torch.softmax(scores / self.head_dim**0.5, dim=-1)) @ v[:, h])
        return self.out_proj(torch.cat(outs, dim=-1))


class SplitSubclass(cu.chapters.MultiHeadAttention):
    """A subclass of the chapter's class that only adds a method: inherits a right forward."""

    def extra_repr(self):
        return f"heads={self.num_heads}"


ANSWERS = [
    ("check_multihead_wrapper", (WrapperConcat,)),
    ("check_multihead_attention", (SplitSdpa,)),
    ("check_multihead_attention", (SplitEinsumWhere,)),
    ("check_multihead_attention", (SplitPerHeadLoop,)),
    ("check_multihead_attention", (SplitSubclass,)),
]
