"""Measure eight ways of computing the same multi-head causal attention (chapter 07).

Every variant is built from **one** set of weights, taken from a reference
:class:`course_utils.models.MultiHeadAttention`, so "equal output" is a meaningful test:

============  ===============================================================
name          what it does
============  ===============================================================
wrapper       ``num_heads`` separate causal heads, concatenated (chapter 05)
split         one Q, one K, one V projection, split into heads by view
fused_qkv     one (d_in, 3 * d_out) projection for Q, K and V together
einsum        the same algebra written with ``torch.einsum``
sdpa_causal   ``F.scaled_dot_product_attention(..., is_causal=True)``
sdpa_mask     the same with an explicit boolean mask (True = may attend)
torch_mha     ``nn.MultiheadAttention`` (bool mask True = may NOT attend)
flex          FlexAttention with a causal block mask (CUDA, torch 2.5+)
============  ===============================================================

Before a variant is timed at a sequence length, its output and its input gradient are
compared with the reference's; a variant that disagrees is reported as ``wrong`` and
not timed. ``sdpa_inverted_mask`` is a deliberately broken variant (it hands SDPA the
``nn.MultiheadAttention`` mask convention) that shows the check at work.

Command line (``make bench`` runs the quick default, ``make bench FULL=1`` the long one)::

    python -m course_utils.bench [--full] [--out results] [--device cpu] [--seq-lens 128 256]
                                 [--batch 4] [--dtype bfloat16] [--threads 1] [--variants split ...]

It writes ``bench.csv``, ``bench.png`` and ``bench.md`` (a Markdown table) to ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import ctypes.util
import gc
import importlib
import math
import os
import platform
import statistics
import sys
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from .models import CausalAttention, MultiHeadAttention, MultiHeadAttentionWrapper, causal_mask
from .validation import CourseInputError, expect_int, expect_tensor

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "results"
"""Where ``make bench`` writes (git-ignored)."""

GPT2_WIDTH = 768
GPT2_HEADS = 12
MODES = ("forward", "forward+backward")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 3e-2, torch.float16: 5e-3}
"""Largest accepted difference from the fp32 reference, relative to the reference's largest
magnitude. Correct variants land far below (fp32: about 1e-6); a wrong mask or a missing
scale lands far above (about 1e-1)."""


# ============================================================================ the weights
@dataclass(frozen=True)
class AttentionWeights:
    """The parameters of one multi-head causal attention layer, in ``nn.Linear`` layout.

    Every benchmark variant is built from one of these, so all of them compute the same
    function. ``w_query[i * head_dim:(i + 1) * head_dim]`` are the rows of head ``i``.

    Attributes:
        w_query, w_key, w_value: (d_out, d_in) projection matrices.
        b_query, b_key, b_value: (d_out,) biases, or None (``qkv_bias=False``).
        w_out, b_out: the output projection, (d_out, d_out) and (d_out,).
        num_heads: the number of heads; ``d_out`` is divisible by it.
    """

    w_query: torch.Tensor
    w_key: torch.Tensor
    w_value: torch.Tensor
    b_query: torch.Tensor | None
    b_key: torch.Tensor | None
    b_value: torch.Tensor | None
    w_out: torch.Tensor
    b_out: torch.Tensor
    num_heads: int

    @property
    def d_in(self) -> int:
        return self.w_query.shape[1]

    @property
    def d_out(self) -> int:
        return self.w_query.shape[0]

    @property
    def head_dim(self) -> int:
        return self.d_out // self.num_heads

    @property
    def qkv_bias(self) -> bool:
        return self.b_query is not None

    def fused_qkv_weight(self) -> torch.Tensor:
        """Q, K and V stacked into one (3 * d_out, d_in) matrix (the layout of
        ``nn.MultiheadAttention.in_proj_weight``)."""
        return torch.cat([self.w_query, self.w_key, self.w_value], dim=0)

    def fused_qkv_bias(self) -> torch.Tensor:
        """The three biases stacked, (3 * d_out,); zeros when the layer has none."""
        if self.b_query is None:
            return torch.zeros(3 * self.d_out, dtype=self.w_query.dtype)
        return torch.cat([self.b_query, self.b_key, self.b_value], dim=0)

    def head(self, i: int) -> tuple[torch.Tensor, ...]:
        """Head ``i``'s rows of (w_query, w_key, w_value), each (head_dim, d_in)."""
        rows = slice(i * self.head_dim, (i + 1) * self.head_dim)
        return self.w_query[rows], self.w_key[rows], self.w_value[rows]

    def head_biases(self, i: int) -> tuple[torch.Tensor | None, ...]:
        rows = slice(i * self.head_dim, (i + 1) * self.head_dim)
        if self.b_query is None:
            return None, None, None
        return self.b_query[rows], self.b_key[rows], self.b_value[rows]


def weights_from_reference(reference: MultiHeadAttention) -> AttentionWeights:
    """Copy the weights of a :class:`course_utils.models.MultiHeadAttention` (detached, on the CPU).

    Example::

        ref = cu.models.MultiHeadAttention(768, 768, 1024, 0.0, num_heads=12)
        w = cu.bench.weights_from_reference(ref)
        fused = cu.bench.build_variant("fused_qkv", w, context_length=1024)
    """
    if not isinstance(reference, MultiHeadAttention):
        raise CourseInputError(
            f"reference must be a course_utils.models.MultiHeadAttention, but got "
            f"{type(reference).__name__}."
        )

    def grab(linear: nn.Linear) -> tuple[torch.Tensor, torch.Tensor | None]:
        bias = None if linear.bias is None else linear.bias.detach().to("cpu", torch.float32).clone()
        return linear.weight.detach().to("cpu", torch.float32).clone(), bias

    (wq, bq), (wk, bk), (wv, bv) = grab(reference.W_query), grab(reference.W_key), grab(reference.W_value)
    wo, bo = grab(reference.out_proj)
    return AttentionWeights(wq, wk, wv, bq, bk, bv, wo, bo, reference.num_heads)


