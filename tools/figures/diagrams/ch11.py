"""Chapter 11's diagrams: the KV cache of six published models against the context length; the
keys each query keeps under top-k sparse attention.

Instructor machinery, drawn through :mod:`tools.figures.catalogue`. The bytes come from chapter 11's own
``kv_cache_bytes`` and ``PUBLISHED`` layouts (``course_utils.chapters``).
"""

from __future__ import annotations

import torch
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from course_utils.chapters import (
    PUBLISHED,
    STATED_CONTEXT,
    kv_cache_bytes,
    lightning_index,
    sparse_attention,
)
from course_utils.plotting import HEAD_COLOURS, INPUT_COLOUR, MUTED_COLOUR

CONTEXTS = [2**k for k in range(8, 18)]  # 256 to 131,072 tokens


def draw_kv_wall_bytes() -> Figure:
    """Solid up to the context each model's makers state, dotted beyond; a marker shape per model,
    and Llama 3 8B's line drawn wide beneath the others, so that where Mistral's lies on it (up to
    its 4,096-token window) both can be seen."""
    fig = Figure(figsize=(7.0, 4.0))
    ax = fig.add_subplot()
    colours = (*HEAD_COLOURS, INPUT_COLOUR, MUTED_COLOUR)
    for (name, layout), colour, marker in zip(PUBLISHED.items(), colours, "osDv^P"):
        wide = name == "Llama 3 8B"  # Mistral's line lies on it up to 4,096 tokens
        style = {"color": colour, "linewidth": 3.5 if wide else 1.5, "zorder": 1 if wide else 2}
        stated = STATED_CONTEXT[name]  # solid up to it, dotted beyond
        read = [n for n in CONTEXTS if n < stated] + [stated] * (stated <= CONTEXTS[-1])
        gib = [kv_cache_bytes(layout, n) / 2**30 for n in read]
        ax.plot(read, gib, marker=marker, markersize=7 if wide else 4, label=name, **style)
        beyond = [stated] + [n for n in CONTEXTS if n > stated]
        if len(beyond) > 1:
            gib = [kv_cache_bytes(layout, n) / 2**30 for n in beyond]
            ax.plot(beyond, gib, linestyle=":", **style)
    ax.axhline(80, color="#888888", linestyle=":", linewidth=1)
    ax.text(CONTEXTS[0], 80 * 1.15, "80 GiB GPU", fontsize=8, color="#555555")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("context length (tokens), one text; dotted: past the stated context")
    ax.set_ylabel("KV cache, 16-bit (GiB)")
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def draw_sparse_topk_keys() -> Figure:
    """Section 4's indexer (seed 12, 10 tokens): for k = 3 and k = 10, the keys each query keeps."""
    draws = torch.Generator().manual_seed(12)
    xs = torch.randn(1, 10, 16, dtype=torch.float64, generator=draws)  # (b, N, d)
    w_q, w_k, w_w = (
        torch.randn(m, 16, dtype=torch.float64, generator=draws) / 4 for m in (8, 4, 2)
    )
    scores = lightning_index((xs @ w_q.T).view(1, 10, 2, 4), xs @ w_k.T, xs @ w_w.T)  # (1, 10, 10)
    eye = torch.eye(10, dtype=torch.float64).expand(
        1, 1, 10, 10
    )  # v = I: the output is the weights
    q = torch.zeros(1, 1, 10, 4, dtype=torch.float64)  # equal scores: only the choice shows
    fig = Figure(figsize=(7.0, 4.0))
    cmap = ListedColormap(["white", "#dddddd", HEAD_COLOURS[0]])
    for panel, topk in enumerate((3, 10)):
        ax = fig.add_subplot(1, 2, panel + 1)
        kept = sparse_attention(q, q, eye, scores, topk)[0, 0] > 0  # (10, 10)
        grid = torch.ones(10, 10).tril() + kept.double()  # 0 future, 1 dropped, 2 kept
        ax.imshow(grid.numpy(), cmap=cmap, vmin=0, vmax=2)
        ax.set_title(f"k = {topk}: {int(kept.sum())} of the 55 allowed keys kept", fontsize=10)
        ax.set_xlabel("key position")
        ax.set_ylabel("query position")
        ax.set_xticks(range(10))
        ax.set_yticks(range(10))
    kinds = zip(cmap.colors[::-1], ("kept", "earlier, dropped", "later: never chosen"))
    handles = [Patch(facecolor=c, edgecolor="#888888", label=label) for c, label in kinds]
    fig.tight_layout(rect=(0, 0.07, 1, 1))  # room below for the legend
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=9, frameon=False)
    return fig


FIGURES = {
    "kv_wall_bytes": (
        "Log-log lines of one text's 16-bit KV cache against context, 256 to 131,072 tokens: GPT-2 "
        "small, Llama 3 8B (wide), Qwen3 8B and DeepSeek-V3 (about half of Llama's) grow in step; "
        "Mistral 7B lies on Llama's line up to its 4,096-token window, then flattens; Gemma 3 1B "
        "bends once its 22 windowed layers are full. Solid up to the context the makers state, "
        "dotted beyond; a grey dotted line at 80 GiB.",
        draw_kv_wall_bytes,
    ),
    "sparse_topk_keys": (
        "Two 10 by 10 grids of query position against key position for section 4's lightning "
        "indexer. Left, k = 3: each query keeps at most 3 keys at or before its own position "
        "(orange), its other earlier keys are dropped (grey), later keys are never chosen "
        "(white), as the legend below says; 27 of the 55 allowed (query, key) pairs are kept. "
        "Right, k = 10: every earlier key is kept, dense causal attention.",
        draw_sparse_topk_keys,
    ),
}
"""This chapter's figures: name -> (alt text, drawing function); see tools/figures/catalogue.py."""
