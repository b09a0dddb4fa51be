"""Chapter 11's diagram: the KV cache of six published models against the context length.

Instructor machinery, drawn through :mod:`tools.figures`. The bytes come from chapter 11's own
``kv_cache_bytes`` and ``PUBLISHED`` layouts (``course_utils.chapters``).
"""

from __future__ import annotations

from matplotlib.figure import Figure

from course_utils.chapters import PUBLISHED, kv_cache_bytes
from course_utils.plotting import HEAD_COLOURS, INPUT_COLOUR, MUTED_COLOUR

CONTEXTS = [2**k for k in range(8, 18)]  # 256 to 131,072 tokens


def draw_kv_wall_bytes() -> Figure:
    fig = Figure(figsize=(7.0, 4.0))
    ax = fig.add_subplot()
    colours = (*HEAD_COLOURS, INPUT_COLOUR, MUTED_COLOUR)
    for (name, layout), colour in zip(PUBLISHED.items(), colours):
        gib = [kv_cache_bytes(layout, n) / 2**30 for n in CONTEXTS]
        ax.plot(CONTEXTS, gib, marker="o", markersize=3, color=colour, label=name)
    ax.axhline(80, color="#888888", linestyle=":", linewidth=1)
    ax.text(CONTEXTS[0], 80 * 1.15, "80 GiB GPU", fontsize=8, color="#555555")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("context length (tokens), one text")
    ax.set_ylabel("KV cache, 16-bit (GiB)")
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


FIGURES = {
    "kv_wall_bytes": (
        "Log-log lines of 16-bit KV-cache size against context length, 256 to 131,072 tokens, one "
        "text: GPT-2 small, Llama 3 8B and Qwen3 8B grow in proportion; Mistral 7B flattens at its "
        "4,096-token window; Gemma 3 1B bends once its 22 windowed layers are full; DeepSeek-V3's "
        "latent cache grows at about half of Llama 3 8B's. A dotted line marks 80 GiB.",
        draw_kv_wall_bytes,
    ),
}
"""This chapter's figures: name -> (alt text, drawing function); see tools/figures.py."""
