"""Explorer of chapter 11: the KV cache of a published model under every layout."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from course_utils import _explorer_parts as X
from course_utils import plotting as P
from course_utils.chapters import PUBLISHED, KVLayout, kv_cache_bytes
from course_utils.chapters.ch09.explorer import KV_CONTEXTS
from course_utils.plotting import explorer, handles
from course_utils.validation import expect_int

__all__ = ["KVWallView", "kv_wall_layouts", "kv_wall_data", "draw_kv_wall", "kv_wall_explorer"]

QUERY_HEADS = dict(zip(PUBLISHED, (12, 32, 32, 4, 32, 128)))
"""num_attention_heads of each published config (what MHA would give every query head)."""

BATCHES = (1, 2, 4, 8, 16, 32, 64)


def kv_wall_layouts(model: str) -> dict[str, KVLayout | None]:
    """The model's published layout and the same shape under the other layouts (None: not possible,
    as sharing pairs of layers in a model with an odd number of layers). Keys and values are
    head_dim wide in the variants (DeepSeek-V3's real keys are 192 wide, its values 128)."""
    X._one_of(model, "model", list(PUBLISHED), str)
    base = PUBLISHED[model]
    plain = KVLayout(base.layers, base.kv_heads, base.head_dim)
    return {
        "published": base,
        "MHA": replace(plain, kv_heads=QUERY_HEADS[model]),
        "GQA 8": replace(plain, kv_heads=min(8, QUERY_HEADS[model])),
        "MQA": replace(plain, kv_heads=1),
        "window 4,096": replace(plain, window=4096, windowed_caches=base.layers),
        "2 layers per cache": replace(plain, layers_per_cache=2) if base.layers % 2 == 0 else None,
        "MLA 512 + 64": replace(plain, latent_dim=512, rope_dim=64),
    }


KV_WALL_LAYOUTS = tuple(kv_wall_layouts("GPT-2 small"))  # the names of the bars, in their order


@dataclass(frozen=True)
class KVWallView:
    """What :func:`kv_wall_explorer` shows: one bar per layout, the chosen one highlighted."""

    model: str
    layout: str
    context: int
    batch: int
    # GiB of the batch's cache per layout, NaN where impossible: (len(KV_WALL_LAYOUTS),)
    gib: torch.Tensor


def kv_wall_data(
    model: str = "Llama 3 8B", layout: str = "published", context: int = 32_768, batch: int = 1
) -> KVWallView:
    """GiB of the 16-bit KV cache of ``batch`` texts of ``context`` tokens, for every layout of ``model``."""
    X._one_of(layout, "layout", KV_WALL_LAYOUTS, str)
    expect_int(batch, "batch", minimum=1)
    X._one_of(context, "context", KV_CONTEXTS)
    X._one_of(batch, "batch", BATCHES)
    gib = [
        float("nan") if lay is None else kv_cache_bytes(lay, context, batch) / 2**30
        for lay in kv_wall_layouts(model).values()
    ]
    return KVWallView(model, layout, context, batch, torch.tensor(gib, dtype=torch.float64))


def draw_kv_wall(fig, view: KVWallView) -> None:
    """Horizontal bars on a log-2 byte axis, the chosen layout highlighted."""
    h = handles(fig)
    n = len(KV_WALL_LAYOUTS)
    if not h:
        ax = fig.add_subplot()
        h["bars"] = ax.barh(range(n), [1.0] * n, height=0.6, animated=True)
        h["texts"] = [
            ax.text(1.0, i, "", va="center", fontsize=8.5, animated=True) for i in range(n)
        ]
        ax.set_xscale("log", base=2)
        ticks = [2.0**k for k in range(-10, 15, 3)]
        ax.set_xticks(ticks, [X.format_bytes(t * 2**30) for t in ticks])
        ax.set_xlim(2.0**-10, 2.0**16)
        ax.set_yticks(range(n), KV_WALL_LAYOUTS)
        ax.set_ylim(n - 0.5, -0.5)
        P.plain_axes(ax, "KV cache of the batch (16-bit)", "", axis="x")
    for i, (bar, text, gib) in enumerate(zip(h["bars"], h["texts"], view.gib.tolist())):
        known = gib == gib  # NaN: the layout is not possible for this model
        bar.set_width(gib if known else 0.0)
        bar.set_color(P.QUERY_COLOUR if KV_WALL_LAYOUTS[i] == view.layout else P.MUTED_COLOUR)
        text.set_position((gib * 1.1 if known else 2.0**-9.5, i))
        label = X.format_bytes(gib * 2**30) if known else "not possible (odd number of layers)"
        text.set_text(label)
    X._title(fig.axes[0], f"{view.model}, {view.batch} x {view.context:,} tokens", fontsize=9.5)


def kv_wall_explorer(
    model: str = "Llama 3 8B", layout: str = "published", context: int = 32_768, batch: int = 1
) -> None:
    """Choose a published model, a layout, a context length and a batch; the bars show the cache.

    Notebook: ``cu.widgets.kv_wall_explorer()``
    """
    start = {"model": model, "layout": layout, "context": context, "batch": batch}

    def controls(widgets):
        contexts = [(f"{k:,}", k) for k in KV_CONTEXTS]  # (label, value) pairs
        return {
            "model": widgets.Dropdown(options=list(PUBLISHED), value=model, description="model"),
            "layout": widgets.Dropdown(options=KV_WALL_LAYOUTS, value=layout, description="layout"),
            "context": widgets.SelectionSlider(
                options=contexts, value=context, description="context (tokens)", **X.slider_style()
            ),
            "batch": widgets.SelectionSlider(
                options=list(BATCHES), value=batch, description="batch", **X.slider_style()
            ),
        }

    explorer(kv_wall_data, draw_kv_wall, start, controls, figsize=(8.0, 4.2))
