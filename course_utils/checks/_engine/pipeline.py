"""The one functional attention pipeline: a :class:`Recipe` says how to compute attention, and
every recipe but :data:`RIGHT` is a known mistake (:func:`variants`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Recipe:
    """How to compute attention; the defaults are right, every other value is a known mistake."""

    softmax_dim: int = -1
    scale: str = "sqrt_d_k"  # none | d_k | half_d_k | double_d_k | sqrt_d_out | sqrt_d_in | after_softmax  # | times_sqrt_d_k
    mask: str = "future"  # none | diagonal | leak | past | keep | sdpa_inverted
    mask_fill: str = "-inf"  # zero
    mask_after: str | None = None  # zero | -inf: masked after the softmax
    renormalise: int | None = None  # dim the masked-after weights are renormalised over
    renormalise_keepdim: bool = True
    keys_from: str = "key"  # query | value
    values_from: str = "value"  # query | key | input
    scores_transposed: bool = False
    returns: str = "context"  # weights
    split: str = "transpose"  # view (multi-head)
    merge: str = "transpose"  # view | interleave (multi-head)
    out_proj: bool = True  # multi-head
    out_proj_on: str = "merged"  # values: applied to the values before the heads are split
    concat: str = "last"  # dim0 | dim1 | stack | reversed (chapter 05's wrapper)


RIGHT = Recipe()
NO_DROP = lambda weights, unit: weights  # noqa: E731


@dataclass
class Trace:
    """Intermediate tensors of a pipeline run, to locate the student's dropout."""

    weights: list = field(default_factory=list)
    scores: list = field(default_factory=list)
    context: list = field(default_factory=list)
    projections: list = field(default_factory=list)


def mask_of(kind: str, n: int, device: torch.device | str = "cpu") -> torch.Tensor | None:
    """The (n, n) bool fill mask (True = hidden) for a Recipe's ``mask``."""
    ones = torch.ones(n, n, dtype=torch.bool, device=device)
    return {
        "future": ones.triu(1),
        "diagonal": ones.triu(0),
        "leak": ones.triu(2),
        "past": ones.tril(-1),
        "keep": ones.tril(0),
        "sdpa_inverted": ones.tril(0),
        "none": None,
    }[kind]


