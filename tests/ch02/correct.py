"""Right but unusual answers to chapter 02's exercises: every one must pass its check."""

import math

import torch
import torch.nn.functional as F
from torch import nn


class V1Sdpa(nn.Module):
    """SelfAttention_v1 with x @ W on nn.Parameters and PyTorch's fused scaled_dot_product_attention."""

    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        return F.scaled_dot_product_attention(x @ self.W_query, x @ self.W_key, x @ self.W_value)


class _MatMul(torch.autograd.Function):
    """x @ w with its own backward; it keeps x as ``ctx.variable``, a name autograd's leaf nodes use."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.variable, ctx.w = x, w
        return x @ w

    @staticmethod
    def backward(ctx, grad):
        return grad @ ctx.w.T, ctx.variable.transpose(-2, -1) @ grad


class V1OwnMatMul(V1Sdpa):
    """V1Sdpa's parameters, with the projections through a custom autograd.Function and attention
    by hand (the grader once took the Function's ctx.variable for a leaf and doubled x's gradient)."""

    def forward(self, x):
        q, k, v = (_MatMul.apply(x, w) for w in (self.W_query, self.W_key, self.W_value))
        weights = torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, dim=-1)
        return weights @ v


class V2Einsum(nn.Module):
    """SelfAttention_v2 with F.linear on the layers' weights and einsum for the two products."""

    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        q = F.linear(x, self.W_query.weight, self.W_query.bias)
        k = F.linear(x, self.W_key.weight, self.W_key.bias)
        v = F.linear(x, self.W_value.weight, self.W_value.bias)
        weights = torch.einsum("qd,kd->qk", q, k).div(math.sqrt(k.shape[-1])).softmax(dim=-1)
        return torch.einsum("qk,kd->qd", weights, v)


class BatchedBaddbmm(V2Einsum):
    """The batched layer with baddbmm folding the 1/sqrt(d_k) scale into the product."""

    def forward(self, x):
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        empty = torch.zeros(x.shape[0], x.shape[1], x.shape[1], dtype=x.dtype, device=x.device)
        scores = torch.baddbmm(empty, q, k.transpose(1, 2), beta=0.0, alpha=k.shape[-1] ** -0.5)
        return torch.bmm(scores.softmax(dim=-1), v)


class BatchedSdpa(V2Einsum):
    """The batched layer as one call to scaled_dot_product_attention."""

    def forward(self, x):
        return F.scaled_dot_product_attention(self.W_query(x), self.W_key(x), self.W_value(x))


def transfer_state_dict(v1, v2):
    """load_state_dict copies (and checks the shapes of) every transposed weight at once."""
    v1.load_state_dict(
        {name: getattr(v2, name).weight.T for name in ("W_query", "W_key", "W_value")}
    )


def transfer_data(v1, v2):
    """Writes .data (outside autograd) with transposed copies."""
    for name in ("W_query", "W_key", "W_value"):
        getattr(v1, name).data = getattr(v2, name).weight.data.T.clone()


ANSWERS = [
    ("check_self_attention_v1", (V1Sdpa,)),
    ("check_self_attention_v1", (V1OwnMatMul,)),
    ("check_self_attention_v2", (V2Einsum,)),
    ("check_batched_self_attention", (BatchedBaddbmm,)),
    ("check_batched_self_attention", (BatchedSdpa,)),
    ("check_weight_transfer", (transfer_state_dict,)),
    ("check_weight_transfer", (transfer_data,)),
]
