"""Explorers of chapters 01-04: one query, scaling, masking, dropout."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from matplotlib.patches import Patch

from course_utils import chapters as ch
from course_utils import plotting as P
from course_utils.data import EXAMPLE_TOKENS, example_causal_weights, example_scores
from course_utils.plotting import Bars, draw_map, explorer, handles
from course_utils.repro import portable_dropout_mask
from course_utils.validation import CourseInputError, expect_int, expect_probability
from course_utils.widgets._parts import RowSums, _title, _tokens, slider_style

__all__ = [
    "QueryView",
    "query_data",
    "draw_query",
    "query_explorer",
    "SCALING_MAX_D_K",
    "SCALING_KEYS",
    "ScalingView",
    "scaling_data",
    "draw_scaling",
    "scaling_explorer",
    "MASK_MODES",
    "MaskView",
    "mask_data",
    "draw_mask",
    "mask_explorer",
    "DropoutView",
    "dropout_data",
    "draw_dropout",
    "dropout_explorer",
]


# ----------------------------------------------------------------------------- 1. one query
@dataclass(frozen=True)
class QueryView:
    """What :func:`query_explorer` shows for one query token."""

    query: int
    labels: tuple[str, ...]
    inputs: torch.Tensor  # (n, d)
    scores: torch.Tensor  # (n,) dot products of the query with every token
    weights: torch.Tensor  # (n,) softmax of the scores
    context: torch.Tensor  # (d,) the weighted sum of the inputs
    score_range: tuple[float, float]  # over every query, so the axes stay put
    value_range: tuple[float, float]


def query_data(
    inputs: torch.Tensor, query: int, labels: Sequence[str] = EXAMPLE_TOKENS
) -> QueryView:
    """Scores, softmax weights and context vector of token ``query`` attending to all of ``inputs``."""
    all_scores = ch.attention_scores(
        inputs[:, None], inputs
    )  # (n, n): chapter 01's scores, every query at once
    all_weights = ch.attention_weights(inputs)  # (n, n)
    contexts = ch.context_vectors(inputs)  # (n, d)
    values = torch.cat([inputs.flatten(), contexts.flatten(), torch.zeros(1)])
    return QueryView(
        query,
        tuple(labels),
        inputs,
        all_scores[query],
        all_weights[query],
        contexts[query],
        (min(0.0, float(all_scores.min())), float(all_scores.max())),
        (float(values.min()), float(values.max())),
    )


def draw_query(fig, view: QueryView) -> None:
    """Three panels: the query's scores, its softmax weights, and its context vector."""
    h, q, n, d = handles(fig), view.query, len(view.labels), view.inputs.shape[1]
    colours = [P.QUERY_COLOUR if j == q else P.MUTED_COLOUR for j in range(n)]
    if not h:
        ax_s, ax_w, ax_c = fig.subplots(1, 3, width_ratios=[1, 1, 0.8])
        low, high = view.score_range
        h["scores"] = Bars(ax_s, view.scores, colour=colours, top=high - low, animated=True)
        ax_s.set_ylim(low * 1.1, high * 1.15)
        h["weights"] = Bars(ax_w, view.weights, animated=True)
        ax_w.set_ylim(0, 1.15)
        h["sum"] = ax_w.text(
            0.99,
            0.97,
            "",
            transform=ax_w.transAxes,
            ha="right",
            va="top",
            fontsize=9,
            animated=True,
        )
        positions = torch.arange(d, dtype=torch.float32)
        h["input"] = Bars(
            ax_c,
            view.inputs[q],
            x=positions - 0.19,
            width=0.38,
            colour=P.QUERY_COLOUR,
            animated=True,
        )
        h["context"] = Bars(
            ax_c, view.context, x=positions + 0.19, width=0.38, colour=P.KEY_COLOUR, animated=True
        )
        low, high = view.value_range
        ax_c.set_ylim(low - 0.1 * (high - low), high + 0.35 * (high - low))
        ax_c.legend(
            handles=[
                Patch(color=P.QUERY_COLOUR, label="input x(query)"),
                Patch(color=P.KEY_COLOUR, label="context z(query)"),
            ],
            fontsize=8,
            loc="upper left",
            frameon=False,
        )
        for ax in (ax_s, ax_w):
            P.tick_labels(ax, view.labels)
        ax_c.set_xticks(range(d), [f"dim {i}" for i in range(d)])
        P.plain_axes(ax_s, ylabel="score")
        P.plain_axes(ax_w, ylabel="weight", title="2. weights: softmax(scores)")
        P.plain_axes(ax_c, title="3. context: Σ weight(j) · x(j)")
        h["axes"] = (ax_s, ax_c)
    ax_s, ax_c = h["axes"]
    h["scores"].colour = colours
    h["scores"].update(view.scores)
    h["weights"].update(view.weights)
    h["sum"].set_text(f"sum = {float(view.weights.sum()):.2f}")
    h["input"].update(view.inputs[q])
    h["context"].update(view.context)
    _title(ax_s, f"1. scores: x({view.labels[q]}) · x(j), query {q}")


