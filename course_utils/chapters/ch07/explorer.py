"""Explorer of chapter 07: memory of the (b, h, n, n) score matrix."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from course_utils import plotting as P
from course_utils._explorer_parts import (
    _byte_axis,
    _gpu_lines,
    _one_of,
    _title,
    format_bytes,
    slider_style,
)
from course_utils.chapters import score_bytes
from course_utils.plotting import explorer, handles
from course_utils.validation import expect_int

__all__ = [
    "MEMORY_LENGTHS",
    "DTYPE_BYTES",
    "MemoryView",
    "memory_data",
    "draw_memory",
    "memory_explorer",
]


# ----------------------------------------------------------------------------- 6. memory
MEMORY_LENGTHS = tuple(2**k for k in range(6, 18))
"""Sequence lengths offered by :func:`memory_explorer`: 64 to 131,072."""

DTYPE_BYTES = {"float32": 4, "bfloat16": 2}


@dataclass(frozen=True)
class MemoryView:
    """What :func:`memory_explorer` shows for one setting."""

    n: int
    heads: int
    batch: int
    d_model: int
    bytes_per_value: int
    lengths: torch.Tensor  # (N,) sequence lengths of the curves
    score_bytes: torch.Tensor  # (N,) bytes of the (b, h, n, n) score matrix (float64)
    activation_bytes: torch.Tensor  # (N,) bytes of the (b, n, d) activations (float64)
    score_now: int
    activation_now: int


_LENGTHS = torch.logspace(4, 17, 200, base=2, dtype=torch.float64)  # (200,) 16 to 131,072 tokens


def memory_data(
    n: int, heads: int = 12, batch: int = 1, d_model: int = 768, bytes_per_value: int = 4
) -> MemoryView:
    """Bytes of the (batch, heads, n, n) score matrix and of the (batch, n, d_model) activations.

    The score matrix grows with n squared, the activations with n: the scores are
    ``heads * n / d_model`` times larger. Defaults are GPT-2 small (12 heads, width 768) in float32.
    """
    return MemoryView(
        n,
        heads,
        batch,
        d_model,
        bytes_per_value,
        _LENGTHS,
        score_bytes=batch * heads * _LENGTHS**2 * bytes_per_value,
        activation_bytes=batch * _LENGTHS * d_model * bytes_per_value,
        score_now=score_bytes(batch, heads, n, bytes_per_value),  # chapter 07's count
        activation_now=batch * n * d_model * bytes_per_value,
    )


def draw_memory(fig, view: MemoryView) -> None:
    """Both byte counts against n on log-log axes, with the current n marked."""
    h = handles(fig)
    lengths = view.lengths.numpy()
    if not h:
        ax = fig.add_subplot()
        for key, colour, label in (
            ("scores", P.QUERY_COLOUR, "scores / weights (b, h, n, n): grows like n²"),
            ("acts", P.KEY_COLOUR, "activations (b, n, d): grows like n"),
        ):
            (h[key],) = ax.plot([], [], color=colour, linewidth=2, label=label, animated=True)
        _gpu_lines(ax, (16, 80), lengths[0], 2**30, 1.25)
        for key, colour, dy, ha, va in (
            ("s", P.QUERY_COLOUR, 6, "right", "bottom"),
            ("a", P.KEY_COLOUR, -6, "left", "top"),
        ):
            (h[f"dot_{key}"],) = ax.plot([], [], "o", color=colour, animated=True)
            h[f"text_{key}"] = ax.annotate(
                "",
                (0, 0),
                xytext=(8, dy),
                textcoords="offset points",
                fontsize=9,
                color=colour,
                ha=ha,
                va=va,
                animated=True,
            )
        h["at"] = ax.axvline(view.n, color="#555555", linestyle=":", linewidth=1, animated=True)
        h["equal"] = ax.annotate(
            "",
            (0, 0),
            xytext=(14, -22),
            textcoords="offset points",
            fontsize=8.5,
            color="#444444",
            animated=True,
            arrowprops={"arrowstyle": "-", "color": "#888888", "linewidth": 0.8},
        )
        ax.set_xscale("log", base=2)
        ticks = [4**k for k in range(2, 9)]
        ax.set_xticks(ticks, [f"{t:,}" for t in ticks])
        _byte_axis(ax, range(10, 61, 5))
        ax.set_xlim(lengths[0], lengths[-1])
        ax.set_ylim(2**12, 2**52)  # every setting of the controls fits
        P.plain_axes(ax, "sequence length n (tokens)", "memory for one layer", which="major")
        ax.legend(fontsize=9, loc="upper left", frameon=False)
        h["ax"] = ax
    h["scores"].set_data(lengths, view.score_bytes.numpy())
    h["acts"].set_data(lengths, view.activation_bytes.numpy())
    for key, value in (("s", view.score_now), ("a", view.activation_now)):
        h[f"dot_{key}"].set_data([view.n], [value])
        h[f"text_{key}"].xy = (view.n, value)
        h[f"text_{key}"].set_text(format_bytes(value))
    h["at"].set_xdata([view.n, view.n])
    equal = view.d_model / view.heads  # b*h*n*n == b*n*d  <=>  n == d / h
    h["equal"].set_visible(bool(lengths[0] <= equal <= lengths[-1]))
    h["equal"].xy = (equal, view.batch * equal * view.d_model * view.bytes_per_value)
    h["equal"].set_text(f"equal at n = d / h = {equal:,.4g}")
    dtype = next(
        (name for name, size in DTYPE_BYTES.items() if size == view.bytes_per_value),
        f"{view.bytes_per_value}-byte values",
    )
    ratio = view.score_now / view.activation_now
    times = f"{ratio:,.0f}" if ratio >= 10 else f"{ratio:.2g}"
    _title(
        h["ax"],
        f"b = {view.batch}, h = {view.heads}, d = {view.d_model}, {dtype}: at n = {view.n:,} "
        f"the scores take {times}× the activations' memory",
        fontsize=10,
    )


def memory_explorer(n: int = 1024, heads: int = 12, batch: int = 1, d_model: int = 768) -> None:
    """Slide the sequence length, heads and batch; compare the n² score matrix with the activations.

    Args:
        n: the starting sequence length (one of 64, 128, ..., 131072).
        heads, batch: the starting heads (up to 32) and batch size (up to 64).
        d_model: the model width (default 768, GPT-2 small).

    Notebook: ``cu.widgets.memory_explorer()``
    """
    _one_of(n, "n", MEMORY_LENGTHS)
    for value, name, top in (
        (heads, "heads", 32),
        (batch, "batch", 64),
        (d_model, "d_model", 2**16),
    ):
        expect_int(value, name, minimum=1, maximum=top)

    def controls(widgets):
        return {
            "n": widgets.SelectionSlider(
                options=[(f"{k:,}", k) for k in MEMORY_LENGTHS],
                value=n,
                description="sequence length n",
                **slider_style(),
            ),
            "heads": widgets.IntSlider(
                value=heads, min=1, max=32, description="heads h", **slider_style()
            ),
            "batch": widgets.IntSlider(
                value=batch, min=1, max=64, description="batch b", **slider_style()
            ),
            "dtype": widgets.Dropdown(
                options=list(DTYPE_BYTES.items()), value=4, description="dtype"
            ),
        }

    explorer(
        lambda n, heads, batch, dtype: memory_data(n, heads, batch, d_model, dtype),
        draw_memory,
        {"n": n, "heads": heads, "batch": batch, "dtype": 4},
        controls,
        figsize=(8.0, 4.6),
    )
