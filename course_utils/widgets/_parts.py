"""Pieces shared by the explorers: animated titles, token labels, row-sum bars."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .. import plotting as P
from ..data import EXAMPLE_TOKENS, example_inputs
from ..validation import CourseInputError, expect_tensor


def _title(ax, text: str, **kwargs) -> None:
    """Set a title that changes with the controls (redrawn alone, like the data)."""
    if ax.title.get_animated():
        ax.title.set_text(text)  # set_title would also touch the non-animated side titles
    else:
        ax.set_title(text, **kwargs)
        ax.title.set_animated(True)


def _tokens(inputs: torch.Tensor | None, labels: Sequence[str] | None, what: str, example=example_inputs):
    """The explorer's 2-d ``inputs`` on the CPU and one label per row (the example's by default)."""
    if inputs is None:
        inputs, default = example(), EXAMPLE_TOKENS
    else:
        expect_tensor(inputs, what, ndim=2, floating=True)
        if min(inputs.shape) < 1:
            raise CourseInputError(f"{what} must have at least one row and one column, "
                                   f"but got shape {tuple(inputs.shape)}.")
        default = [str(i) for i in range(inputs.shape[0])]
    inputs = inputs.detach().to("cpu", torch.float32)
    return inputs, P.check_labels(labels, inputs.shape[0], "labels", f"row of {what}", default)


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

