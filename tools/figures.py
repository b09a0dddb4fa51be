"""Every diagram of the course, drawn from code into ``figures/`` (``make figures``).

Usage::

    python -m course_utils.figures                  # (re)write every figures/*.png
    python -m course_utils.figures --check          # exit 1 if a committed figure would change
    python -m course_utils.figures --out /tmp/f causal_mask   # one figure, elsewhere

The output is byte-for-byte deterministic on a given matplotlib version (fixed size,
dpi, fonts and style; no "Software" or date metadata), so ``tests/test_figures.py`` can
regenerate the figures and compare bytes with the committed files.

:data:`FIGURES` maps each figure's name to its chapter, its alt text and its drawing
function. Notebooks embed a figure with exactly the markdown :func:`markdown` returns,
``![<alt text>](../figures/<name>.png)``, so notebooks and tests share one alt text.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import matplotlib
import matplotlib.style
import torch
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

from . import plotting
from .data import EXAMPLE_SENTENCE, EXAMPLE_TOKENS, example_causal_weights, example_inputs, example_scores
from .models import causal_mask
from .repro import portable_dropout_mask, portable_rand
from .validation import CourseInputError

ROOT = Path(__file__).resolve().parent.parent
FIGURES_DIR = ROOT / "figures"
DPI = 150

STYLE = {
    "font.family": "DejaVu Sans",
    "mathtext.fontset": "dejavusans",
    "font.size": 10,
    "axes.titlesize": 11,
    "figure.facecolor": "white",
    "savefig.facecolor": "white",
    "image.interpolation": "nearest",
    "path.simplify": True,
}
"""The rcParams every figure is drawn with, on top of matplotlib's defaults."""

# Okabe-Ito colours (distinguishable with every common colour-vision deficiency).
Q_COLOUR = "#D55E00"  # query: vermillion
K_COLOUR = "#0072B2"  # key: blue
V_COLOUR = "#009E73"  # value: bluish green
X_COLOUR = "#666666"  # inputs: grey
EXTRA_COLOUR = "#CC79A7"  # a fourth colour (reddish purple)
HEAD_COLOURS = (Q_COLOUR, K_COLOUR, V_COLOUR)
INK = "#222222"


# ----------------------------------------------------------------------------- drawing helpers
def _tint(colour: str, amount: float) -> tuple[float, float, float]:
    """Mix ``colour`` with white: amount 0 is white, 1 is the colour itself."""
    r, g, b, _ = to_rgba(colour)
    return (1 - amount * (1 - r), 1 - amount * (1 - g), 1 - amount * (1 - b))


def _canvas(width: float, height: float) -> tuple[Figure, object]:
    """A blank figure whose data coordinates are inches: (0, 0) bottom left."""
    fig = Figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig, ax


def _box(ax, x: float, y: float, w: float, h: float, text: str = "", *, colour: str = X_COLOUR,
         fill: float = 0.12, fontsize: float = 10, weight: str = "normal", lw: float = 1.4,
         text_colour: str = INK) -> None:
    """A rounded box with its lower-left corner at (x, y) and centred text."""
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0,rounding_size=0.08",
                                facecolor=_tint(colour, fill), edgecolor=colour, linewidth=lw))
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize,
                weight=weight, color=text_colour, linespacing=1.35)


def _arrow(ax, start: tuple[float, float], end: tuple[float, float], *, colour: str = INK,
           lw: float = 1.3, rad: float = 0.0, style: str = "-|>", scale: float = 12) -> None:
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=scale, color=colour,
                                 linewidth=lw, shrinkA=0, shrinkB=0,
                                 connectionstyle=f"arc3,rad={rad}"))


def _cells(ax, x: float, y: float, values: torch.Tensor | None, *, rows: int | None = None,
           cols: int | None = None, cell: float = 0.42, colour: str = X_COLOUR,
           fill: float | Sequence[Sequence[float]] = 0.18, fontsize: float = 8.5,
           col_colours: Sequence[str] | None = None, fmt: str = "{:.2f}", cell_h: float | None = None) -> None:
    """A grid of square cells with its top-left corner at (x, y); numbers written when given."""
    if values is not None:
        values = values.reshape(values.shape[0], -1) if values.dim() > 1 else values.reshape(1, -1)
        rows, cols = values.shape
    assert rows is not None and cols is not None
    cell_h = cell if cell_h is None else cell_h
    for i in range(rows):
        for j in range(cols):
            c = col_colours[j] if col_colours is not None else colour
            f = fill if isinstance(fill, (int, float)) else fill[i][j]
            ax.add_patch(Rectangle((x + j * cell, y - (i + 1) * cell_h), cell, cell_h,
                                   facecolor=_tint(c, f), edgecolor=c, linewidth=0.9))
            if values is not None:
                ax.text(x + (j + 0.5) * cell, y - (i + 0.5) * cell_h, fmt.format(float(values[i, j])),
                        ha="center", va="center", fontsize=fontsize, color=INK)