def weights_from_scores(
    scores: torch.Tensor,
    r: Recipe = RIGHT,
    *,
    d_k: float,
    d_in: float = 0,
    d_out: float = 0,
    trace: Trace | None = None,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention weights (..., n, n) from raw scores: mask (``mask`` overrides the recipe's), scale, softmax."""
    if r.scores_transposed:
        scores = scores.transpose(-2, -1)
    raw, n = scores, scores.shape[-1]
    mask = mask_of(r.mask, n, scores.device) if mask is None else mask
    if mask is not None and r.mask_after is None:
        scores = scores.masked_fill(mask, 0.0 if r.mask_fill == "zero" else -math.inf)
    divisor = {
        "sqrt_d_k": math.sqrt(d_k),
        "none": 1.0,
        "d_k": d_k,
        "half_d_k": d_k / 2,
        "double_d_k": d_k * 2,
        "after_softmax": 1.0,
        "sqrt_d_out": math.sqrt(d_out),
        "sqrt_d_in": math.sqrt(d_in),
        "times_sqrt_d_k": 1 / math.sqrt(d_k),
    }[r.scale]
    scaled = scores / divisor
    weights = torch.softmax(scaled, dim=r.softmax_dim)
    if (
        r.mask == "sdpa_inverted"
    ):  # SDPA (torch >= 2.5) gives 0, not NaN, for a row with every key hidden
        weights = weights.nan_to_num(0.0)
    if r.scale == "after_softmax":
        weights = weights / math.sqrt(d_k)
    if mask is not None and r.mask_after is not None:
        weights = weights.masked_fill(mask, 0.0 if r.mask_after == "zero" else -math.inf)
        if r.renormalise is not None:
            weights = weights / weights.sum(dim=r.renormalise, keepdim=r.renormalise_keepdim)
    if trace is not None:
        trace.scores += [raw, scores, scaled]
        trace.weights.append(weights)
    return weights


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    r: Recipe = RIGHT,
    *,
    x: torch.Tensor | None = None,
    d_out: float = 0,
    drop=NO_DROP,
    unit: int = 0,
    trace: Trace | None = None,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Scaled dot-product attention over the last two axes, from queries, keys and values."""
    k, v = (
        {"query": q, "value": v}.get(r.keys_from, k),
        {"query": q, "key": k, "input": x}.get(r.values_from, v),
    )
    d_in = x.shape[-1] if x is not None else k.shape[-1]
    weights = weights_from_scores(
        q @ k.transpose(-2, -1),
        r,
        d_k=k.shape[-1],
        d_in=d_in,
        d_out=d_out or k.shape[-1],
        trace=trace,
        mask=mask,
    )  # (..., n, n)
    if r.returns == "weights":
        return weights
    context = drop(weights, unit) @ v  # (..., n, d_v)
    if trace is not None:
        trace.context.append(context)
    return context


def project(layers: dict[str, nn.Linear], x: torch.Tensor, trace: Trace | None = None):
    """Queries, keys and values from the student's own nn.Linear layers."""
    q, k, v = (
        F.linear(x, layers[n].weight, layers[n].bias) for n in ("W_query", "W_key", "W_value")
    )
    if trace is not None:
        trace.projections += [x, q, k, v]
    return q, k, v


def head_attention(
    layers: dict[str, nn.Linear],
    x: torch.Tensor,
    r: Recipe = RIGHT,
    drop=NO_DROP,
    trace: Trace | None = None,
    unit: int = 0,
) -> torch.Tensor:
    """One causal attention head (chapter 04's CausalAttention) from the student's weights: (b, n, d_out)."""
    q, k, v = project(layers, x, trace)  # each (b, n, d_out)
    return attention(q, k, v, r, x=x, drop=drop, unit=unit, trace=trace)


@dataclass
class MHAWeights:
    """What the split-head reference needs from the student's layer."""

    qkv: dict[str, nn.Linear]
    out_proj: nn.Linear
    num_heads: int


def mha_reference(
    weights: MHAWeights,
    x: torch.Tensor,
    r: Recipe = RIGHT,
    drop=NO_DROP,
    trace: Trace | None = None,
) -> torch.Tensor:
    """Multi-head causal attention from one Q/K/V projection each: (b, n, d_out)."""
    b, n, _ = x.shape
    h = weights.num_heads
    q, k, v = project(weights.qkv, x, trace)  # each (b, n, d_out)
    d_out = q.shape[-1]
    if r.out_proj_on == "values":
        v = weights.out_proj(v)

    def split(t: torch.Tensor) -> torch.Tensor:  # (b, n, d_out) -> (b, h, n, hd)
        if r.split == "view":
            return t.reshape(b, h, n, d_out // h)
        return t.reshape(b, n, h, d_out // h).transpose(1, 2)

    context = attention(
        split(q), split(k), split(v), r, x=x, d_out=d_out, drop=drop, trace=trace
    )  # (b, h, n, hd)
    merged = {
        "view": lambda: context.reshape(b, n, d_out),
        "interleave": lambda: context.permute(0, 2, 3, 1).reshape(b, n, d_out),
        "transpose": lambda: context.transpose(1, 2).reshape(b, n, d_out),
    }[r.merge]()  # (b, n, d_out)
    if trace is not None:
        trace.context.append(merged)
    return weights.out_proj(merged) if r.out_proj and r.out_proj_on == "merged" else merged


def variants(*names: str) -> list[tuple[str, Recipe]]:
    """(mistake id, recipe) pairs of the named groups of the table below, in the order named."""
    groups = {
        "axis": [
            ("softmax_over_queries", Recipe(softmax_dim=-2)),
            ("softmax_over_batch", Recipe(softmax_dim=0)),
        ],
        "heads_axis": [("softmax_over_heads", Recipe(softmax_dim=1))],
        "scale": [
            ("no_scaling", Recipe(scale="none")),
            ("scale_d_k", Recipe(scale="d_k")),
            ("scale_precedence", Recipe(scale="half_d_k")),
            ("scale_precedence", Recipe(scale="double_d_k")),
            ("scale_d_in", Recipe(scale="sqrt_d_in")),
            ("scale_after_softmax", Recipe(scale="after_softmax")),
            ("scale_multiplied", Recipe(scale="times_sqrt_d_k")),
        ],
        "head_scale": [("scale_d_out", Recipe(scale="sqrt_d_out"))],
        "mask": [
            ("mask_after_softmax", Recipe(mask_after="zero")),
            ("mask_after_softmax", Recipe(mask_after="-inf")),
            ("mask_missing", Recipe(mask="none")),
            ("mask_diagonal", Recipe(mask="diagonal")),
            ("mask_leak", Recipe(mask="leak")),
            ("mask_past", Recipe(mask="past")),
            ("keep_mask", Recipe(mask="keep")),
            ("sdpa_mask_inverted", Recipe(mask="sdpa_inverted")),
            ("mask_zero_fill", Recipe(mask_fill="zero")),
        ],
        "projections": [
            ("keys_values_from_query", Recipe(keys_from="query", values_from="query")),
            ("keys_from_query", Recipe(keys_from="query")),
            ("values_from_query", Recipe(values_from="query")),
            ("values_from_key", Recipe(values_from="key")),
            ("context_from_inputs", Recipe(values_from="input")),
            ("keys_values_swapped", Recipe(keys_from="value", values_from="key")),
            ("scores_transposed", Recipe(scores_transposed=True)),
            ("returns_weights", Recipe(returns="weights")),
        ],
        "split": [
            ("view_without_transpose", Recipe(split="view", merge="view")),
            ("view_without_transpose", Recipe(split="view")),
            ("merge_without_transpose", Recipe(merge="view")),
            ("heads_interleaved", Recipe(merge="interleave")),
            ("out_proj_unused", Recipe(out_proj=False)),
            ("out_proj_on_values", Recipe(out_proj_on="values")),
        ],
    }
    return [pair for name in names for pair in groups[name]]


__all__ = [
    "NO_DROP",
    "RIGHT",
    "MHAWeights",
    "Recipe",
    "Trace",
    "attention",
    "head_attention",
    "mask_of",
    "mha_reference",
    "project",
    "variants",
    "weights_from_scores",
]
