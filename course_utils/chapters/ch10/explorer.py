"""Explorer of chapter 10: every layer's and head's map of a multi-layer model through training."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from course_utils import plotting as P
from course_utils._explorer_parts import _title, slider_style
from course_utils.plotting import Heat, explorer, handles
from course_utils.validation import CourseInputError, expect_tensor

__all__ = ["LayerView", "layer_snapshots", "layer_data", "draw_layers", "layer_explorer"]


@dataclass(frozen=True)
class LayerShot:
    step: int
    losses: torch.Tensor  # (step,) float64
    maps: torch.Tensor  # (layers, heads, n, n) float32 on the CPU


@dataclass(frozen=True)
class LayerView:
    """What :func:`layer_explorer` shows: one head's map at one snapshot, and the loss so far."""

    shot: LayerShot
    layer: int
    head: int
    labels: tuple[str, ...]
    last_step: int
    loss_top: float


def layer_snapshots(snapshots: object) -> tuple[LayerShot, ...]:
    """Check snapshots saved while training: dicts with ``step`` (increasing ints), ``losses`` (one
    finite number per step so far) and ``maps`` (a (layers, heads, n, n) tensor, the same shape in
    every snapshot)."""
    if (
        isinstance(snapshots, (Mapping, str))
        or not isinstance(snapshots, Sequence)
        or not snapshots
    ):
        raise CourseInputError(
            "snapshots must be a non-empty list of dicts with the keys 'step', 'losses' and 'maps', "
            f"but got {type(snapshots).__name__} {str(snapshots)[:40]}."
        )
    shots: list[LayerShot] = []
    for i, raw in enumerate(snapshots):
        what = f"snapshots[{i}]"
        if not isinstance(raw, Mapping) or any(k not in raw for k in ("step", "losses", "maps")):
            raise CourseInputError(
                f"{what} must be a dict with the keys 'step', 'losses' and 'maps'."
            )
        step, losses = raw["step"], raw["losses"]
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise CourseInputError(
                f"{what}['step'] must be an int of at least 0, but got {step!r}."
            )
        if shots and step <= shots[-1].step:
            raise CourseInputError(f"{what}['step'] = {step} must come after {shots[-1].step}.")
        if isinstance(losses, torch.Tensor):
            losses = losses.detach().cpu().flatten().tolist()
        if (
            isinstance(losses, (str, bytes))
            or not isinstance(losses, Sequence)
            or len(losses) != step
            or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                for v in losses
            )
        ):
            raise CourseInputError(
                f"{what}['losses'] must hold one finite number per step so far ({step})."
            )
        maps = expect_tensor(raw["maps"], f"{what}['maps']", ndim=4, floating=True)
        maps = maps.detach().to("cpu", torch.float32)
        if maps.shape[-1] != maps.shape[-2] or (shots and maps.shape != shots[0].maps.shape):
            raise CourseInputError(
                f"{what}['maps'] must be (layers, heads, n, n), the same in every snapshot, "
                f"but has shape {tuple(maps.shape)}."
            )
        shots.append(LayerShot(step, torch.tensor(losses, dtype=torch.float64), maps))
    return tuple(shots)


def layer_data(
    shots: Sequence[LayerShot], index: int, layer: int, head: int, labels: Sequence[str]
) -> LayerView:
    """The view of head ``head`` of layer ``layer`` (both from 1 and 0 as shown) at snapshot ``index``."""
    layers, heads = shots[0].maps.shape[:2]
    for name, value, top in (("index", index, len(shots)), ("layer", layer, layers + 1)):
        low = 1 if name == "layer" else 0
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value < top:
            raise CourseInputError(
                f"{name} must be an int from {low} to {top - 1}, but got {value!r}."
            )
    if isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < heads:
        raise CourseInputError(f"head must be an int from 0 to {heads - 1}, but got {head!r}.")
    top = max((float(s.losses.max()) for s in shots if s.losses.numel()), default=1.0)
    return LayerView(shots[index], layer, head, tuple(labels), shots[-1].step, top)


def draw_layers(fig, view: LayerView) -> None:
    """The chosen head's map (left) and the loss curve with the current step (right)."""
    h = handles(fig)
    shot, n = view.shot, view.shot.maps.shape[-1]
    if not h:
        left, right = fig.subplots(1, 2, width_ratios=(1.2, 1))
        h["heat"] = Heat(left, shot.maps[0, 0], vmin=0.0, vmax=1.0, annotate=False, animated=True)
        size = 8.5 if n <= 16 else 8
        left.set_xticks(range(n), view.labels, fontsize=size, rotation=90)
        left.set_yticks(range(n), view.labels, fontsize=size)
        left.tick_params(length=0, pad=1)
        left.set_xlabel("key (token id)", fontsize=9)
        left.set_ylabel("query (token id)", fontsize=9)
        h["map_ax"] = left
        (h["curve"],) = right.plot([], [], color=P.KEY_COLOUR, linewidth=1, animated=True)
        (h["dot"],) = right.plot([], [], "o", color=P.QUERY_COLOUR, markersize=5, animated=True)
        right.set_xlim(0, max(view.last_step, 1))
        right.set_ylim(0, view.loss_top * 1.05)
        P.plain_axes(right, "training step", "training loss")
        h["loss_ax"] = right
    h["heat"].update(shot.maps[view.layer - 1, view.head])
    _title(h["map_ax"], f"layer {view.layer}, head {view.head} at step {shot.step}", fontsize=10)
    h["curve"].set_data(torch.arange(1, shot.step + 1).numpy(), shot.losses.numpy())
    if shot.step:
        h["dot"].set_data([shot.step], [float(shot.losses[-1])])
        _title(h["loss_ax"], f"loss {float(shot.losses[-1]):.2f}", fontsize=10)
    else:
        h["dot"].set_data([], [])
        _title(h["loss_ax"], "before training", fontsize=10)


def layer_explorer(snapshots: object, labels: Sequence[str] | None = None) -> None:
    """Slide over training steps, layers and heads: the attention maps of a multi-layer model.

    Args:
        snapshots: a list of dicts saved while training, each with ``step``, ``losses`` (every
            step's loss so far) and ``maps`` (a (layers, heads, n, n) tensor: every head's
            weights on one fixed input); see :func:`layer_snapshots`.
        labels: one label per token of that input (default 0, 1, 2, ...).

    Notebook: ``cu.widgets.layer_explorer(snapshots, labels)``
    """
    shots = layer_snapshots(snapshots)
    layers, heads, n = shots[0].maps.shape[:3]
    labels = P.check_labels(
        [str(i) for i in range(n)] if labels is None else labels, n, "labels", "row of the maps"
    )
    start = {"index": len(shots) - 1, "layer": layers, "head": 0}

    def controls(widgets):
        return {
            "index": widgets.SelectionSlider(
                options=[(str(s.step), i) for i, s in enumerate(shots)],
                value=start["index"],
                description="training step",
                **slider_style(),
            ),
            "layer": widgets.IntSlider(
                value=layers, min=1, max=layers, description="layer", **slider_style()
            ),
            "head": widgets.IntSlider(
                value=0, min=0, max=heads - 1, description="head", **slider_style()
            ),
        }

    explorer(
        lambda index, layer, head: layer_data(shots, index, layer, head, labels),
        draw_layers,
        start,
        controls,
        figsize=(9.1, 4.6),
    )
