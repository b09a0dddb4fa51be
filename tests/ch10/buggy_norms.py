"""Wrong answers to chapter 10's LayerNorm, GELU, RMSNorm, SwiGLU and ALiBi exercises, each with
where it comes from. The real code is reduced to the exercise's interface (the given ``__init__``
and its parameter names); the formula, the bug, is kept as found. Each list holds (answer,
mistake id the check must name); tests/ch10/test_ch10_norms.py runs them."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


# ============================================================================= given parts
class LayerNorm(nn.Module):
    """The exercise's given __init__ with a right forward."""

    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = (x - mean).pow(2).mean(dim=-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight


class SwiGLU(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff, bias=False)
        self.w3 = nn.Linear(d_model, d_ff, bias=False)
        self.w2 = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def gelu(x, approximate="none"):
    if approximate == "none":
        return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))
    if approximate == "tanh":
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    raise ValueError(f"approximate must be 'none' or 'tanh', but got {approximate!r}")


def alibi_slopes(num_heads):
    closest = 2 ** math.floor(math.log2(num_heads))
    base = 2.0 ** (-8.0 * torch.arange(1, closest + 1) / closest)
    extra = 2.0 ** (-8.0 * torch.arange(1, 2 * (num_heads - closest) + 1, 2) / (2 * closest))
    return torch.cat([base, extra]).float()


def alibi_bias(n, num_heads, slopes=alibi_slopes):
    distance = torch.arange(n)[:, None] - torch.arange(n)[None, :]
    bias = slopes(num_heads)[:, None, None] * -distance
    return bias.masked_fill(distance < 0, -torch.inf)


# ============================================================================= LayerNorm
class AnnotatedTransformerNorm(LayerNorm):
    """EricSteinberger/DREAM PokerRL/rl/neural/LayerNorm.py and prajjwal1/transformers-nlp
    transformer_main/layer_norm.py, both the Annotated Transformer's: x.std (unbiased) + eps."""

    def forward(self, x):
        mean, std = x.mean(-1, keepdim=True), x.std(-1, keepdim=True)
        return self.weight * (x - mean) / (std + self.eps) + self.bias


class TorchVarNorm(LayerNorm):
    """kveps/motion_prediction models/transformer/layer_norm.py: torch.var's default divides by
    d - 1 (that file also has no scale and shift; the course's given parameters are kept)."""

    def forward(self, x):
        mean = torch.mean(x, dim=-1, keepdim=True)
        var = torch.var(x, dim=-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class StdPlusEpsNorm(LayerNorm):
    """Biased std with eps outside the root: allenai/OLMo#281's RMSNorm slip, in a LayerNorm."""

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True, correction=0)
        return (x - mean) / (std + self.eps) * self.weight + self.bias


class TokenAxisNorm(LayerNorm):
    """Normalised over the tokens (dim=-2), kyegomez/zeta#180's axis slip, in a LayerNorm."""

    def forward(self, x):
        mean = x.mean(-2, keepdim=True)
        var = (x - mean).pow(2).mean(-2, keepdim=True)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class NoAffineNorm(LayerNorm):
    """kveps/motion_prediction's LayerNorm has no scale and shift at all (biased variance here)."""

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + self.eps)


class NoShiftNorm(LayerNorm):
    """Constructed: the shift forgotten (no public example found)."""

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        return (
            (x - mean)
            / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + self.eps)
            * self.weight
        )


class NoEpsNorm(LayerNorm):
    """Constructed: (x - mean) / std, no eps (a constant row gives 0 / 0)."""

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        return (x - mean) / x.std(-1, keepdim=True, correction=0) * self.weight + self.bias


class RMSInsteadOfLayerNorm(LayerNorm):
    """Constructed: the mean never subtracted (RMSNorm under LayerNorm's name)."""

    def forward(self, x):
        rms = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return x / rms * self.weight + self.bias


class InPlaceNorm(LayerNorm):
    """Constructed: `x -= mean` changes the caller's tensor."""

    def forward(self, x):
        x -= x.mean(-1, keepdim=True)
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight + self.bias


