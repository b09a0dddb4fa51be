"""Self-checks graded from a state the student's cells cannot patch.

nbgrader runs a student's notebook in one kernel, where the student's cells run before each
check cell: a line such as ``cu.checks.check_softmax = lambda f: None``, a replaced engine
helper, a patched ``torch.allclose`` or an exception handler that hides failures
(``get_ipython().set_custom_exc``) turns every check into free points, and no code that runs
later in the same kernel can be trusted to catch it, because it can be patched as well.

So the verdict of each check comes from outside that kernel. :class:`FreshChecks` is an
nbgrader preprocessor that runs after ``Execute`` (``nbgrader_config.py`` puts it there): it
re-runs the graded notebook's code cells in a fresh Python process (:func:`rerun`), which takes
the genuine checks, guarded by ``tools/nbgrader_honesty.py`` (the course's own code and the
shortcuts a chapter forbids earn nothing), and a snapshot of ``course_utils`` and ``torch``
*before* any student code runs, puts that snapshot back before every check cell, calls the
checks on the student's objects, and reports a check whose student code changed the protected
modules while it ran. A check that passed in the kernel but fails there gets the fresh
diagnosis as its error output, so nbgrader's ``SaveAutoGrades`` gives it no points. Only a
failure is carried over: the fresh run never raises a score.

The fresh process is cheap: one template process per grading run imports torch and the course
(and runs nothing else), and each notebook is re-run in a fork of it (:class:`Template`), so a
notebook pays no interpreter start and no imports a second time. Without ``os.fork`` (Windows)
each notebook gets a new interpreter.

It runs only the code cells the checks need (``tools/nbgrader_needs.py``): the cells nbgrader
marks (answers, checks, read-only given code), cells that reach names indirectly, and every earlier
cell binding a name one of those reads; teaching cells that print, plot, time or train for show
are skipped. This changes no score (:func:`confirm`). A check that does not pass in the pruned
run runs again in a second fork with every cell, as before pruning, and only that verdict counts:
no point the full run gives is lost. A pass in the pruned run is the genuine check's pass, in the
same restored state, on the notebook without some cells that carry no nbgrader metadata (cells
nbgrader neither locks nor restores, which the student could have deleted before handing in): no
point is given that the full run would not give to a notebook the student could hand in.

Command line::

    python -m tools.nbgrader_guard NOTEBOOK.ipynb    # prints {grade_id: null or diagnosis} as JSON
    python -m tools.nbgrader_guard --serve           # the template (run by FreshChecks)
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

from tools.nbgrader_feedback import timed_out, wrap
from tools.nbgrader_needs import needed_cells
from tools.optional import optional_base

ROOT = Path(__file__).resolve().parent.parent
PROTECTED = ("torch", "torch.nn", "torch.nn.functional", "torch.nn.modules.module", "builtins")
OWN = ("course_utils", "tools.nbgrader_honesty")  # modules (and submodules) kept as imported


def only_draws(source: str) -> bool:
    """True for a cell that is one call of a course explorer, ``cu.widgets.name(a, b)`` with names
    or constants as arguments: it defines nothing, and the explorers draw without touching the
    global random state, so no later check can depend on it. Any other code (a student's line
    added to the cell included) runs."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return False
    if (
        len(body) != 1
        or not isinstance(body[0], ast.Expr)
        or not isinstance(body[0].value, ast.Call)
    ):
        return False
    call = body[0].value
    func = call.func
    named = (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Attribute)
        and func.value.attr == "widgets"
        and isinstance(func.value.value, ast.Name)
        and func.value.value.id == "cu"
    )
    arguments = [*call.args, *(k.value for k in call.keywords)]
    return named and all(isinstance(a, (ast.Name, ast.Constant)) for a in arguments)


def graded_checks(nb) -> list[int]:
    """Indices of the autograder test cells (code cells with nbgrader ``grade: true``)."""
    return [
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")
    ]


