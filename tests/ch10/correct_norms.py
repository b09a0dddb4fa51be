"""Right but unusual answers to chapter 10's LayerNorm, GELU, RMSNorm, SwiGLU and ALiBi exercises:
every one must pass its check (tests/ch10/test_ch10_norms.py)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from tests.ch10.buggy_norms import LayerNorm, RMSNorm, SwiGLU, alibi_slopes


class FunctionalLayerNorm(LayerNorm):
    """F.layer_norm with the layer's own parameters: right numbers, but the exercise asks for the
    formula, so the check refuses it (``LIBRARY``)."""

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)


class RsqrtVarLayerNorm(LayerNorm):
    """torch.var with unbiased=False and torch.rsqrt (mukang98/Own_Transformer's formula)."""

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        return (x - mean) * torch.rsqrt(
            x.var(-1, unbiased=False, keepdim=True) + self.eps
        ) * self.weight + self.bias


class UpcastRMSNorm(RMSNorm):
    """Hugging Face's LlamaRMSNorm, upcast to at least float32 and cast back (its own code upcasts to
    float32 exactly, which loses a float64 input's precision: layer_dtype_changed)."""

    def forward(self, x):
        h = x.to(torch.promote_types(x.dtype, torch.float32))
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class NormalizeRMSNorm(RMSNorm):
    """lucidrains' style: F.normalize (x over its length) times sqrt(d), with eps inside the root."""

    def forward(self, x):
        d = x.shape[-1]
        return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) / d + self.eps) * self.weight


def gelu_horner(x, approximate="none"):
    """hendrycks/GELUs' README form, x * 0.7978845608 * (1 + 0.044715 x^2) (Horner, answered in
    hendrycks/GELUs#1), and Phi as torch.special.ndtr."""
    if approximate == "tanh":
        return 0.5 * x * (1 + torch.tanh(x * 0.7978845608028654 * (1 + 0.044715 * x * x)))
    if approximate == "none":
        return x * torch.special.ndtr(x)
    raise ValueError(f"approximate must be 'none' or 'tanh', but got {approximate!r}")


def gelu_through_torch(x, approximate="none"):
    """F.gelu itself, which raises RuntimeError for a bad approximate: wrapped into ValueError.
    Right numbers, refused as a library call (``LIBRARY``)."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate must be 'none' or 'tanh', but got {approximate!r}")
    return F.gelu(x, approximate=approximate)


class SigmoidGateSwiGLU(SwiGLU):
    """SiLU written out, gate * sigmoid(gate), and the parts computed one at a time."""

    def forward(self, x):
        gate, up = self.w1(x), self.w3(x)
        return self.w2(gate * torch.sigmoid(gate) * up)


def slopes_authors(num_heads):
    """The ALiBi authors' get_slopes (recursive, on Python floats), as a float32 tensor."""

    def power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    def get(n):
        if math.log2(n).is_integer():
            return power_of_2(n)
        closest = 2 ** math.floor(math.log2(n))
        return power_of_2(closest) + get(2 * closest)[0::2][: n - closest]

    return torch.tensor(get(num_heads), dtype=torch.float32)


def slopes_strided(num_heads):
    """MosaicML's gen_slopes idea: the next power of two's slopes, strided."""
    up = 2 ** math.ceil(math.log2(num_heads))
    m = 2.0 ** (-8.0 * torch.arange(1, up + 1) / up)
    return torch.cat([m[1::2], m[0::2]])[:num_heads] if up != num_heads else m


def bias_key_positions(n, num_heads):
    """BLOOM's and the authors' trick: m * j per key (a constant per row away from -m (i - j)),
    and torch.finfo's minimum instead of -inf above the diagonal."""
    j = torch.arange(n, dtype=torch.float32)
    bias = alibi_slopes(num_heads)[:, None, None] * j[None, None, :].expand(num_heads, n, n)
    future = torch.ones(n, n, dtype=torch.bool).triu(1)
    return bias.masked_fill(future, torch.finfo(torch.float32).min)


ANSWERS = [
    ("check_layer_norm", (RsqrtVarLayerNorm,)),
    ("check_rms_norm", (UpcastRMSNorm,)),
    ("check_rms_norm", (NormalizeRMSNorm,)),
    ("check_gelu", (gelu_horner,)),
    ("check_swiglu", (SigmoidGateSwiGLU,)),
    ("check_alibi", (slopes_authors, lambda n, h: bias_key_positions(n, h))),
    ("check_alibi", (slopes_strided, bias_key_positions)),
]
# torch's own layers: right in every probe (the library check runs last), refused as library calls
# because the exercises ask for the formula (tests/ch10/test_ch10_review.py)
LIBRARY = [
    ("check_layer_norm", (nn.LayerNorm,)),
    ("check_layer_norm", (FunctionalLayerNorm,)),
    ("check_gelu", (gelu_through_torch,)),
]
if hasattr(nn, "RMSNorm"):  # torch 2.4 and later

    class TorchRMSNorm(nn.RMSNorm):
        """PyTorch's own, with the exercise's eps (its default, None, is the dtype's epsilon)."""

        def __init__(self, d, eps=1e-5):
            super().__init__(d, eps=eps)

    LIBRARY.append(("check_rms_norm", (TorchRMSNorm,)))
