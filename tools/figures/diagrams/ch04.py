"""The diagrams of chapter 04 (``make figures``): its catalogue (names, alt texts) and drawing code."""

from __future__ import annotations

from matplotlib.figure import Figure

from course_utils import plotting
from course_utils.data import (
    EXAMPLE_TOKENS,
)
from course_utils.plotting import INK
from course_utils.plotting import QUERY_COLOUR as Q_COLOUR
from course_utils.repro import portable_dropout_mask
from tools.figures.diagrams._draw import (
    _down_arrow,
    _flow_of_three,
    _map_text,
    _note,
    _panel_arrow,
    _trainable_trail,
)

DROPOUT_P = 0.5
DROPOUT_SEED = 123


def draw_dropout() -> Figure:
    """Chapter 04's masked weights, the portable keep mask (p = 0.5, seed 123), their product, row sums."""
    weights = _trainable_trail()[2]  # (6, 6)
    mask = portable_dropout_mask((6, 6), DROPOUT_P, DROPOUT_SEED)  # (6, 6)
    dropped = weights * mask  # (6, 6)
    fig = Figure(figsize=(11.2, 9.8), layout="constrained")
    axes, times, equals, corner = _flow_of_three(fig, extra=0.2)
    top = float(dropped.max())  # one colour scale for both
    kwargs = {"colorbar": False, "vmin": 0, "decimals": 4}
    plotting.heatmap(
        weights, EXAMPLE_TOKENS, ax=axes[0], vmax=top, title="attention weights", **kwargs
    )
    plotting.heatmap(
        mask,
        EXAMPLE_TOKENS,
        ax=axes[1],
        vmax=4,
        cmap="Greys",
        ylabel="",
        title=f"keep mask (p = {DROPOUT_P}, seed {DROPOUT_SEED}):\n0 or 1/(1-p) = 2",
        **kwargs,
    )
    plotting.heatmap(
        dropped,
        EXAMPLE_TOKENS,
        ax=axes[2],
        vmax=top,
        title="dropped and rescaled",
        ylabel="",
        **kwargs,
    )
    _map_text(axes, 9)
    _panel_arrow(times, "", symbol="×")
    _down_arrow(equals, "= (element by element)")
    sums = fig.axes[-1]
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
    _note(
        corner,
        "Dropout in training on chapter 04's\nweights: each weight is dropped with\n"
        "probability p and the kept ones are\ndoubled (0.5517 becomes 1.1034),\n"
        "so rows no longer sum to 1.",
    )
    return fig


FIGURES = {
    "dropout": (
        "Causal attention weights multiplied element-wise by a dropout keep mask of zeros and twos "
        "(p = 0.5) give dropped and rescaled weights whose rows no longer sum to 1.",
        draw_dropout,
    ),
}
"""This chapter's figures: name -> (alt text, drawing function); see tools/figures/catalogue.py."""
