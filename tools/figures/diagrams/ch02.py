"""The diagrams of chapter 02 (``make figures``): its catalogue (names, alt texts) and drawing code."""

from __future__ import annotations

from matplotlib.figure import Figure

from course_utils.data import (
    example_inputs,
)
from course_utils.plotting import INK
from course_utils.plotting import INPUT_COLOUR as X_COLOUR
from course_utils.plotting import KEY_COLOUR as K_COLOUR
from course_utils.plotting import QUERY_COLOUR as Q_COLOUR
from course_utils.plotting import VALUE_COLOUR as V_COLOUR
from tools.figures.diagrams._draw import (
    _arrow,
    _book_projections,
    _canvas,
    _caption,
    _cells,
)


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
    _caption(
        ax,
        4.85,
        0.35,
        "One input, three learned (3 × 2) matrices: three 2-d views of the same token.\n"
        "Every token is projected by the same three matrices.",
    )
    return fig


FIGURES = {
    "qkv_projections": (
        "The input vector of 'journey' is multiplied by three learned 3 by 2 matrices W_q, W_k and W_v, "
        "giving its 2-dimensional query, key and value vectors.",
        draw_qkv_projections,
    ),
}
"""This chapter's figures: name -> (alt text, drawing function); see tools/figures/catalogue.py."""