def _panel_arrow(ax, text: str, *, symbol: str | None = None) -> None:
    """Fill a narrow axes with a right arrow (or a big symbol such as ⊙) and a caption."""
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.axis("off")
    if symbol:
        ax.text(0.5, 0.55, symbol, ha="center", va="center", fontsize=22, color=INK)
    else:
        _arrow(ax, (0.1, 0.55), (0.9, 0.55), lw=1.8, scale=16)
    ax.text(0.5, 0.42, text, ha="center", va="top", fontsize=9, color=INK, linespacing=1.3)


def _book_projections() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """W_query, W_key, W_value as chapter 02 makes them: ``torch.manual_seed(123)``, three ``torch.rand(3, 2)``."""
    generator = torch.Generator().manual_seed(123)
    return tuple(torch.rand(3, 2, generator=generator) for _ in range(3))  # type: ignore[return-value]


def _mini_maps(count: int, n: int = 6) -> list[torch.Tensor]:
    """Distinct-looking causal attention maps, identical on every machine (portable_rand)."""
    maps = []
    for h in range(count):
        scores = (portable_rand((n, n), seed=40 + h) * 5.0).masked_fill(causal_mask(n), float("-inf"))
        maps.append(torch.softmax(scores, dim=-1))
    return maps


def _mini_map(ax, weights: torch.Tensor, x: float, y: float, size: float, edge: str) -> None:
    """Draw an (n, n) map as a small picture with its top-left corner at (x, y)."""
    shown = weights.masked_fill(causal_mask(weights.shape[0]), float("nan")).numpy()
    ax.imshow(shown, cmap=plotting.CMAP, vmin=0, vmax=1, extent=(x, x + size, y - size, y),
              interpolation="nearest", zorder=3)
    ax.add_patch(Rectangle((x, y - size), size, size, fill=False, edgecolor=edge, linewidth=1.0, zorder=4))


# ----------------------------------------------------------------------------- ch01
def draw_attention_scores() -> Figure:
    """Query x(2) against every token: dot products, softmax weights, the context vector."""
    x = example_inputs()
    q = 1
    scores = x @ x[q]  # (6,)
    weights = torch.softmax(scores, dim=0)  # (6,)
    context = weights @ x  # (3,)
    fig, ax = _canvas(12.7, 5.6)
    top, step = 4.55, 0.66
    heads = [(2.0, "1 · inputs  $x^{(j)}$"), (4.72, "2 · scores  $\\omega_{2j} = x^{(2)} \\cdot x^{(j)}$"),
             (8.0, "3 · weights  $\\alpha_{2j} = \\mathrm{softmax}(\\omega_2)_j$"),
             (11.2, "4 · context  $z^{(2)} = \\sum_j \\alpha_{2j}\\, x^{(j)}$")]
    for hx, text in heads:
        ax.text(hx, 5.2, text, ha="center", va="center", fontsize=11, color=INK)
    bar_x, bar_max = 6.75, 2.2
    for j, name in enumerate(EXAMPLE_TOKENS):
        y = top - j * step
        is_query = j == q
        colour = Q_COLOUR if is_query else X_COLOUR
        ax.text(1.35, y, f"{name}", ha="right", va="center", fontsize=10, color=colour,
                weight="bold" if is_query else "normal")
        ax.text(1.45, y, f"$x^{{({j + 1})}}$", ha="left", va="center", fontsize=9, color=colour)
        _cells(ax, 1.95, y + 0.21, x[j], cell=0.52, cell_h=0.42, colour=colour, fill=0.25 if is_query else 0.1)
        _arrow(ax, (3.65, y), (4.2, y), colour="#9A9A9A", lw=1.0, scale=9)
        _box(ax, 4.25, y - 0.21, 0.95, 0.42, f"{float(scores[j]):.2f}", colour=K_COLOUR if not is_query
             else Q_COLOUR, fill=0.12, fontsize=9.5)
        _arrow(ax, (5.3, y), (6.6, y), colour="#9A9A9A", lw=1.0, scale=9)
        length = bar_max * float(weights[j]) / float(weights.max())
        ax.add_patch(Rectangle((bar_x, y - 0.17), length, 0.34, facecolor=_tint(K_COLOUR, 0.75),
                               edgecolor=K_COLOUR, linewidth=0.8))
        ax.text(bar_x + length + 0.08, y, f"{float(weights[j]):.2f}", ha="left", va="center", fontsize=9.5)
        ax.plot([9.55, 10.15], [y, 2.9], color="#B0B0B0", linewidth=0.8)
    ax.text(4.72, top - 5.5 * step, "dot products\nwith the query", ha="center", va="top", fontsize=8.5,
            color="#555555")
    ax.text(bar_x, top - 5.5 * step, f"sum = {float(weights.sum()):.2f}", ha="left", va="top", fontsize=9,
            color="#555555")
    _arrow(ax, (10.15, 2.9), (10.42, 2.9), colour="#888888", lw=1.0, scale=9)
    _cells(ax, 10.45, 3.11, context, cell=0.56, cell_h=0.42, colour=Q_COLOUR, fill=0.3, fontsize=9.5)
    ax.text(11.29, 2.45, "context vector of\n'journey': a blend of\nall six inputs",
            ha="center", va="top", fontsize=9, color="#444444")
    ax.text(6.35, 0.35, "The query 'journey' scores every token by a dot product; softmax turns the scores "
            "into weights that sum to 1;\nthe context vector is the weighted sum of the inputs.",
            ha="center", va="center", fontsize=9.5, color="#444444")
    return fig


