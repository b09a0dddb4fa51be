"""Explorer of chapter 11: the KV cache of a published model under every layout."""

from __future__ import annotations

from dataclasses import dataclass
from math import nan

import torch

from course_utils import _explorer_parts as X
from course_utils import plotting as P
from course_utils.chapters import PUBLISHED, beyond_limit, kv_cache_bytes, layout_variants
from course_utils.chapters.ch09.explorer import KV_CONTEXTS
from course_utils.plotting import explorer, handles

__all__ = ["KVWallView", "kv_wall_data", "draw_kv_wall", "kv_wall_explorer"]

BATCHES = (1, 2, 4, 8, 16, 32, 64)
KV_WALL_LAYOUTS = tuple(layout_variants("GPT-2 small"))  # the names of the bars, in their order
GPU_GIB = (24, 80)  # the memory of two common accelerators, drawn as dashed lines


@dataclass(frozen=True)
class KVWallView:
    """What :func:`kv_wall_explorer` shows: one bar per layout, the chosen one highlighted."""

    model: str
    layout: str
    context: int
    batch: int
    gib: torch.Tensor  # (bars,): GiB of the batch's cache, NaN where the shape cannot take it
    notes: tuple[str, ...]  # why the shape cannot take a layout ("" where it can), one per bar


def kv_wall_data(
    model: str = "Llama 3 8B", layout: str = "published", context: int = 32_768, batch: int = 1
) -> KVWallView:
    """GiB of the 16-bit KV cache of ``batch`` texts of ``context`` tokens, for every layout of
    ``model`` (``layout``: the bar in colour)."""
    X._one_of(model, "model", list(PUBLISHED), str)
    X._one_of(layout, "layout", KV_WALL_LAYOUTS, str)
    X._one_of(context, "context", KV_CONTEXTS, int)
    X._one_of(batch, "batch", BATCHES, int)
    lays = layout_variants(model).values()  # a layout, or why the shape cannot take it
    gib = [nan if isinstance(v, str) else kv_cache_bytes(v, context, batch) / 2**30 for v in lays]
    notes = tuple(v if isinstance(v, str) else "" for v in lays)
    return KVWallView(model, layout, context, batch, torch.tensor(gib, dtype=torch.float64), notes)


def draw_kv_wall(fig, view: KVWallView) -> None:
    """Horizontal bars on a log-2 byte axis, the chosen layout highlighted, dashed lines at 24 and
    80 GiB."""
    h = handles(fig)
    n = len(KV_WALL_LAYOUTS)
    if not h:
        ax = fig.add_subplot()
        h["bars"] = ax.barh(range(n), [1.0] * n, height=0.6, animated=True)
        h["texts"] = [
            ax.text(1.0, i, "", va="center", fontsize=8.5, animated=True) for i in range(n)
        ]
        for gib, side in zip(GPU_GIB, ("right", "left")):  # animated: drawn over the bars
            ax.axvline(gib, color="#333333", linestyle="--", linewidth=1, zorder=3, animated=True)
            ax.text(gib, -0.85, f" {gib} GiB ", ha=side, va="center", fontsize=8.5)
        ax.set_xscale("log", base=2)
        ticks = [2.0**k for k in range(-10, 15, 3)]
        ax.set_xticks(ticks, [X.format_bytes(t * 2**30) for t in ticks])
        ax.set_xlim(2.0**-10, 2.0**16)
        ax.set_yticks(range(n), KV_WALL_LAYOUTS)
        ax.set_ylim(n - 0.5, -1.2)  # room above the bars for the lines' labels
        P.plain_axes(ax, "KV cache of the batch (16-bit)", "", axis="x")
    for i, (bar, text, gib) in enumerate(zip(h["bars"], h["texts"], view.gib.tolist())):
        known = not view.notes[i]
        bar.set_width(gib if known else 0.0)
        bar.set_color(P.QUERY_COLOUR if KV_WALL_LAYOUTS[i] == view.layout else P.MUTED_COLOUR)
        text.set_position((gib * 1.1 if known else 2.0**-9.5, i))
        text.set_text(X.format_bytes(gib * 2**30) if known else view.notes[i])
    beyond = beyond_limit(view.model, view.context)
    title = f"{view.model}, {view.batch} x {view.context:,} tokens" + (
        f"\n{beyond}" if beyond else ""
    )
    X._title(fig.axes[0], title, fontsize=9.5)


def kv_wall_explorer(model: str = "Llama 3 8B", context: int = 32_768, batch: int = 1) -> None:
    """Choose a published model, a context length and a batch; the bars show the cache of the
    published layout (in colour) and of the others.

    Notebook: ``cu.widgets.kv_wall_explorer()``
    """
    start = {"model": model, "context": context, "batch": batch}

    def controls(widgets):
        contexts = [(f"{k:,}", k) for k in KV_CONTEXTS]  # (label, value) pairs
        return {
            "model": widgets.Dropdown(options=list(PUBLISHED), value=model, description="model"),
            "context": widgets.SelectionSlider(
                options=contexts, value=context, description="context (tokens)", **X.slider_style()
            ),
            "batch": widgets.SelectionSlider(
                options=list(BATCHES), value=batch, description="batch", **X.slider_style()
            ),
        }

    explorer(kv_wall_data, draw_kv_wall, start, controls, figsize=(8.0, 4.2))
