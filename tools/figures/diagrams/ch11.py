"""Chapter 11's diagrams: the KV cache of six published models against the context length; the
keys each query keeps under top-k sparse attention.

Instructor machinery, drawn through :mod:`tools.figures.catalogue`. The bytes come from chapter 11's own
``kv_cache_bytes`` and ``PUBLISHED`` layouts (``course_utils.chapters``).
"""

from __future__ import annotations

import torch
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from course_utils.chapters import (
    MAX_CONTEXT,
    PUBLISHED,
    kv_cache_bytes,
    lightning_index,
    sparse_attention,
)
from course_utils.plotting import HEAD_COLOURS, INPUT_COLOUR, MUTED_COLOUR

CONTEXTS = [2**k for k in range(8, 18)]  # 256 to 131,072 tokens


def draw_kv_wall_bytes() -> Figure:
    fig = Figure(figsize=(7.0, 4.0))
    ax = fig.add_subplot()
    colours = (*HEAD_COLOURS, INPUT_COLOUR, MUTED_COLOUR)
    for (name, layout), colour in zip(PUBLISHED.items(), colours):
        limit = MAX_CONTEXT[name]  # solid up to the longest text the model reads, dotted beyond
        read = [n for n in CONTEXTS if n < limit] + [limit] * (limit <= CONTEXTS[-1])
        gib = [kv_cache_bytes(layout, n) / 2**30 for n in read]
        ax.plot(read, gib, marker="o", markersize=3, color=colour, label=name)
        beyond = [limit] + [n for n in CONTEXTS if n > limit]
        if len(beyond) > 1:
            gib = [kv_cache_bytes(layout, n) / 2**30 for n in beyond]
            ax.plot(beyond, gib, linestyle=":", linewidth=1.2, color=colour)
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


def draw_sparse_topk_keys() -> Figure:
    """Section 4's indexer (seed 12, 10 tokens): for k = 3 and k = 10, which keys each query keeps."""
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
    fig = Figure(figsize=(7.0, 3.6))
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
    fig.tight_layout()
    return fig


FIGURES = {
    "kv_wall_bytes": (
        "Log-log lines of 16-bit KV-cache size against context, 256 to 131,072 tokens, one text: "
        "GPT-2 small, Llama 3 8B, Qwen3 8B and DeepSeek-V3 (about half of Llama's) grow in "
        "proportion; Mistral 7B flattens at its 4,096-token window; Gemma 3 1B bends once its 22 "
        "windowed layers are full. Each line is solid up to the longest text its model reads, "
        "dotted beyond. A grey dotted line marks 80 GiB.",
        draw_kv_wall_bytes,
    ),
    "sparse_topk_keys": (
        "Two 10 by 10 grids of query position against key position for section 4's lightning "
        "indexer. Left, k = 3: each query keeps at most 3 keys at or before its own position "
        "(dark), its other earlier keys are dropped (grey), later keys are never chosen (white); "
        "27 of the 55 allowed (query, key) pairs are kept. Right, k = 10: every earlier key is kept, dense causal "
        "attention.",
        draw_sparse_topk_keys,
    ),
}
"""This chapter's figures: name -> (alt text, drawing function); see tools/figures/catalogue.py."""
