"""Time every explorer from a control change to its new PNG, as the kernel sends it (`make bench-explorers`).

Every ``*_explorer`` of ``course_utils.widgets`` is found by name (later chapters' explorers
are picked up without a list to keep in step). Each is started live once with its defaults;
then every slider and drop-down is moved through a few values across its range and back
(text boxes are left alone: a new text rebuilds the axes, by design). One pass over those
changes warms the caches; then ``--runs`` passes are timed, each change from setting the
value to the new PNG bytes (compute + draw + render + encode). The table gives the median
and the 10th-90th percentile spread of all timed changes, the smallest per-pass median
(the least disturbed by other jobs) and, as "first", the median of one more pass that starts
with an empty text cache (strings never drawn before are rasterised: a student's first pass). The machine's load is
printed, because other jobs slow every number down.

    python -m tools.bench.explorers [--runs 7] [--names query_explorer mask_explorer]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("agg")

from course_utils import _render, plotting  # noqa: E402
from course_utils import widgets as W  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BUDGET_MS = 100.0
"""The aim: a control change feels immediate under about 100 ms."""
VALUES_PER_CONTROL = 5


def _training_snapshots() -> tuple:
    """Snapshots shaped like chapter 08's run: 4 heads over a 25-character sentence, every 30 of 300 steps."""
    import torch

    generator = torch.Generator().manual_seed(0)
    sentence, losses, shots = "the river runs to the sea", [], []
    for step in range(0, 301, 30):
        while len(losses) < step:
            losses.append(
                3.3 * 0.995 ** len(losses) + 0.2 * float(torch.rand(1, generator=generator))
            )
        scores = torch.randn(4, 25, 25, generator=generator) * (1 + step / 100)  # (4, 25, 25)
        weights = torch.softmax(
            scores.masked_fill(torch.ones(25, 25).triu(1).bool(), float("-inf")), dim=-1
        )
        shots.append(
            {
                "step": step,
                "losses": list(losses),
                "weights": weights,
                "labels": list(sentence),
                "sample": f"step {step}: " + "the sea runs to the river " * 2,
            }
        )
    return (shots,)


def _layer_snapshots() -> tuple:
    """Snapshots shaped like chapter 10's run: 2 layers of 2 heads over 31 tokens, every 100 of 600 steps."""
    import torch

    generator, losses, shots = torch.Generator().manual_seed(0), [], []
    for step in range(0, 601, 100):
        losses += [4.2 * 0.99**k for k in range(len(losses), step)]
        scores = torch.randn(2, 2, 31, 31, generator=generator) * (1 + step / 100)
        maps = torch.softmax(scores.masked_fill(torch.ones(31, 31).triu(1).bool(), -torch.inf), -1)
        shots.append({"step": step, "losses": list(losses), "maps": maps})
    return (shots, [str(i) for i in range(31)])


EXAMPLE_ARGUMENTS = {"training_explorer": _training_snapshots, "layer_explorer": _layer_snapshots}
"""Arguments for the explorers that show the notebook's own data (the others start with their defaults)."""


def explorer_names() -> list[str]:
    """Every explorer function of ``course_utils.widgets``, in the package's order."""
    return [name for name in W.__all__ if name.endswith("_explorer") and callable(getattr(W, name))]


def chapter_of(name: str) -> str:
    """The chapters whose solution notebook calls ``cu.widgets.<name>``, e.g. ``'05, 06'``."""
    pattern = re.compile(rf"cu\.widgets\.{name}\b")
    found = [
        path.name[:2]
        for path in sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
        if pattern.search(path.read_text(encoding="utf-8"))
    ]
    return ", ".join(found) or "-"


def start(name: str) -> plotting.Explorer:
    """Run explorer ``name`` live with its defaults and return its :class:`~course_utils.plotting.Explorer`."""
    shown: list = []
    saved, plotting._display = plotting._display, shown.append
    saved_env = os.environ.pop(plotting.STATIC_ENV_VAR, None)
    try:
        getattr(W, name)(*EXAMPLE_ARGUMENTS.get(name, tuple)())
    finally:
        plotting._display = saved
        if saved_env is not None:
            os.environ[plotting.STATIC_ENV_VAR] = saved_env
    live = [obj for obj in shown if isinstance(obj, plotting.Explorer)]
    if len(live) != 1:
        raise RuntimeError(f"{name}() showed {shown!r}, not one live explorer")
    return live[0]


