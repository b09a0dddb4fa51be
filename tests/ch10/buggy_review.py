"""The wrong answers of a stranger's review of chapter 10 (/work/wt/ch10-REVIEW.md, 2026-11-28: its
attack file review/attack.py on branch ch10rev, and the JupyterLab trial it summarises in section C,
review/browser_log.json), each with the mistake id its check must name. The attack's snippets are
copied as the review wrote them (their own sources in their docstrings); the trial's were not saved,
only their labels and diagnoses, so they are rewritten here from the label (and, for keepdim, from
the traceback the trial printed). Each is a wrong answer the checks accepted, named with the wrong
cause, or left unnamed before branch ch10chk2; tests/ch10/test_ch10_review.py runs ``CASES``."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

import course_utils as cu
from tests.ch10.buggy_norms import LayerNorm, RMSNorm, SwiGLU, alibi_bias, alibi_slopes

Decoder = cu.chapters.DecoderBlock


# ---------------------------------------------------------------- A1, A2: accepted before ch10fix
def packed_python_loops_cpu(doc_ids):
    """attack.py (the trial's 'Python loops, CPU result'): a fresh torch.zeros on the default device
    filled by loops over .tolist(); on a GPU input the mask comes back on the CPU."""
    b, n = doc_ids.shape
    ids = doc_ids.tolist()
    out = torch.zeros(b, n, n, dtype=torch.bool)
    for r in range(b):
        for i in range(n):
            for j in range(i + 1):
                out[r, i, j] = ids[r][i] == ids[r][j]
    return out


def sinusoid_numpy_float64(n, d):
    """attack.py: the TensorFlow tutorial's get_angles/positional_encoding in NumPy (float64),
    wrapped with torch.from_numpy: right values, a float64 table where the exercise asks float32."""
    if d % 2:
        raise ValueError(f"an even width is needed, got d={d}")
    pos, i = np.arange(n)[:, None], np.arange(d)[None, :]
    ang = pos / np.power(10000, (2 * (i // 2)) / np.float32(d))
    ang[:, 0::2], ang[:, 1::2] = np.sin(ang[:, 0::2]), np.cos(ang[:, 1::2])
    return torch.from_numpy(ang)


# ---------------------------------------------------------------- A3: the wrong cause named before
def gelu_rounded_constant(x, approximate="none"):
    """attack.py (the trial's 'rounded constants'): sqrt(2) written as 1.4142, sqrt(2/pi) as 0.7979.
    Named layer_dtype_changed ('computes in float32') before: it computes in float64 throughout."""
    if approximate == "none":
        return 0.5 * x * (1 + torch.erf(x / 1.4142))
    if approximate == "tanh":
        return 0.5 * x * (1 + torch.tanh(0.7979 * (x + 0.044715 * x**3)))
    raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")


def gelu_handwritten_sigmoid(x, approximate="none"):
    """attack.py (the trial's 'tanh form with sigmoid written by hand'): 0.5 (1 + tanh z) as
    1 / (1 + exp(-2z)); exp overflows for large negative x: the value is 0, the gradient NaN."""
    if approximate == "none":
        return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))
    if approximate == "tanh":
        z = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
        return x / (1 + torch.exp(-2 * z))
    raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")


# ---------------------------------------------------------------- A4: the library instead of the formula
class LayerNormLibrary(LayerNorm):
    """attack.py: F.layer_norm, which the exercise text forbids ('not with nn.LayerNorm')."""

    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


def gelu_library(x, approximate="none"):
    """attack.py: F.gelu, which the exercise text forbids."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return F.gelu(x, approximate=approximate)


class RMSNormLibrary(RMSNorm):
    """attack.py: F.rms_norm (torch >= 2.4); the exercise says 'from the formula'."""

    def forward(self, x):
        return F.rms_norm(x, x.shape[-1:], self.weight, self.eps)


class LayerNormInside(LayerNorm):
    """The brief's 'nn.LayerNorm inside': torch's layer (no parameters of its own) made in forward."""

    def forward(self, x):
        inner = torch.nn.LayerNorm(x.shape[-1], eps=self.eps, elementwise_affine=False)
        return inner(x) * self.weight + self.bias


# ---------------------------------------------------------------- A5: Meta's Llama RMSNorm
class RMSNormMetaLlama(RMSNorm):
    """attack.py: meta-llama/llama model.py RMSNorm: self._norm(x.float()).type_as(x) * weight."""

    def forward(self, x):
        out = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return out.type_as(x) * self.weight


# ---------------------------------------------------------------- D: unnamed in the attack
def gelu_sqrt_pi_over_2(x, approximate="none"):
    """attack.py: find_string 'math.sqrt(math.pi / 2) * (x + 0.044715' found 10 hits (minGPT forks'
    gelu, a Gelu module): sqrt(pi/2) for sqrt(2/pi)."""
    if approximate == "none":
        return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))
    if approximate == "tanh":
        return 0.5 * x * (1 + torch.tanh(math.sqrt(math.pi / 2) * (x + 0.044715 * x**3)))
    raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")


class LayerNormBertTfEps(LayerNorm):
    """attack.py: Google's BERT modeling.py layer_norm (epsilon 1e-12) and pytorch-pretrained-BERT's
    BertLayerNorm(eps=1e-12), ported with 1e-12 hard-coded, self.eps ignored."""

    def forward(self, x):
        u = x.mean(-1, keepdim=True)
        s = (x - u).pow(2).mean(-1, keepdim=True)
        return self.weight * (x - u) / torch.sqrt(s + 1e-12) + self.bias


def alibi_slopes_growing(num_heads):
    """attack.py: a get_alibi_slopes from the code corpus whose power-of-two part returns
    start * 2 ** (i / 2): the ratio inverted (and fixed at sqrt 2), so the slopes grow."""

    def p2(n):
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start * (2.0 ** (i / 2.0)) for i in range(n)]

    if math.log2(num_heads).is_integer():
        slopes = p2(num_heads)
    else:
        c = 2 ** math.floor(math.log2(num_heads))
        slopes = p2(c)
        slopes += [slopes[-1] * 2.0 ** ((i + 1) / 2.0) for i in range(num_heads - c)]
    return torch.tensor(slopes, dtype=torch.float32)