class DetachedStatsNorm(LayerNorm):
    """Constructed: the statistics detached 'for speed', so no gradient flows through them."""

    def forward(self, x):
        mean = x.mean(-1, keepdim=True).detach()
        var = (x - mean).pow(2).mean(-1, keepdim=True).detach()
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class Float32Norm(LayerNorm):
    """Constructed: computes in float32 whatever the input (a .float() kept from mixed precision)."""

    def forward(self, x):
        return super().forward(x.float())


class ThreeAxesNorm(LayerNorm):
    """Constructed: unpacks b, n, d = x.shape, so a (n, d) input fails."""

    def forward(self, x):
        b, n, d = x.shape
        return super().forward(x.reshape(b * n, d)).reshape(b, n, d)


class CpuOnesNorm(LayerNorm):
    """Constructed: a scale made with torch.ones(d) inside forward, on the CPU."""

    def forward(self, x):
        return super().forward(x) * torch.ones(x.shape[-1])


class DropoutInsideNorm(LayerNorm):
    """Constructed: a dropout inside the norm, active in training (the layer has none)."""

    def forward(self, x):
        return F.dropout(super().forward(x), 0.1, self.training)


LAYER_NORM_BUGS = [
    (AnnotatedTransformerNorm, "ln_std_plus_eps"),
    (TorchVarNorm, "ln_unbiased_variance"),
    (StdPlusEpsNorm, "norm_eps_outside_root"),
    (TokenAxisNorm, "norm_wrong_axis"),
    (NoAffineNorm, "norm_weight_ignored"),
    (NoShiftNorm, "ln_shift_ignored"),
    (NoEpsNorm, "norm_eps_missing"),
    (RMSInsteadOfLayerNorm, "ln_not_centred"),
    (InPlaceNorm, "input_modified"),
    (DetachedStatsNorm, "gradient_blocked"),
    (Float32Norm, "layer_dtype_changed"),
    (ThreeAxesNorm, "layer_fixed_rank"),
    (CpuOnesNorm, "cpu_tensor_in_forward"),
    (DropoutInsideNorm, "layer_train_mode_differs"),
]


# ============================================================================= RMSNorm
class DividedByRsqrt(RMSNorm):
    """mosaicml/llm-foundry#371: x / torch.rsqrt(...) ('the loss diverges')."""

    def forward(self, x):
        return self.weight * (x / torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


class OlmoRMSNorm(RMSNorm):
    """allenai/OLMo#281: rms from x.norm * d**-0.5, then x / (rms + eps)."""

    def forward(self, x):
        rms = x.norm(2, dim=-1, keepdim=True) * x.shape[-1] ** -0.5
        return x / (rms + self.eps) * self.weight


class KerasVarianceRMSNorm(RMSNorm):
    """keras-team/keras#22393: rms_scaling used the variance (the mean subtracted)."""

    def forward(self, x):
        var = x.var(-1, keepdim=True, unbiased=False)
        return x * torch.rsqrt(var + self.eps) * self.weight


class ZetaAxisRMSNorm(RMSNorm):
    """kyegomez/zeta#180: normalised over dim -2 instead of -1."""

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-2, keepdim=True) + self.eps) * self.weight


class GemmaStyleRMSNorm(RMSNorm):
    """Gemma's convention, x * (1 + weight) (Hugging Face GemmaRMSNorm), where the weight starts at 1."""

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1 + self.weight)


class LengthRMSNorm(RMSNorm):
    """Constructed: divides by the vector's length, x.norm(), and forgets sqrt(d)."""

    def forward(self, x):
        return x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + self.eps) * self.weight


class UnscaledRMSNorm(RMSNorm):
    """Constructed: the learned scale forgotten."""

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class CentredRMSNorm(RMSNorm):
    """Constructed: the mean subtracted first (LayerNorm without its shift)."""

    def forward(self, x):
        return super().forward(x - x.mean(-1, keepdim=True))


RMS_NORM_BUGS = [
    (DividedByRsqrt, "rms_multiplied_by_rms"),
    (OlmoRMSNorm, "norm_eps_outside_root"),
    (KerasVarianceRMSNorm, "rms_divides_by_std"),
    (ZetaAxisRMSNorm, "norm_wrong_axis"),
    (GemmaStyleRMSNorm, "rms_one_plus_weight"),
    (LengthRMSNorm, "rms_sum_not_mean"),
    (UnscaledRMSNorm, "norm_weight_ignored"),
    (CentredRMSNorm, "rms_centred"),
]


