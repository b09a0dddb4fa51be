"""Explorer of chapter 09: the KV cache against key/value heads, context length and precision."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from course_utils import plotting as P
from course_utils._explorer_parts import (
    _byte_axis,
    _divisors,
    _gpu_lines,
    _one_of,
    _title,
    format_bytes,
    slider_style,
)
from course_utils.chapters import kv_bytes_per_token
from course_utils.chapters.ch07.explorer import DTYPE_BYTES
from course_utils.plotting import explorer, handles
from course_utils.validation import CourseInputError, expect_int

__all__ = [
    "KV_CONTEXTS",
    "KV_DTYPE_BYTES",
    "KVCacheView",
    "kv_cache_data",
    "draw_kv_cache",
    "kv_cache_explorer",
]

KV_CONTEXTS = tuple(2**k for k in range(10, 18))
"""Context lengths offered by :func:`kv_cache_explorer`: 1,024 to 131,072 tokens."""

KV_DTYPE_BYTES = {**DTYPE_BYTES, "int8": 1}
"""Number formats of the cache and their bytes per number (8-bit caches are a common option)."""

LLAMA3_8B = {"layers": 32, "num_heads": 32, "head_dim": 128}
"""Llama 3 8B's published config.json: 32 layers, 32 query heads of width 4096 / 32 = 128."""


@dataclass(frozen=True)
class KVCacheView:
    """What :func:`kv_cache_explorer` shows for one setting (one text; a batch multiplies it)."""

    n_kv_heads: int
    context: int
    bytes_per_value: int
    layers: int
    num_heads: int
    head_dim: int
    options: list[int]  # every allowed n_kv_heads: the divisors of num_heads
    per_token: int  # bytes per token for n_kv_heads
    gib: (
        torch.Tensor
    )  # (len(options),) GiB of the whole cache at `context` tokens, per option (float64)


def kv_cache_data(
    n_kv_heads: int = 8,
    context: int = 8_192,
    bytes_per_value: int = 2,
    *,
    layers: int = LLAMA3_8B["layers"],
    num_heads: int = LLAMA3_8B["num_heads"],
    head_dim: int = LLAMA3_8B["head_dim"],
) -> KVCacheView:
    """KV-cache bytes of one text of ``context`` tokens for every possible number of key/value heads.

    Defaults are Llama 3 8B (32 layers, 32 query heads of 128, ``n_kv_heads`` 8) in 16-bit numbers.
    The bytes come from chapter 09's ``kv_bytes_per_token``.
    """
    for value, name in (
        (layers, "layers"),
        (num_heads, "num_heads"),
        (head_dim, "head_dim"),
        (n_kv_heads, "n_kv_heads"),
        (context, "context"),
        (bytes_per_value, "bytes_per_value"),
    ):
        expect_int(value, name, minimum=1)
    options = _divisors(num_heads)
    if n_kv_heads not in options:
        raise CourseInputError(
            f"n_kv_heads must divide num_heads={num_heads}, i.e. be one of {options}, "
            f"but got {n_kv_heads!r}."
        )
    _one_of(context, "context", KV_CONTEXTS)
    _one_of(bytes_per_value, "bytes_per_value", sorted(set(KV_DTYPE_BYTES.values())))
    per_option = [
        kv_bytes_per_token(layers, g, head_dim, bytes_per_value) * context for g in options
    ]
    return KVCacheView(
        n_kv_heads,
        context,
        bytes_per_value,
        layers,
        num_heads,
        head_dim,
        options,
        per_token=kv_bytes_per_token(layers, n_kv_heads, head_dim, bytes_per_value),
        gib=torch.tensor(per_option, dtype=torch.float64) / 2**30,
    )


def _kind(g: int, h: int) -> str:
    return "MQA" if g == 1 else "MHA" if g == h else "GQA"


def draw_kv_cache(fig, view: KVCacheView) -> None:
    """One bar per possible n_kv_heads (log scale), the chosen one highlighted, GPU sizes marked."""
    h = handles(fig)
    positions = range(len(view.options))
    if not h:
        ax = fig.add_subplot()
        h["bars"] = ax.bar(positions, [1.0] * len(view.options), width=0.65, animated=True)
        h["texts"] = [
            ax.text(i, 1.0, "", ha="center", va="bottom", fontsize=8.5, animated=True)
            for i in positions
        ]
        _gpu_lines(ax, (24, 80), -0.55, 1, 1.12)  # labelled above g = 1's bar
        _byte_axis(ax, range(-7, 9, 2), 2**30)
        ax.set_ylim(2.0**-8, 2.0**9)  # every setting of the controls fits (4 MiB to 256 GiB)
        ax.set_xticks(list(positions), [f"{g}\n{_kind(g, view.num_heads)}" for g in view.options])
        ax.set_xlim(-0.6, len(view.options) - 0.4)
        P.plain_axes(ax, "key/value heads g", "KV cache of one text", axis="y")
        h["ax"] = ax
    for bar, text, g, gib in zip(h["bars"], h["texts"], view.options, view.gib.tolist()):
        bar.set_height(gib)
        bar.set_color(P.QUERY_COLOUR if g == view.n_kv_heads else P.MUTED_COLOUR)
        text.set_position((text.get_position()[0], gib * 1.08))
        text.set_text(format_bytes(gib * 2**30))
    dtype = next(name for name, size in KV_DTYPE_BYTES.items() if size == view.bytes_per_value)
    chosen = view.per_token * view.context
    _title(
        h["ax"],
        f"{view.layers} layers x {view.num_heads} heads of {view.head_dim}, {dtype}, {view.context:,} "
        f"tokens: g = {view.n_kv_heads} keeps {format_bytes(view.per_token)} per token, "
        f"{format_bytes(chosen)} in all",
        fontsize=9.5,
    )


def kv_cache_explorer(n_kv_heads: int = 8, context: int = 8_192, dtype: str = "bfloat16") -> None:
    """Slide the key/value heads, the context length and the number format of a Llama-3-8B-shaped cache.

    Args:
        n_kv_heads: the starting number of key/value heads (a divisor of 32; Llama 3 8B uses 8).
        context: the starting context length (one of 1,024, 2,048, ..., 131,072 tokens).
        dtype: the starting number format, one of "float32", "bfloat16", "int8".

    Notebook: ``cu.widgets.kv_cache_explorer()``
    """
    _one_of(dtype, "dtype", list(KV_DTYPE_BYTES), str)
    start = {"n_kv_heads": n_kv_heads, "context": context, "bytes_per_value": KV_DTYPE_BYTES[dtype]}
    options = _divisors(LLAMA3_8B["num_heads"])

    def controls(widgets):
        return {
            "n_kv_heads": widgets.SelectionSlider(
                options=options, value=n_kv_heads, description="key/value heads g", **slider_style()
            ),
            "context": widgets.SelectionSlider(
                options=[(f"{k:,}", k) for k in KV_CONTEXTS],
                value=context,
                description="context length (tokens)",
                **slider_style(),
            ),
            "bytes_per_value": widgets.Dropdown(
                options=list(KV_DTYPE_BYTES.items()),
                value=KV_DTYPE_BYTES[dtype],
                description="format",
            ),
        }

    explorer(kv_cache_data, draw_kv_cache, start, controls, figsize=(8.0, 4.4))
