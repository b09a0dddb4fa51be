"""Chapter 09's diagram: the causal mask, the sliding-window band, and a windowed cache step.

Instructor machinery, drawn through :mod:`tools.figures.catalogue` like every other figure. The masks
come from chapter 09's own ``sliding_window_mask`` (``course_utils.chapters``).
"""

from __future__ import annotations

import torch
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from course_utils.chapters import sliding_window_mask
from course_utils.plotting import INK
from course_utils.plotting import KEY_COLOUR as ALLOWED
from course_utils.plotting import QUERY_COLOUR as CACHED
from tools.figures.diagrams._draw import _readable

N_TOKENS = 8
WINDOW = 3
NEW = 2  # queries of the cached step


def _grid(
    ax, allowed: torch.Tensor, first_query: int, title: str, kept: range | None = None
) -> None:
    """One boolean mask as a grid: allowed cells filled, hidden ones hatched; rows are queries."""
    n_q, n_k = allowed.shape
    for i in range(n_q):
        for j in range(n_k):
            if allowed[i, j]:
                ax.add_patch(
                    Rectangle((j, i), 1, 1, facecolor=ALLOWED, edgecolor="white", linewidth=1.5)
                )
            else:
                ax.add_patch(
                    Rectangle(
                        (j, i),
                        1,
                        1,
                        facecolor="#F2F2F2",
                        edgecolor="white",
                        linewidth=1.5,
                        hatch="///",
                        zorder=0.5,
                    )
                )
    if kept is not None:  # the only keys the step reads
        ax.add_patch(
            Rectangle(
                (kept.start, -0.18),
                len(kept),
                n_q + 0.36,
                fill=False,
                edgecolor=CACHED,
                linewidth=2.2,
                linestyle="--",
            )
        )
        ax.text(
            kept.start + len(kept) / 2,
            n_q + 0.55,
            "the only keys\nthis step reads",
            ha="center",
            va="top",
            fontsize=9,
            color=CACHED,
        )
    ax.set_xlim(-0.05, n_k + 0.05)
    ax.set_ylim(max(n_q, 3) + 0.9 if kept is not None else n_q + 0.05, -0.05)
    ax.set_aspect("equal")
    ax.set_xticks([j + 0.5 for j in range(n_k)], [str(j) for j in range(n_k)], fontsize=8.5)
    ax.set_yticks(
        [i + 0.5 for i in range(n_q)], [str(first_query + i) for i in range(n_q)], fontsize=8.5
    )
    ax.tick_params(length=0)
    ax.xaxis.set_ticks_position("top")
    ax.xaxis.set_label_position("top")
    ax.set_xlabel("key position j", fontsize=9, color=INK)
    ax.set_ylabel("query position i", fontsize=9, color=INK)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set_title(title, fontsize=10.5, color=INK, pad=28, loc="left")


def draw_sliding_window() -> Figure:
    """Causal (W = n), a band of W = 3, and the 2 newest of 8 tokens against a cache of W keys."""
    fig = Figure(figsize=(13.0, 4.6), layout="constrained")
    axes = fig.subplots(1, 3, width_ratios=[1, 1, 1])
    _grid(
        axes[0],
        sliding_window_mask(N_TOKENS, N_TOKENS, N_TOKENS),
        0,
        "causal (chapter 03): 0 ≤ i − j",
    )
    _grid(
        axes[1],
        sliding_window_mask(N_TOKENS, N_TOKENS, WINDOW),
        0,
        f"sliding window W = {WINDOW}: 0 ≤ i − j < {WINDOW}",
    )
    _grid(
        axes[2],
        sliding_window_mask(NEW, N_TOKENS, WINDOW),
        N_TOKENS - NEW,
        f"the {NEW} newest of {N_TOKENS} tokens, W = {WINDOW}:\nbottom-right rows of the band",
        kept=range(N_TOKENS - NEW - WINDOW + 1, N_TOKENS),
    )
    fig.suptitle(
        "Blue: the query may attend to the key (True); hatched: hidden (−∞ before the softmax). "
        f"Every row of the band has at most W = {WINDOW} keys.",
        fontsize=10.5,
        color="#333333",
    )
    return _readable(fig)


FIGURES = {
    "sliding_window": (
        "Three boolean masks, blue where a query may attend to a key and hatched where it is hidden: "
        "the 8 by 8 causal mask, the sliding-window band of width 3 (each query sees itself and the 2 "
        "tokens before it), and the 2 newest of 8 tokens as queries, the bottom-right rows of the band, "
        "which read only keys 4 to 7.",
        draw_sliding_window,
    ),
}
"""This chapter's figures: name -> (alt text, drawing function); see tools/figures/catalogue.py."""
