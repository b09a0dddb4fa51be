"""Right but unusual answers to chapter 04's CausalAttention exercise: every one must pass."""

import torch
import torch.nn.functional as F
from torch import nn


class _Base(nn.Module):
    """The book's constructor; each subclass changes how the mask is kept or used."""

    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.context_length = context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.ones(context_length, context_length).triu(1).bool())

    def too_long(self, x):
        if x.shape[1] > self.context_length:
            raise ValueError(f"{x.shape[1]} tokens, context_length {self.context_length}")


class CausalSdpa(_Base):
    """scaled_dot_product_attention with a keep-mask (True = attend) and dropout_p from self.training."""

    def forward(self, x):
        self.too_long(x)
        n = x.shape[1]
        p = self.dropout.p if self.training else 0.0
        return F.scaled_dot_product_attention(
            self.W_query(x),
            self.W_key(x),
            self.W_value(x),
            attn_mask=~self.mask[:n, :n],
            dropout_p=p,
        )


class CausalKeepMaskNonPersistent(_Base):
    """A keep-mask from torch.tril, registered as a non-persistent buffer (not in the state_dict)."""

    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, dropout, qkv_bias)
        del self.mask
        keep = torch.tril(torch.ones(context_length, context_length, dtype=torch.bool))
        self.register_buffer("keep", keep, persistent=False)

    def forward(self, x):
        self.too_long(x)
        n = x.shape[1]
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = (q @ k.transpose(1, 2)).masked_fill(~self.keep[:n, :n], float("-inf"))
        return self.dropout(torch.softmax(scores / k.shape[-1] ** 0.5, dim=-1)) @ v


class CausalBaddbmmWhere(_Base):
    """baddbmm for the scaled scores, torch.where for the mask."""

    def forward(self, x):
        self.too_long(x)
        b, n, _ = x.shape
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = torch.baddbmm(
            torch.zeros(b, n, n, dtype=x.dtype, device=x.device),
            q,
            k.transpose(1, 2),
            beta=0.0,
            alpha=k.shape[-1] ** -0.5,
        )
        scores = torch.where(self.mask[:n, :n], torch.full_like(scores, float("-inf")), scores)
        return self.dropout(scores.softmax(dim=-1)) @ v


class CausalFloat64(_Base):
    """Scores and softmax in float64, the result handed back in the input's dtype."""

    def forward(self, x):
        self.too_long(x)
        n = x.shape[1]
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = (q.double() @ k.double().transpose(1, 2)).masked_fill(
            self.mask[:n, :n], float("-inf")
        )
        weights = torch.softmax(scores / k.shape[-1] ** 0.5, dim=-1).to(x.dtype)
        return self.dropout(weights) @ v


class CausalAdditiveFloatBuffer(_Base):
    """A float buffer of 0 and -inf added to the scores (the convention of many GPT ports)."""

    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, dropout, qkv_bias)
        self.mask = torch.full((context_length, context_length), float("-inf")).triu(1)

    def forward(self, x):
        self.too_long(x)
        n = x.shape[1]
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        weights = torch.softmax((q @ k.mT) / k.shape[-1] ** 0.5 + self.mask[:n, :n], dim=-1)
        return self.dropout(weights) @ v


ANSWERS = [
    ("check_causal_attention", (cls,))
    for cls in (
        CausalSdpa,
        CausalKeepMaskNonPersistent,
        CausalBaddbmmWhere,
        CausalFloat64,
        CausalAdditiveFloatBuffer,
    )
]
