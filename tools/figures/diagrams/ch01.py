"""The diagrams of chapter 01 (``make figures``): its catalogue (names, alt texts) and drawing code."""

from __future__ import annotations

import torch
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from course_utils import plotting
from course_utils.data import (
    EXAMPLE_TOKENS,
    example_inputs,
    example_scores,
)
from course_utils.plotting import INK
from course_utils.plotting import INPUT_COLOUR as X_COLOUR
from course_utils.plotting import KEY_COLOUR as K_COLOUR
from course_utils.plotting import QUERY_COLOUR as Q_COLOUR
from tools.figures.diagrams._draw import (
    _arrow,
    _box,
    _canvas,
    _cells,
    _panel_arrow,
    _readable,
    _tint,
)


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
    return _readable(fig)


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
    return _readable(fig)


FIGURES = {
    "attention_scores": (
        "The query 'journey' is compared with all six tokens by dot products, giving six scores; softmax "
        "turns them into weights that sum to 1; the weighted sum of the inputs is the context vector "
        "of 'journey'.",
        draw_attention_scores,
    ),
    "score_matrix": (
        "Two 6 by 6 matrices: all pairwise scores X times X transposed, and the attention weights after "
        "a softmax over each row; row 2, the query 'journey', is outlined in both.",
        draw_score_matrix,
    ),
}
"""This chapter's figures: name -> (alt text, drawing function); see tools/figures/catalogue.py."""
