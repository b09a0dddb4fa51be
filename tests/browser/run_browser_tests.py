"""Open every course notebook in JupyterLab in headless Chromium, run it, and check what a student sees.

Usage (``make test-browser`` installs Chromium and Playwright first, then runs the pytest wrappers)::

    .venv/bin/python tests/browser/run_browser_tests.py                 # every notebook of the course
    .venv/bin/python tests/browser/run_browser_tests.py solutions/03_*.ipynb notebooks/03_*.ipynb

Two notebooks are checked at once (``--workers``), each worker with its own Chromium and one
JupyterLab page that stays loaded: a notebook is opened with *File > Open from Path*, gets a
fresh kernel (started ahead through the sessions API), *Run > Run All Cells*, *File > Save*, and
*Close All Tabs*; the kernel is then shut down. After any failure the worker loads a new page.
For each notebook it asserts:

* **No error output.** Read from the saved notebook (exact ``output_type``/``ename``), and nothing
  written to stderr; every code cell ran. In an exercise notebook (``notebooks/``) JupyterLab's
  Run All stops at the first error, and the exercise stubs raise on purpose, so the rule there is:
  every code cell up to the first error ran cleanly, and that first (and only) error comes from an
  exercise stub: either a ``NotImplementedError`` whose traceback shows the stub line
  ``raise NotImplementedError()``, or an error reporting a ``NotImplementedError`` (a self-check
  calling the stubbed function says "raised NotImplementedError: the exercise stub is still in
  place") with a stub in that cell or an earlier one. Cells after it are not run in the exercise;
  the solution notebook, which must run completely, covers them.
* **Every figure loaded.** Every ``<img>`` of the rendered markdown that is served by the lab
  itself (``../figures/x.png`` and any other local picture) or embedded in the notebook (an inline
  ``![alt](data:image/png;base64,...)``, what the generator writes, or a cell attachment) has
  ``naturalWidth > 0``, and the number of rendered figures equals the number of ``figures/``,
  ``data:`` and ``attachment:`` references in the notebook's markdown. External pictures (the Colab
  badge) are skipped: the browser is offline. The first figure is photographed
  (``results/browser/<notebook>__figure.png``).
* **Every widget rendered.** No output shows a widget's text fallback (``VBox(children=(...``:
  the ipywidgets lab extension did not load), no "Error displaying widget", no view stuck on
  "Loading widget...", and every executed explorer cell (tag ``explorer`` or a call to
  ``*_explorer(``) shows a widget view.
* **Every explorer is live.** An explorer is a widget view with a picture in it (an ``HTML``
  widget's ``<img>``: the course's frames; or an ``Image`` or an ``Output``); each of its sliders,
  dropdowns, checkboxes, toggle buttons and radio buttons is moved once, and the plot (those pictures) must be redrawn to a different, fully loaded picture. Text boxes
  are left alone (no generic value to type) and reported as skipped. The time from each move to
  the new picture loaded on screen (browser -> kernel -> compute, draw, PNG -> browser), timed in
  the page itself (from the key press, click or change event to the new ``<img>``'s load), is
  reported per explorer, not asserted: it depends on the machine and its load.

One screenshot per notebook goes to ``results/browser/`` (the first explorer after its controls
were moved, else the top of the notebook). The server runs on a copy of the course in a
temporary folder with its own Jupyter config, settings (no news, no autosave, no windowing)
and a random token on a free port; it is killed by its PID (process group) even on failure.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the course root makes `tests.browser` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.browser.browser_lab import BrowserLab  # noqa: E402
from tests.browser.lab_server import COURSE_FOLDERS, RESULTS, ROOT, copy_course
from tests.browser.notebook_report import (
    NotebookReport,
    execution_problems,
    explorer_cells,
    figure_references,
)

__all__ = [  # what tests/browser/test_browser.py uses: the harness's public face
    "ROOT",
    "RESULTS",
    "BrowserLab",
    "NotebookReport",
    "copy_course",
    "course_notebooks",
    "execution_problems",
    "explorer_cells",
    "figure_references",
    "main",
    "run",
    "run_notebooks",
    "terminate_on_sigterm",
]


# ----------------------------------------------------------------------------- course
def course_notebooks(course: Path = ROOT) -> list[str]:
    """Every chapter notebook of the course, solutions first, as paths relative to the course."""
    found = []
    for folder in COURSE_FOLDERS:
        found += [
            p.relative_to(course).as_posix()
            for p in sorted((course / folder).glob("[0-9][0-9]_*.ipynb"))
        ]
    return found


def run_notebooks(
    lab: BrowserLab, notebooks: Iterable[str], workers: int = 2, echo=print
) -> list[NotebookReport]:
    """Check notebooks with ``workers`` pages at once (the calling thread is one of them)."""
    queue = list(notebooks)
    reports: dict[str, NotebookReport] = {}
    lock = threading.Lock()

    def work(own_browser: bool) -> None:
        try:
            while True:
                with lock:
                    if not queue:
                        return
                    relpath = queue.pop(0)
                    following = queue[0] if queue else None
                lab.prestart(relpath)
                if following:  # its kernel starts while this notebook runs
                    lab.prestart(following, background=True)
                report = lab.check(relpath)
                report.saved = None
                with lock:
                    reports[relpath] = report
                    echo(report.format(), flush=True)
        finally:
            if own_browser:
                lab.release_browser()

    helpers = [
        threading.Thread(target=work, args=(True,), daemon=True) for _ in range(max(1, workers) - 1)
    ]
    for thread in helpers:
        thread.start()
    work(False)
    for thread in helpers:
        thread.join()
    return [reports[n] for n in notebooks if n in reports]


def run(
    notebooks: Iterable[str],
    course: Path = ROOT,
    results: Path = RESULTS,
    run_timeout: float = 300,
    workers: int = 2,
    echo=print,
) -> list[NotebookReport]:
    notebooks = list(notebooks)
    with BrowserLab(course, results, run_timeout=run_timeout) as lab:
        return run_notebooks(lab, notebooks, workers, echo)


@contextlib.contextmanager
def terminate_on_sigterm() -> Iterator[None]:
    """Turn SIGTERM into SystemExit so the ``finally`` blocks stop the server and the browser."""

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "notebooks", nargs="*", help="paths relative to the course (default: every chapter)"
    )
    parser.add_argument(
        "--course", type=Path, default=ROOT, help="course root (default: this repository)"
    )
    parser.add_argument("--results", type=Path, default=RESULTS, help="screenshot folder")
    parser.add_argument(
        "--run-timeout", type=float, default=300, help="seconds for one notebook's Run All"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=int(os.environ.get("COURSE_BROWSER_WORKERS", "2")),
        help="notebooks checked at once (default 2, or $COURSE_BROWSER_WORKERS)",
    )
    args = parser.parse_args(argv)
    course = args.course.resolve()
    notebooks = [
        Path(n).resolve().relative_to(course).as_posix() if Path(n).exists() else n
        for n in args.notebooks
    ] or course_notebooks(course)
    if not notebooks:
        print(
            f"no chapter notebooks found under {course}/{{{','.join(COURSE_FOLDERS)}}}",
            file=sys.stderr,
        )
        return 1
    started = time.monotonic()
    with terminate_on_sigterm():
        reports = run(notebooks, course, args.results, args.run_timeout, args.workers)
    failed = [r for r in reports if not r.ok]
    print(
        f"\n{len(reports) - len(failed)} of {len(reports)} notebooks passed in {time.monotonic() - started:.0f} s"
        f"; screenshots in {args.results}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
