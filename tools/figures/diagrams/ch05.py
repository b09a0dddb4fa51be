"""The diagrams of chapter 05 (``make figures``): its catalogue (names, alt texts) and drawing code."""

from __future__ import annotations

import torch
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from torch import nn

from course_utils.data import (
    example_inputs,
)
from course_utils.plotting import EXTRA_COLOUR, HEAD_COLOURS, INK
from course_utils.plotting import INPUT_COLOUR as X_COLOUR
from tools.figures.diagrams._draw import (
    _arrow,
    _box,
    _canvas,
    _caption,
    _cells,
    _mini_map,
    _mini_maps,
    _readable,
    _tint,
)


def _heading(ax, y: float, text: str) -> None:
    """A section title across the diagram, at height ``y``."""
    ax.text(0.25, y, text, fontsize=12, weight="bold", color=INK, va="center")


def draw_single_vs_multihead() -> Figure:
    """One head making (n × 2) versus two heads whose (n × 2) outputs are concatenated (chapter 05's example)."""
    fig, ax = _canvas(12.6, 7.0)
    # --- one head
    _heading(ax, 6.65, "one head (chapter 04's CausalAttention, d_out = 2)")
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
    _heading(ax, 4.0, "multi-head (h = 2): the wrapper of two heads")
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
    return _readable(fig)


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
    # Two rows (the matrix multiply, then .view and .transpose): narrow enough that the
    # numbers stay readable where JupyterLab shows the figure (tests/test_legibility.py).
    fig, ax = _canvas(6.4, 8.6)
    cell, row_h = 0.56, 0.34
    top, low = 7.75, 3.95  # top edges of the two rows
    mid, low_mid = top - n * row_h / 2, low - n * row_h / 2

    def caption(x: float, y: float, text: str) -> None:
        ax.text(x, y + 0.15, text, ha="center", va="bottom", fontsize=9.5, linespacing=1.4)

    def step(x0: float, x1: float, y: float, text: str) -> None:
        _arrow(ax, (x0, y), (x1, y))
        ax.text((x0 + x1) / 2, y + 0.15, text, ha="center", va="bottom", fontsize=9)

    def grid(x: float, y: float, values, fill: float = 0.55, **kwargs) -> None:
        _cells(
            ax,
            x,
            y,
            values,
            cell=cell,
            cell_h=row_h,
            fill=fill,
            fontsize=7.5,
            fmt="{:.4f}",
            **kwargs,
        )

    grid(0.2, top, w_query.weight.detach().T, fill=0.35, col_colours=cols)
    caption(0.2 + d_out * cell / 2, top, "one big $W_q$\n($d_{in}$ × $d_{out}$) = (3 × 4)")
    for h in range(heads):
        ax.text(
            0.2 + (h * hd + hd / 2) * cell,
            top - d_in * row_h - 0.12,
            f"head {h}",
            ha="center",
            va="top",
            fontsize=8.5,
            color=HEAD_COLOURS[h],
        )
    step(2.6, 3.75, mid, "X @ $W_q$")
    grid(3.9, top, queries, col_colours=cols)
    caption(3.9 + d_out * cell / 2, top, "queries[0]\n(n, $d_{out}$) = (6, 4)")
    # .view: from under queries[0] down to the second row
    _arrow(ax, (5.0, top - n * row_h - 0.1), (1.4, low + 0.95), rad=-0.15)
    ax.text(0.3, 5.45, ".view(b, n, h, $d_{head}$)", ha="left", va="bottom", fontsize=9)
    gap = 0.16
    for h in range(heads):
        grid(
            0.2 + h * (hd * cell + gap),
            low,
            queries[:, h * hd : (h + 1) * hd],
            colour=HEAD_COLOURS[h],
        )
    caption(
        0.2 + (d_out * cell + gap) / 2, low, "same numbers, read as\n(n, h, $d_{head}$) = (6, 2, 2)"
    )
    step(2.65, 3.75, low_mid, ".transpose(1, 2)")
    offset = 0.45
    for h in reversed(range(heads)):
        ox, oy = 3.9 + h * offset, low + h * offset * 0.8 - 0.3
        ax.add_patch(
            Rectangle(
                (ox - 0.05, oy - n * row_h - 0.05),
                hd * cell + 0.1,
                n * row_h + 0.1,
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
                        (ox + j * cell, oy - (i + 1) * row_h),
                        cell,
                        row_h,
                        zorder=z,
                        facecolor=_tint(HEAD_COLOURS[h], 0.55),
                        edgecolor=HEAD_COLOURS[h],
                        linewidth=0.9,
                    )
                )
                if h == 0:
                    ax.text(
                        ox + (j + 0.5) * cell,
                        oy - (i + 0.5) * row_h,
                        f"{float(queries[i, j]):.4f}",
                        ha="center",
                        va="center",
                        fontsize=7.5,
                        color=INK,
                        zorder=z + 1,
                    )
    caption(
        4.75, low + 0.25, "one (n × $d_{head}$) matrix\nper head (h, n, $d_{head}$) = (2, 6, 2)"
    )
    ax.text(
        3.9 + hd * cell / 2 + offset / 2,
        low - 0.45 - n * row_h - 0.1,
        "head 0 in front, head 1 behind",
        ha="center",
        va="top",
        fontsize=8.5,
        color="#444444",
    )
    _caption(
        ax,
        3.2,
        0.6,
        "One matrix multiply computes every head's queries at once (the same for\n"
        "keys and values). Columns 0-1 belong to head 0 and 2-3 to head 1: .view\n"
        "relabels them without copying; .transpose moves the head axis forward, so\n"
        "each head attends on its own. Numbers: chapter 05, seed 123, first sequence.",
    )
    return fig


FIGURES = {
    "single_vs_multihead": (
        "Top: one attention head turns the 6 by 3 inputs into a 6 by 2 context matrix. Bottom: two "
        "heads, each with its own query, key and value projections and its own attention pattern, "
        "produce two 6 by 2 outputs that are concatenated into 6 by 4 and passed through an output "
        "projection.",
        draw_single_vs_multihead,
    ),
    "weight_split": (
        "One 3 by 4 query matrix W_q whose column pairs belong to heads 0 and 1 gives the 6 by 4 "
        "queries of the first sequence; .view regroups each row's columns per head without copying and "
        ".transpose(1, 2) stacks one 6 by 2 query matrix per head.",
        draw_weight_split,
    ),
}
"""This chapter's figures: name -> (alt text, drawing function); see tools/figures/catalogue.py."""
