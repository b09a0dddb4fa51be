"""Chapter 10's diagram: a post-norm and a pre-norm transformer block side by side.

Instructor machinery, drawn through :mod:`tools.figures.catalogue` like every other figure.
"""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from course_utils.plotting import INK, INPUT_COLOUR, KEY_COLOUR, QUERY_COLOUR, VALUE_COLOUR

NORM, ATTN, FFN = KEY_COLOUR, QUERY_COLOUR, VALUE_COLOUR
STEM, SIDE = 0.0, 1.25  # x of the residual line and of the sub-layers


def _box(ax, x: float, y: float, text: str, colour: str, width: float = 1.5) -> None:
    ax.add_patch(
        FancyBboxPatch(
            (x - width / 2, y - 0.28),
            width,
            0.56,
            boxstyle="round,pad=0.02,rounding_size=0.12",
            facecolor=colour,
            edgecolor="none",
            alpha=0.9,
        )
    )
    ax.text(x, y, text, ha="center", va="center", color="white", fontsize=10, weight="bold")


def _plus(ax, x: float, y: float) -> None:
    ax.add_patch(
        FancyBboxPatch(
            (x - 0.2, y - 0.2),
            0.4,
            0.4,
            boxstyle="circle,pad=0",
            facecolor="white",
            edgecolor=INK,
            linewidth=1.4,
        )
    )
    ax.text(x, y, "+", ha="center", va="center", fontsize=13, color=INK)


def _arrow(ax, start: tuple[float, float], end: tuple[float, float], colour: str = INK) -> None:
    ax.add_patch(
        FancyArrowPatch(
            start,
            end,
            arrowstyle="-|>",
            mutation_scale=11,
            color=colour,
            linewidth=1.4,
            connectionstyle="arc3,rad=0"
            if start[0] == end[0] or start[1] == end[1]
            else "angle,angleA=0,angleB=90",
        )
    )


def _sublayer(ax, y: float, name: str, colour: str, norm: str, pre: bool) -> float:
    """One residual sub-layer starting at height y; returns the height where it ends."""
    top = y + 2.2
    branch_in = y + 0.3
    if pre:  # norm on the branch, before the sub-layer; the stem stays untouched
        _box(ax, SIDE, y + 0.75, norm, NORM)
        _box(ax, SIDE, y + 1.55, name, colour)
        _arrow(ax, (STEM, branch_in), (SIDE, y + 0.45))
        _arrow(ax, (SIDE, y + 1.03), (SIDE, y + 1.27))
        _arrow(ax, (SIDE, y + 1.83), (STEM + 0.2, top - 0.2))
        _plus(ax, STEM, top - 0.2)
        _arrow(ax, (STEM, y), (STEM, top - 0.4), INPUT_COLOUR)
        return top
    _box(ax, SIDE, y + 1.1, name, colour)
    _arrow(ax, (STEM, branch_in), (SIDE, y + 0.82))
    _arrow(ax, (SIDE, y + 1.38), (STEM + 0.2, y + 1.75))
    _plus(ax, STEM, y + 1.75)
    _arrow(ax, (STEM, y), (STEM, y + 1.55), INPUT_COLOUR)
    _box(ax, STEM, top + 0.15, norm, NORM, width=1.3)
    _arrow(ax, (STEM, y + 1.95), (STEM, top - 0.13))
    return top + 0.45


def _block(ax, pre: bool, title: str, formula: str) -> None:
    ax.text(STEM, -0.45, "x (block input)", ha="center", va="top", fontsize=9.5, color=INK)
    y = _sublayer(ax, 0.0, "attention", ATTN, "norm1", pre)
    y = _sublayer(ax, y, "feed-forward", FFN, "norm2", pre)
    _arrow(ax, (STEM, y), (STEM, y + 0.45))
    ax.text(STEM, y + 0.55, "block output", ha="center", va="bottom", fontsize=9.5, color=INK)
    ax.set_title(f"{title}\n{formula}", fontsize=10.5, color=INK, loc="left")
    ax.set_xlim(-1.2, 2.3)
    ax.set_ylim(-0.9, 6.2)
    ax.set_aspect("equal")
    ax.axis("off")


def draw_transformer_blocks() -> Figure:
    """Post-norm (2017, BERT) and pre-norm (GPT-2) blocks: where the norms sit on the residual."""
    fig = Figure(figsize=(8.0, 6.0), layout="constrained")
    left, right = fig.subplots(1, 2)
    _block(left, False, "post-norm (2017 paper, BERT)", "x = norm(x + f(x))")
    _block(right, True, "pre-norm (GPT-2 and later)", "x = x + f(norm(x))")
    fig.suptitle(
        "Grey: the residual stream. In pre-norm no norm sits on it.", fontsize=10, color="#333333"
    )
    return fig


FIGURES = {
    "transformer_blocks": (
        "Two transformer blocks. Post-norm: attention's output is added to the input, then "
        "normalised; the same for the feed-forward network. Pre-norm: the input is normalised before "
        "attention and before the feed-forward network, and each output is added to the "
        "un-normalised input, so a straight residual line runs from input to output.",
        draw_transformer_blocks,
    ),
}
"""This chapter's figures: name -> (alt text, drawing function); see tools/figures/catalogue.py."""
