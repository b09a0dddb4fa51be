"""Pieces shared by the explorers: animated titles, token labels, checks, byte axes, GPU lines, row sums."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from . import plotting as P
from .data import EXAMPLE_TOKENS, example_inputs
from .validation import CourseInputError


def _title(ax, text: str, **kwargs) -> None:
    """Set a title that changes with the controls (redrawn alone, like the data)."""
    if ax.title.get_animated():
        ax.title.set_text(text)  # set_title would also touch the non-animated side titles
    else:
        ax.set_title(text, **kwargs)
        ax.title.set_animated(True)


def _tokens(
    inputs: torch.Tensor | None, labels: Sequence[str] | None, what: str, example=example_inputs
):
    """The explorer's 2-d ``inputs`` on the CPU and one label per row (the example's by default)."""
    if inputs is None:
        inputs, default = example(), EXAMPLE_TOKENS  # a fresh float32 CPU tensor
    else:
        inputs, default = P.expect_map(inputs, what, floating=True), None  # labels 0..n-1
    return inputs, P.check_labels(labels, inputs.shape[0], "labels", f"row of {what}", default)


def slider_style() -> dict:
    """Keyword arguments shared by every explorer slider (wide, label in full, update on release)."""
    return {
        "style": {"description_width": "initial"},
        "layout": {"width": "460px"},
        "continuous_update": False,
    }


def _visible(piece: str) -> str:
    """A token with its spaces, newlines and tabs made visible (and the empty one as ∅)."""
    return piece.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥") or "∅"


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def _one_of(value, name: str, options, kind: type = object) -> None:
    if not isinstance(value, kind) or value not in options:
        raise CourseInputError(f"{name} must be one of {list(options)}, but got {value!r}.")


def format_bytes(count: float) -> str:
    """``1536`` -> ``'1.5 KiB'``: a byte count in binary units."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(value) < 1024 or unit == "PiB":
            return f"{value:.0f} {unit}" if unit == "B" or value >= 100 else f"{value:.3g} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _byte_axis(ax, exponents: range, unit: int = 1) -> None:
    """A log-2 y axis with byte-count ticks at 2**k times ``unit`` bytes, for k in ``exponents``."""
    ax.set_yscale("log", base=2)
    ticks = [2.0**k for k in exponents]
    ax.set_yticks(ticks, [format_bytes(t * unit) for t in ticks])


def _gpu_lines(ax, gibs: Sequence[int], x: float, unit: float, lift: float) -> None:
    """Dotted lines at common GPU memory sizes (``gibs`` GiB, ``unit`` each), labelled above at ``x``."""
    for gib in gibs:
        ax.axhline(gib * unit, color="#888888", linestyle=":", linewidth=1)
        ax.text(x, gib * unit * lift, f"{gib} GiB GPU", fontsize=8, color="#555555")


class RowSums:
    """Horizontal bars of each row's sum next to a map, blue when 1 and vermillion when not."""

    def __init__(self, ax, labels: Sequence[str], top: float = 1.4) -> None:
        n = len(labels)
        self.ax, self.bars = ax, ax.barh(range(n), [0.0] * n, height=0.6, animated=True)
        self.texts = [ax.text(0, i, "", va="center", fontsize=8, animated=True) for i in range(n)]
        ax.axvline(1.0, color="#333333", linestyle="--", linewidth=0.8)
        ax.set_yticks(range(n), labels)
        ax.set_ylim(n - 0.5, -0.5)  # same row order as the maps
        ax.set_xlim(0, top)
        ax.set_xlabel("row sum")
        ax.spines[["top", "right"]].set_visible(False)

    def update(self, sums: torch.Tensor) -> None:
        ones = torch.isclose(sums, torch.ones_like(sums), atol=5e-3).tolist()
        for bar, text, value, ok in zip(self.bars, self.texts, sums.tolist(), ones):
            bar.set_width(value)
            bar.set_color(P.KEY_COLOUR if ok else P.QUERY_COLOUR)
            text.set_text(f"{value:.2f}")
            text.set_x(min(value, self.ax.get_xlim()[1] - 0.35) + 0.03)
        _title(self.ax, "row sums: all 1" if all(ones) else "not all 1!", fontsize=10)