# ----------------------------------------------------------------------------- the fresh process
def _protected_objects() -> dict[str, object]:
    import torch

    found = {name: sys.modules[name] for name in PROTECTED if name in sys.modules}
    found.update({k: m for k, m in sys.modules.items() if k.startswith(OWN)})
    found["torch.Tensor"], found["torch.nn.Module"] = torch.Tensor, torch.nn.Module
    return found


def snapshot() -> dict[str, tuple[object, dict]]:
    """Every protected module's and class's attributes, and the code of each of their Python
    functions (``f.__code__ = ...`` changes a function without replacing it)."""
    saved = {name: (obj, dict(vars(obj))) for name, obj in _protected_objects().items()}
    for name, (_, attrs) in list(saved.items()):
        for attr, value in attrs.items():
            value = getattr(value, "__func__", value)
            if isinstance(value, types.FunctionType):
                saved[f"{name}.{attr}()"] = (value, {"__code__": value.__code__})
            elif isinstance(value, type) and name.startswith(OWN):
                for key, method in vars(value).items():
                    if isinstance(method, types.FunctionType):
                        saved[f"{name}.{attr}.{key}()"] = (method, {"__code__": method.__code__})
    return saved


def restore(saved) -> list[str]:
    """Put every protected attribute back; return the names that had been changed."""
    changed = []
    for name, (obj, attrs) in saved.items():
        if isinstance(obj, types.ModuleType) and sys.modules.get(name, obj) is not obj:
            sys.modules[name] = obj
            changed.append(name)
        if isinstance(obj, types.FunctionType):
            if obj.__code__ is not attrs["__code__"]:
                obj.__code__ = attrs["__code__"]
                changed.append(name)
            continue
        current = vars(obj)
        for attr, value in attrs.items():
            if current.get(attr, value) is not value or attr not in current:
                with contextlib.suppress(AttributeError, TypeError):
                    setattr(obj, attr, value)
                changed.append(f"{name}.{attr}")
    return changed


class CellTimeout(BaseException):
    """A cell ran past the grader's time limit (a BaseException, so no check turns it into a diagnosis)."""


@contextlib.contextmanager
def time_limit(seconds: int):
    """Raise :class:`CellTimeout` in the block after ``seconds`` (0: no limit)."""

    def stop(signum, frame):
        raise CellTimeout(seconds)

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def preload() -> None:
    """What every fresh run needs, imported before any student code (runs no torch operation)."""
    import IPython.core.interactiveshell  # noqa: F401
    import matplotlib.pyplot as plt
    import torch.nn.attention.bias  # noqa: F401 - loads torch._dynamo, which wraps torch.manual_seed

    import course_utils.chapters  # noqa: F401 - the checks' references, protected from here on
    import course_utils.checks as checks
    import course_utils.plotting  # noqa: F401
    import course_utils.widgets as widgets
    import tools.nbgrader_honesty  # noqa: F401

    dir(checks), dir(widgets)  # every chapter's checks and explorers collected
    figure = plt.figure()  # a notebook's first figure loads matplotlib's fonts: done once, here
    figure.text(0, 0, "fonts")
    figure.canvas.draw()
    plt.close(figure)