def make_reference(d_model: int = GPT2_WIDTH, num_heads: int = GPT2_HEADS, context_length: int = 1024,
                   *, qkv_bias: bool = False, seed: int = 123) -> MultiHeadAttention:
    """A seeded reference layer (dropout 0, on the CPU, float32), the source of every variant's weights."""
    expect_int(seed, "seed", minimum=0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        reference = MultiHeadAttention(d_model, d_model, context_length, 0.0, num_heads, qkv_bias=qkv_bias)
    return reference.eval()


def _set(param: nn.Parameter | None, value: torch.Tensor | None) -> None:
    if param is None:
        return
    with torch.no_grad():
        param.copy_(value)


def _linear(weight: torch.Tensor, bias: torch.Tensor | None, *, with_bias: bool | None = None) -> nn.Linear:
    has_bias = bias is not None if with_bias is None else with_bias
    layer = nn.Linear(weight.shape[1], weight.shape[0], bias=has_bias)
    _set(layer.weight, weight)
    if has_bias:
        _set(layer.bias, bias if bias is not None else torch.zeros(weight.shape[0]))
    return layer


def sdpa_keep_mask(n: int) -> torch.Tensor:
    """(n, n) bool mask in the ``scaled_dot_product_attention`` convention: True = MAY attend.

    For causal attention that is the lower triangle, diagonal included.
    """
    return ~causal_mask(n)


def mha_block_mask(n: int) -> torch.Tensor:
    """(n, n) bool mask in the ``nn.MultiheadAttention`` convention: True = may NOT attend.

    For causal attention that is the strict upper triangle (the future), the same matrix
    as :func:`course_utils.models.causal_mask` and the opposite of :func:`sdpa_keep_mask`.
    """
    return causal_mask(n)


# ============================================================================ the variants
class _FusedProjection(nn.Module):
    """Shared by the variants that compute Q, K and V with one matmul."""

    def __init__(self, w: AttentionWeights) -> None:
        super().__init__()
        self.num_heads, self.head_dim, self.d_out = w.num_heads, w.head_dim, w.d_out
        self.qkv = _linear(w.fused_qkv_weight(), w.fused_qkv_bias() if w.qkv_bias else None)
        self.out_proj = _linear(w.w_out, w.b_out)

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, n, _ = x.shape
        qkv = self.qkv(x)                                            # (b, n, 3 * d_out)
        qkv = qkv.view(b, n, 3, self.num_heads, self.head_dim)       # (b, n, 3, h, hd)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)               # 3 x (b, h, n, hd)
        return q, k, v

    def merge(self, context: torch.Tensor) -> torch.Tensor:
        b, _, n, _ = context.shape                                   # (b, h, n, hd)
        context = context.transpose(1, 2).reshape(b, n, self.d_out)  # (b, n, d_out)
        return self.out_proj(context)


class WrapperAttention(nn.Module):
    """(1) Chapter 05's wrapper: one :class:`CausalAttention` per head, concatenated,
    then the output projection that :class:`MultiHeadAttention` adds."""

    def __init__(self, w: AttentionWeights, context_length: int) -> None:
        super().__init__()
        self.heads = MultiHeadAttentionWrapper(w.d_in, w.head_dim, context_length, 0.0, w.num_heads,
                                               qkv_bias=w.qkv_bias)
        for i, head in enumerate(self.heads.heads):
            assert isinstance(head, CausalAttention)
            (wq, wk, wv), (bq, bk, bv) = w.head(i), w.head_biases(i)
            _set(head.W_query.weight, wq)
            _set(head.W_key.weight, wk)
            _set(head.W_value.weight, wv)
            _set(head.W_query.bias, bq)
            _set(head.W_key.bias, bk)
            _set(head.W_value.bias, bv)
        self.out_proj = _linear(w.w_out, w.b_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out_proj(self.heads(x))                          # (b, n, d_out)


def _split_attention(w: AttentionWeights, context_length: int) -> MultiHeadAttention:
    """(2) The reference class itself: three projections, heads split by ``view``."""
    layer = MultiHeadAttention(w.d_in, w.d_out, context_length, 0.0, w.num_heads, qkv_bias=w.qkv_bias)
    for linear, weight, bias in ((layer.W_query, w.w_query, w.b_query), (layer.W_key, w.w_key, w.b_key),
                                 (layer.W_value, w.w_value, w.b_value), (layer.out_proj, w.w_out, w.b_out)):
        _set(linear.weight, weight)
        _set(linear.bias, bias)
    return layer


class FusedQKVAttention(_FusedProjection):
    """(3) One projection for Q, K and V; the score matrix is still built explicitly."""

    def __init__(self, w: AttentionWeights, context_length: int) -> None:
        super().__init__(w)
        self.register_buffer("mask", causal_mask(context_length), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[1]
        q, k, v = self.heads(x)                                      # (b, h, n, hd)
        scores = q @ k.transpose(-2, -1)                             # (b, h, n, n)
        scores = scores.masked_fill(self.mask[:n, :n], float("-inf"))
        weights = torch.softmax(scores / self.head_dim ** 0.5, dim=-1)
        return self.merge(weights @ v)                               # (b, n, d_out)


class EinsumAttention(nn.Module):
    """(4) Every product written as an Einstein sum over named axes."""

    def __init__(self, w: AttentionWeights, context_length: int) -> None:
        super().__init__()
        h, hd = w.num_heads, w.head_dim
        self.head_dim = hd
        # Projection weights reshaped to (heads, head_dim, d_in): head i's rows, as in AttentionWeights.head.
        self.w_q = nn.Parameter(w.w_query.reshape(h, hd, w.d_in).clone())
        self.w_k = nn.Parameter(w.w_key.reshape(h, hd, w.d_in).clone())
        self.w_v = nn.Parameter(w.w_value.reshape(h, hd, w.d_in).clone())
        if w.qkv_bias:
            self.b_q = nn.Parameter(w.b_query.reshape(h, 1, hd).clone())
            self.b_k = nn.Parameter(w.b_key.reshape(h, 1, hd).clone())
            self.b_v = nn.Parameter(w.b_value.reshape(h, 1, hd).clone())
        else:
            self.b_q = self.b_k = self.b_v = None
        self.w_o = nn.Parameter(w.w_out.reshape(w.d_out, h, hd).clone())  # (d_out, h, hd)
        self.b_o = nn.Parameter(w.b_out.clone())
        self.register_buffer("mask", causal_mask(context_length), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[1]
        q = torch.einsum("bni,hdi->bhnd", x, self.w_q)               # (b, h, n, hd)
        k = torch.einsum("bni,hdi->bhnd", x, self.w_k)               # (b, h, n, hd)
        v = torch.einsum("bni,hdi->bhnd", x, self.w_v)               # (b, h, n, hd)
        if self.b_q is not None:
            q, k, v = q + self.b_q, k + self.b_k, v + self.b_v
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k)               # (b, h, n, n)
        scores = scores.masked_fill(self.mask[:n, :n], float("-inf"))
        weights = torch.softmax(scores / self.head_dim ** 0.5, dim=-1)
        context = torch.einsum("bhqk,bhkd->bhqd", weights, v)        # (b, h, n, hd)
        return torch.einsum("bhnd,ohd->bno", context, self.w_o) + self.b_o  # (b, n, d_out)


class SDPACausalAttention(_FusedProjection):
    """(5) Fused projection + ``scaled_dot_product_attention(is_causal=True)``: the kernel
    knows the mask's shape, so it never needs an (n, n) tensor at all."""

    def __init__(self, w: AttentionWeights, context_length: int) -> None:
        super().__init__(w)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.heads(x)                                      # (b, h, n, hd)
        return self.merge(F.scaled_dot_product_attention(q, k, v, is_causal=True))


class SDPAMaskAttention(_FusedProjection):
    """(6) SDPA with an explicit (n, n) boolean mask, SDPA's convention: True = may attend."""

    def __init__(self, w: AttentionWeights, context_length: int) -> None:
        super().__init__(w)
        self.register_buffer("keep", sdpa_keep_mask(context_length), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[1]
        q, k, v = self.heads(x)                                      # (b, h, n, hd)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=self.keep[:n, :n])
        return self.merge(out)


class SDPAInvertedMaskAttention(SDPAMaskAttention):
    """A deliberately WRONG variant: it hands SDPA the nn.MultiheadAttention convention
    (True = blocked), so every token attends only to the future. The equality check must
    catch it; it is never timed."""

    def __init__(self, w: AttentionWeights, context_length: int) -> None:
        super().__init__(w, context_length)
        self.keep = mha_block_mask(context_length)  # the bug: the opposite convention


class TorchMHAAttention(nn.Module):
    """(7) ``nn.MultiheadAttention``; its bool ``attn_mask`` means True = may NOT attend."""

    def __init__(self, w: AttentionWeights, context_length: int) -> None:
        super().__init__()
        if w.d_in != w.d_out:
            raise CourseInputError(
                f"nn.MultiheadAttention needs d_in == d_out (its embed_dim), but d_in={w.d_in} "
                f"and d_out={w.d_out}."
            )
        self.mha = nn.MultiheadAttention(w.d_out, w.num_heads, dropout=0.0, bias=True, batch_first=True)
        _set(self.mha.in_proj_weight, w.fused_qkv_weight())
        _set(self.mha.in_proj_bias, w.fused_qkv_bias())  # zeros when the reference has no qkv bias
        _set(self.mha.out_proj.weight, w.w_out)
        _set(self.mha.out_proj.bias, w.b_out)
        self.register_buffer("block", mha_block_mask(context_length), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[1]
        out, _ = self.mha(x, x, x, attn_mask=self.block[:n, :n], need_weights=False)
        return out                                                   # (b, n, d_out)


def _causal_mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


_COMPILED_FLEX: Callable | None = None


def _compiled_flex() -> Callable:
    global _COMPILED_FLEX
    if _COMPILED_FLEX is None:
        import torch._dynamo.config as dynamo_config
        from torch.nn.attention.flex_attention import flex_attention

        # One compiled graph per (length, grad mode): raise the default limit of 8 so that
        # a long sweep never falls back silently to the unfused eager version.
        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(dynamo_config, name):
                setattr(dynamo_config, name, max(64, getattr(dynamo_config, name)))
        _COMPILED_FLEX = torch.compile(flex_attention, dynamic=False)
    return _COMPILED_FLEX


class FlexCausalAttention(_FusedProjection):
    """(8) FlexAttention with a causal block mask: whole blocks above the diagonal are
    skipped. ``compile=False`` runs the unfused eager version (for tests on the CPU)."""

    def __init__(self, w: AttentionWeights, context_length: int, compile: bool = True) -> None:
        super().__init__(w)
        self.compile = compile
        self._block_masks: dict[tuple[int, str], object] = {}

    def _block_mask(self, n: int, device: torch.device):
        from torch.nn.attention.flex_attention import create_block_mask

        key = (n, str(device))
        if key not in self._block_masks:
            self._block_masks[key] = create_block_mask(_causal_mask_mod, None, None, n, n, device=device)
        return self._block_masks[key]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.nn.attention.flex_attention import flex_attention

        q, k, v = self.heads(x)                                      # (b, h, n, hd)
        attend = _compiled_flex() if self.compile else flex_attention
        out = attend(q, k, v, block_mask=self._block_mask(x.shape[1], x.device))
        return self.merge(out)


def _torch_version() -> tuple[int, int]:
    major, minor = torch.__version__.split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


def flex_unavailable_reason(device: torch.device | str) -> str | None:
    """Why FlexAttention is not timed on ``device`` (None when it is)."""
    device = torch.device(device)
    if _torch_version() < (2, 5):
        return f"FlexAttention needs torch 2.5 or newer (found {torch.__version__})"
    try:
        importlib.import_module("torch.nn.attention.flex_attention")
    except ImportError as exc:  # pragma: no cover - present from 2.5 on
        return f"FlexAttention cannot be imported: {exc}"
    if device.type != "cuda":
        return "FlexAttention is timed on CUDA only (elsewhere it would not be compiled into a fused kernel)"
    return None


def _needs_square(w: AttentionWeights) -> str | None:
    if w.d_in != w.d_out:
        return f"nn.MultiheadAttention needs d_in == d_out, got {w.d_in} and {w.d_out}"
    return None


@dataclass(frozen=True)
class Variant:
    """One way to compute the attention layer.

    Attributes:
        name: short identifier used on the command line and in the CSV.
        label: the legend text.
        build: ``build(weights, context_length)`` returns the module.
        unavailable: ``unavailable(weights, device)`` returns a reason to skip, or None.
    """

    name: str
    label: str
    build: Callable[[AttentionWeights, int], nn.Module]
    unavailable: Callable[[AttentionWeights, torch.device], str | None] = lambda w, d: None


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("wrapper", "(1) wrapper of causal heads", WrapperAttention),
        Variant("split", "(2) split Q/K/V weights", _split_attention),
        Variant("fused_qkv", "(3) one fused QKV projection", FusedQKVAttention),
        Variant("einsum", "(4) einsum", EinsumAttention),
        Variant("sdpa_causal", "(5) SDPA is_causal=True", SDPACausalAttention),
        Variant("sdpa_mask", "(6) SDPA + bool mask", SDPAMaskAttention),
        Variant("torch_mha", "(7) nn.MultiheadAttention", TorchMHAAttention,
                lambda w, d: _needs_square(w)),
        Variant("flex", "(8) FlexAttention", FlexCausalAttention,
                lambda w, d: flex_unavailable_reason(d)),
        Variant("sdpa_inverted_mask", "SDPA, inverted mask (bug on purpose)", SDPAInvertedMaskAttention),
    )
}
"""Every known variant by name, including the deliberately broken ``sdpa_inverted_mask``."""

DEFAULT_VARIANTS = ("wrapper", "split", "fused_qkv", "einsum", "sdpa_causal", "sdpa_mask", "torch_mha", "flex")


def _resolve_variant(v: str | Variant) -> Variant:
    if isinstance(v, Variant):
        return v
    if isinstance(v, str) and v in VARIANTS:
        return VARIANTS[v]
    raise CourseInputError(f"unknown variant {v!r}; the known variants are: {', '.join(VARIANTS)}.")


def build_variant(variant: str | Variant, weights: AttentionWeights, context_length: int) -> nn.Module:
    """Build one variant (by name or :class:`Variant`) from ``weights``, in eval mode, on the CPU."""
    variant = _resolve_variant(variant)
    if not isinstance(weights, AttentionWeights):
        raise CourseInputError(
            f"weights must be an AttentionWeights (from cu.bench.weights_from_reference), "
            f"but got {type(weights).__name__}."
        )
    expect_int(context_length, "context_length", minimum=1)
    return variant.build(weights, context_length).eval()


# ============================================================================ checking
@dataclass(frozen=True)
class CheckResult:
    """The outcome of comparing a variant with the reference.

    ``error`` is the largest difference (output, output under no_grad, input gradient)
    relative to the reference's largest magnitude; ``detail`` says what disagreed.
    """

    ok: bool
    error: float
    detail: str


def _relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    if got.shape != expected.shape:
        return math.inf
    got, expected = got.detach().double().cpu(), expected.detach().double().cpu()
    if not torch.isfinite(got).all():
        return math.nan
    scale = float(expected.abs().max()) or 1.0
    return float((got - expected).abs().max()) / scale


def _forward_backward(module: nn.Module, x: torch.Tensor, grad_output: torch.Tensor):
    x = x.detach().requires_grad_(True)
    out = module(x)
    (grad,) = torch.autograd.grad(out, x, grad_output)
    return out.detach(), grad


def reference_outputs(reference: nn.Module, x: torch.Tensor, grad_output: torch.Tensor):
    """The reference's output and input gradient, computed in float32."""
    ref32 = reference.float()
    return _forward_backward(ref32, x.float(), grad_output.float())


def compare_to_expected(module: nn.Module, x: torch.Tensor, grad_output: torch.Tensor,
                        expected_out: torch.Tensor, expected_grad: torch.Tensor,
                        tolerance: float | None = None) -> CheckResult:
    """Check ``module`` against precomputed reference outputs (see :func:`check_variant`)."""
    tol = TOLERANCE.get(x.dtype, 1e-4) if tolerance is None else tolerance
    with torch.no_grad():
        inference = module(x)
    out, grad = _forward_backward(module, x, grad_output)
    errors = {
        "output": _relative_error(out, expected_out),
        "output under no_grad": _relative_error(inference, expected_out),
        "input gradient": _relative_error(grad, expected_grad),
    }
    for what, err in errors.items():
        if math.isnan(err):
            return CheckResult(False, math.nan, f"the {what} contains NaN or inf")
        if math.isinf(err):
            return CheckResult(False, math.inf, f"the {what} has the wrong shape")
    for what, err in errors.items():  # report the first disagreement, the output before the gradient
        if err > tol:
            return CheckResult(False, err, f"the {what} differs from the reference by {err:.2e} "
                                           f"of its largest value (tolerance {tol:.0e})")
    return CheckResult(True, max(errors.values()), "matches the reference")


def check_variant(module: nn.Module, reference: nn.Module, x: torch.Tensor,
                  *, seed: int = 0, tolerance: float | None = None) -> CheckResult:
    """Compare ``module`` with ``reference`` on input ``x`` (b, n, d_in).

    Checks the output (with and without autograd) and the gradient with respect to ``x``
    for a fixed random upstream gradient. Both modules must hold the same weights and
    have dropout off. Returns a :class:`CheckResult`; it never raises on a mismatch.
    """
    expect_tensor(x, "x", ndim=3, floating=True)
    for name, m in (("module", module), ("reference", reference)):
        if not isinstance(m, nn.Module):
            raise CourseInputError(f"{name} must be an nn.Module, but got {type(m).__name__}.")
    gen = torch.Generator().manual_seed(seed)
    d_out = getattr(reference, "d_out", None)
    if not isinstance(d_out, int):  # any other module: run it once to learn its output width
        with torch.no_grad():
            d_out = reference.float()(x.float()).shape[-1]
    grad_output = torch.randn(*x.shape[:-1], d_out, generator=gen).to(x.device)
    expected_out, expected_grad = reference_outputs(reference, x, grad_output)
    return compare_to_expected(module, x, grad_output.to(x.dtype), expected_out, expected_grad, tolerance)


# ============================================================================ measuring
def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


@dataclass(frozen=True)
class Timing:
    """Times of ``repeats`` calls, in milliseconds.

    ``median_ms`` and its quartiles and range are wall-clock time (what you wait).
    ``cpu_ms`` is the median CPU time the process used per call, summed over its threads:
    on a busy shared machine wall time grows while waiting for a core, CPU time much less.
    """

    median_ms: float
    p25_ms: float
    p75_ms: float
    min_ms: float
    max_ms: float
    repeats: int
    cpu_ms: float


def measure_time(fn: Callable[[], object], device: torch.device | str = "cpu", *,
                 warmup: int = 2, repeats: int = 5) -> Timing:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeats`` timed ones.

    On CUDA (and MPS) the device is synchronised before the clock starts and before it
    stops, so queued kernels are counted. Returns the median, quartiles and range.
    """
    if not callable(fn):
        raise CourseInputError(f"fn must be callable, but got {type(fn).__name__}.")
    expect_int(warmup, "warmup", minimum=0)
    expect_int(repeats, "repeats", minimum=1)
    device = torch.device(device)
    for _ in range(warmup):
        fn()
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = _timed_call(fn, device)
        walls.append(wall)
        cpus.append(cpu)
    return _summarise(walls, cpus)


def _timed_call(fn: Callable[[], object], device: torch.device) -> tuple[float, float]:
    """One call of ``fn``: (wall ms, process CPU ms), the device synchronised on both ends."""
    _synchronize(device)
    cpu_start, start = time.process_time(), time.perf_counter()
    result = fn()
    _synchronize(device)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    del result
    return wall * 1e3, cpu * 1e3


def measure_interleaved(fns: Mapping[str, Callable[[], object]], device: torch.device | str = "cpu", *,
                        warmup: int = 2, repeats: int = 5,
                        on_call: Callable[[str], object] | None = None) -> dict[str, Timing | BaseException]:
    """Time several functions round-robin: ``warmup`` untimed calls of each, then ``repeats``
    rounds in which every function runs once (in a rotating order).

    On a shared machine, a slow spell then hits every contender alike instead of whichever
    happened to be running, so the comparison stays fair. A function that raises is dropped
    and its exception returned in its place (e.g. out of memory at a long sequence).
    ``on_call(name)`` is called after every call (a progress bar's hook).
    """
    if not isinstance(fns, Mapping):
        raise CourseInputError(f"fns must map names to functions, but got {type(fns).__name__}.")
    for name, fn in fns.items():
        if not callable(fn):
            raise CourseInputError(f"fns[{name!r}] must be callable, but got {type(fn).__name__}.")
    expect_int(warmup, "warmup", minimum=0)
    expect_int(repeats, "repeats", minimum=1)
    device = torch.device(device)
    results: dict[str, Timing | BaseException] = {}
    walls: dict[str, list[float]] = {name: [] for name in fns}
    cpus: dict[str, list[float]] = {name: [] for name in fns}

    def call(name: str, timed: bool) -> None:
        try:
            wall, cpu = _timed_call(fns[name], device)
            if timed:
                walls[name].append(wall)
                cpus[name].append(cpu)
        except Exception as exc:  # noqa: BLE001 - reported to the caller
            results[name] = exc.with_traceback(None)  # the traceback would keep the run's tensors alive
            if _is_oom(exc):
                _empty_cache(device)
        if on_call is not None:
            on_call(name)

    names = list(fns)
    for name in names:
        for _ in range(warmup):
            if name not in results:
                call(name, timed=False)
    for r in range(repeats):
        shift = r % len(names) if names else 0
        for name in names[shift:] + names[:shift]:
            if name not in results:
                call(name, timed=True)
    for name in names:
        if name not in results:
            results[name] = _summarise(walls[name], cpus[name])
    return results


def _summarise(walls: Sequence[float], cpus: Sequence[float]) -> Timing:
    if len(walls) >= 2:
        p25, _, p75 = statistics.quantiles(walls, n=4, method="inclusive")
    else:
        p25 = p75 = walls[0]
    return Timing(statistics.median(walls), p25, p75, min(walls), max(walls), len(walls),
                  statistics.median(cpus))


_LIBC = None


def _malloc_trim() -> None:
    global _LIBC
    if _LIBC is None:
        name = ctypes.util.find_library("c")
        try:
            _LIBC = ctypes.CDLL(name) if name else False
        except OSError:  # pragma: no cover
            _LIBC = False
    if _LIBC and hasattr(_LIBC, "malloc_trim"):
        _LIBC.malloc_trim(0)


def _proc_status_kib(key: str) -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise OSError(f"{key} missing from /proc/self/status")


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")  # Linux: reset VmHWM (the peak RSS) to the current RSS
        return True
    except OSError:
        return False


def cpu_peak_memory_supported() -> bool:
    """True on Linux, where the peak resident set size can be reset before a run."""
    return sys.platform.startswith("linux") and os.path.exists("/proc/self/clear_refs") and _reset_peak_rss()


class _LiveTensorBytes(TorchDispatchMode):
    """Counts the bytes of tensor storages that operations create while the mode is on,
    subtracts them when they are freed, and keeps the peak (checked after every operation)."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._sizes: dict[int, int] = {}

    def _freed(self, key: int) -> None:
        self.live -= self._sizes.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = {_storage_key(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            key = _storage_key(t)
            if key in (0, None) or key in inputs or key in self._sizes:
                continue  # a view, an in-place result, or a tensor without storage
            storage = t.untyped_storage()
            self._sizes[key] = storage.nbytes()
            self.live += storage.nbytes()
            weakref.finalize(storage, self._freed, key)  # runs when the memory is released
        self.peak = max(self.peak, self.live)
        return out


def _storage_key(t: torch.Tensor) -> int | None:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # sparse and other storage-less tensors
        return None


def measure_peak_memory(fn: Callable[[], object], device: torch.device | str = "cpu") -> int:
    """Extra tensor memory (bytes) that one call of ``fn()`` holds at its peak.

    CUDA: ``torch.cuda.max_memory_allocated`` after a reset, minus what was allocated before.
    Elsewhere (CPU, MPS): every tensor that an operation creates during the call is counted
    from its creation until it is freed, and the largest total is returned. Both count
    tensors (the score matrices, the tensors autograd saves) and are the same on every run;
    scratch space inside a CPU kernel is not seen (see :func:`measure_peak_rss` for that).
    """
    if not callable(fn):
        raise CourseInputError(f"fn must be callable, but got {type(fn).__name__}.")
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        result = fn()
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device)
        del result
        return max(0, peak - before)
    tracker = _LiveTensorBytes()
    with tracker:
        result = fn()
    del result
    return tracker.peak


def measure_peak_rss(fn: Callable[[], object]) -> int | None:
    """How far one call of ``fn()`` raises the process's resident memory (bytes), Linux only.

    The C allocator's free memory is handed back first, then the kernel's peak counter is
    reset (``/proc/self/clear_refs``) and read after the call. Unlike
    :func:`measure_peak_memory` this sees everything, kernels' scratch space included, but
    also the allocator's habits (glibc keeps some freed blocks), so it varies a little from
    run to run. None where it cannot be measured.
    """
    if not callable(fn):
        raise CourseInputError(f"fn must be callable, but got {type(fn).__name__}.")
    if not cpu_peak_memory_supported():
        return None
    _malloc_trim()
    before = _proc_status_kib("VmRSS")
    _reset_peak_rss()
    result = fn()
    peak = _proc_status_kib("VmHWM")
    del result
    return max(0, peak - before) * 1024


# ============================================================================ the benchmark
@dataclass(frozen=True)
class BenchConfig:
    """What to measure. :func:`quick_config` and :func:`full_config` give the defaults."""

    seq_lens: tuple[int, ...] = (128, 256, 512, 1024)
    batch: int = 1
    d_model: int = GPT2_WIDTH
    num_heads: int = GPT2_HEADS
    qkv_bias: bool = False
    dtype: str = "float32"
    modes: tuple[str, ...] = MODES
    variants: tuple[str | Variant, ...] = DEFAULT_VARIANTS
    warmup: int = 2
    repeats: int = 5
    device: str = "cpu"
    memory: bool = True
    seed: int = 123
    memory_fraction: float = 0.5
    """Skip a length whose estimated peak exceeds this fraction of the free memory (CPU)."""
    threads: int | None = None
    """CPU threads for the run (``torch.set_num_threads``); None keeps torch's default."""

    def validate(self) -> BenchConfig:
        """Return the config with normalised fields, or raise :class:`CourseInputError`."""
        lens = self.seq_lens
        if isinstance(lens, int) or not isinstance(lens, Sequence) or not lens:
            raise CourseInputError(f"seq_lens must be a non-empty list of ints, but got {lens!r}.")
        for n in lens:
            expect_int(n, "each sequence length", minimum=1)
        expect_int(self.batch, "batch", minimum=1)
        expect_int(self.d_model, "d_model", minimum=1)
        expect_int(self.num_heads, "num_heads", minimum=1)
        if self.d_model % self.num_heads:
            raise CourseInputError(
                f"d_model must be divisible by num_heads, but d_model={self.d_model} and "
                f"num_heads={self.num_heads}."
            )
        if self.dtype not in DTYPES:
            raise CourseInputError(f"dtype must be one of {', '.join(DTYPES)}, but got {self.dtype!r}.")
        modes = (self.modes,) if isinstance(self.modes, str) else tuple(self.modes)
        bad = [m for m in modes if m not in MODES]
        if bad or not modes:
            raise CourseInputError(f"modes must be taken from {MODES}, but got {self.modes!r}.")
        variants = (self.variants,) if isinstance(self.variants, (str, Variant)) else tuple(self.variants)
        if not variants:
            raise CourseInputError("variants must name at least one variant.")
        for v in variants:
            _resolve_variant(v)
        expect_int(self.warmup, "warmup", minimum=0)
        expect_int(self.repeats, "repeats", minimum=1)
        if self.device not in ("cpu", "cuda", "mps"):
            raise CourseInputError(f"device must be 'cpu', 'cuda' or 'mps', but got {self.device!r}.")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise CourseInputError("device 'cuda' was requested, but CUDA is not available here.")
        if self.threads is not None:
            expect_int(self.threads, "threads", minimum=1)
        if not 0 < self.memory_fraction <= 1:
            raise CourseInputError(f"memory_fraction must be in (0, 1], but got {self.memory_fraction}.")
        return replace(self, seq_lens=tuple(sorted(set(lens))), modes=modes, variants=variants)


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def quick_config(device: str | None = None) -> BenchConfig:
    """The default of ``make bench``: a few minutes on a laptop CPU, seconds on a GPU."""
    device = device or default_device()
    if device == "cuda":
        return BenchConfig(seq_lens=(128, 256, 512, 1024, 2048, 4096), batch=8, device=device,
                           warmup=3, repeats=10)
    return BenchConfig(device=device, warmup=1, repeats=5)


def full_config(device: str | None = None) -> BenchConfig:
    """``make bench FULL=1``: longer sequences (as far as memory allows) and more repeats."""
    device = device or default_device()
    if device == "cuda":
        return BenchConfig(seq_lens=tuple(2 ** k for k in range(7, 14)), batch=8, device=device,
                           warmup=5, repeats=20)
    return BenchConfig(seq_lens=tuple(2 ** k for k in range(7, 13)), device=device, warmup=2, repeats=10)


@dataclass
class BenchRow:
    """One line of ``bench.csv``: a variant at one length and mode.

    ``status`` is ``ok`` (checked and timed), ``wrong`` (disagrees with the reference: not
    timed), ``unavailable``, ``skipped`` (not enough memory expected), ``oom`` or ``error``.
    Times are NaN unless the status is ``ok``. ``peak_mib`` is the extra tensor memory at
    the peak (:func:`measure_peak_memory`); ``rss_mib`` the rise of the process's resident
    memory (:func:`measure_peak_rss`, CPU on Linux only, NaN elsewhere).
    """

    variant: str
    label: str
    mode: str
    seq_len: int
    status: str
    median_ms: float = math.nan
    p25_ms: float = math.nan
    p75_ms: float = math.nan
    min_ms: float = math.nan
    max_ms: float = math.nan
    repeats: int = 0
    cpu_ms: float = math.nan
    peak_mib: float = math.nan
    rss_mib: float = math.nan
    check_error: float = math.nan
    batch: int = 1
    d_model: int = GPT2_WIDTH
    num_heads: int = GPT2_HEADS
    dtype: str = "float32"
    device: str = "cpu"
    device_name: str = ""
    torch_version: str = field(default_factory=lambda: torch.__version__)
    note: str = ""


CSV_COLUMNS = tuple(f.name for f in fields(BenchRow))


def device_name(device: str) -> str:
    """A readable name for the machine: the GPU's name, or the CPU's model."""
    if device == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    model = model or platform.processor() or platform.machine()
    return f"{model}, {torch.get_num_threads()} threads"


def _free_bytes(device: torch.device) -> int | None:
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free
    try:
        return _proc_meminfo_kib("MemAvailable") * 1024
    except OSError:
        return None


def _proc_meminfo_kib(key: str) -> int:
    with open("/proc/meminfo", encoding="ascii") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise OSError(f"{key} missing from /proc/meminfo")


def estimated_peak_bytes(cfg: BenchConfig, n: int, mode: str) -> int:
    """A generous estimate of the naive variants' peak: copies of the (b, h, n, n) scores."""
    element = torch.finfo(DTYPES[cfg.dtype]).bits // 8
    scores = cfg.batch * cfg.num_heads * n * n * element
    return scores * (3 if mode == "forward" else 5)


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, torch.cuda.OutOfMemoryError | MemoryError):
        return True
    text = str(exc).lower()
    return "out of memory" in text or "can't allocate memory" in text


def _runner(module: nn.Module, x: torch.Tensor, g: torch.Tensor, mode: str) -> Callable[[], object]:
    """The call that is timed: a forward pass under no_grad, or a forward pass plus the
    gradients of the input and of every parameter (no accumulation into ``.grad``)."""
    if mode == "forward":
        def run():
            with torch.no_grad():
                return module(x)
        return run
    params = [p for p in module.parameters() if p.requires_grad]
    xg = x.detach().requires_grad_(True)

    def run_backward():
        return torch.autograd.grad(module(xg), [xg, *params], g)
    return run_backward


def run_benchmark(config: BenchConfig | None = None, *, progress: bool = True) -> list[BenchRow]:
    """Check, then time, every variant at every length and mode; return one row each.

    For each sequence length the reference's output and input gradient are computed once
    (for the batch's first sequence) and every variant is checked against them: a ``wrong``
    variant is never timed. The correct ones are timed together, round-robin
    (:func:`measure_interleaved`), then each one's peak memory is measured in one more call.
    A variant that runs out of memory is reported as ``oom`` and the sweep goes on.
    float32 runs use full IEEE precision (no TF32). Progress is shown with tqdm unless
    ``progress=False``.
    """
    from tqdm.auto import tqdm

    cfg = (config or quick_config()).validate()
    device = torch.device(cfg.device)
    dtype = DTYPES[cfg.dtype]
    context = max(cfg.seq_lens)
    threads, precision = torch.get_num_threads(), torch.get_float32_matmul_precision()
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    # float32 means IEEE float32 here: no TF32 in cuBLAS or in FlexAttention's kernels, so
    # the check's tolerance holds and every variant does the same arithmetic.
    torch.set_float32_matmul_precision("highest")
    reference = make_reference(cfg.d_model, cfg.num_heads, context, qkv_bias=cfg.qkv_bias, seed=cfg.seed)
    weights = weights_from_reference(reference)
    reference = reference.to(device)
    variants = [_resolve_variant(v) for v in cfg.variants]
    common = dict(batch=cfg.batch, d_model=cfg.d_model, num_heads=cfg.num_heads, dtype=cfg.dtype,
                  device=cfg.device, device_name=device_name(cfg.device))
    modules: dict[str, nn.Module] = {}
    unavailable: dict[str, str] = {}
    for v in variants:
        reason = v.unavailable(weights, device)
        if reason:
            unavailable[v.name] = reason
        else:
            modules[v.name] = build_variant(v, weights, context).to(device=device, dtype=dtype)

    calls_per_run = cfg.warmup + cfg.repeats + (1 if cfg.memory else 0)
    bar = tqdm(total=len(cfg.seq_lens) * len(cfg.modes) * len(variants) * calls_per_run,
               disable=not progress, unit="call", dynamic_ncols=True)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    rows: list[BenchRow] = []
    try:
        for n in cfg.seq_lens:
            bar.set_description(f"n={n}: checking")
            x32 = torch.randn(cfg.batch, n, cfg.d_model, generator=gen)  # (b, n, d)
            g32 = torch.randn(cfg.batch, n, cfg.d_model, generator=gen)  # (b, n, d)
            x, g = x32.to(device, dtype), g32.to(device, dtype)
            # verdicts: variant -> (status, note, check error); "ok" ones are timed.
            verdicts = _check_all(variants, modules, unavailable, reference, x32, g32, x, g, cfg, device)
            for mode in cfg.modes:
                bar.set_description(f"n={n} {mode}")
                to_time = {name: _runner(modules[name], x, g, mode)
                           for name, (status, _, _) in verdicts.items() if status == "ok"}
                made = dict.fromkeys(to_time, 0)

                def tick(name: str) -> None:
                    made[name] += 1
                    bar.update(1)

                timings = measure_interleaved(to_time, device, warmup=cfg.warmup, repeats=cfg.repeats,
                                              on_call=tick)
                for v in variants:
                    status, note, err = verdicts[v.name]
                    row = BenchRow(variant=v.name, label=v.label, mode=mode, seq_len=n, status=status,
                                   note=note, check_error=err, **common)
                    if status == "ok":
                        _fill_measurements(row, timings[v.name], to_time[v.name], device, cfg.memory)
                    bar.update(calls_per_run - made.get(v.name, 0))  # untimed variants and the memory run
                    rows.append(row)
                del to_time, timings
    finally:
        bar.close()
        torch.set_num_threads(threads)
        torch.set_float32_matmul_precision(precision)
    return rows


def _check_all(variants, modules, unavailable, reference, x32, g32, x, g, cfg, device):
    """Check every available variant against the reference on the batch's first sequence
    (sequences are independent, and one keeps the reference's own (n, n) tensors small)."""
    n = x.shape[1]
    x32, g32, x, g = x32[:1], g32[:1], x[:1], g[:1]
    free = _free_bytes(device)
    if free is not None and device.type == "cpu" and \
            estimated_peak_bytes(cfg, n, "forward+backward") > cfg.memory_fraction * free:
        note = (f"expected to need about {estimated_peak_bytes(cfg, n, 'forward+backward') / 2**30:.1f} GiB, "
                f"{free / 2**30:.1f} GiB free")
        return {v.name: ("skipped", note, math.nan) if v.name not in unavailable
                else ("unavailable", unavailable[v.name], math.nan) for v in variants}
    try:
        expected = reference_outputs(reference, x32.to(device), g32.to(device))
    except Exception as exc:  # noqa: BLE001
        if not _is_oom(exc):
            raise
        _empty_cache(device)
        expected = None
    verdicts = {}
    for v in variants:
        if v.name in unavailable:
            verdicts[v.name] = ("unavailable", unavailable[v.name], math.nan)
            continue
        if expected is None:
            verdicts[v.name] = ("oom", "the reference itself did not fit in memory: not checked", math.nan)
            continue
        try:
            check = compare_to_expected(modules[v.name], x, g, *expected)
        except Exception as exc:  # noqa: BLE001 - reported in the CSV, never timed
            _empty_cache(device)
            status = "oom" if _is_oom(exc) else "error"
            verdicts[v.name] = (status, f"check failed to run: {type(exc).__name__}: {exc}"[:300], math.nan)
            continue
        if check.ok:
            verdicts[v.name] = ("ok", "", check.error)
        else:
            verdicts[v.name] = ("wrong", check.detail + "; not timed", check.error)
    return verdicts


def _fill_measurements(row: BenchRow, timing: Timing | BaseException, run: Callable[[], object],
                       device: torch.device, memory: bool) -> None:
    if isinstance(timing, BaseException):
        row.status = "oom" if _is_oom(timing) else "error"
        row.note = f"{type(timing).__name__}: {timing}"[:300]
        return
    row.median_ms, row.p25_ms, row.p75_ms = timing.median_ms, timing.p25_ms, timing.p75_ms
    row.min_ms, row.max_ms, row.repeats = timing.min_ms, timing.max_ms, timing.repeats
    row.cpu_ms = timing.cpu_ms
    if memory:
        try:
            row.peak_mib = measure_peak_memory(run, device) / 2**20
            if device.type == "cpu":
                rss = measure_peak_rss(run)
                row.rss_mib = math.nan if rss is None else rss / 2**20
        except Exception as exc:  # noqa: BLE001
            if not _is_oom(exc):
                raise
            _empty_cache(device)
            row.note = "the memory run ran out of memory"


def _empty_cache(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ============================================================================ results
def write_csv(rows: Sequence[BenchRow], path: str | os.PathLike) -> Path:
    """Write rows to ``path`` (parent folders are created). Returns the path."""
    for row in rows:
        if not isinstance(row, BenchRow):
            raise CourseInputError(f"rows must hold BenchRow objects, but got {type(row).__name__}.")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow(asdict(row))
    return path


def read_csv(path: str | os.PathLike) -> list[BenchRow]:
    """Read a ``bench.csv`` written by :func:`write_csv`."""
    path = Path(path)
    if not path.is_file():
        raise CourseInputError(f"no benchmark results at {path}: run `make bench` first.")
    types = {f.name: f.type for f in fields(BenchRow)}
    rows = []
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in ("variant", "mode", "seq_len", "status", "median_ms") if c not in (reader.fieldnames or [])]
        if missing:
            raise CourseInputError(f"{path} is not a benchmark CSV: columns {missing} are missing.")
        for line, record in enumerate(reader, start=2):
            values = {}
            for key, text in record.items():
                if key not in types:
                    continue
                kind = types[key]
                try:
                    if kind == "int":
                        values[key] = int(text)
                    elif kind == "float":
                        values[key] = float(text) if text not in ("", None) else math.nan
                    else:
                        values[key] = text or ""
                except ValueError:
                    raise CourseInputError(f"{path}, line {line}: {key}={text!r} is not a number.") from None
            values.setdefault("label", values.get("variant", ""))
            rows.append(BenchRow(**values))
    return rows


TABLE_METRICS = {
    "median_ms": "median wall-clock time (ms)",
    "cpu_ms": "median CPU time of the process (ms)",
    "peak_mib": "peak extra tensor memory (MiB)",
    "rss_mib": "peak rise of the process's resident memory (MiB)",
}


def _fmt(value: float, metric: str) -> str:
    if math.isnan(value):
        return "n/a"
    if metric in ("peak_mib", "rss_mib"):
        return f"{value:,.0f}" if value >= 10 else f"{value:.1f}"
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def markdown_table(rows: Sequence[BenchRow], mode: str = "forward+backward", metric: str = "median_ms") -> str:
    """One metric (see ``TABLE_METRICS``) per variant and length, as a Markdown table.

    A variant that was not timed shows its status (``wrong``, ``unavailable``, ``oom``, ...).
    """
    if metric not in TABLE_METRICS:
        raise CourseInputError(f"metric must be one of {', '.join(TABLE_METRICS)}, but got {metric!r}.")
    chosen = [r for r in rows if r.mode == mode]
    if not chosen:
        return f"(no {mode} results)"
    lens = sorted({r.seq_len for r in chosen})
    order = list(dict.fromkeys(r.variant for r in chosen))
    cells = {(r.variant, r.seq_len): r for r in chosen}
    labels = {r.variant: r.label for r in chosen}
    head = "| variant | " + " | ".join(f"n={n}" for n in lens) + " |"
    lines = [head, "|---|" + "---:|" * len(lens)]
    for name in order:
        entries = []
        for n in lens:
            r = cells.get((name, n))
            if r is None:
                entries.append("")
            elif r.status != "ok":
                entries.append(r.status)
            else:
                entries.append(_fmt(getattr(r, metric), metric))
        lines.append(f"| {labels[name]} | " + " | ".join(entries) + " |")
    return "\n".join(lines)


def markdown_report(rows: Sequence[BenchRow]) -> str:
    """Every table (time, CPU time, memory; per mode) with a header naming the machine."""
    rows = list(rows)
    if not rows:
        raise CourseInputError("rows is empty: there is nothing to report.")
    first = rows[0]
    parts = [f"Machine: {first.device_name} ({first.device}), torch {first.torch_version}, {first.dtype}, "
             f"batch {first.batch}, d={first.d_model}, {first.num_heads} heads, "
             f"{max(r.repeats for r in rows)} timed runs per cell."]
    for mode in MODES:
        if any(r.mode == mode for r in rows):
            for metric, title in TABLE_METRICS.items():
                if all(math.isnan(getattr(r, metric)) for r in rows if r.mode == mode):
                    continue  # e.g. no resident-memory figure on a GPU
                parts.append(f"### {mode}: {title}\n\n{markdown_table(rows, mode, metric)}")
    return "\n\n".join(parts) + "\n"


def plot_results(rows: Sequence[BenchRow], *, title: str | None = None):
    """Median time (with the interquartile range) and peak memory against sequence length.

    One column per mode; variants that were not timed are left out. Returns the figure.
    """
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    rows = list(rows)
    if not rows:
        raise CourseInputError("rows is empty: there is nothing to plot.")
    modes = [m for m in MODES if any(r.mode == m for r in rows)]
    fig, axes = plt.subplots(2, len(modes), figsize=(11 if len(modes) > 1 else 7, 8), squeeze=False,
                             sharex=True, layout="constrained")
    plt.close(fig)
    order = list(dict.fromkeys(r.variant for r in rows))
    lens = sorted({r.seq_len for r in rows})
    styles = ["o-", "s-", "^-", "v-", "D-", "P-", "X-", "*-", "h--"]
    handles = {}
    for col, mode in enumerate(modes):
        t_ax, m_ax = axes[0, col], axes[1, col]
        for i, name in enumerate(order):
            ok = sorted((r for r in rows if r.variant == name and r.mode == mode and r.status == "ok"),
                        key=lambda r: r.seq_len)
            if not ok:
                continue
            xs = [r.seq_len for r in ok]
            med = [r.median_ms for r in ok]
            lo = [r.median_ms - r.p25_ms for r in ok]
            hi = [r.p75_ms - r.median_ms for r in ok]
            style, colour = styles[i % len(styles)], f"C{i % 10}"
            handles[ok[0].label] = t_ax.errorbar(xs, med, yerr=[lo, hi], fmt=style, color=colour, ms=4,
                                                 capsize=2)
            mem = [(r.seq_len, r.peak_mib) for r in ok if not math.isnan(r.peak_mib)]
            if mem:
                m_ax.plot([m[0] for m in mem], [max(m[1], 1e-3) for m in mem], style, color=colour, ms=4)
        t_ax.set_title(mode)
        t_ax.set_ylabel("median time (ms), bars: quartiles")
        m_ax.set_ylabel("peak extra tensor memory (MiB)")
        m_ax.set_xlabel("sequence length n")
        for ax in (t_ax, m_ax):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xticks(lens, [str(n) for n in lens])
            ax.xaxis.set_minor_locator(NullLocator())
            ax.grid(True, which="both", alpha=0.3)
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="outside lower center",
                   ncols=min(4 if len(modes) > 1 else 2, len(handles)), fontsize=8, frameon=False)
    first = rows[0]
    fig.suptitle(title or f"{first.device_name}\ntorch {first.torch_version} · {first.dtype} · "
                          f"batch {first.batch}, d={first.d_model}, {first.num_heads} heads", fontsize=10)
    return fig


def default_csv_path() -> Path:
    """``results/bench.csv`` at the repository's root (it exists after ``make bench``)."""
    return RESULTS_DIR / "bench.csv"


# ============================================================================ command line
def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m course_utils.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="long sequences and more repeats")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="folder for bench.csv/png/md")
    parser.add_argument("--device", choices=("cpu", "cuda", "mps"), default=None)
    parser.add_argument("--seq-lens", type=int, nargs="+", default=None)
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--d-model", type=int, default=None)
    parser.add_argument("--heads", type=int, default=None)
    parser.add_argument("--dtype", choices=tuple(DTYPES), default=None)
    parser.add_argument("--modes", choices=MODES, nargs="+", default=None)
    parser.add_argument("--variants", nargs="+", default=None, help=f"any of: {', '.join(VARIANTS)}")
    parser.add_argument("--warmup", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's)")
    parser.add_argument("--qkv-bias", action="store_true")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory runs")
    parser.add_argument("--no-progress", action="store_true")
    return parser.parse_args(argv)


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    cfg = (full_config if args.full else quick_config)(args.device)
    overrides: Mapping[str, object] = {
        "seq_lens": tuple(args.seq_lens) if args.seq_lens else None, "batch": args.batch,
        "d_model": args.d_model, "num_heads": args.heads, "dtype": args.dtype,
        "modes": tuple(args.modes) if args.modes else None,
        "variants": tuple(args.variants) if args.variants else None,
        "warmup": args.warmup, "repeats": args.repeats, "threads": args.threads,
    }
    cfg = replace(cfg, **{k: v for k, v in overrides.items() if v is not None})
    if args.qkv_bias:
        cfg = replace(cfg, qkv_bias=True)
    if args.no_memory:
        cfg = replace(cfg, memory=False)
    return cfg.validate()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    try:
        cfg = config_from_args(args)
    except CourseInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from . import repro

    repro.seed_everything(cfg.seed)  # also: full fp32 matmuls on CUDA (no TF32)
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    print(f"Benchmarking {len(cfg.variants)} variants on {device_name(cfg.device)} "
          f"(torch {torch.__version__}, {cfg.dtype}, batch {cfg.batch}, d={cfg.d_model}, "
          f"{cfg.num_heads} heads, n={list(cfg.seq_lens)}, {cfg.warmup} warm-up + {cfg.repeats} runs)")
    start = time.perf_counter()
    rows = run_benchmark(cfg, progress=not args.no_progress)
    csv_path = write_csv(rows, args.out / "bench.csv")
    fig = plot_results(rows)
    png_path = args.out / "bench.png"
    fig.savefig(png_path, dpi=120)
    md = markdown_report(rows)
    md_path = args.out / "bench.md"
    md_path.write_text(md, encoding="utf-8")
    print(md)
    for r in rows:
        if r.status not in ("ok",) and r.mode == cfg.modes[0]:
            print(f"  n={r.seq_len} {r.variant}: {r.status} ({r.note})")
    print(f"Wrote {csv_path}, {png_path} and {md_path} in {time.perf_counter() - start:.0f} s.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
