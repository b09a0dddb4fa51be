"""Explorer of chapter 02: why scores are divided by sqrt(d_k)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from course_utils import plotting as P
from course_utils._explorer_parts import _title, slider_style
from course_utils.plotting import Bars, explorer, handles
from course_utils.validation import expect_int

__all__ = [
    "SCALING_MAX_D_K",
    "SCALING_KEYS",
    "ScalingView",
    "scaling_data",
    "draw_scaling",
    "scaling_explorer",
]


# ----------------------------------------------------------------------------- 2. scaling
SCALING_MAX_D_K = 512
SCALING_KEYS = 6


@dataclass(frozen=True)
class ScalingView:
    """What :func:`scaling_explorer` shows for one width ``d_k``."""

    d_k: int
    scores: torch.Tensor  # (n_keys,) raw dot products q · k_j
    weights_plain: torch.Tensor  # (n_keys,) softmax(scores)
    weights_scaled: torch.Tensor  # (n_keys,) softmax(scores / sqrt(d_k))
    sweep_d_k: torch.Tensor  # (D,) every width 1..SCALING_MAX_D_K
    sweep_plain: torch.Tensor  # (D,) average largest weight without scaling
    sweep_scaled: torch.Tensor  # (D,) average largest weight with scaling


@functools.lru_cache(maxsize=4)
def _scaling_sweep(
    max_d_k: int, n_keys: int, draws: int = 256
) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(draws, 1, max_d_k, generator=generator)  # (draws, 1, D)
    k = torch.randn(draws, n_keys, max_d_k, generator=generator)  # (draws, keys, D)
    scores = torch.cumsum(q * k, dim=-1)  # (draws, keys, D): column d-1 is the score at d_k = d
    dims = torch.arange(1, max_d_k + 1, dtype=torch.float32)  # (D,)
    plain = torch.softmax(scores, dim=1).amax(dim=1).mean(dim=0)  # (D,)
    scaled = torch.softmax(scores / dims.sqrt(), dim=1).amax(dim=1).mean(dim=0)  # (D,)
    return plain, scaled


@functools.lru_cache(maxsize=8)
def _scaling_draw(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(SCALING_MAX_D_K, generator=generator)  # (D,)
    k = torch.randn(SCALING_KEYS, SCALING_MAX_D_K, generator=generator)  # (6, D)
    return q, k


def scaling_data(d_k: int, seed: int = 0) -> ScalingView:
    """One query against six keys, every component drawn from N(0, 1), at width ``d_k``.

    Raw scores q · k spread out like sqrt(d_k), so softmax(q · k) turns nearly one-hot as
    d_k grows; softmax(q · k / sqrt(d_k)) keeps the same spread at every width. The same
    draw is reused for every ``d_k`` (its first ``d_k`` components), so sliding ``d_k``
    changes only the width.
    """
    q, k = _scaling_draw(seed)
    scores = k[:, :d_k] @ q[:d_k]  # (6,)
    plain, scaled = _scaling_sweep(SCALING_MAX_D_K, SCALING_KEYS)
    return ScalingView(
        d_k,
        scores,
        torch.softmax(scores, dim=0),
        torch.softmax(scores / math.sqrt(d_k), dim=0),
        torch.arange(1, SCALING_MAX_D_K + 1),
        plain,
        scaled,
    )


def draw_scaling(fig, view: ScalingView) -> None:
    """Weights without and with the sqrt(d_k) division, and the average largest weight vs d_k."""
    h = handles(fig)
    if not h:
        axes = fig.subplots(1, 3)
        keys = [f"k{j + 1}" for j in range(view.scores.shape[0])]
        for name, ax, weights in zip(
            ("plain", "scaled"), axes, (view.weights_plain, view.weights_scaled)
        ):
            h[name] = Bars(ax, weights, animated=True)
            ax.set_ylim(0, 1.15)
            P.tick_labels(ax, keys)
            P.plain_axes(ax, "key", "weight")
        sweep = axes[2]
        dims = view.sweep_d_k.numpy()
        sweep.plot(dims, view.sweep_plain.numpy(), color=P.QUERY_COLOUR, label="q·k")
        sweep.plot(dims, view.sweep_scaled.numpy(), color=P.KEY_COLOUR, label="q·k / √d_k")
        h["at"] = sweep.axvline(
            view.d_k, color="#555555", linestyle=":", linewidth=1, animated=True
        )
        uniform = 1 / view.scores.shape[0]
        sweep.axhline(uniform, color="#999999", linestyle="--", linewidth=0.8)
        sweep.text(1.1, uniform + 0.02, "uniform", fontsize=8, color="#666666")
        sweep.set_xscale("log", base=2)
        sweep.set_ylim(0, 1.05)
        sweep.legend(fontsize=8, loc="center right", frameon=False)
        P.plain_axes(
            sweep,
            "d_k (width of q and k)",
            "largest weight (average)",
            "how peaked? (average of 256 draws)",
        )
        h["axes"] = axes
    spread = float(view.scores.std())
    h["plain"].update(view.weights_plain)
    h["scaled"].update(view.weights_scaled)
    h["at"].set_xdata([view.d_k, view.d_k])
    _title(h["axes"][0], f"d_k = {view.d_k}: softmax(q·k), score std {spread:.1f}")
    _title(
        h["axes"][1], f"softmax(q·k / √{view.d_k}): score std {spread / math.sqrt(view.d_k):.1f}"
    )


def scaling_explorer(d_k: int = 16, seed: int = 0) -> None:
    """Slide d_k and watch softmax sharpen without the sqrt(d_k) division, and stay calm with it.

    Args:
        d_k: the starting width of queries and keys (1 to 512).
        seed: the starting random draw.

    Notebook: ``cu.widgets.scaling_explorer()``
    """
    expect_int(d_k, "d_k", minimum=1, maximum=SCALING_MAX_D_K)
    expect_int(seed, "seed", minimum=0)

    def controls(widgets):
        return {
            "d_k": widgets.IntSlider(
                value=d_k, min=1, max=SCALING_MAX_D_K, description="d_k", **slider_style()
            ),
            "seed": widgets.IntSlider(
                value=seed,
                min=0,
                max=max(50, seed),
                description="random draw (seed)",
                **slider_style(),
            ),
        }

    explorer(scaling_data, draw_scaling, {"d_k": d_k, "seed": seed}, controls, figsize=(10.4, 3.4))
