"""Explorer of chapter 08: a training run replayed from the snapshots saved while it ran."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial

import torch

from course_utils import plotting as P
from course_utils._explorer_parts import _title, _visible, slider_style
from course_utils.plotting import Heat, explorer, handles
from course_utils.validation import CourseInputError, expect_int, expect_tensor

__all__ = [
    "SNAPSHOT_KEYS",
    "TrainingView",
    "training_snapshots",
    "training_data",
    "draw_training",
    "training_explorer",
]

SNAPSHOT_KEYS = ("step", "losses", "weights", "labels", "sample")
"""What each saved snapshot holds (a dict with these keys)."""

SAMPLE_WIDTH = 34
"""Characters per line of the sample text under the loss curve."""


@dataclass(frozen=True)
class TrainingView:
    """One checked snapshot, what :func:`training_explorer` shows of it: the step, the loss of every
    step so far, the maps, labels and sample, and the ranges of the whole run's loss curve."""

    index: int  # which snapshot (0 = the first)
    step: int
    losses: torch.Tensor  # (step,) float64: the training loss of steps 1 .. step
    weights: torch.Tensor  # (heads, n, n) float32 on the CPU
    labels: tuple[str, ...]  # n token labels, spaces shown as "␣"
    sample: str
    last_step: int = 0  # the step of the last snapshot: the x range of the loss curve
    loss_top: float = 1.0  # the largest loss of the whole run: the y range of the loss curve


def _finite_numbers(values: object) -> bool:
    """Whether ``values`` is a list (or another sequence, not a string) of finite numbers."""
    return (
        isinstance(values, Sequence)
        and not isinstance(values, (str, bytes))
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        and all(math.isfinite(v) for v in values)
    )


def _one_snapshot(raw: object, i: int, previous: TrainingView | None) -> TrainingView:
    """``snapshots[i]`` checked and in the explorer's form; ``previous``: the snapshot before it."""
    what = f"snapshots[{i}]"
    if not isinstance(raw, Mapping):
        raise CourseInputError(
            f"{what} must be a dict with the keys {list(SNAPSHOT_KEYS)}, "
            f"but got a {type(raw).__name__}."
        )
    missing = [key for key in SNAPSHOT_KEYS if key not in raw]
    if missing:
        raise CourseInputError(
            f"{what} lacks the key(s) {missing}: each snapshot needs {list(SNAPSHOT_KEYS)}."
        )
    step = expect_int(raw["step"], f"{what}['step']", minimum=0)
    if previous is not None and step <= previous.step:
        raise CourseInputError(
            f"the snapshots must be in training order, but {what}['step'] = {step} "
            f"comes after step {previous.step}."
        )
    losses = raw["losses"]
    if isinstance(losses, torch.Tensor):
        losses = losses.detach().cpu().flatten().tolist()
    if not _finite_numbers(losses):
        raise CourseInputError(
            f"{what}['losses'] must be a list of finite numbers (the loss of every step so "
            f"far), but got {type(raw['losses']).__name__} {str(raw['losses'])[:60]}."
        )
    if len(losses) != step:
        raise CourseInputError(
            f"{what}['losses'] must hold one loss per step so far ({step}), "
            f"but holds {len(losses)}."
        )
    weights = expect_tensor(raw["weights"], f"{what}['weights']", ndim=(2, 3), floating=True)
    weights = weights.detach().to("cpu", torch.float32)
    if weights.ndim == 2:
        weights = weights[None]  # (1, n, n): one head
    heads, n, m = weights.shape
    if n != m or n < 1:
        raise CourseInputError(
            f"{what}['weights'] must hold square (n, n) maps, one per head, "
            f"but got shape {tuple(raw['weights'].shape)}."
        )
    if previous is not None and weights.shape != previous.weights.shape:
        raise CourseInputError(
            f"every snapshot must have maps of the same shape, but {what}['weights'] has "
            f"{tuple(weights.shape)} and the one before {tuple(previous.weights.shape)}."
        )
    labels = P.check_labels(raw["labels"], n, f"{what}['labels']", "row of the map")
    if not isinstance(raw["sample"], str):
        raise CourseInputError(
            f"{what}['sample'] must be the generated text (a str), "
            f"but got a {type(raw['sample']).__name__}."
        )
    losses = torch.tensor(losses, dtype=torch.float64)
    return TrainingView(i, step, losses, weights, tuple(map(_visible, labels)), raw["sample"])


def training_snapshots(snapshots: object) -> tuple[TrainingView, ...]:
    """Check the snapshots a training loop saved and return them in the explorer's form.

    Each snapshot is a dict: ``step`` (int, in increasing order), ``losses`` (the loss of
    every step so far, ``step`` numbers), ``weights`` (the attention maps on one fixed input,
    a (heads, n, n) or (n, n) tensor, the same shape in every snapshot), ``labels`` (n
    strings, one per token of that input) and ``sample`` (a generated text).
    """
    if isinstance(snapshots, (Mapping, str)) or not isinstance(snapshots, Sequence):
        raise CourseInputError(
            f"snapshots must be a list of dicts (one per saved step), "
            f"but got a {type(snapshots).__name__}."
        )
    if not snapshots:
        raise CourseInputError("snapshots is empty: save at least one snapshot while training.")
    checked: list[TrainingView] = []
    for i, raw in enumerate(snapshots):
        checked.append(_one_snapshot(raw, i, checked[-1] if checked else None))
    top = max((float(s.losses.max()) for s in checked if s.losses.numel()), default=1.0)
    return tuple(replace(s, last_step=checked[-1].step, loss_top=top) for s in checked)


