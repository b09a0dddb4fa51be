"""Explorer of chapter 04: dropout on the attention weights."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from course_utils._explorer_parts import RowSums, _title, _tokens, slider_style
from course_utils.chapters.ch03.explorer import example_causal_weights
from course_utils.data import EXAMPLE_TOKENS
from course_utils.plotting import draw_map, explorer, handles
from course_utils.repro import portable_dropout_mask
from course_utils.validation import expect_int, expect_probability

__all__ = [
    "DropoutView",
    "dropout_data",
    "draw_dropout",
    "dropout_explorer",
]


# ----------------------------------------------------------------------------- 4. dropout
@dataclass(frozen=True)
class DropoutView:
    """What :func:`dropout_explorer` shows for one drop probability and seed."""

    p: float
    seed: int
    labels: tuple[str, ...]
    weights: torch.Tensor  # (n, m)
    mask: torch.Tensor  # (n, m) 0 (dropped) or 1/(1-p) (kept and rescaled)
    dropped: torch.Tensor  # (n, m) weights * mask
    row_sums: torch.Tensor  # (n,)


def dropout_data(
    weights: torch.Tensor, p: float, seed: int, labels: Sequence[str] = EXAMPLE_TOKENS
) -> DropoutView:
    """Dropout as ``nn.Dropout(p)`` applies it in training, with a mask identical on every machine."""
    mask = portable_dropout_mask(tuple(weights.shape), p, seed)  # (n, m)
    dropped = weights * mask  # (n, m)
    return DropoutView(p, seed, tuple(labels), weights, mask, dropped, dropped.sum(dim=-1))


def draw_dropout(fig, view: DropoutView) -> None:
    """The weights, the keep mask, the dropped-and-rescaled weights, and each row's sum."""
    h, n = handles(fig), len(view.labels)
    if not h:
        axes = fig.subplots(1, 4, width_ratios=[1, 1, 1, 0.5])
        m = view.weights.shape[1]
        cols, blank = view.labels if m == n else [str(j) for j in range(m)], [""] * n
        shared = {
            "vmin": 0.0,
            "annotate": max(n, m) <= 8,
            "colorbar": False,
        }  # one colour bar, drawn below
        h["weights"] = draw_map(
            axes[0], view.weights, view.labels, cols, vmax=1.0, xlabel="", title="weights", **shared
        )
        h["mask"] = draw_map(
            axes[1],
            view.mask,
            blank,
            cols,
            vmax=2.0,
            cmap="Greys",
            ylabel="",
            animated=True,
            **shared,
        )
        h["dropped"] = draw_map(
            axes[2],
            view.dropped,
            blank,
            cols,
            vmax=1.0,
            xlabel="",
            ylabel="",
            animated=True,
            **shared,
        )
        fig.colorbar(h["weights"].image, ax=axes[2], shrink=0.8)
        h["sums"], h["axes"] = RowSums(axes[3], [""] * n, top=3.0), axes
    scale = 1.0 / (1.0 - view.p)
    h["mask"].image.set_clim(0.0, max(scale, 1.0) * 1.6)
    h["mask"].norm.vmax = max(scale, 1.0) * 1.6
    h["mask"].update(view.mask)
    h["dropped"].update(view.dropped)
    h["sums"].update(view.row_sums)
    kept = int((view.mask > 0).sum())
    _title(
        h["axes"][1],
        f"p = {view.p:.2f}, seed {view.seed}: keep mask,\n0 or 1/(1-p) = {scale:.2f}",
        fontsize=10,
    )
    _title(h["axes"][2], f"weights × mask: kept {kept} of {view.mask.numel()}", fontsize=10)


def dropout_explorer(
    weights: torch.Tensor | None = None,
    labels: Sequence[str] | None = None,
    p: float = 0.5,
    seed: int = 123,
) -> None:
    """Slide the drop probability p and the seed; see the dropped, rescaled weights and row sums.

    The mask comes from ``cu.portable_dropout_mask``, so it is the same on every machine.

    Args:
        weights: (n, m) attention weights (default: the six-token example's causal weights).
        labels: one label per row (default: the example's words, or 0..n-1).
        p: the starting drop probability, in [0, 1).
        seed: the starting seed.

    Notebook: ``cu.widgets.dropout_explorer()``
    """
    w, names = _tokens(weights, labels, "weights", example_causal_weights)
    p = expect_probability(p, "p")
    expect_int(seed, "seed", minimum=0)

    def controls(widgets):
        return {
            "p": widgets.FloatSlider(
                value=p,
                min=0.0,
                max=0.9,
                step=0.05,
                readout_format=".2f",
                description="drop probability p",
                **slider_style(),
            ),
            "seed": widgets.IntSlider(
                value=seed, min=0, max=max(200, seed), description="seed", **slider_style()
            ),
        }

    explorer(
        lambda p, seed: dropout_data(w, p, seed, names),
        draw_dropout,
        {"p": p, "seed": seed},
        controls,
        figsize=(9.1, 3.9),
    )
