"""Self-checks graded from a state the student's cells cannot patch.

nbgrader runs a student's notebook in one kernel, where the student's cells run before each
check cell: a line such as ``cu.checks.check_softmax = lambda f: None``, a replaced engine
helper, a patched ``torch.allclose`` or an exception handler that hides failures
(``get_ipython().set_custom_exc``) turns every check into free points, and no code that runs
later in the same kernel can be trusted to catch it, because it can be patched as well.

So the verdict of each check comes from outside that kernel. :class:`FreshChecks` is an
nbgrader preprocessor that runs after ``Execute`` (``nbgrader_config.py`` puts it there): it
re-runs the graded notebook's code cells in a fresh Python process (:func:`rerun`), which takes
the genuine checks and a snapshot of ``course_utils`` and ``torch`` *before* any student code
runs, puts that snapshot back before every check cell, calls the genuine checks on the
student's objects, and reports a check whose student code changed the protected modules while
it ran. A check that passed in the kernel but fails there gets the fresh diagnosis as its error
output, so nbgrader's ``SaveAutoGrades`` gives it no points. Only a failure is carried over:
the fresh run never raises a score.

Command line (the fresh process; run by :class:`FreshChecks`)::

    python -m tools.nbgrader_guard NOTEBOOK.ipynb    # prints {grade_id: null or diagnosis} as JSON
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTECTED = ("torch", "torch.nn", "torch.nn.functional", "torch.nn.modules.module", "builtins")
WIDTH = 88  # diagnoses are wrapped to this width, so feedback pages and `nbgrader validate` show them whole


def graded_checks(nb) -> list[int]:
    """Indices of the autograder test cells (code cells with nbgrader ``grade: true``)."""
    return [
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")
    ]


def wrap(text: str) -> str:
    """A diagnosis wrapped paragraph by paragraph to :data:`WIDTH` columns."""
    return "\n".join(
        textwrap.fill(p, WIDTH, break_long_words=False, break_on_hyphens=False) if p else ""
        for p in text.split("\n")
    )


# ----------------------------------------------------------------------------- the fresh process
def _protected_objects() -> dict[str, object]:
    import torch

    found = {name: sys.modules[name] for name in PROTECTED if name in sys.modules}
    found.update({k: m for k, m in sys.modules.items() if k.split(".")[0] == "course_utils"})
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
            elif isinstance(value, type) and name.startswith("course_utils"):
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


def timed_out(seconds: float) -> str:
    """The words a student reads when a cell was stopped."""
    return (
        f"This cell was stopped after {seconds:g} seconds, the grader's limit for one cell: the code "
        "it runs did not finish (for example a loop whose condition never becomes false, or a "
        "function that calls itself without end). Run the notebook from the top in your own "
        "kernel; the cell that never finishes is the one to fix."
    )


def rerun(nb, only: set[str] | None = None, cell_timeout: int = 0) -> dict[str, str | None]:
    """Run ``nb``'s code cells in this (fresh) process; {check grade_id: None or diagnosis} of the
    checks in ``only`` (default: all); each cell stops after ``cell_timeout`` seconds."""
    import torch._dynamo  # noqa: F401 - torch wraps torch.manual_seed & co. on this first import
    from IPython.core.interactiveshell import InteractiveShell

    import course_utils.chapters  # noqa: F401 - the checks' references, protected from here on
    import course_utils.checks as checks

    checks_ns = types.SimpleNamespace(
        **{n: getattr(checks, n) for n in dir(checks) if n.startswith("check_")}
    )
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
    for index, cell in enumerate(nb.cells[: last + 1]):
        if cell.cell_type != "code":
            continue
        sink = io.StringIO()
        if index not in checked:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                with contextlib.suppress(CellTimeout), time_limit(cell_timeout):
                    shell.run_cell(cell.source, store_history=False, silent=True)
            continue
        grade_id = cell.metadata["nbgrader"]["grade_id"]
        restore(saved)
        namespace = dict(shell.user_ns, cu=stand_in)
        try:
            with contextlib.redirect_stdout(sink), time_limit(cell_timeout):
                exec(compile(cell.source, f"<check cell {grade_id}>", "exec"), namespace)
            verdicts[grade_id] = None
        except CellTimeout:
            verdicts[grade_id] = timed_out(cell_timeout)
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


def main(argv: list[str] | None = None) -> int:
    import nbformat

    parser = argparse.ArgumentParser(prog="python -m tools.nbgrader_guard")
    parser.add_argument("notebook")
    parser.add_argument("--only", nargs="*", help="grade_ids of the checks to confirm")
    parser.add_argument("--cell-timeout", type=int, default=0, help="seconds per cell (0: none)")
    args = parser.parse_args(argv)
    nb = nbformat.read(args.notebook, as_version=4)
    only = None if args.only is None else set(args.only)
    verdicts = rerun(nb, only, args.cell_timeout)
    sys.__stdout__.write("\nGUARD-VERDICTS " + json.dumps(verdicts) + "\n")
    return 0


# ----------------------------------------------------------------------------- the preprocessor
def _preprocessor_base():
    try:
        from nbgrader.preprocessors import NbGraderPreprocessor
    except ImportError:  # outside .venv-nbgrader: the module stays importable for its tests
        return object
    return NbGraderPreprocessor


class FreshChecks(_preprocessor_base()):
    """nbgrader preprocessor: each check's verdict from a fresh process (see the module text)."""

    cell_timeout = 300  # seconds per cell, as nbgrader's Execute.timeout in the course's config

    def preprocess(self, nb, resources):
        cells = graded_checks(nb)
        self._explain_timeouts(nb, cells)
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
        verdicts = self._run(nb, folder, ids)
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

    def _explain_timeouts(self, nb, cells: list[int]) -> None:
        """A check stopped by nbgrader's time limit shows words, not a bare KeyboardInterrupt."""
        for index in cells:
            for output in nb.cells[index].outputs:
                if output.output_type == "error" and output.ename in (
                    "KeyboardInterrupt",
                    "CellTimeoutError",
                    "TimeoutError",
                ):
                    text = wrap(timed_out(self.cell_timeout))
                    output.ename, output.evalue, output.traceback = (
                        "Timeout",
                        text,
                        text.split("\n"),
                    )

    def _run(self, nb, folder: str, ids: list[str]) -> dict[str, str | None]:
        import nbformat

        with tempfile.NamedTemporaryFile("w", suffix=".ipynb", delete=False) as handle:
            nbformat.write(nb, handle)
        env = dict(os.environ, MPLBACKEND="Agg", COURSE_STATIC_WIDGETS="1")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        try:
            done = subprocess.run(
                [sys.executable, "-m", "tools.nbgrader_guard", handle.name]
                + ["--cell-timeout", str(self.cell_timeout), "--only", *ids],
                cwd=folder,
                env=env,
                capture_output=True,
                text=True,
                timeout=self.cell_timeout * (len(nb.cells) + 1),
            )
        except subprocess.TimeoutExpired:
            return {}
        finally:
            os.unlink(handle.name)
        for line in reversed(done.stdout.splitlines()):
            if line.startswith("GUARD-VERDICTS "):
                return json.loads(line.split(" ", 1)[1])
        return {}


FRESH = "Checked again in a fresh process, where the notebook's cells cannot change the check:"


def _error(text: str):
    from nbformat.v4 import new_output

    return new_output(
        "error", ename="CheckFailure", evalue=text, traceback=[FRESH, "", *text.split("\n")]
    )


if __name__ == "__main__":
    raise SystemExit(main())