def moves(explorer: plotting.Explorer) -> list[tuple[str, str, object]]:
    """(control, attribute, value) changes: each slider or drop-down across its range, then back."""
    changes: list[tuple[str, str, object]] = []
    for control_name, control in explorer.controls.items():
        if hasattr(control, "options") and hasattr(
            control, "index"
        ):  # Dropdown, SelectionSlider, ...
            attribute, current, count = "index", control.index, len(control.options)
            wanted = sorted(
                {
                    round(i * (count - 1) / (VALUES_PER_CONTROL - 1))
                    for i in range(VALUES_PER_CONTROL)
                }
            )
        elif isinstance(getattr(control, "value", None), bool):  # Checkbox, ToggleButton
            attribute, current, wanted = "value", control.value, [not control.value]
        elif all(hasattr(control, key) for key in ("min", "max", "step")):  # IntSlider, FloatSlider
            attribute, current, low, high, step = (
                "value",
                control.value,
                control.min,
                control.max,
                control.step,
            )
            wanted = [
                low + round((high - low) * i / (VALUES_PER_CONTROL - 1) / step) * step
                for i in range(VALUES_PER_CONTROL)
            ]
            wanted = sorted({round(v, 10) if isinstance(v, float) else v for v in wanted})
        else:  # a text box: typing a new text is not a control move
            continue
        changes += [(control_name, attribute, v) for v in wanted if v != current] + [
            (control_name, attribute, current)
        ]
    return changes


def one_pass(explorer: plotting.Explorer, changes, first: bool = False) -> list[float]:
    """Milliseconds of each change, from setting the control to the new PNG bytes (``first``: text cache emptied)."""
    if first:
        _render._sprites.clear()
    times = []
    for control_name, attribute, value in changes:
        before = explorer.png
        start_time = time.perf_counter()
        setattr(explorer.controls[control_name], attribute, value)
        elapsed = (time.perf_counter() - start_time) * 1000
        if explorer.error:
            raise RuntimeError(
                f"{control_name}: {attribute}={value!r} was rejected: {explorer.error}"
            )
        if explorer.png is before:
            raise RuntimeError(f"{control_name}: {attribute}={value!r} made no new picture")
        times.append(elapsed)
    return times


@dataclass(frozen=True)
class Timing:
    """One explorer's numbers in milliseconds."""

    name: str
    changes: int
    median: float
    p10: float
    p90: float
    best_pass: float  # the smallest per-pass median
    first: float  # median of a pass that starts with an empty text cache


def time_explorer(name: str, runs: int = 7) -> Timing:
    """Warm up with one pass over the changes, then time ``runs`` passes (and one first-time pass)."""
    explorer = start(name)
    changes = moves(explorer)
    if not changes:
        raise RuntimeError(f"{name} has no slider or drop-down to move")
    one_pass(explorer, changes)
    passes = [one_pass(explorer, changes) for _ in range(runs)]
    every = sorted(t for times in passes for t in times)
    first = statistics.median(one_pass(explorer, changes, first=True))
    deciles = statistics.quantiles(every, n=10) if len(every) > 1 else every * 9
    return Timing(
        name,
        len(changes),
        statistics.median(every),
        deciles[0],
        deciles[-1],
        min(statistics.median(times) for times in passes),
        first,
    )


def load_line() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{os.cpu_count()} CPUs, load average {one:.2f} {five:.2f} {fifteen:.2f}"


def main(argv: Sequence[str] | None = None) -> int:
    names = explorer_names()
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench.explorers", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--runs", type=int, default=7, help="timed passes over each explorer's changes (default 7)"
    )
    parser.add_argument(
        "--names",
        nargs="*",
        choices=names,
        default=names,
        metavar="NAME",
        help=f"explorers to time (default: all of {', '.join(names)})",
    )
    parser.add_argument(
        "--record", action="store_true", help="write the rows into docs/results/explorers.json"
    )
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    print(f"{load_line()} before (other jobs slow every number down)")
    print(
        f"{'explorer':20s} {'ch':>6s} {'changes':>7s} {'median':>7s} {'p10-p90':>11s} {'best pass':>9s} "
        f"{'first':>6s}  (ms)"
    )
    over, timings, load_at_start = [], [], os.getloadavg()[0]
    for name in args.names:
        t = time_explorer(name, args.runs)
        timings.append(t)
        print(
            f"{name:20s} {chapter_of(name):>6s} {t.changes:7d} {t.median:7.0f} {t.p10:5.0f}-{t.p90:<5.0f} "
            f"{t.best_pass:9.0f} {t.first:6.0f}",
            flush=True,
        )
        if t.median > BUDGET_MS:
            over.append(name)
    print(f"{load_line()} after")
    if args.record:
        from tools.site import results

        chapters = {name: chapter_of(name) for name in args.names}
        results.record_explorers(timings, chapters, load_at_start)
    print(
        f"over {BUDGET_MS:.0f} ms median: {', '.join(over)}"
        if over
        else f"every explorer at or under {BUDGET_MS:.0f} ms median"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