def draw_score_matrix() -> Figure:
    """All pairwise scores X Xᵀ, and row-wise softmax weights, as two matrices."""
    scores = example_scores()
    weights = torch.softmax(scores, dim=-1)
    fig = Figure(figsize=(11.6, 4.9), layout="constrained")
    ax_s, ax_arrow, ax_w = fig.subplots(1, 3, width_ratios=[1, 0.22, 1])
    plotting.heatmap(scores, EXAMPLE_TOKENS, ax=ax_s, colorbar=False,
                     title="scores  $\\Omega = X X^\\top$  (every pair)")
    plotting.heatmap(weights, EXAMPLE_TOKENS, ax=ax_w, colorbar=False, vmin=0,
                     title="weights  $A = \\mathrm{softmax}(\\Omega)$  (each row)", ylabel="")
    for ax in (ax_s, ax_w):
        ax.add_patch(Rectangle((-0.5, 0.5), 6, 1, fill=False, edgecolor=Q_COLOUR, linewidth=2.4, clip_on=False))
    _panel_arrow(ax_arrow, "softmax\nrow by row")
    fig.suptitle("Row i belongs to query i: the outlined row 2 ('journey') holds its scores (left) and "
                 "weights (right).\nThen $Z = A X$ gives every context vector at once.", fontsize=10.5,
                 color="#333333")
    return fig


# ----------------------------------------------------------------------------- ch02
def draw_qkv_projections() -> Figure:
    """x(2) times three learned matrices gives its query, key and value."""
    x2 = example_inputs()[1]
    mats = _book_projections()
    names = [("q", "q", "query", Q_COLOUR, "what 'journey' is looking for"),
             ("k", "k", "key", K_COLOUR, "what it offers to be matched on"),
             ("v", "v", "value", V_COLOUR, "what it passes on when attended to")]
    fig, ax = _canvas(9.7, 7.1)
    cell = 0.5
    ys = [6.45, 4.45, 2.45]  # top edge of each W; its middle row is at y - 0.75
    mid = ys[1] - 0.75
    _cells(ax, 0.35, mid + 0.25, x2, cell=cell, colour=X_COLOUR, fill=0.15, fontsize=9.5)
    ax.text(0.35 + 1.5 * cell, mid + 0.42, "input $x^{(2)}$  'journey'\n(1 × 3)", ha="center", va="bottom",
            fontsize=9.5, linespacing=1.4)
    for (short, sub, word, colour, meaning), W, y in zip(names, mats, ys):
        centre = y - 0.75
        _arrow(ax, (2.0, mid), (3.0, centre), colour=colour, lw=1.5)
        ax.text(3.22, centre, "@", ha="center", va="center", fontsize=14)
        _cells(ax, 3.5, y, W, cell=cell, colour=colour, fill=0.18, fontsize=9)
        ax.text(3.5 + cell, y + 0.1, f"$W_{sub}$ (3 × 2)", ha="center", va="bottom", fontsize=9.5,
                color=colour)
        ax.text(4.8, centre, "=", ha="center", va="center", fontsize=14)
        _cells(ax, 5.1, centre + 0.25, x2 @ W, cell=0.6, colour=colour, fill=0.35, fontsize=9.5, cell_h=0.5)
        ax.text(5.7, centre + 0.37, f"${short}^{{(2)}}$ (1 × 2)", ha="center", va="bottom", fontsize=9.5,
                color=colour)
        ax.text(6.65, centre + 0.16, word, ha="left", va="center", fontsize=11, color=colour, weight="bold")
        ax.text(6.65, centre - 0.2, meaning, ha="left", va="center", fontsize=9.5, color=INK)
    ax.text(4.85, 0.35, "One input, three learned (3 × 2) matrices: three 2-d views of the same token.\n"
            "Every token is projected by the same three matrices.",
            ha="center", va="center", fontsize=9.5, color="#444444", linespacing=1.5)
    return fig


# ----------------------------------------------------------------------------- ch03
def draw_causal_mask() -> Figure:
    """Scores, the scores with the future masked to -inf, and the softmax weights."""
    scores = example_scores()
    future = causal_mask(6)
    masked = scores.masked_fill(future, float("-inf"))
    weights = torch.softmax(masked, dim=-1)
    fig = Figure(figsize=(13.6, 4.7), layout="constrained")
    axes = fig.subplots(1, 5, width_ratios=[1, 0.3, 1, 0.3, 1])
    plotting.heatmap(scores, EXAMPLE_TOKENS, ax=axes[0], colorbar=False, title="scores")
    plotting.heatmap(masked, EXAMPLE_TOKENS, ax=axes[2], colorbar=False, title="masked scores",
                     ylabel="", vmin=float(scores.min()), vmax=float(scores.max()))
    plotting.heatmap(weights, EXAMPLE_TOKENS, ax=axes[4], colorbar=False, vmin=0, vmax=1,
                     title="weights (each row sums to 1)", ylabel="")
    for i, j in future.nonzero().tolist():
        axes[2].add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="#EFEFEF", edgecolor="#BBBBBB",
                                    hatch="///", linewidth=0, zorder=0.5))
    _panel_arrow(axes[1], "set the future\n(key after query)\nto $-\\infty$")
    _panel_arrow(axes[3], "softmax\nrow by row:\n$e^{-\\infty} = 0$")
    fig.suptitle("A causal mask: each token may attend only to itself and the tokens before it",
                 fontsize=11, color="#333333")
    return fig


