"""Key-to-picture latency of every explorer in JupyterLab, as a learner feels it (`make bench-browser`).

Each solution notebook that shows an explorer is opened in JupyterLab in headless Chromium and run
(the browser test's harness, one notebook at a time); then every control of every explorer is
moved ``--passes`` times. Each move is timed in the page itself, from the key press, click or
change event to the load of the new picture (browser -> kernel -> compute, draw, PNG -> browser).
The table gives, per explorer, the median, the fastest and the slowest move, and the machine's
load average (1 minute) before and after its notebook: other jobs slow every number down, so
compare only rows measured at a similar load. Nothing is asserted: it is a measurement.

    .venv/bin/python tests/browser/bench_browser.py [--passes 5] [solutions/04_dropout.ipynb ...]
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the course root makes `tests.browser` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.browser.browser_lab import BrowserLab  # noqa: E402
from tests.browser.lab_server import RESULTS, ROOT  # noqa: E402
from tests.browser.notebook_report import explorer_cells  # noqa: E402


def explorer_notebooks(course: Path = ROOT) -> list[str]:
    """The solution notebooks that show at least one explorer, in chapter order."""
    import nbformat

    found = []
    for path in sorted((course / "solutions").glob("[0-9][0-9]_*.ipynb")):
        if explorer_cells(nbformat.read(str(path), as_version=4)):
            found.append(path.relative_to(course).as_posix())
    return found


def table(rows: list[dict]) -> str:
    """A markdown table: one row per explorer."""
    lines = [
        "| chapter | explorer | moves | median ms | fastest-slowest ms | load before / after |",
        "|---|---|---:|---:|---:|---|",
    ]
    for r in rows:
        ms = r["ms"]
        timing = (
            f"| {statistics.median(ms):.0f} | {min(ms):.0f}-{max(ms):.0f} " if ms else "| - | - "
        )
        lines.append(
            f"| {r['chapter']} | {r['explorer']} | {len(ms)} {timing}"
            f"| {r['load'][0]:.1f} / {r['load'][1]:.1f} |"
        )
    return "\n".join(lines)


def measure(notebooks: list[str], passes: int, course: Path = ROOT, echo=print) -> list[dict]:
    rows = []
    with BrowserLab(course, RESULTS / "bench", passes=passes) as lab:
        for relpath in notebooks:
            before = os.getloadavg()[0]
            report = lab.check(relpath)
            after = os.getloadavg()[0]
            for problem in report.problems:
                echo(f"{relpath}: problem: {problem}", flush=True)
            for name, ms in report.latencies.items():
                explorer = re.sub(r"^explorer \d+\s*", "", name) or name
                row = {"chapter": Path(relpath).name[:2], "explorer": explorer, "ms": ms}
                row["load"] = (before, after)
                rows.append(row)
                echo(table([row]).splitlines()[-1], flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", help="default: every solution with an explorer")
    parser.add_argument("--passes", type=int, default=5, help="moves of each control (default 5)")
    args = parser.parse_args(argv)
    notebooks = args.notebooks or explorer_notebooks()
    cores = os.cpu_count()
    started = time.monotonic()
    print(
        f"key-to-picture latency in JupyterLab (headless Chromium), "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {cores} cores, "
        f"load average {os.getloadavg()[0]:.1f}; {len(notebooks)} notebooks, one at a time",
        flush=True,
    )
    rows = measure(notebooks, args.passes)
    print(f"\n{table(rows)}\n\n{time.monotonic() - started:.0f} s in all")
    return 0 if rows else 1


if __name__ == "__main__":
    raise SystemExit(main())