def training_data(snapshots: Sequence[TrainingView], index: int) -> TrainingView:
    """The view at snapshot ``index`` of checked snapshots (from :func:`training_snapshots`); no retraining."""
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(snapshots):
        raise CourseInputError(
            f"index must be an int from 0 to {len(snapshots) - 1} (one per snapshot), "
            f"but got {index!r}."
        )
    return snapshots[index]


def draw_training(fig, view: TrainingView) -> None:
    """Every head's map on the fixed input (top), the loss so far and the sample (bottom)."""
    h = handles(fig)
    heads, n, _ = view.weights.shape
    if not h:
        # fixed positions instead of constrained layout: ~100 tick labels make that layout slow
        fig.set_layout_engine("none")
        widths = (*[1] * heads, 0.06)  # the maps, then the colour bar
        grid = fig.add_gridspec(2, heads + 1, width_ratios=widths, height_ratios=(1.45, 1.0))
        # margins on the grid, not fig.subplots_adjust: that warns on a figure that had a layout
        # engine (JupyterLab's live figure), and a warning is output the student did not ask for
        grid.update(left=0.07, right=0.95, top=0.94, bottom=0.1, wspace=0.08, hspace=0.35)
        h["heat"] = []
        size = 7.5 if n <= 12 else 6.6  # 9 px or more on screen (tests/test_legibility.py)
        for i in range(heads):
            ax = fig.add_subplot(grid[0, i])
            heat = Heat(ax, view.weights[i], vmin=0.0, vmax=1.0, annotate=False, animated=True)
            h["heat"].append(heat)
            ax.set_xticks(range(n), view.labels, fontsize=size)
            ax.set_yticks(range(n) if i == 0 else [], view.labels if i == 0 else [], fontsize=size)
            ax.set_title(f"head {i}" if heads > 1 else "attention", fontsize=9)
            ax.tick_params(length=0, pad=1)
        fig.colorbar(h["heat"][-1].image, cax=fig.add_subplot(grid[0, heads]))
        lower = grid[1, :].subgridspec(1, 2, width_ratios=(3, 2), wspace=0.12)
        ax, text_ax = fig.add_subplot(lower[0, 0]), fig.add_subplot(lower[0, 1])
        (h["curve"],) = ax.plot([], [], color=P.KEY_COLOUR, linewidth=1, animated=True)
        (h["dot"],) = ax.plot([], [], "o", color=P.QUERY_COLOUR, markersize=5, animated=True)
        ax.set_xlim(0, max(view.last_step, 1))
        ax.set_ylim(0, view.loss_top * 1.05)
        P.plain_axes(ax, "training step", "training loss")
        h["loss_ax"] = ax
        text_ax.axis("off")
        text_ax.set_title("greedy sample at this step", fontsize=9, loc="left")
        h["sample"] = text_ax.text(0.0, 0.95, "", transform=text_ax.transAxes, animated=True)
        h["sample"].set(va="top", family="monospace", fontsize=8.5)
    for heat, weights in zip(h["heat"], view.weights):
        heat.update(weights)
    steps, losses = range(1, view.step + 1), view.losses.numpy()
    h["curve"].set_data(steps, losses)
    h["dot"].set_data(steps[-1:], losses[-1:])  # the curve's last point (none before training)
    now = f"step {view.step}: loss {losses[-1]:.2f}" if view.step else "step 0: before training"
    _title(h["loss_ax"], now, fontsize=9)
    lines = textwrap.wrap(view.sample, SAMPLE_WIDTH, drop_whitespace=False)[:6]
    h["sample"].set_text("\n".join(lines) if lines else "(empty)")


def training_explorer(snapshots: object, step: int | None = None) -> None:
    """Slide over the snapshots saved during training: the attention maps, the loss so far and a sample.

    Args:
        snapshots: a list of dicts saved while training, each with ``step``, ``losses``,
            ``weights``, ``labels`` and ``sample``, as :func:`training_snapshots` describes them.
        step: the step shown first (one of the snapshots' steps); the last one by default.

    Nothing is retrained when the slider moves: every picture comes from the snapshots.

    Notebook: ``cu.widgets.training_explorer(snapshots)``
    """
    checked = training_snapshots(snapshots)
    steps = [s.step for s in checked]
    step = steps[-1] if step is None else step
    if isinstance(step, bool) or not isinstance(step, int) or step not in steps:
        shown = steps if len(steps) <= 12 else [*steps[:5], "...", *steps[-5:]]
        raise CourseInputError(
            f"step must be one of the snapshots' steps {shown}, but got {step!r}."
        )
    index = steps.index(step)
    figsize = (max(8.4, 2.1 * checked[0].weights.shape[0]), 5.0)  # wider for more heads

    def controls(widgets):
        return {
            "index": widgets.SelectionSlider(
                options=[(str(s), i) for i, s in enumerate(steps)],
                value=index,
                description="training step",
                **slider_style(),
            )
        }

    explorer(
        partial(training_data, checked), draw_training, {"index": index}, controls, figsize=figsize
    )
