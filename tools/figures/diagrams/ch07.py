"""The diagrams of chapter 07 (``make figures``): its catalogue (names, alt texts) and drawing code."""

from __future__ import annotations

from matplotlib.figure import Figure


def draw_attention_memory() -> Figure:
    """Bytes of the (b, h, n, n) score matrix vs the (b, n, d) activations, GPT-2 small (the explorer's drawing)."""
    from course_utils.widgets import draw_memory, memory_data

    fig = Figure(figsize=(8.0, 4.8), layout="constrained")
    draw_memory(fig, memory_data(1024, heads=12, batch=1, d_model=768, bytes_per_value=4))
    fig.axes[0].set_title(
        "GPT-2 small (12 heads, d = 768), batch 1, float32: one layer's attention scores "
        "vs its activations",
        fontsize=10,
    )
    return fig


FIGURES = {
    "attention_memory": (
        "Log-log plot of memory against sequence length for GPT-2 small: the attention score matrix "
        "grows with the square of the length and passes 16 and 80 GiB long before the activations, "
        "which grow linearly.",
        draw_attention_memory,
    ),
}
"""This chapter's figures: name -> (alt text, drawing function); see tools/figures/catalogue.py."""