# ---------------------------------------------------------------- C: the trial's shape/NaN and generic ones
class LayerNormKeepdimForgotten(LayerNorm):
    """The trial's 'keepdim forgotten', as its traceback printed it: the mean without keepdim, so
    x - mean does not broadcast (RuntimeError: size of tensor a (8) must match ... (4))."""

    def forward(self, x):
        mean = x.mean(dim=-1)
        var = ((x - mean[..., None]) ** 2).mean(dim=-1)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class RMSNormUnbiasedStd(RMSNorm):
    """The trial's 'divides by the (unbiased) std': torch.var's default (d - 1, mean subtracted)
    in the root; got 207.3 for 1.31 on the constant row."""

    def forward(self, x):
        return x / torch.sqrt(x.var(-1, keepdim=True) + self.eps) * self.weight


class RMSNormStdPlusEps(RMSNorm):
    """The same with x.std() and eps added outside (x / (x.std(-1) + eps)), as the Annotated
    Transformer's LayerNorm does."""

    def forward(self, x):
        return self.weight * x / (x.std(-1, keepdim=True) + self.eps)


class SwiGLUGeluTanhGate(SwiGLU):
    """The trial's 'GELU (tanh) gate, i.e. GEGLU': Gemma's FFN (hidden_activation
    gelu_pytorch_tanh) written into the SwiGLU exercise."""

    def forward(self, x):
        return self.w2(F.gelu(self.w1(x), approximate="tanh") * self.w3(x))


def alibi_bias_hides_diagonal(n, num_heads):
    """The trial's 'right slopes; bias hides the diagonal too': j >= i masked (triu(0))."""
    i = torch.arange(n)
    dist = (i[:, None] - i[None, :]).float()
    bias = -alibi_slopes(num_heads)[:, None, None] * dist
    return bias.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(), float("-inf"))


class DecoderMemoryRealInverted(Decoder):
    """The trial's 'memory_real inverted (key_padding_mask habit)': ~memory_real passed on, as
    nn.MultiheadAttention's key_padding_mask (True = padding) would want."""

    def forward(self, x, memory, memory_real=None):
        hidden = None if memory_real is None else ~memory_real
        if self.norm_first:
            x = x + self.drop(self.self_attn(self.norm1(x)))
            x = x + self.drop(self.cross_attn(self.norm2(x), memory, hidden))
            return x + self.drop(self.ff(self.norm3(x)))
        x = self.norm1(x + self.drop(self.self_attn(x)))
        x = self.norm2(x + self.drop(self.cross_attn(x, memory, hidden)))
        return self.norm3(x + self.drop(self.ff(x)))


class DecoderCrossBeforeSelf(Decoder):
    """The trial's 'cross-attention before self-attention': the two attention sub-layers in the
    other order, each keeping its own norm."""

    def forward(self, x, memory, memory_real=None):
        if self.norm_first:
            x = x + self.drop(self.cross_attn(self.norm2(x), memory, memory_real))
            x = x + self.drop(self.self_attn(self.norm1(x)))
            return x + self.drop(self.ff(self.norm3(x)))
        x = self.norm2(x + self.drop(self.cross_attn(x, memory, memory_real)))
        x = self.norm1(x + self.drop(self.self_attn(x)))
        return self.norm3(x + self.drop(self.ff(x)))


CASES = [  # (check, args, the mistake id it must name)
    ("check_packed_causal_mask", (packed_python_loops_cpu,), "result_on_cpu"),
    ("check_sinusoidal_positions", (sinusoid_numpy_float64,), "sinusoid_not_float"),
    ("check_gelu", (gelu_rounded_constant,), "layer_constant_rounded"),
    ("check_gelu", (gelu_handwritten_sigmoid,), "layer_overflows"),
    ("check_layer_norm", (LayerNormLibrary,), "layer_library_call"),
    ("check_layer_norm", (LayerNormInside,), "layer_library_call"),
    ("check_gelu", (gelu_library,), "layer_library_call"),
    ("check_rms_norm", (RMSNormMetaLlama,), "layer_upcast_float32"),
    ("check_gelu", (gelu_sqrt_pi_over_2,), "gelu_tanh_constants"),
    ("check_layer_norm", (LayerNormBertTfEps,), "norm_eps_hardcoded"),
    ("check_alibi", (alibi_slopes_growing, alibi_bias), "alibi_slopes_growing"),
    ("check_layer_norm", (LayerNormKeepdimForgotten,), "norm_keepdim_missing"),
    ("check_rms_norm", (RMSNormUnbiasedStd,), "rms_divides_by_std"),
    ("check_rms_norm", (RMSNormStdPlusEps,), "rms_divides_by_std"),
    ("check_swiglu", (SwiGLUGeluTanhGate,), "swiglu_geglu_tanh"),
    ("check_alibi", (alibi_slopes, alibi_bias_hides_diagonal), "alibi_bias_hides_diagonal"),
    ("check_decoder_block", (DecoderMemoryRealInverted,), "decoder_memory_real_inverted"),
    ("check_decoder_block", (DecoderCrossBeforeSelf,), "decoder_cross_before_self"),
]
if hasattr(F, "rms_norm"):  # torch 2.4 and later
    CASES.append(("check_rms_norm", (RMSNormLibrary,), "layer_library_call"))