def query_explorer(inputs: torch.Tensor | None = None, labels: Sequence[str] | None = None) -> None:
    """Pick a query token; see its scores, softmax weights and the context vector it makes.

    Args:
        inputs: (n, d) token embeddings (default: the six-token example, ``cu.example_inputs()``).
        labels: one label per token (default: the example's words, or 0..n-1).

    Notebook: ``cu.widgets.query_explorer()``
    """
    x, names = _tokens(inputs, labels, "inputs")
    start = 1 if x.shape[0] > 1 else 0

    def controls(widgets):
        return {
            "query": widgets.Dropdown(
                options=[(f"{i}: {name}", i) for i, name in enumerate(names)],
                value=start,
                description="query token",
            )
        }

    explorer(
        lambda query: query_data(x, query, names),
        draw_query,
        {"query": start},
        controls,
        figsize=(11.0, 3.4),
    )


# ----------------------------------------------------------------------------- 2. scaling
SCALING_MAX_D_K = 512
SCALING_KEYS = 6


@dataclass(frozen=True)
class ScalingView:
    """What :func:`scaling_explorer` shows for one width ``d_k``."""

    d_k: int
    scores: torch.Tensor  # (n_keys,) raw dot products q · k_j
    weights_plain: torch.Tensor  # (n_keys,) softmax(scores)
    weights_scaled: torch.Tensor  # (n_keys,) softmax(scores / sqrt(d_k))
    sweep_d_k: torch.Tensor  # (D,) every width 1..SCALING_MAX_D_K
    sweep_plain: torch.Tensor  # (D,) average largest weight without scaling
    sweep_scaled: torch.Tensor  # (D,) average largest weight with scaling


@functools.lru_cache(maxsize=4)
def _scaling_sweep(
    max_d_k: int, n_keys: int, draws: int = 256
) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(draws, 1, max_d_k, generator=generator)  # (draws, 1, D)
    k = torch.randn(draws, n_keys, max_d_k, generator=generator)  # (draws, keys, D)
    scores = torch.cumsum(q * k, dim=-1)  # (draws, keys, D): column d-1 is the score at d_k = d
    dims = torch.arange(1, max_d_k + 1, dtype=torch.float32)  # (D,)
    plain = torch.softmax(scores, dim=1).amax(dim=1).mean(dim=0)  # (D,)
    scaled = torch.softmax(scores / dims.sqrt(), dim=1).amax(dim=1).mean(dim=0)  # (D,)
    return plain, scaled


