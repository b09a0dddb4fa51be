"""The diagrams of chapter 03 (``make figures``): its catalogue (names, alt texts) and drawing code."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from course_utils import plotting
from course_utils.data import (
    EXAMPLE_TOKENS,
)
from tools.figures.diagrams._draw import (
    _down_arrow,
    _flow_of_three,
    _future,
    _map_text,
    _note,
    _panel_arrow,
    _trainable_trail,
)


def draw_causal_mask() -> Figure:
    """Scores, the scores with the future masked to -inf, and the softmax weights (chapter 03's numbers)."""
    scores, masked, weights = _trainable_trail()
    fig = Figure(figsize=(10.4, 9.8), layout="constrained")
    axes, right, down, corner = _flow_of_three(fig)
    kwargs = {"colorbar": False, "decimals": 4}
    plotting.heatmap(scores, EXAMPLE_TOKENS, ax=axes[0], title="scores  q kᵀ", **kwargs)
    plotting.heatmap(
        masked,
        EXAMPLE_TOKENS,
        ax=axes[1],
        title="masked scores",
        ylabel="",
        vmin=float(scores.min()),
        vmax=float(scores.max()),
        **kwargs,
    )
    plotting.heatmap(
        weights,
        EXAMPLE_TOKENS,
        ax=axes[2],
        vmin=0,
        vmax=1,
        ylabel="",
        title="weights (each row sums to 1)",
        **kwargs,
    )
    _map_text(axes, 8.5)
    for i, j in _future(6).nonzero().tolist():
        axes[1].add_patch(
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
    _panel_arrow(right, "set the future\n(key after\nquery)\nto $-\\infty$")
    _down_arrow(down, "softmax of scores / $\\sqrt{2}$,\nrow by row: $e^{-\\infty} = 0$")
    _note(
        corner,
        "A causal mask on chapter 03's\ntrainable attention (SelfAttention_v2,\nseed 789, d_out = 2): "
        "each token\nattends only to itself and the\ntokens before it.",
    )
    return fig


FIGURES = {
    "causal_mask": (
        "Three 6 by 6 matrices: the attention scores, the same scores with every entry above the "
        "diagonal (a future token) set to minus infinity, and the softmax weights, which are zero "
        "above the diagonal and sum to 1 in each row.",
        draw_causal_mask,
    ),
}
"""This chapter's figures: name -> (alt text, drawing function); see tools/figures/catalogue.py."""