# ============================================================================= GELU
def gelu_tanh_only(x, approximate="none"):
    """rasbt/LLMs-from-scratch chapter 4's GELU: the tanh form whatever is asked for."""
    return (
        0.5 * x * (1 + torch.tanh(torch.sqrt(torch.tensor(2.0 / torch.pi)) * (x + 0.044715 * x**3)))
    )


def gelu_swapped_constants(x, approximate="none"):
    """huggingface/transformers#11514: TF gelu_fast with its two coefficients swapped."""
    if approximate == "tanh":
        return 0.5 * x * (1 + torch.tanh(x * 0.044715 * (1 + 0.7978845608 * x * x)))
    return gelu(x, approximate)


def gelu_cdf_only(x, approximate="none"):
    """tensorflow/tfjs#8224: gelu_new returned the CDF, the `* x` missing."""
    if approximate == "tanh":
        return 0.5 * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * torch.pow(x, 3))))
    return gelu(x, approximate)


def gelu_sigmoid(x, approximate="none"):
    """harvard-edge/cs249r_book#1154: the sigmoid approximation x * sigmoid(1.702 x) as GELU."""
    return x * torch.sigmoid(1.702 * x)


def gelu_erf_unscaled(x, approximate="none"):
    """Constructed: erf(x) instead of erf(x / sqrt(2))."""
    if approximate == "none":
        return 0.5 * x * (1 + torch.erf(x))
    return gelu(x, approximate)


def gelu_no_half(x, approximate="none"):
    """Constructed: the 1/2 forgotten."""
    return 2 * gelu(x, approximate)


def gelu_silu(x, approximate="none"):
    """Constructed: SiLU under GELU's name."""
    return x * torch.sigmoid(x)


def gelu_accepts_anything(x, approximate="none"):
    """Constructed: any approximate other than 'tanh' gives the exact form."""
    return gelu(x, "tanh" if approximate == "tanh" else "none")


def gelu_numpy(x, approximate="none"):
    """Constructed: a round trip through NumPy cuts the graph."""
    return torch.from_numpy(gelu(x.detach(), approximate).numpy())


GELU_BUGS = [
    (gelu_tanh_only, "gelu_form_swapped"),
    (gelu_swapped_constants, "gelu_tanh_constants"),
    (gelu_cdf_only, "gelu_cdf_only"),
    (gelu_sigmoid, "gelu_sigmoid_form"),
    (gelu_erf_unscaled, "gelu_erf_scale"),
    (gelu_no_half, "gelu_half_missing"),
    (gelu_silu, "gelu_is_silu"),
    (gelu_accepts_anything, "gelu_bad_approximate_accepted"),
    (gelu_numpy, "gradient_blocked"),
]


def gelu_python_float_sqrt(x, approximate="none"):
    """juannpmari/Building-an-LLM-from-scratch gpt/gelu.py: torch.sqrt of a Python float raises
    TypeError; the check must relay it as a failure, not crash."""
    return 0.5 * x * (1 + torch.tanh(torch.sqrt(2 / torch.pi) * (x + 0.044715 * torch.pow(x, 3))))


# ============================================================================= SwiGLU
class GateSwapped(SwiGLU):
    """ml-explore/mlx-lm#767: 'silu(x) * gate instead of silu(gate) * x'."""

    def forward(self, x):
        return self.w2(F.silu(self.w3(x)) * self.w1(x))


class ActAfterProduct(SwiGLU):
    """Nijikadesu/breakdown-minimind#3: self.w2(F.silu(self.w1(x) * self.w3(x)))."""

    def forward(self, x):
        return self.w2(F.silu(self.w1(x) * self.w3(x)))


class SiluOnly(SwiGLU):
    """google-research/timesfm#493: 'swiglu' mapped to F.silu, the gate never used."""

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)))


class ActOnBoth(SwiGLU):
    """kakaobrain/trident#101: the activation on the whole projection, gate and value alike."""

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * F.silu(self.w3(x)))


class GeGLU(SwiGLU):
    """Constructed: GELU on the gate (GEGLU, a sibling from Shazeer's paper)."""

    def forward(self, x):
        return self.w2(F.gelu(self.w1(x)) * self.w3(x))


