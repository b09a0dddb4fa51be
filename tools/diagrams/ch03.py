"""The diagrams of chapter 03 (``make figures``): its catalogue (names, alt texts) and drawing code."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from course_utils import plotting
from course_utils.data import (
    EXAMPLE_TOKENS,
)
from tools.diagrams._draw import (
    _future,
    _panel_arrow,
    _trainable_trail,
)


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


FIGURES = {
    "causal_mask": (
        "Three 6 by 6 matrices: the attention scores, the same scores with every entry above the "
        "diagonal (a future token) set to minus infinity, and the softmax weights, which are zero "
        "above the diagonal and sum to 1 in each row.",
        draw_causal_mask,
    ),
}
"""This chapter's figures: name -> (alt text, drawing function); see tools/figures.py."""