def rerun(
    nb,
    only: set[str] | None = None,
    cell_timeout: int | list[int] = 0,
    prune: bool = False,
    counts: dict | None = None,
) -> dict[str, str | None]:
    """Run ``nb``'s code cells in this (fresh) process; {check grade_id: None or diagnosis} of the
    checks in ``only`` (default: all); each cell stops after ``cell_timeout`` seconds (a list:
    each cell's own limit, by index, as the kernel had it). ``prune``:
    only the cells :func:`needed_cells` keeps; ``counts`` gets the code cells up to the last
    check (``cells``) and how many of them ran (``ran``)."""
    preload()
    from IPython.core.interactiveshell import InteractiveShell

    import course_utils.checks as checks
    from tools.nbgrader_honesty import guarded_checks

    checks_ns = guarded_checks()
    failure_type = checks.CheckFailure
    stand_in = types.SimpleNamespace(checks=checks_ns)
    shell = InteractiveShell.instance()
    saved = snapshot()
    verdicts: dict[str, str | None] = {}
    checked = {
        i
        for i in graded_checks(nb)
        if only is None or nb.cells[i].metadata["nbgrader"]["grade_id"] in only
    }
    last = max(checked, default=-1)
    kept = needed_cells(nb, last) if prune else range(last + 1)
    counts = {} if counts is None else counts
    counts.update(cells=sum(c.cell_type == "code" for c in nb.cells[: last + 1]), ran=0)
    for index, cell in enumerate(nb.cells[: last + 1]):
        if cell.cell_type != "code" or (index not in checked and only_draws(cell.source)):
            continue  # an explorer's picture changes no check: the kernel has drawn it already
        if index not in kept or cell.metadata.get("course_grading", {}).get("stopped"):
            continue  # no check reads what this cell binds (see needed_cells and confirm), or the
            # kernel died in it (tools/nbgrader_stops.py): it would end this fresh run too
        counts["ran"] += 1
        seconds = cell_timeout[index] if isinstance(cell_timeout, list) else cell_timeout
        sink = io.StringIO()
        if index not in checked:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                with contextlib.suppress(CellTimeout), time_limit(seconds):
                    shell.run_cell(cell.source, store_history=False, silent=True)
            continue
        grade_id = cell.metadata["nbgrader"]["grade_id"]
        restore(saved)
        namespace = dict(shell.user_ns, cu=stand_in)
        try:
            with contextlib.redirect_stdout(sink), time_limit(seconds):
                exec(compile(cell.source, f"<check cell {grade_id}>", "exec"), namespace)
            verdicts[grade_id] = None
        except CellTimeout:
            verdicts[grade_id] = timed_out(seconds)
        except failure_type as exc:
            verdicts[grade_id] = str(exc)
        except Exception as exc:  # noqa: BLE001 - any crash loses the points, in words
            verdicts[grade_id] = f"The check cell raised {type(exc).__name__}: {exc}"
        changed = restore(saved)
        if changed and verdicts[grade_id] is None:
            verdicts[grade_id] = (
                f"While this check ran, your code replaced {', '.join(sorted(changed)[:3])}: "
                "code that changes the course's checks or torch cannot be graded, so this check "
                "gives no points."
            )
    return verdicts


# ----------------------------------------------------------------------------- the template
def serve() -> int:
    """The template: import what a fresh run needs, then re-run each requested notebook (one JSON
    request per line on stdin) in a fork of this still untouched process; reply one JSON line."""
    import nbformat  # noqa: F401

    preload()
    for line in sys.stdin:
        reply = _in_a_fork(json.loads(line))
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    return 0