# ----------------------------------------------------------------------------- ch04
DROPOUT_P = 0.5
DROPOUT_SEED = 123


def draw_dropout() -> Figure:
    """Attention weights, a keep mask scaled by 1/(1-p), and their product with row sums."""
    weights = example_causal_weights()
    mask = portable_dropout_mask((6, 6), DROPOUT_P, DROPOUT_SEED)
    dropped = weights * mask
    fig = Figure(figsize=(14.4, 4.6), layout="constrained")
    axes = fig.subplots(1, 6, width_ratios=[1, 0.16, 1, 0.16, 1, 0.26])
    top = max(float(weights.max()), float(dropped.max()))  # one colour scale for both
    plotting.heatmap(weights, EXAMPLE_TOKENS, ax=axes[0], colorbar=False, vmin=0, vmax=top,
                     title="attention weights")
    plotting.heatmap(mask, EXAMPLE_TOKENS, ax=axes[2], colorbar=False, vmin=0, vmax=4, cmap="Greys",
                     title=f"keep mask (p = {DROPOUT_P}): 0 or 1/(1-p) = 2", ylabel="")
    plotting.heatmap(dropped, EXAMPLE_TOKENS, ax=axes[4], colorbar=False, vmin=0, vmax=top,
                     title="dropped and rescaled", ylabel="")
    _panel_arrow(axes[1], "", symbol="×")
    _panel_arrow(axes[3], "", symbol="=")
    sums = axes[5]
    sums.set_xlim(0, 1)
    sums.set_ylim(5.5, -0.5)
    sums.axis("off")
    sums.set_title("row sum", fontsize=10)
    for i, value in enumerate(dropped.sum(dim=-1).tolist()):
        sums.text(0.5, i, f"{value:.2f}", ha="center", va="center", fontsize=10,
                  color=Q_COLOUR if abs(value - 1) > 5e-3 else INK)
    fig.suptitle("Dropout in training: each weight is dropped with probability p and the kept ones are "
                 "doubled, so every weight keeps its average (rows no longer sum to 1)",
                 fontsize=10.5, color="#333333")
    return fig


# ----------------------------------------------------------------------------- ch05
def draw_single_vs_multihead() -> Figure:
    """One head making (n × d_out) versus three heads whose outputs are concatenated."""
    fig, ax = _canvas(12.6, 7.4)
    # --- one head
    ax.text(0.25, 7.05, "one head", fontsize=12, weight="bold", color=INK, va="center")
    _box(ax, 0.3, 5.35, 1.7, 1.0, "inputs X\n(n × $d_{in}$)", colour=X_COLOUR)
    _arrow(ax, (2.05, 5.85), (3.05, 5.85))
    _box(ax, 3.1, 5.1, 3.2, 1.5, "", colour=EXTRA_COLOUR, fill=0.1)
    ax.text(3.25, 6.35, "head: $W_q, W_k, W_v$", fontsize=9.5, va="center", color=INK)
    ax.text(3.25, 5.95, "causal attention", fontsize=9.5, va="center", color=INK)
    _mini_map(ax, _mini_maps(1)[0], 4.95, 6.45, 1.2, EXTRA_COLOUR)
    _arrow(ax, (6.35, 5.85), (7.35, 5.85))
    _cells(ax, 7.45, 6.35, None, rows=4, cols=3, cell=0.25, colour=EXTRA_COLOUR, fill=0.35)
    ax.text(8.6, 5.85, "context Z\n(n × $d_{out}$)", fontsize=9.5, va="center")
    ax.plot([0.25, 12.35], [4.65, 4.65], color="#CCCCCC", linewidth=1)
    # --- several heads
    ax.text(0.25, 4.3, "multi-head (h = 3)", fontsize=12, weight="bold", color=INK, va="center")
    _box(ax, 0.3, 1.85, 1.7, 1.0, "inputs X\n(n × $d_{in}$)", colour=X_COLOUR)
    maps = _mini_maps(4)[1:]
    head_ys = [3.55, 2.35, 1.15]
    for h, (colour, y, weights) in enumerate(zip(HEAD_COLOURS, head_ys, maps), start=1):
        _arrow(ax, (2.05, 2.35), (3.05, y), colour=colour, lw=1.3)
        _box(ax, 3.1, y - 0.5, 3.2, 1.0, "", colour=colour, fill=0.1)
        ax.text(3.25, y + 0.18, f"head {h}: own $W_q^{{{h}}}, W_k^{{{h}}}, W_v^{{{h}}}$", fontsize=9,
                va="center")
        ax.text(3.25, y - 0.2, "causal attention", fontsize=9, va="center")
        _mini_map(ax, weights, 5.32, y + 0.42, 0.84, colour)
        _arrow(ax, (6.35, y), (7.35, y), colour=colour)
        _cells(ax, 7.45, y + 0.5, None, rows=4, cols=1, cell=0.25, colour=colour, fill=0.4)
        ax.text(7.8, y, f"$Z_{h}$ (n × $d_{{head}}$)", fontsize=9, va="center")
        _arrow(ax, (9.15, y), (9.65, 2.35), colour=colour, lw=1.0)
    ax.text(10.45, 3.05, "concatenate", fontsize=9.5, ha="center", va="center")
    _cells(ax, 9.75, 2.85, None, rows=4, cols=3, cell=0.25, colour=X_COLOUR,
           col_colours=HEAD_COLOURS, fill=0.4)
    ax.text(10.12, 1.65, "(n × h·$d_{head}$)", fontsize=9, ha="center", va="center")
    _arrow(ax, (10.55, 2.35), (11.0, 2.35))
    _box(ax, 11.05, 1.85, 1.3, 1.0, "out_proj\n→ (n × $d_{out}$)", colour=X_COLOUR, fontsize=9)
    ax.text(6.3, 0.25, "Each head has its own projections, so each can learn its own attention pattern; "
            "their outputs sit side by side.", fontsize=9.5, ha="center", va="center", color="#444444")
    return fig


