"""Drawing helpers shared by the chapters' diagrams (tools/figures/diagrams/chNN.py).

Instructor machinery: ``make figures`` calls the chapters' drawing functions through
:mod:`tools.figures.catalogue`. The attention-map pieces come from ``course_utils.plotting``, the same code
the explorers draw with.
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
    example_inputs,
)
from course_utils.plotting import INK
from course_utils.plotting import INPUT_COLOUR as X_COLOUR
from course_utils.repro import portable_rand


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


def _flow_of_three(fig: Figure, extra: float = 0.0) -> tuple[list, object, object, object]:
    """Three maps in an L, so each is shown large enough to read: first -> second along the top,
    then down to the third under the second. Returns the map axes, the right-arrow axes, the
    down-arrow axes and the empty corner under the first map (for a note). ``extra``: the width of
    one more column right of the maps (its axes is ``fig.axes[-1]``)."""
    widths = [1, 0.24, 1] + ([extra] if extra else [])
    grid = fig.add_gridspec(3, len(widths), width_ratios=widths, height_ratios=[1, 0.22, 1])
    maps = [fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 2]), fig.add_subplot(grid[2, 2])]
    right, down, corner = (
        fig.add_subplot(grid[0, 1]),
        fig.add_subplot(grid[1, 2]),
        fig.add_subplot(grid[1:, 0]),
    )
    if extra:
        fig.add_subplot(grid[2, 3])
    return maps, right, down, corner


def _down_arrow(ax, text: str) -> None:
    """Fill a flat axes with a downward arrow and a caption to its right."""
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.axis("off")
    _arrow(ax, (0.5, 0.95), (0.5, 0.05), lw=1.8, scale=16)
    ax.text(0.56, 0.5, text, ha="left", va="center", fontsize=9.5, color=INK, linespacing=1.3)


def _caption(ax, x: float, y: float, text: str) -> None:
    """The grey explanation under a diagram, centred at (x, y), text already broken into lines."""
    ax.text(x, y, text, ha="center", va="center", fontsize=9.5, color="#444444", linespacing=1.5)


def _note(ax, text: str) -> None:
    """Fill an axes with a paragraph (text already broken into lines), top left."""
    ax.axis("off")
    ax.text(
        0.0,
        0.8,
        text,
        ha="left",
        va="top",
        fontsize=10.5,
        color="#333333",
        linespacing=1.5,
        transform=ax.transAxes,
    )


def _readable(fig: Figure) -> Figure:
    """Raise every text of ``fig`` smaller than what stays 9 px high where JupyterLab shows the
    figure (tools.figures.catalogue.DISPLAY_WIDTH) to that size; call it last, once the figure is drawn."""
    from matplotlib.text import Text

    from tools.figures.catalogue import DISPLAY_WIDTH, DPI, MIN_TEXT_PX

    width = fig.get_size_inches()[0]
    floor = MIN_TEXT_PX * 72 / min(DPI, DISPLAY_WIDTH / width) + 0.05  # pt
    for text in fig.findobj(Text):
        if text.get_fontsize() < floor:
            text.set_fontsize(floor)
    for ax in fig.axes:
        for which, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            labels = axis.get_ticklabels()
            if labels and labels[0].get_fontsize() < floor:
                ax.tick_params(axis=which, labelsize=floor)
    return fig


def _map_text(axes, fontsize: float) -> None:
    """Write the numbers in the cells of ``axes``'s maps (plotting.heatmap's) at ``fontsize``."""
    for ax in axes:
        for text in ax.texts:
            text.set_fontsize(fontsize)


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
