"""Chapter 08's diagram: the look-back task, the map attention starts from, and the map it must find.

Instructor machinery, drawn through :mod:`tools.figures.catalogue` like every other figure. The tokens
are the example sequence chapter 08 prints (``torch.Generator().manual_seed(5)``), written out
here so the figure never depends on a random generator.
"""

from __future__ import annotations

import torch
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

from course_utils import plotting
from course_utils.plotting import INK, KEY_COLOUR, MUTED_COLOUR, QUERY_COLOUR
from tools.figures.diagrams._draw import _readable

TOKENS = (1, 4, 7, 5, 6, 0, 2, 3, 8, 4, 9, 0)
"""Chapter 08's example sequence (12 tokens from a vocabulary of 10)."""
LAG = 2


def _task(ax) -> None:
    """Two rows of cells, tokens above and targets below, with arrows from t - 2 to t."""
    n = len(TOKENS)
    for j, token in enumerate(TOKENS):
        ax.add_patch(
            Rectangle((j, 1.6), 1, 1, facecolor="#EAF2F8", edgecolor=KEY_COLOUR, linewidth=1.2)
        )
        ax.text(j + 0.5, 2.1, str(token), ha="center", va="center", fontsize=11, color=INK)
        target = TOKENS[j - LAG] if j >= LAG else None
        ax.add_patch(
            Rectangle(
                (j, 0),
                1,
                1,
                facecolor="#FBEDE5" if target is not None else "#F2F2F2",
                edgecolor=QUERY_COLOUR if target is not None else MUTED_COLOUR,
                linewidth=1.2,
                hatch=None if target is not None else "///",
            )
        )
        ax.text(
            j + 0.5,
            0.5,
            str(target) if target is not None else "−100",
            ha="center",
            va="center",
            fontsize=11 if target is not None else 8,
            color=INK if target is not None else "#777777",
        )
        ax.text(j + 0.5, 2.85, str(j), ha="center", va="bottom", fontsize=8, color="#666666")
    for j in (4, 9):  # two examples of the rule
        ax.add_patch(
            FancyArrowPatch(
                (j - LAG + 0.5, 1.6),
                (j + 0.5, 1.0),
                arrowstyle="-|>",
                mutation_scale=11,
                color=QUERY_COLOUR,
                linewidth=1.4,
                shrinkA=2,
                shrinkB=2,
            )
        )
    ax.text(-0.2, 2.1, "token", ha="right", va="center", fontsize=10, color=INK)
    ax.text(-0.2, 0.5, "target", ha="right", va="center", fontsize=10, color=INK)
    ax.text(n + 0.2, 2.85, "position t", ha="left", va="bottom", fontsize=8, color="#666666")
    ax.set_xlim(-1.6, n + 1.6)
    ax.set_ylim(-0.2, 3.4)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(
        "The task: the target at position t is the token at t − 2 (positions 0 and 1 have none: −100)",
        fontsize=10.5,
        color=INK,
        loc="left",
    )


def lookback_maps() -> tuple[torch.Tensor, torch.Tensor]:
    """The prefix average (zero queries) and the right map (all weight on t - 2; rows 0, 1 unchanged)."""
    n = len(TOKENS)
    future = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)  # (n, n)
    average = torch.softmax(
        torch.zeros(n, n).masked_fill(future, float("-inf")), dim=-1
    )  # (n, n): 1/(t+1)
    right = average.clone()  # (n, n)
    right[LAG:] = 0.0
    right[torch.arange(LAG, n), torch.arange(n - LAG)] = 1.0
    return average.masked_fill(future, float("nan")), right.masked_fill(future, float("nan"))


def draw_lookback_task() -> Figure:
    """The task on chapter 08's example tokens, then the map before training and the map to learn."""
    fig = Figure(figsize=(11.0, 7.2), layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=[0.55, 1.6])
    _task(top.subplots())
    axes = bottom.subplots(1, 3, width_ratios=[1, 0.28, 1])
    average, right = lookback_maps()
    labels = [str(t) for t in range(len(TOKENS))]  # positions: the rule is about where, not what
    kwargs = {"vmin": 0, "vmax": 1, "annotate": False, "colorbar": False, "xlabel": "key position"}
    plotting.heatmap(
        average,
        labels,
        ax=axes[0],
        ylabel="query position t",
        title="start: zero queries, every score 0,\nweight 1/(t + 1) on each visible key (prefix average)",
        **kwargs,
    )
    plotting.heatmap(
        right,
        labels,
        ax=axes[2],
        ylabel="",
        title="the right answer: each row from t = 2 on\nputs all its weight on key t − 2",
        **kwargs,
    )
    for ax in (axes[0], axes[2]):
        for i in range(LAG):  # rows without a target: anything goes
            ax.add_patch(
                Rectangle(
                    (-0.5, i - 0.5),
                    i + 1,
                    1,
                    fill=False,
                    edgecolor=MUTED_COLOUR,
                    hatch="///",
                    linewidth=0,
                )
            )
        ax.text(LAG + 0.2, LAG / 2 - 0.5, "no target", va="center", fontsize=8, color="#666666")
    for i in range(LAG, len(TOKENS)):
        axes[2].add_patch(
            Rectangle(
                (i - LAG - 0.5, i - 0.5), 1, 1, fill=False, edgecolor=QUERY_COLOUR, linewidth=1.6
            )
        )
    axes[1].set_xlim(0, 1)
    axes[1].set_ylim(0, 1)
    axes[1].axis("off")
    axes[1].add_patch(
        FancyArrowPatch(
            (0.1, 0.55), (0.9, 0.55), arrowstyle="-|>", mutation_scale=16, color=INK, linewidth=1.8
        )
    )
    axes[1].text(
        0.5, 0.45, "training\n(a few hundred\nsteps)", ha="center", va="top", fontsize=9, color=INK
    )
    bottom.colorbar(axes[2].images[0], ax=list(axes), shrink=0.7, label="attention weight")
    return _readable(fig)


FIGURES = {
    "lookback_task": (
        "The look-back task on twelve tokens: the target at each position is the token two places "
        "earlier (positions 0 and 1 have none). Below, two 12 by 12 causal attention maps: at the start, "
        "with zero queries, each row spreads its weight evenly over the keys it may see (the prefix "
        "average); the right answer puts all of row t's weight on key t - 2.",
        draw_lookback_task,
    ),
}
"""This chapter's figures: name -> (alt text, drawing function); see tools/figures/catalogue.py."""