def draw_weight_split() -> Figure:
    """One (d_in × d_out) W_q computed once, then split into heads by .view and .transpose."""
    d_in, n, heads, hd = 4, 4, 3, 2
    d_out = heads * hd
    cols = [HEAD_COLOURS[j // hd] for j in range(d_out)]
    fig, ax = _canvas(13.9, 4.35)
    cell, top = 0.34, 3.45
    mid = top - n * cell / 2

    def caption(x: float, text: str) -> None:
        ax.text(x, top + 0.15, text, ha="center", va="bottom", fontsize=9.5, linespacing=1.4)

    def step(x0: float, x1: float, text: str) -> None:
        _arrow(ax, (x0, mid), (x1, mid))
        ax.text((x0 + x1) / 2, mid + 0.15, text, ha="center", va="bottom", fontsize=9)

    # W_q, columns coloured by the head they will serve
    _cells(ax, 0.4, top, None, rows=d_in, cols=d_out, cell=cell, col_colours=cols, fill=0.35)
    caption(0.4 + d_out * cell / 2, "one big $W_q$\n($d_{in}$ × $d_{out}$) = (4 × 6)")
    for h in range(heads):
        ax.text(0.4 + (h * hd + hd / 2) * cell, top - d_in * cell - 0.12, f"head {h + 1}", ha="center",
                va="top", fontsize=8.5, color=HEAD_COLOURS[h])
    step(2.65, 3.6, "X @ $W_q$")
    # Q = X @ W_q
    _cells(ax, 3.75, top, None, rows=n, cols=d_out, cell=cell, col_colours=cols, fill=0.55)
    caption(3.75 + d_out * cell / 2, "queries Q\n(b, n, $d_{out}$) = (1, 4, 6)")
    step(6.0, 7.55, ".view(b, n, h, $d_{head}$)")
    # the same numbers, each token's row read as h chunks of d_head
    gap = 0.14
    for h in range(heads):
        _cells(ax, 7.7 + h * (hd * cell + gap), top, None, rows=n, cols=hd, cell=cell,
               colour=HEAD_COLOURS[h], fill=0.55)
    caption(7.7 + (d_out * cell + 2 * gap) / 2, "same numbers, read as\n(b, n, h, $d_{head}$) = (1, 4, 3, 2)")
    step(10.2, 11.35, ".transpose(1, 2)")
    # one (n × d_head) card per head, head 1 in front
    offset = 0.3
    for h in reversed(range(heads)):
        ox, oy = 11.5 + h * offset, top + h * offset * 0.8 - 0.45
        z = 2 + 3 * (heads - h)
        ax.add_patch(Rectangle((ox - 0.05, oy - n * cell - 0.05), hd * cell + 0.1, n * cell + 0.1,
                               facecolor="white", edgecolor="none", zorder=z))
        for i in range(n):
            for j in range(hd):
                ax.add_patch(Rectangle((ox + j * cell, oy - (i + 1) * cell), cell, cell,
                                       facecolor=_tint(HEAD_COLOURS[h], 0.55), edgecolor=HEAD_COLOURS[h],
                                       linewidth=0.9, zorder=z + 1))
    caption(12.35, "one (n × $d_{head}$) matrix per head\n(b, h, n, $d_{head}$) = (1, 3, 4, 2)")
    ax.text(11.5 + hd * cell / 2 + offset, top - 0.45 - n * cell - 0.12, "head 1 in front, heads 2 and 3 behind",
            ha="center", va="top", fontsize=8.5, color="#444444")
    ax.text(6.95, 0.6, "One matrix multiply computes every head's queries at once (the same for keys and "
            "values). Columns 1-2 belong to head 1,\n3-4 to head 2 and 5-6 to head 3: .view relabels them "
            "without copying; .transpose moves the head axis forward, so each head attends on its own.",
            ha="center", va="center", fontsize=9.5, color="#444444", linespacing=1.5)
    return fig


# ----------------------------------------------------------------------------- ch06
def draw_text_to_logits() -> Figure:
    """Text to token ids, to embeddings plus positions, through attention, to logits."""
    from .tokenizer import gpt2_tokenizer

    tokenizer = gpt2_tokenizer()
    ids = tokenizer.encode(EXAMPLE_SENTENCE)
    pieces = [tokenizer.decode([i]).replace(" ", "␣") for i in ids]
    n = len(ids)
    fig, ax = _canvas(12.2, 8.7)
    label_x, data_x, shape_x = 0.3, 4.55, 11.9
    rows = [8.05, 6.65, 4.9, 3.05, 1.35]
    stages = [
        ("text", "a string"),
        ("GPT-2 tokenizer", "token ids (n,)"),
        ("token embedding\n+ position embedding", "X  (n, d)"),
        ("multi-head causal\nattention", "Z  (n, d)"),
        ("output layer\nLinear(d, 50,257)", "logits  (n, 50,257)"),
    ]
    colours = [X_COLOUR, X_COLOUR, K_COLOUR, EXTRA_COLOUR, Q_COLOUR]
    for (stage, shape), y, colour in zip(stages, rows, colours):
        _box(ax, label_x, y - 0.45, 2.75, 0.9, stage, colour=colour, fill=0.12, fontsize=9.5)
        ax.text(shape_x, y, shape, ha="right", va="center", fontsize=9.5, color="#444444")
    code = ["tok.encode(text)", "tok_emb(ids) + pos_emb(arange(n))", "mha(x)", "out_head(z)"]
    for y0, y1, text in zip(rows[:-1], rows[1:], code):
        _arrow(ax, (label_x + 1.375, y0 - 0.5), (label_x + 1.375, y1 + 0.5))
        ax.text(label_x + 1.55, (y0 + y1) / 2, text, ha="left", va="center", fontsize=8.5,
                family="DejaVu Sans Mono", color="#444444")
    # text
    ax.text(data_x, rows[0], f"“{EXAMPLE_SENTENCE}”", ha="left", va="center", fontsize=11)
    # ids
    width = 0.95
    for j, (piece, token_id) in enumerate(zip(pieces, ids)):
        x0 = data_x + j * (width + 0.08)
        _box(ax, x0, rows[1] - 0.05, width, 0.42, piece, colour=X_COLOUR, fill=0.08, fontsize=8.5)
        ax.text(x0 + width / 2, rows[1] - 0.3, f"{token_id}", ha="center", va="center", fontsize=9,
                family="DejaVu Sans Mono")
    # embeddings: token rows + position rows = X
    cell = 0.22
    d = 5
    ax.text(data_x, rows[2] + 0.85, "rows picked by id", ha="left", va="center", fontsize=8.5, color="#444444")
    _cells(ax, data_x, rows[2] + 0.66, None, rows=n, cols=d, cell=cell, colour=K_COLOUR, fill=0.3)
    ax.text(data_x + d * cell + 0.3, rows[2] - 0.0, "+", fontsize=14, ha="center", va="center")
    ax.text(data_x + d * cell + 0.6, rows[2] + 0.85, "rows 0..n-1", ha="left", va="center", fontsize=8.5,
            color="#444444")
    _cells(ax, data_x + d * cell + 0.6, rows[2] + 0.66, None, rows=n, cols=d, cell=cell, colour=V_COLOUR,
           fill=0.3)
    ax.text(data_x + 2 * d * cell + 0.9, rows[2], "=", fontsize=14, ha="center", va="center")
    _cells(ax, data_x + 2 * d * cell + 1.2, rows[2] + 0.66, None, rows=n, cols=d, cell=cell,
           colour=K_COLOUR, col_colours=None, fill=0.55)
    ax.text(data_x + 3 * d * cell + 1.4, rows[2], "one vector per token:\nwhat it is + where it is",
            ha="left", va="center", fontsize=9, color="#444444")
    # attention
    _mini_map(ax, example_causal_weights(), data_x, rows[3] + 0.66, 1.32, EXTRA_COLOUR)
    ax.text(data_x + 1.6, rows[3], "each token mixes in the tokens before it\n"
            "(in GPT: many such blocks, with feed-forward layers)", ha="left", va="center", fontsize=9,
            color="#444444")
    # logits
    generator_values = portable_rand((n, 24), seed=7)
    fill = [[0.1 + 0.6 * float(v) for v in row] for row in generator_values]
    _cells(ax, data_x, rows[4] + 0.66, None, rows=n, cols=24, cell=cell, colour=Q_COLOUR, fill=fill)
    ax.text(data_x + 24 * cell + 0.12, rows[4], "…", fontsize=14, ha="left", va="center")
    ax.text(data_x + 0.0, rows[4] - 0.95, "one score for every vocabulary entry, at every position: "
            "the last row scores the next token", ha="left", va="center", fontsize=9, color="#444444")
    return fig


# ----------------------------------------------------------------------------- ch07
def draw_attention_memory() -> Figure:
    """Bytes of the (b, h, n, n) score matrix vs the (b, n, d) activations, GPT-2 small."""
    from .widgets import draw_memory, memory_data

    fig = draw_memory(memory_data(1024, heads=12, batch=1, d_model=768, bytes_per_value=4),
                      title="GPT-2 small (12 heads, d = 768), batch 1, float32: one layer's attention "
                            "scores vs its activations")
    fig.set_size_inches(8.0, 4.8)
    return fig


# ----------------------------------------------------------------------------- the catalogue
class FigureSpec(NamedTuple):
    """One figure: the chapter that shows it, its alt text, and the function drawing it."""

    chapter: str
    alt: str
    draw: Callable[[], Figure]


FIGURES: dict[str, FigureSpec] = {
    "attention_scores": FigureSpec(
        "01",
        "The query 'journey' is compared with all six tokens by dot products, giving six scores; softmax "
        "turns them into weights that sum to 1; the weighted sum of the inputs is the context vector "
        "of 'journey'.",
        draw_attention_scores,
    ),
    "score_matrix": FigureSpec(
        "01",
        "Two 6 by 6 matrices: all pairwise scores X times X transposed, and the attention weights after "
        "a softmax over each row; row 2, the query 'journey', is outlined in both.",
        draw_score_matrix,
    ),
    "qkv_projections": FigureSpec(
        "02",
        "The input vector of 'journey' is multiplied by three learned 3 by 2 matrices W_q, W_k and W_v, "
        "giving its 2-dimensional query, key and value vectors.",
        draw_qkv_projections,
    ),
    "causal_mask": FigureSpec(
        "03",
        "Three 6 by 6 matrices: the attention scores, the same scores with every entry above the "
        "diagonal (a future token) set to minus infinity, and the softmax weights, which are zero "
        "above the diagonal and sum to 1 in each row.",
        draw_causal_mask,
    ),
    "dropout": FigureSpec(
        "04",
        "Causal attention weights multiplied element-wise by a dropout keep mask of zeros and twos "
        "(p = 0.5) give dropped and rescaled weights whose rows no longer sum to 1.",
        draw_dropout,
    ),
    "single_vs_multihead": FigureSpec(
        "05",
        "Top: one attention head turns the inputs into one context matrix. Bottom: three heads, each "
        "with its own query, key and value projections and its own attention pattern, produce three "
        "narrower outputs that are concatenated and passed through an output projection.",
        draw_single_vs_multihead,
    ),
    "weight_split": FigureSpec(
        "05",
        "One 4 by 6 query matrix W_q whose column pairs belong to heads 1, 2 and 3 gives a queries "
        "matrix Q; .view regroups its columns per head without copying and .transpose(1, 2) stacks "
        "one 4 by 2 query matrix per head.",
        draw_weight_split,
    ),
    "text_to_logits": FigureSpec(
        "06",
        "The pipeline from text to logits: the sentence is split by the GPT-2 tokenizer into six token "
        "ids, each id picks a row of the token embedding to which a position embedding is added, "
        "multi-head causal attention mixes the tokens, and an output layer gives one score per "
        "vocabulary entry at every position.",
        draw_text_to_logits,
    ),
    "attention_memory": FigureSpec(
        "07",
        "Log-log plot of memory against sequence length for GPT-2 small: the attention score matrix "
        "grows with the square of the length and passes 16 and 80 GiB long before the activations, "
        "which grow linearly.",
        draw_attention_memory,
    ),
}
"""Every figure of the course by name (the file is ``figures/<name>.png``)."""


def _check_name(name: str) -> FigureSpec:
    if name not in FIGURES:
        raise CourseInputError(f"name must be one of the course's figures {sorted(FIGURES)}, but got {name!r}.")
    return FIGURES[name]


def path(name: str, folder: Path | str = FIGURES_DIR) -> Path:
    """Where figure ``name`` lives: ``figures/<name>.png``."""
    _check_name(name)
    return Path(folder) / f"{name}.png"


def markdown(name: str, prefix: str = "../figures") -> str:
    """The markdown a notebook uses to show figure ``name``: ``![<alt>](../figures/<name>.png)``."""
    spec = _check_name(name)
    return f"![{spec.alt}]({prefix}/{name}.png)"


def render(name: str) -> Figure:
    """Draw figure ``name`` with the course style and return it (nothing is written)."""
    spec = _check_name(name)
    with matplotlib.style.context("default"), matplotlib.rc_context(STYLE):
        return spec.draw()


def save(name: str, folder: Path | str = FIGURES_DIR) -> Path:
    """Draw figure ``name`` and write ``<folder>/<name>.png`` deterministically; return the path."""
    spec = _check_name(name)
    target = path(name, folder)
    target.parent.mkdir(parents=True, exist_ok=True)
    with matplotlib.style.context("default"), matplotlib.rc_context(STYLE):
        fig = spec.draw()
        fig.savefig(target, format="png", dpi=DPI, metadata={"Software": None}, facecolor="white")
    return target


def generate(folder: Path | str = FIGURES_DIR, names: Iterable[str] | None = None) -> list[Path]:
    """Write every figure (or the named ones) into ``folder``; return their paths."""
    return [save(name, folder) for name in (FIGURES if names is None else names)]


# ----------------------------------------------------------------------------- references in notebooks
_MARKDOWN_IMAGE = re.compile(r"!\[(?P<alt>[^\]]*)\]\(\s*<?(?P<src>[^)\s>]+)>?(?:\s+[\"'][^)]*[\"'])?\s*\)")
_HTML_IMAGE = re.compile(r"<img\b[^>]*>", re.IGNORECASE)
_HTML_ATTRIBUTE = re.compile(r"\b(?P<name>src|alt)\s*=\s*(?P<quote>[\"'])(?P<value>.*?)(?P=quote)",
                             re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class FigureReference:
    """One image a notebook's markdown points to inside ``figures/``."""

    notebook: Path
    cell: int
    src: str  # as written, e.g. ../figures/causal_mask.png
    alt: str | None
    target: Path  # resolved against the notebook's folder

    @property
    def name(self) -> str:
        return Path(self.src).stem


def figure_references(notebook: Path | str) -> list[FigureReference]:
    """Every ``![alt](.../figures/x.png)`` and ``<img src=".../figures/x.png">`` in a notebook's markdown."""
    notebook = Path(notebook)
    cells = json.loads(notebook.read_text(encoding="utf-8")).get("cells", [])
    found = []
    for index, cell in enumerate(cells):
        if cell.get("cell_type") != "markdown":
            continue
        source = cell.get("source", "")
        text = "".join(source) if isinstance(source, list) else source
        candidates = [(m["src"], m["alt"]) for m in _MARKDOWN_IMAGE.finditer(text)]
        for tag in _HTML_IMAGE.finditer(text):
            attributes = {m["name"].lower(): m["value"] for m in _HTML_ATTRIBUTE.finditer(tag.group())}
            if "src" in attributes:
                candidates.append((attributes["src"], attributes.get("alt")))
        for src, alt in candidates:
            if "://" in src or src.startswith(("attachment:", "data:")) or "figures/" not in src:
                continue
            target = (notebook.parent / src.split("#")[0].split("?")[0]).resolve()
            found.append(FigureReference(notebook, index, src, alt, target))
    return found


def broken_figure_references(notebooks: Iterable[Path | str]) -> list[str]:
    """One message per figure reference whose file does not exist (empty when all are fine)."""
    problems = []
    for notebook in notebooks:
        for ref in figure_references(notebook):
            if not ref.target.is_file():
                hint = ("`make figures` writes it" if ref.name in FIGURES
                        else f"known figures: {', '.join(sorted(FIGURES))}")
                problems.append(f"{_show(ref.notebook)}, cell {ref.cell}: {ref.src!r} points to "
                                f"{_show(ref.target)}, which does not exist ({hint}).")
    return problems


def alt_text_mismatches(notebooks: Iterable[Path | str]) -> list[str]:
    """One message per reference to a course figure whose alt text differs from :data:`FIGURES`."""
    problems = []
    for notebook in notebooks:
        for ref in figure_references(notebook):
            spec = FIGURES.get(ref.name)
            if spec is not None and ref.alt != spec.alt:
                problems.append(f"{_show(ref.notebook)}, cell {ref.cell}: figure {ref.name!r} has alt text "
                                f"{ref.alt!r}, expected FIGURES[{ref.name!r}].alt; paste "
                                f"cu.figures.markdown({ref.name!r}) instead.")
    return problems


def _show(p: Path) -> str:
    try:
        return str(Path(p).resolve().relative_to(ROOT))
    except ValueError:
        return str(p)


# ----------------------------------------------------------------------------- command line
def figure_differences(committed: Path | str, fresh: Path | str) -> list[str]:
    """Compare the committed figures with freshly drawn ones, byte for byte; one message per problem."""
    committed, fresh = Path(committed), Path(fresh)
    problems = []
    for name in FIGURES:
        old, new = path(name, committed), path(name, fresh)
        if not new.is_file():
            problems.append(f"{name}: no fresh drawing at {_show(new)}")
        elif not old.is_file():
            problems.append(f"{name}: {_show(old)} is missing")
        elif old.read_bytes() != new.read_bytes():
            problems.append(f"{name}: {_show(old)} differs from what the code draws")
    for stray in sorted(committed.glob("*.png")):
        if stray.stem not in FIGURES:
            problems.append(f"{stray.name}: not drawn by course_utils.figures (remove it or add it to FIGURES)")
    return problems


def stale_figures(folder: Path | str = FIGURES_DIR) -> list[str]:
    """Draw every figure into a scratch folder and compare with ``folder`` (see :func:`figure_differences`)."""
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        generate(scratch)
        return figure_differences(folder, scratch)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_utils.figures", description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help=f"figures to draw (default: all of {', '.join(FIGURES)})")
    parser.add_argument("--out", default=str(FIGURES_DIR), help="folder to write into (default: figures/)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a committed figure is missing or would change")
    args = parser.parse_args(argv)
    for name in args.names:
        if name not in FIGURES:
            parser.error(f"unknown figure {name!r}; choose from {', '.join(FIGURES)}")
    if args.check:
        problems = stale_figures(args.out)
        for problem in problems:
            print(problem)
        if problems:
            print("Run `make figures` and commit the result.")
            return 1
        print(f"all {len(FIGURES)} figures are up to date")
        return 0
    for written in generate(args.out, args.names or None):
        print(f"wrote {_show(written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