@functools.lru_cache(maxsize=8)
def _scaling_draw(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(SCALING_MAX_D_K, generator=generator)  # (D,)
    k = torch.randn(SCALING_KEYS, SCALING_MAX_D_K, generator=generator)  # (6, D)
    return q, k


def scaling_data(d_k: int, seed: int = 0) -> ScalingView:
    """One query against six keys, every component drawn from N(0, 1), at width ``d_k``.

    Raw scores q · k spread out like sqrt(d_k), so softmax(q · k) turns nearly one-hot as
    d_k grows; softmax(q · k / sqrt(d_k)) keeps the same spread at every width. The same
    draw is reused for every ``d_k`` (its first ``d_k`` components), so sliding ``d_k``
    changes only the width.
    """
    q, k = _scaling_draw(seed)
    scores = k[:, :d_k] @ q[:d_k]  # (6,)
    plain, scaled = _scaling_sweep(SCALING_MAX_D_K, SCALING_KEYS)
    return ScalingView(
        d_k,
        scores,
        torch.softmax(scores, dim=0),
        torch.softmax(scores / math.sqrt(d_k), dim=0),
        torch.arange(1, SCALING_MAX_D_K + 1),
        plain,
        scaled,
    )


def draw_scaling(fig, view: ScalingView) -> None:
    """Weights without and with the sqrt(d_k) division, and the average largest weight vs d_k."""
    h = handles(fig)
    if not h:
        axes = fig.subplots(1, 3)
        keys = [f"k{j + 1}" for j in range(view.scores.shape[0])]
        for name, ax, weights in zip(
            ("plain", "scaled"), axes, (view.weights_plain, view.weights_scaled)
        ):
            h[name] = Bars(ax, weights, animated=True)
            ax.set_ylim(0, 1.15)
            P.tick_labels(ax, keys)
            P.plain_axes(ax, "key", "weight")
        sweep = axes[2]
        dims = view.sweep_d_k.numpy()
        sweep.plot(dims, view.sweep_plain.numpy(), color=P.QUERY_COLOUR, label="q·k")
        sweep.plot(dims, view.sweep_scaled.numpy(), color=P.KEY_COLOUR, label="q·k / √d_k")
        h["at"] = sweep.axvline(
            view.d_k, color="#555555", linestyle=":", linewidth=1, animated=True
        )
        uniform = 1 / view.scores.shape[0]
        sweep.axhline(uniform, color="#999999", linestyle="--", linewidth=0.8)
        sweep.text(1.1, uniform + 0.02, "uniform", fontsize=8, color="#666666")
        sweep.set_xscale("log", base=2)
        sweep.set_ylim(0, 1.05)
        sweep.legend(fontsize=8, loc="center right", frameon=False)
        P.plain_axes(
            sweep,
            "d_k (width of q and k)",
            "largest weight (average)",
            "how peaked? (average of 256 draws)",
        )
        h["axes"] = axes
    spread = float(view.scores.std())
    h["plain"].update(view.weights_plain)
    h["scaled"].update(view.weights_scaled)
    h["at"].set_xdata([view.d_k, view.d_k])
    _title(h["axes"][0], f"d_k = {view.d_k}: softmax(q·k), score std {spread:.1f}")
    _title(
        h["axes"][1], f"softmax(q·k / √{view.d_k}): score std {spread / math.sqrt(view.d_k):.1f}"
    )


def scaling_explorer(d_k: int = 16, seed: int = 0) -> None:
    """Slide d_k and watch softmax sharpen without the sqrt(d_k) division, and stay calm with it.

    Args:
        d_k: the starting width of queries and keys (1 to 512).
        seed: the starting random draw.

    Notebook: ``cu.widgets.scaling_explorer()``
    """
    expect_int(d_k, "d_k", minimum=1, maximum=SCALING_MAX_D_K)
    expect_int(seed, "seed", minimum=0)

    def controls(widgets):
        return {
            "d_k": widgets.IntSlider(
                value=d_k, min=1, max=SCALING_MAX_D_K, description="d_k", **slider_style()
            ),
            "seed": widgets.IntSlider(
                value=seed,
                min=0,
                max=max(50, seed),
                description="random draw (seed)",
                **slider_style(),
            ),
        }

    explorer(scaling_data, draw_scaling, {"d_k": d_k, "seed": seed}, controls, figsize=(11.0, 3.4))


# ----------------------------------------------------------------------------- 3. masking
MASK_MODES = (
    "no mask",
    "mask with -inf, then softmax",
    "softmax, then zero the future",
    "softmax, zero the future, renormalise",
)
"""The ways to apply a causal mask that :func:`mask_explorer` compares."""

_MASKINGS = dict(
    zip(
        MASK_MODES,
        (  # mode -> (n, n) scores -> (n, n) weights; chapter 03's two ways at d_k = 1
            lambda scores: torch.softmax(scores, dim=-1),
            lambda scores: ch.mask_before_softmax(scores, 1),
            lambda scores: torch.softmax(scores, dim=-1).masked_fill(
                ch.causal_mask(scores.shape[0]), 0.0
            ),
            lambda scores: ch.mask_after_softmax(scores, 1),
        ),
    )
)


@dataclass(frozen=True)
class MaskView:
    """What :func:`mask_explorer` shows for one way of masking."""

    mode: str
    labels: tuple[str, ...]
    softmax_input: torch.Tensor  # (n, n) what softmax sees (scores, perhaps with -inf)
    weights: torch.Tensor  # (n, n) the final attention weights
    row_sums: torch.Tensor  # (n,)


def mask_data(scores: torch.Tensor, mode: str, labels: Sequence[str] = EXAMPLE_TOKENS) -> MaskView:
    """Apply a causal mask to square ``scores`` in one of :data:`MASK_MODES`."""
    future = ch.causal_mask(scores.shape[0])  # (n, n) True above the diagonal
    softmax_input = (
        scores.masked_fill(future, float("-inf")) if mode == MASK_MODES[1] else scores
    )  # (n, n)
    weights = _MASKINGS[mode](scores)  # (n, n)
    return MaskView(mode, tuple(labels), softmax_input, weights, weights.sum(dim=-1))


def draw_mask(fig, view: MaskView) -> None:
    """What softmax sees, the resulting weights, and each row's sum."""
    h, n = handles(fig), len(view.labels)
    if not h:
        ax_in, ax_w, ax_sums = fig.subplots(1, 3, width_ratios=[1, 1, 0.45])
        low, high = P.finite_range(view.softmax_input)
        h["in"] = draw_map(
            ax_in,
            view.softmax_input,
            view.labels,
            view.labels,
            vmin=low,
            vmax=high,
            annotate=n <= 8,
            title="softmax input",
            colorbar=False,
            animated=True,
        )
        h["weights"] = draw_map(
            ax_w,
            view.weights,
            view.labels,
            view.labels,
            vmin=0.0,
            vmax=1.0,
            annotate=n <= 8,
            ylabel="",
            animated=True,
        )
        h["sums"], h["ax"] = RowSums(ax_sums, view.labels), ax_w
    h["in"].update(view.softmax_input)
    h["weights"].update(view.weights)
    h["sums"].update(view.row_sums)
    _title(h["ax"], f"weights: {view.mode}", fontsize=10)


def mask_explorer(scores: torch.Tensor | None = None, labels: Sequence[str] | None = None) -> None:
    """Compare masking before softmax (-inf) with zeroing after it, with and without renormalising.

    Args:
        scores: square (n, n) attention scores (default: the six-token example's ``x @ x.T``).
        labels: one label per token (default: the example's words, or 0..n-1).

    Notebook: ``cu.widgets.mask_explorer()``
    """
    scores, names = _tokens(scores, labels, "scores", example_scores)
    if scores.shape[0] != scores.shape[1]:
        raise CourseInputError(
            f"scores must be a square (n, n) matrix, one row and one column per "
            f"token, but got shape {tuple(scores.shape)}."
        )

    def controls(widgets):
        return {
            "mode": widgets.Dropdown(
                options=list(MASK_MODES),
                value=MASK_MODES[1],
                description="masking",
                layout={"width": "460px"},
            )
        }

    explorer(
        lambda mode: mask_data(scores, mode, names),
        draw_mask,
        {"mode": MASK_MODES[1]},
        controls,
        figsize=(10.5, 4.0),
    )


# ----------------------------------------------------------------------------- 4. dropout
@dataclass(frozen=True)
class DropoutView:
    """What :func:`dropout_explorer` shows for one drop probability and seed."""

    p: float
    seed: int
    labels: tuple[str, ...]
    weights: torch.Tensor  # (n, m)
    mask: torch.Tensor  # (n, m) 0 (dropped) or 1/(1-p) (kept and rescaled)
    dropped: torch.Tensor  # (n, m) weights * mask
    row_sums: torch.Tensor  # (n,)


def dropout_data(
    weights: torch.Tensor, p: float, seed: int, labels: Sequence[str] = EXAMPLE_TOKENS
) -> DropoutView:
    """Dropout as ``nn.Dropout(p)`` applies it in training, with a mask identical on every machine."""
    mask = portable_dropout_mask(tuple(weights.shape), p, seed)  # (n, m)
    dropped = weights * mask  # (n, m)
    return DropoutView(p, seed, tuple(labels), weights, mask, dropped, dropped.sum(dim=-1))


def draw_dropout(fig, view: DropoutView) -> None:
    """The weights, the keep mask, the dropped-and-rescaled weights, and each row's sum."""
    h, n = handles(fig), len(view.labels)
    if not h:
        axes = fig.subplots(1, 4, width_ratios=[1, 1, 1, 0.5])
        m = view.weights.shape[1]
        cols, blank = view.labels if m == n else [str(j) for j in range(m)], [""] * n
        shared = {
            "vmin": 0.0,
            "annotate": max(n, m) <= 8,
            "colorbar": False,
        }  # one colour bar, drawn below
        h["weights"] = draw_map(
            axes[0], view.weights, view.labels, cols, vmax=1.0, xlabel="", title="weights", **shared
        )
        h["mask"] = draw_map(
            axes[1],
            view.mask,
            blank,
            cols,
            vmax=2.0,
            cmap="Greys",
            ylabel="",
            animated=True,
            **shared,
        )
        h["dropped"] = draw_map(
            axes[2],
            view.dropped,
            blank,
            cols,
            vmax=1.0,
            xlabel="",
            ylabel="",
            animated=True,
            **shared,
        )
        fig.colorbar(h["weights"].image, ax=axes[2], shrink=0.8)
        h["sums"], h["axes"] = RowSums(axes[3], [""] * n, top=3.0), axes
    scale = 1.0 / (1.0 - view.p)
    h["mask"].image.set_clim(0.0, max(scale, 1.0) * 1.6)
    h["mask"].norm.vmax = max(scale, 1.0) * 1.6
    h["mask"].update(view.mask)
    h["dropped"].update(view.dropped)
    h["sums"].update(view.row_sums)
    kept = int((view.mask > 0).sum())
    _title(
        h["axes"][1],
        f"p = {view.p:.2f}, seed {view.seed}: keep mask,\n0 or 1/(1-p) = {scale:.2f}",
        fontsize=10,
    )
    _title(h["axes"][2], f"weights × mask: kept {kept} of {view.mask.numel()}", fontsize=10)


def dropout_explorer(
    weights: torch.Tensor | None = None,
    labels: Sequence[str] | None = None,
    p: float = 0.5,
    seed: int = 123,
) -> None:
    """Slide the drop probability p and the seed; see the dropped, rescaled weights and row sums.

    The mask comes from ``cu.portable_dropout_mask``, so it is the same on every machine.

    Args:
        weights: (n, m) attention weights (default: the six-token example's causal weights).
        labels: one label per row (default: the example's words, or 0..n-1).
        p: the starting drop probability, in [0, 1).
        seed: the starting seed.

    Notebook: ``cu.widgets.dropout_explorer()``
    """
    w, names = _tokens(weights, labels, "weights", example_causal_weights)
    p = expect_probability(p, "p")
    expect_int(seed, "seed", minimum=0)

    def controls(widgets):
        return {
            "p": widgets.FloatSlider(
                value=p,
                min=0.0,
                max=0.9,
                step=0.05,
                readout_format=".2f",
                description="drop probability p",
                **slider_style(),
            ),
            "seed": widgets.IntSlider(
                value=seed, min=0, max=max(200, seed), description="seed", **slider_style()
            ),
        }

    explorer(
        lambda p, seed: dropout_data(w, p, seed, names),
        draw_dropout,
        {"p": p, "seed": seed},
        controls,
        figsize=(12.0, 3.9),
    )
