"""The drawing of every diagram in ``figures/`` (one function per figure; see tools/figures.py).

Instructor machinery: ``make figures`` calls these through :mod:`tools.figures`, which
holds the catalogue (name, chapter, alt text) and writes the PNGs. The attention-map
pieces come from ``course_utils.plotting``, the same code the explorers draw with.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle
from torch import nn

from course_utils import plotting
from course_utils.data import (
    EXAMPLE_SENTENCE,
    EXAMPLE_TOKENS,
    example_causal_weights,
    example_inputs,
    example_scores,
)
from course_utils.plotting import EXTRA_COLOUR, HEAD_COLOURS, INK
from course_utils.plotting import INPUT_COLOUR as X_COLOUR
from course_utils.plotting import KEY_COLOUR as K_COLOUR
from course_utils.plotting import QUERY_COLOUR as Q_COLOUR
from course_utils.plotting import VALUE_COLOUR as V_COLOUR
from course_utils.repro import portable_dropout_mask, portable_rand


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


def _box(
    ax,
    x: float,
    y: float,
    w: float,
    h: float,
    text: str = "",
    *,
    colour: str = X_COLOUR,
    fill: float = 0.12,
    fontsize: float = 10,
    weight: str = "normal",
    lw: float = 1.4,
    text_colour: str = INK,
) -> None:
    """A rounded box with its lower-left corner at (x, y) and centred text."""
    ax.add_patch(
        FancyBboxPatch(
            (x, y),
            w,
            h,
            boxstyle="round,pad=0,rounding_size=0.08",
            facecolor=_tint(colour, fill),
            edgecolor=colour,
            linewidth=lw,
        )
    )
    if text:
        ax.text(
            x + w / 2,
            y + h / 2,
            text,
            ha="center",
            va="center",
            fontsize=fontsize,
            weight=weight,
            color=text_colour,
            linespacing=1.35,
        )


def _arrow(
    ax,
    start: tuple[float, float],
    end: tuple[float, float],
    *,
    colour: str = INK,
    lw: float = 1.3,
    rad: float = 0.0,
    style: str = "-|>",
    scale: float = 12,
) -> None:
    ax.add_patch(
        FancyArrowPatch(
            start,
            end,
            arrowstyle=style,
            mutation_scale=scale,
            color=colour,
            linewidth=lw,
            shrinkA=0,
            shrinkB=0,
            connectionstyle=f"arc3,rad={rad}",
        )
    )


def _cells(
    ax,
    x: float,
    y: float,
    values: torch.Tensor | None,
    *,
    rows: int | None = None,
    cols: int | None = None,
    cell: float = 0.42,
    colour: str = X_COLOUR,
    fill: float | Sequence[Sequence[float]] = 0.18,
    fontsize: float = 8.5,
    col_colours: Sequence[str] | None = None,
    fmt: str = "{:.2f}",
    cell_h: float | None = None,
) -> None:
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
            ax.add_patch(
                Rectangle(
                    (x + j * cell, y - (i + 1) * cell_h),
                    cell,
                    cell_h,
                    facecolor=_tint(c, f),
                    edgecolor=c,
                    linewidth=0.9,
                )
            )
            if values is not None:
                ax.text(
                    x + (j + 0.5) * cell,
                    y - (i + 0.5) * cell_h,
                    fmt.format(float(values[i, j])),
                    ha="center",
                    va="center",
                    fontsize=fontsize,
                    color=INK,
                )


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
        scores = (portable_rand((n, n), seed=40 + h) * 5.0).masked_fill(_future(n), float("-inf"))
        maps.append(torch.softmax(scores, dim=-1))
    return maps


def _mini_map(ax, weights: torch.Tensor, x: float, y: float, size: float, edge: str) -> None:
    """Draw an (n, n) map as a small picture with its top-left corner at (x, y)."""
    shown = weights.masked_fill(_future(weights.shape[0]), float("nan")).numpy()
    ax.imshow(
        shown,
        cmap=plotting.CMAP,
        vmin=0,
        vmax=1,
        extent=(x, x + size, y - size, y),
        interpolation="nearest",
        zorder=3,
    )
    ax.add_patch(
        Rectangle((x, y - size), size, size, fill=False, edgecolor=edge, linewidth=1.0, zorder=4)
    )


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
    heads = [
        (2.0, "1 · inputs  $x^{(j)}$"),
        (4.72, "2 · scores  $\\omega_{2j} = x^{(2)} \\cdot x^{(j)}$"),
        (8.0, "3 · weights  $\\alpha_{2j} = \\mathrm{softmax}(\\omega_2)_j$"),
        (11.2, "4 · context  $z^{(2)} = \\sum_j \\alpha_{2j}\\, x^{(j)}$"),
    ]
    for hx, text in heads:
        ax.text(hx, 5.2, text, ha="center", va="center", fontsize=11, color=INK)
    bar_x, bar_max = 6.75, 2.2
    for j, name in enumerate(EXAMPLE_TOKENS):
        y = top - j * step
        is_query = j == q
        colour = Q_COLOUR if is_query else X_COLOUR
        ax.text(
            1.35,
            y,
            f"{name}",
            ha="right",
            va="center",
            fontsize=10,
            color=colour,
            weight="bold" if is_query else "normal",
        )
        ax.text(1.45, y, f"$x^{{({j + 1})}}$", ha="left", va="center", fontsize=9, color=colour)
        _cells(
            ax,
            1.95,
            y + 0.21,
            x[j],
            cell=0.52,
            cell_h=0.42,
            colour=colour,
            fill=0.25 if is_query else 0.1,
        )
        _arrow(ax, (3.65, y), (4.2, y), colour="#9A9A9A", lw=1.0, scale=9)
        _box(
            ax,
            4.25,
            y - 0.21,
            0.95,
            0.42,
            f"{float(scores[j]):.2f}",
            colour=K_COLOUR if not is_query else Q_COLOUR,
            fill=0.12,
            fontsize=9.5,
        )
        _arrow(ax, (5.3, y), (6.6, y), colour="#9A9A9A", lw=1.0, scale=9)
        length = bar_max * float(weights[j]) / float(weights.max())
        ax.add_patch(
            Rectangle(
                (bar_x, y - 0.17),
                length,
                0.34,
                facecolor=_tint(K_COLOUR, 0.75),
                edgecolor=K_COLOUR,
                linewidth=0.8,
            )
        )
        ax.text(
            bar_x + length + 0.08,
            y,
            f"{float(weights[j]):.2f}",
            ha="left",
            va="center",
            fontsize=9.5,
        )
        ax.plot([9.55, 10.15], [y, 2.9], color="#B0B0B0", linewidth=0.8)
    ax.text(
        4.72,
        top - 5.5 * step,
        "dot products\nwith the query",
        ha="center",
        va="top",
        fontsize=8.5,
        color="#555555",
    )
    ax.text(
        bar_x,
        top - 5.5 * step,
        f"sum = {float(weights.sum()):.2f}",
        ha="left",
        va="top",
        fontsize=9,
        color="#555555",
    )
    _arrow(ax, (10.15, 2.9), (10.42, 2.9), colour="#888888", lw=1.0, scale=9)
    _cells(
        ax, 10.45, 3.11, context, cell=0.56, cell_h=0.42, colour=Q_COLOUR, fill=0.3, fontsize=9.5
    )
    ax.text(
        11.29,
        2.45,
        "context vector of\n'journey': a blend of\nall six inputs",
        ha="center",
        va="top",
        fontsize=9,
        color="#444444",
    )
    ax.text(
        6.35,
        0.35,
        "The query 'journey' scores every token by a dot product; softmax turns the scores "
        "into weights that sum to 1;\nthe context vector is the weighted sum of the inputs.",
        ha="center",
        va="center",
        fontsize=9.5,
        color="#444444",
    )
    return fig


def draw_score_matrix() -> Figure:
    """All pairwise scores X Xᵀ, and row-wise softmax weights, as two matrices."""
    scores = example_scores()
    weights = torch.softmax(scores, dim=-1)
    fig = Figure(figsize=(11.6, 4.9), layout="constrained")
    ax_s, ax_arrow, ax_w = fig.subplots(1, 3, width_ratios=[1, 0.22, 1])
    plotting.heatmap(
        scores,
        EXAMPLE_TOKENS,
        ax=ax_s,
        colorbar=False,
        title="scores  $\\Omega = X X^\\top$  (every pair)",
    )
    plotting.heatmap(
        weights,
        EXAMPLE_TOKENS,
        ax=ax_w,
        colorbar=False,
        vmin=0,
        title="weights  $A = \\mathrm{softmax}(\\Omega)$  (each row)",
        ylabel="",
    )
    for ax in (ax_s, ax_w):
        ax.add_patch(
            Rectangle(
                (-0.5, 0.5), 6, 1, fill=False, edgecolor=Q_COLOUR, linewidth=2.4, clip_on=False
            )
        )
    _panel_arrow(ax_arrow, "softmax\nrow by row")
    fig.suptitle(
        "Row i belongs to query i: the outlined row 2 ('journey') holds its scores (left) and "
        "weights (right).\nThen $Z = A X$ gives every context vector at once.",
        fontsize=10.5,
        color="#333333",
    )
    return fig


# ----------------------------------------------------------------------------- ch02
def draw_qkv_projections() -> Figure:
    """x(2) times three learned matrices gives its query, key and value."""
    x2 = example_inputs()[1]
    mats = _book_projections()
    names = [
        ("q", "q", "query", Q_COLOUR, "what 'journey' is looking for"),
        ("k", "k", "key", K_COLOUR, "what it offers to be matched on"),
        ("v", "v", "value", V_COLOUR, "what it passes on when attended to"),
    ]
    fig, ax = _canvas(9.7, 7.1)
    cell = 0.5
    ys = [6.45, 4.45, 2.45]  # top edge of each W; its middle row is at y - 0.75
    mid = ys[1] - 0.75
    _cells(ax, 0.35, mid + 0.25, x2, cell=cell, colour=X_COLOUR, fill=0.15, fontsize=9.5)
    ax.text(
        0.35 + 1.5 * cell,
        mid + 0.42,
        "input $x^{(2)}$  'journey'\n(1 × 3)",
        ha="center",
        va="bottom",
        fontsize=9.5,
        linespacing=1.4,
    )
    for (short, sub, word, colour, meaning), W, y in zip(names, mats, ys):
        centre = y - 0.75
        _arrow(ax, (2.0, mid), (3.0, centre), colour=colour, lw=1.5)
        ax.text(3.22, centre, "@", ha="center", va="center", fontsize=14)
        _cells(ax, 3.5, y, W, cell=cell, colour=colour, fill=0.18, fontsize=9)
        ax.text(
            3.5 + cell,
            y + 0.1,
            f"$W_{sub}$ (3 × 2)",
            ha="center",
            va="bottom",
            fontsize=9.5,
            color=colour,
        )
        ax.text(4.8, centre, "=", ha="center", va="center", fontsize=14)
        _cells(
            ax,
            5.1,
            centre + 0.25,
            x2 @ W,
            cell=0.6,
            colour=colour,
            fill=0.35,
            fontsize=9.5,
            cell_h=0.5,
        )
        ax.text(
            5.7,
            centre + 0.37,
            f"${short}^{{(2)}}$ (1 × 2)",
            ha="center",
            va="bottom",
            fontsize=9.5,
            color=colour,
        )
        ax.text(
            6.65,
            centre + 0.16,
            word,
            ha="left",
            va="center",
            fontsize=11,
            color=colour,
            weight="bold",
        )
        ax.text(6.65, centre - 0.2, meaning, ha="left", va="center", fontsize=9.5, color=INK)
    ax.text(
        4.85,
        0.35,
        "One input, three learned (3 × 2) matrices: three 2-d views of the same token.\n"
        "Every token is projected by the same three matrices.",
        ha="center",
        va="center",
        fontsize=9.5,
        color="#444444",
        linespacing=1.5,
    )
    return fig


# ----------------------------------------------------------------------------- ch03, ch04
def _future(n: int) -> torch.Tensor:
    return torch.ones(n, n, dtype=torch.bool).triu(diagonal=1)  # (n, n): True above the diagonal


def _trainable_trail() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Chapters 03 and 04's numbers: SelfAttention_v2(3, 2) with seed 789 on the example.

    Returns the scores q kᵀ, the masked scores, and the masked weights softmax(masked / √2),
    whose row 'journey' is [0.5517, 0.4483] as printed in both chapters.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(789)
        w_query, w_key = (
            nn.Linear(3, 2, bias=False),
            nn.Linear(3, 2, bias=False),
        )  # as SelfAttention_v2 makes them
    x = example_inputs()  # (6, 3)
    with torch.no_grad():
        scores = w_query(x) @ w_key(x).T  # (6, 6)
    masked = scores.masked_fill(_future(6), float("-inf"))  # (6, 6)
    return scores, masked, torch.softmax(masked / 2**0.5, dim=-1)


def draw_causal_mask() -> Figure:
    """Scores, the scores with the future masked to -inf, and the softmax weights (chapter 03's numbers)."""
    scores, masked, weights = _trainable_trail()
    fig = Figure(figsize=(15.4, 5.0), layout="constrained")
    axes = fig.subplots(1, 5, width_ratios=[1, 0.26, 1, 0.26, 1])
    kwargs = {"colorbar": False, "decimals": 4}
    plotting.heatmap(scores, EXAMPLE_TOKENS, ax=axes[0], title="scores  q kᵀ", **kwargs)
    plotting.heatmap(
        masked,
        EXAMPLE_TOKENS,
        ax=axes[2],
        title="masked scores",
        ylabel="",
        vmin=float(scores.min()),
        vmax=float(scores.max()),
        **kwargs,
    )
    plotting.heatmap(
        weights,
        EXAMPLE_TOKENS,
        ax=axes[4],
        vmin=0,
        vmax=1,
        ylabel="",
        title="weights (each row sums to 1)",
        **kwargs,
    )
    for i, j in _future(6).nonzero().tolist():
        axes[2].add_patch(
            Rectangle(
                (j - 0.5, i - 0.5),
                1,
                1,
                facecolor="#EFEFEF",
                edgecolor="#BBBBBB",
                hatch="///",
                linewidth=0,
                zorder=0.5,
            )
        )
    _panel_arrow(axes[1], "set the future\n(key after query)\nto $-\\infty$")
    _panel_arrow(axes[3], "softmax of\nscores / $\\sqrt{2}$,\nrow by row:\n$e^{-\\infty} = 0$")
    fig.suptitle(
        "A causal mask on chapter 03's trainable attention (SelfAttention_v2, seed 789, d_out = 2): "
        "each token attends only to itself and the tokens before it",
        fontsize=11,
        color="#333333",
    )
    return fig


DROPOUT_P = 0.5
DROPOUT_SEED = 123


def draw_dropout() -> Figure:
    """Chapter 04's masked weights, the portable keep mask (p = 0.5, seed 123), their product, row sums."""
    weights = _trainable_trail()[2]  # (6, 6)
    mask = portable_dropout_mask((6, 6), DROPOUT_P, DROPOUT_SEED)  # (6, 6)
    dropped = weights * mask  # (6, 6)
    fig = Figure(figsize=(16.0, 4.9), layout="constrained")
    axes = fig.subplots(1, 6, width_ratios=[1, 0.14, 1, 0.14, 1, 0.26])
    top = float(dropped.max())  # one colour scale for both
    kwargs = {"colorbar": False, "vmin": 0, "decimals": 4}
    plotting.heatmap(
        weights, EXAMPLE_TOKENS, ax=axes[0], vmax=top, title="attention weights", **kwargs
    )
    plotting.heatmap(
        mask,
        EXAMPLE_TOKENS,
        ax=axes[2],
        vmax=4,
        cmap="Greys",
        ylabel="",
        title=f"keep mask (p = {DROPOUT_P}, seed {DROPOUT_SEED}): 0 or 1/(1-p) = 2",
        **kwargs,
    )
    plotting.heatmap(
        dropped,
        EXAMPLE_TOKENS,
        ax=axes[4],
        vmax=top,
        title="dropped and rescaled",
        ylabel="",
        **kwargs,
    )
    _panel_arrow(axes[1], "", symbol="×")
    _panel_arrow(axes[3], "", symbol="=")
    sums = axes[5]
    sums.set_xlim(0, 1)
    sums.set_ylim(5.5, -0.5)
    sums.axis("off")
    sums.set_title("row sum", fontsize=10)
    for i, value in enumerate(dropped.sum(dim=-1).tolist()):
        sums.text(
            0.5,
            i,
            f"{value:.4f}",
            ha="center",
            va="center",
            fontsize=10,
            color=Q_COLOUR if abs(value - 1) > 5e-3 else INK,
        )
    fig.suptitle(
        "Dropout in training on chapter 04's weights: each weight is dropped with probability p and "
        "the kept ones are doubled (0.5517 becomes 1.1034), so rows no longer sum to 1",
        fontsize=10.5,
        color="#333333",
    )
    return fig


# ----------------------------------------------------------------------------- ch05
def draw_single_vs_multihead() -> Figure:
    """One head making (n × 2) versus two heads whose (n × 2) outputs are concatenated (chapter 05's example)."""
    fig, ax = _canvas(12.6, 7.0)
    # --- one head
    ax.text(
        0.25,
        6.65,
        "one head (chapter 04's CausalAttention, d_out = 2)",
        fontsize=12,
        weight="bold",
        color=INK,
        va="center",
    )
    _box(ax, 0.3, 4.95, 1.7, 1.0, "inputs X\n(6 × 3)", colour=X_COLOUR)
    _arrow(ax, (2.05, 5.45), (3.05, 5.45))
    _box(ax, 3.1, 4.7, 3.2, 1.5, "", colour=EXTRA_COLOUR, fill=0.1)
    ax.text(3.25, 5.95, "head: $W_q, W_k, W_v$", fontsize=9.5, va="center", color=INK)
    ax.text(3.25, 5.55, "causal attention", fontsize=9.5, va="center", color=INK)
    _mini_map(ax, _mini_maps(1)[0], 4.95, 6.05, 1.2, EXTRA_COLOUR)
    _arrow(ax, (6.35, 5.45), (7.35, 5.45))
    _cells(ax, 7.45, 6.2, None, rows=6, cols=2, cell=0.25, colour=EXTRA_COLOUR, fill=0.35)
    ax.text(8.1, 5.45, "context Z\n(6 × 2)", fontsize=9.5, va="center")
    ax.plot([0.25, 12.35], [4.35, 4.35], color="#CCCCCC", linewidth=1)
    # --- two heads
    ax.text(
        0.25,
        4.0,
        "multi-head (h = 2): the wrapper of two heads",
        fontsize=12,
        weight="bold",
        color=INK,
        va="center",
    )
    _box(ax, 0.3, 1.75, 1.7, 1.0, "inputs X\n(6 × 3)", colour=X_COLOUR)
    head_ys = [3.0, 1.5]
    for h, (colour, y, weights) in enumerate(zip(HEAD_COLOURS, head_ys, _mini_maps(3)[1:])):
        _arrow(ax, (2.05, 2.25), (3.05, y), colour=colour, lw=1.3)
        _box(ax, 3.1, y - 0.55, 3.2, 1.1, "", colour=colour, fill=0.1)
        ax.text(
            3.25,
            y + 0.2,
            f"head {h}: own $W_q^{{{h}}}, W_k^{{{h}}}, W_v^{{{h}}}$",
            fontsize=9,
            va="center",
        )
        ax.text(3.25, y - 0.2, "causal attention", fontsize=9, va="center")
        _mini_map(ax, weights, 5.32, y + 0.45, 0.9, colour)
        _arrow(ax, (6.35, y), (7.35, y), colour=colour)
        _cells(ax, 7.5, y + 0.6, None, rows=6, cols=2, cell=0.2, colour=colour, fill=0.4)
        ax.text(8.0, y, f"$Z_{h}$ (6 × 2)", fontsize=9, va="center")
        _arrow(ax, (9.15, y), (9.65, 2.25), colour=colour, lw=1.0)
    ax.text(10.25, 3.15, "concatenate", fontsize=9.5, ha="center", va="center")
    _cells(
        ax,
        9.75,
        3.0,
        None,
        rows=6,
        cols=4,
        cell=0.25,
        colour=X_COLOUR,
        col_colours=[HEAD_COLOURS[0]] * 2 + [HEAD_COLOURS[1]] * 2,
        fill=0.4,
    )
    ax.text(10.25, 1.3, "(6 × 4)", fontsize=9, ha="center", va="center")
    _arrow(ax, (10.8, 2.25), (11.1, 2.25))
    _box(ax, 11.15, 1.75, 1.25, 1.0, "out_proj\n→ (6 × 4)", colour=X_COLOUR, fontsize=9)
    ax.text(
        6.3,
        0.3,
        "Each head has its own projections, so each can learn its own attention pattern; "
        "their outputs sit side by side (the split class adds out_proj).",
        fontsize=9.5,
        ha="center",
        va="center",
        color="#444444",
    )
    return fig


def draw_weight_split() -> Figure:
    """Chapter 05's worked example: W_q (3 × 4) computed once, split into 2 heads by .view and .transpose."""
    d_in, n, heads, hd = 3, 6, 2, 2
    d_out = heads * hd
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(123)
        w_query = nn.Linear(d_in, d_out, bias=False)  # as the chapter makes it
    with torch.no_grad():
        queries = w_query(example_inputs())  # (6, 4): the first sequence of the batch
    cols = [HEAD_COLOURS[j // hd] for j in range(d_out)]
    fig, ax = _canvas(14.6, 5.0)
    cell, top = 0.56, 3.95
    mid = top - n * 0.34 / 2

    def caption(x: float, text: str) -> None:
        ax.text(x, top + 0.15, text, ha="center", va="bottom", fontsize=9.5, linespacing=1.4)

    def step(x0: float, x1: float, text: str) -> None:
        _arrow(ax, (x0, mid), (x1, mid))
        ax.text((x0 + x1) / 2, mid + 0.15, text, ha="center", va="bottom", fontsize=9)

    _cells(
        ax,
        0.3,
        top,
        w_query.weight.detach().T,
        cell=cell,
        cell_h=0.34,
        col_colours=cols,
        fill=0.35,
        fontsize=7.5,
        fmt="{:.4f}",
    )
    caption(0.3 + d_out * cell / 2, "one big $W_q$\n($d_{in}$ × $d_{out}$) = (3 × 4)")
    for h in range(heads):
        ax.text(
            0.3 + (h * hd + hd / 2) * cell,
            top - d_in * 0.34 - 0.12,
            f"head {h}",
            ha="center",
            va="top",
            fontsize=8.5,
            color=HEAD_COLOURS[h],
        )
    step(2.65, 3.5, "X @ $W_q$")
    _cells(
        ax,
        3.65,
        top,
        queries,
        cell=cell,
        cell_h=0.34,
        col_colours=cols,
        fill=0.55,
        fontsize=7.5,
        fmt="{:.4f}",
    )
    caption(3.65 + d_out * cell / 2, "queries[0]\n(n, $d_{out}$) = (6, 4)")
    step(6.0, 7.75, ".view(b, n, h, $d_{head}$)")
    gap = 0.16
    for h in range(heads):
        _cells(
            ax,
            7.9 + h * (hd * cell + gap),
            top,
            queries[:, h * hd : (h + 1) * hd],
            cell=cell,
            cell_h=0.34,
            colour=HEAD_COLOURS[h],
            fill=0.55,
            fontsize=7.5,
            fmt="{:.4f}",
        )
    caption(7.9 + (d_out * cell + gap) / 2, "same numbers, read as\n(n, h, $d_{head}$) = (6, 2, 2)")
    step(10.35, 11.45, ".transpose(1, 2)")
    offset = 0.45
    for h in reversed(range(heads)):
        ox, oy = 11.6 + h * offset, top + h * offset * 0.8 - 0.3
        ax.add_patch(
            Rectangle(
                (ox - 0.05, oy - n * 0.34 - 0.05),
                hd * cell + 0.1,
                n * 0.34 + 0.1,
                facecolor="white",
                edgecolor="none",
                zorder=2 + 3 * (heads - h),
            )
        )
        for i in range(n):
            for j in range(hd):
                z = 3 + 3 * (heads - h)
                ax.add_patch(
                    Rectangle(
                        (ox + j * cell, oy - (i + 1) * 0.34),
                        cell,
                        0.34,
                        zorder=z,
                        facecolor=_tint(HEAD_COLOURS[h], 0.55),
                        edgecolor=HEAD_COLOURS[h],
                        linewidth=0.9,
                    )
                )
                if h == 0:
                    ax.text(
                        ox + (j + 0.5) * cell,
                        oy - (i + 0.5) * 0.34,
                        f"{float(queries[i, j]):.4f}",
                        ha="center",
                        va="center",
                        fontsize=7.5,
                        color=INK,
                        zorder=z + 1,
                    )
    caption(12.45, "one (n × $d_{head}$) matrix per head\n(h, n, $d_{head}$) = (2, 6, 2)")
    ax.text(
        11.6 + hd * cell / 2 + offset / 2,
        top - 0.45 - n * 0.34 - 0.1,
        "head 0 in front, head 1 behind",
        ha="center",
        va="top",
        fontsize=8.5,
        color="#444444",
    )
    ax.text(
        7.3,
        0.55,
        "One matrix multiply computes every head's queries at once (the same for keys and "
        "values). Columns 0-1 belong to head 0 and 2-3 to head 1:\n.view relabels them without copying; "
        ".transpose moves the head axis forward, so each head attends on its own. Numbers: chapter 05, "
        "seed 123, first sequence.",
        ha="center",
        va="center",
        fontsize=9.5,
        color="#444444",
        linespacing=1.5,
    )
    return fig


# ----------------------------------------------------------------------------- ch06
def draw_text_to_logits() -> Figure:
    """Text to token ids, to embeddings plus positions, through attention, to logits."""
    from course_utils.tokenizer import gpt2_tokenizer

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
        ax.text(
            label_x + 1.55,
            (y0 + y1) / 2,
            text,
            ha="left",
            va="center",
            fontsize=8.5,
            family="DejaVu Sans Mono",
            color="#444444",
        )
    # text
    ax.text(data_x, rows[0], f"“{EXAMPLE_SENTENCE}”", ha="left", va="center", fontsize=11)
    # ids
    width = 0.95
    for j, (piece, token_id) in enumerate(zip(pieces, ids)):
        x0 = data_x + j * (width + 0.08)
        _box(ax, x0, rows[1] - 0.05, width, 0.42, piece, colour=X_COLOUR, fill=0.08, fontsize=8.5)
        ax.text(
            x0 + width / 2,
            rows[1] - 0.3,
            f"{token_id}",
            ha="center",
            va="center",
            fontsize=9,
            family="DejaVu Sans Mono",
        )
    # embeddings: token rows + position rows = X
    cell = 0.22
    d = 5
    ax.text(
        data_x,
        rows[2] + 0.85,
        "rows picked by id",
        ha="left",
        va="center",
        fontsize=8.5,
        color="#444444",
    )
    _cells(ax, data_x, rows[2] + 0.66, None, rows=n, cols=d, cell=cell, colour=K_COLOUR, fill=0.3)
    ax.text(data_x + d * cell + 0.3, rows[2] - 0.0, "+", fontsize=14, ha="center", va="center")
    ax.text(
        data_x + d * cell + 0.6,
        rows[2] + 0.85,
        "rows 0..n-1",
        ha="left",
        va="center",
        fontsize=8.5,
        color="#444444",
    )
    _cells(
        ax,
        data_x + d * cell + 0.6,
        rows[2] + 0.66,
        None,
        rows=n,
        cols=d,
        cell=cell,
        colour=V_COLOUR,
        fill=0.3,
    )
    ax.text(data_x + 2 * d * cell + 0.9, rows[2], "=", fontsize=14, ha="center", va="center")
    _cells(
        ax,
        data_x + 2 * d * cell + 1.2,
        rows[2] + 0.66,
        None,
        rows=n,
        cols=d,
        cell=cell,
        colour=K_COLOUR,
        col_colours=None,
        fill=0.55,
    )
    ax.text(
        data_x + 3 * d * cell + 1.4,
        rows[2],
        "one vector per token:\nwhat it is + where it is",
        ha="left",
        va="center",
        fontsize=9,
        color="#444444",
    )
    # attention
    _mini_map(ax, example_causal_weights(), data_x, rows[3] + 0.66, 1.32, EXTRA_COLOUR)
    ax.text(
        data_x + 1.6,
        rows[3],
        "each token mixes in the tokens before it\n"
        "(in GPT: many such blocks, with feed-forward layers)",
        ha="left",
        va="center",
        fontsize=9,
        color="#444444",
    )
    # logits
    generator_values = portable_rand((n, 24), seed=7)
    fill = [[0.1 + 0.6 * float(v) for v in row] for row in generator_values]
    _cells(ax, data_x, rows[4] + 0.66, None, rows=n, cols=24, cell=cell, colour=Q_COLOUR, fill=fill)
    ax.text(data_x + 24 * cell + 0.12, rows[4], "…", fontsize=14, ha="left", va="center")
    ax.text(
        data_x + 0.0,
        rows[4] - 0.95,
        "one score for every vocabulary entry, at every position: "
        "the last row scores the next token",
        ha="left",
        va="center",
        fontsize=9,
        color="#444444",
    )
    return fig


# ----------------------------------------------------------------------------- ch07
def draw_attention_memory() -> Figure:
    """Bytes of the (b, h, n, n) score matrix vs the (b, n, d) activations, GPT-2 small (the explorer's drawing)."""
    from course_utils.widgets import draw_memory, memory_data

    fig = Figure(figsize=(8.0, 4.8), layout="constrained")
    draw_memory(fig, memory_data(1024, heads=12, batch=1, d_model=768, bytes_per_value=4))
    fig.axes[0].set_title(
        "GPT-2 small (12 heads, d = 768), batch 1, float32: one layer's attention scores "
        "vs its activations",
        fontsize=10,
    )
    return fig
