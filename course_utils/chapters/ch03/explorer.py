"""Explorer of chapter 03: masking before or after the softmax."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from course_utils import chapters as ch
from course_utils import plotting as P
from course_utils._explorer_parts import RowSums, _title, _tokens
from course_utils.data import EXAMPLE_TOKENS, example_scores
from course_utils.plotting import draw_map, explorer, handles
from course_utils.validation import CourseInputError

__all__ = [
    "MASK_MODES",
    "MaskView",
    "mask_data",
    "draw_mask",
    "mask_explorer",
]


# ----------------------------------------------------------------------------- 3. masking
MASK_MODES = (
    "no mask",
    "mask with -inf, then softmax",
    "softmax, then zero the future",
    "softmax, zero the future, renormalise",
)
"""The ways to apply a causal mask that :func:`mask_explorer` compares."""

_MASKINGS = dict(
    zip(
        MASK_MODES,
        (  # mode -> (n, n) scores -> (n, n) weights; chapter 03's two ways at d_k = 1
            lambda scores: torch.softmax(scores, dim=-1),
            lambda scores: ch.mask_before_softmax(scores, 1),
            lambda scores: torch.softmax(scores, dim=-1).masked_fill(
                ch.causal_mask(scores.shape[0]), 0.0
            ),
            lambda scores: ch.mask_after_softmax(scores, 1),
        ),
    )
)


def example_causal_weights() -> torch.Tensor:
    """(6, 6) softmax weights of the running example's scores with the future masked out (this
    chapter's way 2); chapter 04's explorer and chapter 06's figure start from them."""
    return ch.mask_before_softmax(example_scores(), 1)  # d_k = 1: the unscaled weights


@dataclass(frozen=True)
class MaskView:
    """What :func:`mask_explorer` shows for one way of masking."""

    mode: str
    labels: tuple[str, ...]
    softmax_input: torch.Tensor  # (n, n) what softmax sees (scores, perhaps with -inf)
    weights: torch.Tensor  # (n, n) the final attention weights
    row_sums: torch.Tensor  # (n,)


def mask_data(scores: torch.Tensor, mode: str, labels: Sequence[str] = EXAMPLE_TOKENS) -> MaskView:
    """Apply a causal mask to square ``scores`` in one of :data:`MASK_MODES`."""
    future = ch.causal_mask(scores.shape[0])  # (n, n) True above the diagonal
    softmax_input = (
        scores.masked_fill(future, float("-inf")) if mode == MASK_MODES[1] else scores
    )  # (n, n)
    weights = _MASKINGS[mode](scores)  # (n, n)
    return MaskView(mode, tuple(labels), softmax_input, weights, weights.sum(dim=-1))


def draw_mask(fig, view: MaskView) -> None:
    """What softmax sees, the resulting weights, and each row's sum."""
    h, n = handles(fig), len(view.labels)
    if not h:
        ax_in, ax_w, ax_sums = fig.subplots(1, 3, width_ratios=[1, 1, 0.45])
        low, high = P.finite_range(view.softmax_input)
        h["in"] = draw_map(
            ax_in,
            view.softmax_input,
            view.labels,
            view.labels,
            vmin=low,
            vmax=high,
            annotate=n <= 8,
            title="softmax input",
            colorbar=False,
            animated=True,
        )
        h["weights"] = draw_map(
            ax_w,
            view.weights,
            view.labels,
            view.labels,
            vmin=0.0,
            vmax=1.0,
            annotate=n <= 8,
            ylabel="",
            animated=True,
        )
        h["sums"], h["ax"] = RowSums(ax_sums, view.labels), ax_w
    h["in"].update(view.softmax_input)
    h["weights"].update(view.weights)
    h["sums"].update(view.row_sums)
    _title(h["ax"], f"weights: {view.mode}", fontsize=10)


def mask_explorer(scores: torch.Tensor | None = None, labels: Sequence[str] | None = None) -> None:
    """Compare masking before softmax (-inf) with zeroing after it, with and without renormalising.

    Args:
        scores: square (n, n) attention scores (default: the six-token example's ``x @ x.T``).
        labels: one label per token (default: the example's words, or 0..n-1).

    Notebook: ``cu.widgets.mask_explorer()``
    """
    scores, names = _tokens(scores, labels, "scores", example_scores)
    if scores.shape[0] != scores.shape[1]:
        raise CourseInputError(
            f"scores must be a square (n, n) matrix, one row and one column per "
            f"token, but got shape {tuple(scores.shape)}."
        )

    def controls(widgets):
        return {
            "mode": widgets.Dropdown(
                options=list(MASK_MODES),
                value=MASK_MODES[1],
                description="masking",
                layout={"width": "460px"},
            )
        }

    explorer(
        lambda mode: mask_data(scores, mode, names),
        draw_mask,
        {"mode": MASK_MODES[1]},
        controls,
        figsize=(10.4, 4.0),
    )