def _in_a_fork(request: dict) -> dict:
    """{"verdicts": ..., "cells": ..., "ran": ...} of one fresh run in a fork ({} if none came)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the student's cells run here, and only here
        code = 1
        try:
            os.close(read_end)
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
            os.chdir(request["folder"])
            os.environ.update(request["env"])
            import nbformat

            nb = nbformat.read(request["notebook"], as_version=4)
            counts: dict = {}
            only, prune = set(request["only"]), request.get("prune", False)
            verdicts = rerun(nb, only, request["cell_timeout"], prune, counts)
            with os.fdopen(write_end, "wb") as out:
                out.write(json.dumps(dict(counts, verdicts=verdicts)).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    received, deadline = b"", time.monotonic() + request["limit"]
    with os.fdopen(read_end, "rb") as pipe:
        while time.monotonic() < deadline:
            if select.select([pipe], [], [], 1.0)[0]:
                chunk = os.read(pipe.fileno(), 1 << 16)
                if not chunk:
                    break
                received += chunk
        else:
            os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    try:
        return json.loads(received)
    except ValueError:
        return {}


class Template:
    """The grading run's template process (``--serve``), started on first use."""

    process: subprocess.Popen | None = None

    @classmethod
    def start(cls) -> None:
        if cls.process is None or cls.process.poll() is not None:
            cls.process = subprocess.Popen(
                [sys.executable, "-m", "tools.nbgrader_guard", "--serve"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=_env(),
                cwd=ROOT,
            )

    @classmethod
    def run(
        cls, path: str, folder: str, ids: list[str], cell_timeout, limit: int, prune=False
    ) -> dict:
        """{"verdicts": {grade_id: None or diagnosis}, "cells": .., "ran": ..} of one fresh run."""
        cls.start()
        request = dict(notebook=path, folder=os.path.abspath(folder), only=ids, limit=limit)
        request.update(cell_timeout=cell_timeout, env=_env(only_nbgrader=True), prune=prune)
        try:
            cls.process.stdin.write(json.dumps(request) + "\n")
            cls.process.stdin.flush()
            reply = cls.process.stdout.readline()
        except OSError:
            reply = ""
        return json.loads(reply) if reply else {}


def _env(only_nbgrader: bool = False) -> dict[str, str]:
    """The environment of a fresh run (``only_nbgrader``: just nbgrader's own variables)."""
    if only_nbgrader:
        return {k: v for k, v in os.environ.items() if k.startswith("NBGRADER_")}
    env = dict(os.environ, MPLBACKEND="Agg", COURSE_STATIC_WIDGETS="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def main(argv: list[str] | None = None) -> int:
    import nbformat

    parser = argparse.ArgumentParser(prog="python -m tools.nbgrader_guard")
    parser.add_argument("notebook", nargs="?")
    parser.add_argument("--serve", action="store_true", help="be the template FreshChecks forks")
    parser.add_argument("--only", nargs="*", help="grade_ids of the checks to confirm")
    parser.add_argument(
        "--cell-timeout", type=json.loads, default=0, help="seconds per cell (0: none), or a list"
    )
    parser.add_argument("--prune", action="store_true", help="skip cells no check needs")
    args = parser.parse_args(argv)
    if args.serve:
        return serve()
    nb = nbformat.read(args.notebook, as_version=4)
    only = None if args.only is None else set(args.only)
    counts: dict = {}
    verdicts = rerun(nb, only, args.cell_timeout, args.prune, counts)
    sys.__stdout__.write("\nGUARD-COUNTS " + json.dumps(counts) + "\n")
    sys.__stdout__.write("\nGUARD-VERDICTS " + json.dumps(verdicts) + "\n")
    return 0


# ----------------------------------------------------------------------------- the preprocessor
class FreshChecks(optional_base("nbgrader.preprocessors", "NbGraderPreprocessor")):
    """nbgrader preprocessor: each check's verdict from a fresh process (see the module text)."""

    def cell_limits(self, nb) -> list[int]:
        """Each cell's limit in seconds, by index: the kernel's own (the config's
        ``Execute.timeout_func``, else ``Execute.timeout``), so a hang costs this run no more."""
        execute = self.config.get("Execute", {})
        limit = execute.get("timeout_func") or (lambda cell: execute.get("timeout", 300))
        return [int(limit(c)) if c.cell_type == "code" else 0 for c in nb.cells]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if hasattr(os, "fork"):  # its imports overlap the kernel's first notebook
            Template.start()

    def preprocess(self, nb, resources):
        cells = graded_checks(nb)
        for index in cells:  # the feedback shows the diagnosis, wrapped, not our traceback
            for output in nb.cells[index].outputs:
                if output.output_type == "error" and output.ename == "CheckFailure":
                    output.traceback = wrap(output.evalue).split("\n")
        passed = [
            i for i in cells if not any(o.output_type == "error" for o in nb.cells[i].outputs)
        ]
        if not passed:
            return nb, resources
        folder = resources.get("metadata", {}).get("path") or "."
        ids = [nb.cells[i].metadata["nbgrader"]["grade_id"] for i in passed]
        start = time.perf_counter()
        verdicts, report = self._run(nb, folder, ids)
        self.log.info(
            "Fresh run of %d checks: %.1f s; %s of %s code cells skipped; full run again for %s",
            len(ids),
            time.perf_counter() - start,
            report.get("cells", 0) - report.get("ran", 0),
            report.get("cells", "?"),
            ", ".join(report["fallback"]) or "none",
        )
        for index in passed:
            cell = nb.cells[index]
            grade_id = cell.metadata["nbgrader"]["grade_id"]
            if grade_id in verdicts and verdicts[grade_id] is None:
                continue
            text = verdicts.get(grade_id) or (
                "This check could not be confirmed: the notebook, run again in a fresh process "
                "from the top, did not reach this cell."
            )
            cell.outputs.insert(0, _error(wrap(text)))
        return nb, resources

    def _run(self, nb, folder: str, ids: list[str]) -> tuple[dict, dict]:
        import nbformat

        with tempfile.NamedTemporaryFile("w", suffix=".ipynb", delete=False) as handle:
            nbformat.write(nb, handle)
        limits = self.cell_limits(nb)
        limit = sum(limits) + 120  # every cell at its limit, and the fork's start
        try:
            return confirm(handle.name, folder, ids, limits, limit)
        finally:
            os.unlink(handle.name)


def confirm(path: str, folder: str, ids: list[str], cell_timeout: int | list[int], limit: int):
    """(verdicts, report) of the checks ``ids``: a pruned fresh run, then, for the checks that
    did not pass in it, a full one whose verdicts replace theirs (see the module text); the report
    holds the pruned run's ``cells`` and ``ran`` and the ``fallback`` grade_ids."""
    one = Template.run if hasattr(os, "fork") else _spawned
    pruned = one(path, folder, ids, cell_timeout, limit, prune=True)
    verdicts = dict(pruned.get("verdicts", {}))
    fallback = [grade_id for grade_id in ids if verdicts.get(grade_id, "") is not None]
    if fallback:
        full = one(path, folder, fallback, cell_timeout, limit, prune=False).get("verdicts", {})
        for grade_id in fallback:
            verdicts.pop(grade_id, None)
            if grade_id in full:
                verdicts[grade_id] = full[grade_id]
    return verdicts, dict(cells=pruned.get("cells", 0), ran=pruned.get("ran", 0), fallback=fallback)


def _spawned(path: str, folder: str, ids: list[str], cell_timeout, limit: int, prune=False):
    """A fresh interpreter for one notebook (where there is no fork), as :meth:`Template.run`."""
    command = [sys.executable, "-m", "tools.nbgrader_guard", path, *["--prune"] * prune]
    command += ["--cell-timeout", json.dumps(cell_timeout), "--only", *ids]
    try:
        done = subprocess.run(
            command, cwd=folder, env=_env(), capture_output=True, text=True, timeout=limit
        )
    except subprocess.TimeoutExpired:
        return {}
    found = {}
    for line in done.stdout.splitlines():
        if line.startswith("GUARD-COUNTS "):
            found.update(json.loads(line.split(" ", 1)[1]))
        elif line.startswith("GUARD-VERDICTS "):
            found["verdicts"] = json.loads(line.split(" ", 1)[1])
    return found


FRESH = "Checked again in a fresh process, where the notebook's cells cannot change the check:"


def _error(text: str):
    from nbformat.v4 import new_output

    return new_output(
        "error", ename="CheckFailure", evalue=text, traceback=[FRESH, "", *text.split("\n")]
    )


if __name__ == "__main__":
    raise SystemExit(main())