class SummedGate(SwiGLU):
    """Constructed: the gate added instead of multiplied."""

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) + self.w3(x))


SWIGLU_BUGS = [
    (GateSwapped, "swiglu_gate_swapped"),
    (ActAfterProduct, "swiglu_act_after_product"),
    (SiluOnly, "swiglu_no_gate"),
    (ActOnBoth, "swiglu_act_on_both"),
    (GeGLU, "swiglu_wrong_activation"),
    (SummedGate, "swiglu_sum"),
]


# ============================================================================= ALiBi
def slopes_one_line(num_heads):
    """ml-explore/mlx#343 (fixed in #3071): (2**8) ** (-h / num_heads) for every head count."""
    return (2.0**8) ** (-torch.arange(1, num_heads + 1) / num_heads)


def slopes_from_zero(num_heads):
    """paiml/aprender#2143: 2^(-8h/n) with h counted from 0, so head 0 has slope 1."""
    return 2.0 ** (-8.0 * torch.arange(num_heads) / num_heads)


def slopes_extra_from_base(num_heads):
    """Public code found with the course's search tool (its repository not shown by the index):
    the extra slopes taken from the closest power's own sequence, base_slopes[0::2]."""
    closest = 2 ** math.floor(math.log2(num_heads))
    base = 2.0 ** (-8.0 * torch.arange(1, closest + 1) / closest)
    return torch.cat([base, base[0::2]])[:num_heads].float()


def slopes_closest_only(num_heads):
    """Public code found with the course's search tool (repository not shown): the workaround's
    comment kept but only the closest power of two's slopes returned."""
    closest = 2 ** math.floor(math.log2(num_heads))
    return 2.0 ** (-8.0 * torch.arange(1, closest + 1) / closest)


def slopes_reversed(num_heads):
    """Constructed: the shallowest slope first."""
    return alibi_slopes(num_heads).flip(0)


def slopes_float64(num_heads):
    """Constructed: a float64 tensor from a Python list of slopes."""
    return torch.tensor(alibi_slopes(num_heads).tolist(), dtype=torch.float64)


def slopes_extra_first(num_heads):
    """Constructed: the extra slopes put before the closest power of two's."""
    closest = 2 ** math.floor(math.log2(num_heads))
    slopes = alibi_slopes(num_heads)
    return torch.cat([slopes[closest:], slopes[:closest]])


SLOPE_BUGS = [
    (slopes_one_line, "alibi_one_line_slopes"),
    (slopes_from_zero, "alibi_slopes_from_zero"),
    (slopes_extra_from_base, "alibi_extra_slopes_wrong"),
    (slopes_closest_only, "alibi_closest_power_only"),
    (slopes_reversed, "alibi_slopes_reversed"),
    (slopes_float64, "alibi_not_float32"),
    (slopes_extra_first, "alibi_extra_first"),
]


def bias_symmetric(n, num_heads):
    """mosaicml/llm-foundry build_alibi_bias(full=True): -|i - j| for a bidirectional model, used
    here for a causal one (the future not hidden)."""
    distance = torch.arange(n)[:, None] - torch.arange(n)[None, :]
    return alibi_slopes(num_heads)[:, None, None] * -distance.abs()


def bias_positive(n, num_heads):
    """Constructed: +m (i - j), a bonus for distance."""
    distance = torch.arange(n)[:, None] - torch.arange(n)[None, :]
    bias = alibi_slopes(num_heads)[:, None, None] * distance
    return bias.masked_fill(distance < 0, -torch.inf)


def bias_transposed(n, num_heads):
    """Constructed: keys as rows, queries as columns."""
    return alibi_bias(n, num_heads).transpose(-2, -1)


def bias_one_line(n, num_heads):
    """The course's own alibi_bias before issue 38: the one-line formula's slopes inside."""
    return alibi_bias(n, num_heads, slopes=slopes_one_line)


BIAS_BUGS = [
    (bias_symmetric, "alibi_bias_not_causal"),
    (bias_positive, "alibi_bias_sign"),
    (bias_transposed, "alibi_bias_transposed"),
    (bias_one_line, "alibi_bias_own_slopes"),
]
