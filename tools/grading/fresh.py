"""The guard's fresh run, on the judge's side (``tools/grading/guard.py`` says why and how): the
notebook's cells go to the student process of a session (``session.py``), each check cell runs
here, in the judge; :func:`rerun` gives each check's verdict."""

from __future__ import annotations

import ast
import builtins
import contextlib
import io
import signal
import time
import types

from tools.grading.feedback import timed_out
from tools.grading.needs import cell_names, needed_cells

GRACE = 10  # seconds the judge waits past a cell's limit before it gives the student process up
LOST = "This check could not be confirmed: the student process of the fresh run stopped ({})."


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


def chapter(nb) -> int:
    """The chapter a notebook grades (its checks' ``chNN_`` grade_ids); 99 when none says."""
    found = [
        int(c.metadata["nbgrader"]["grade_id"][2:4])
        for c in (nb.cells[i] for i in graded_checks(nb))
        if str(c.metadata["nbgrader"].get("grade_id", ""))[:4].lower().startswith("ch")
        and str(c.metadata["nbgrader"]["grade_id"])[2:4].isdigit()
    ]
    return min(found, default=99)


def given_cell(cell) -> bool:
    """A locked cell of the release that is neither an answer nor a check (nbgrader has restored
    its source): it may build on the graded chapter's classes (see ``tools/grading/student.py``)."""
    meta = cell.metadata.get("nbgrader", {})
    return bool(meta.get("locked")) and not meta.get("solution") and not meta.get("grade")


class CellTimeout(BaseException):
    """A cell ran past the grader's time limit (a BaseException, so no check turns it into a diagnosis)."""


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise :class:`CellTimeout` in the block after ``seconds`` (0: no limit)."""

    def stop(signum, frame):
        raise CellTimeout(seconds)

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, max(0, seconds))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def preload() -> None:
    """What the judge needs, imported before any notebook: the checks and their references."""
    import IPython.core.inputtransformer2  # noqa: F401 - cell_names reads cells as IPython does
    import torch.nn.attention.bias  # noqa: F401 - loads torch._dynamo, which wraps torch.manual_seed

    import course_utils.chapters  # noqa: F401 - the checks' references, never sent anywhere
    import course_utils.checks as checks
    import tools.grading.honesty  # noqa: F401
    import tools.grading.session  # noqa: F401

    dir(checks)  # every chapter's checks collected


# ----------------------------------------------------------------------------- the fresh run
def rerun(nb, session, only=None, cell_timeout=0, prune=False, counts=None) -> dict:
    """Run ``nb`` in the student process of ``session`` and its checks here; {check grade_id:
    None or diagnosis} of the checks in ``only`` (default: all). Each cell stops after
    ``cell_timeout`` seconds (a list: each cell's own limit, by index, as the kernel had it).
    ``prune``: only the cells :func:`needed_cells` keeps; ``counts`` gets the code cells up to the
    last check (``cells``) and how many of them ran (``ran``)."""
    preload()
    from tools.grading.honesty import guarded_checks

    stand_in = types.SimpleNamespace(checks=guarded_checks(session))
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
            # kernel died in it (tools/grading/stops.py): it would end this fresh run too
        counts["ran"] += 1
        seconds = cell_timeout[index] if isinstance(cell_timeout, list) else cell_timeout
        session.cell, session.given = index, given_cell(cell)
        if index not in checked:
            _run_cell(session, cell.source, seconds)
        else:
            grade_id = cell.metadata["nbgrader"]["grade_id"]
            verdicts[grade_id] = _verdict(session, stand_in, cell.source, grade_id, seconds)
            session.end_check()
            session.attempts = []
        if session.broken:
            break
    return verdicts


def _run_cell(session, source: str, seconds: float) -> None:
    from tools.grading.judge import GraderLost, StudentError, StudentTimeout

    with contextlib.suppress(CellTimeout, GraderLost, StudentError, StudentTimeout):
        with time_limit(seconds + GRACE if seconds else 0):
            session.run_cell(source, seconds)


def _verdict(session, stand_in, source: str, grade_id: str, seconds: float) -> str | None:
    """None when the check cell passes here, else why not, in words."""
    from course_utils.checks import CheckFailure
    from tools.grading.honesty import hidden_code
    from tools.grading.judge import GraderLost, StudentTimeout

    try:
        code = compile(source, f"<check cell {grade_id}>", "exec")
        names = cell_names(source)[0] - {"cu"} - set(dir(builtins))
    except SyntaxError as exc:
        return f"The check cell raised SyntaxError: {exc}"
    session.deadline = time.monotonic() + seconds if seconds else None
    try:
        with (
            contextlib.redirect_stdout(io.StringIO()),
            time_limit(seconds + GRACE if seconds else 0),
        ):
            namespace = dict(session.names(names), cu=stand_in, __builtins__=builtins)
            exec(code, namespace)
        return None
    except (CellTimeout, StudentTimeout):
        return timed_out(seconds)
    except GraderLost as exc:
        return LOST.format(exc)
    except CheckFailure as exc:
        failure = exc
    except Exception as exc:  # noqa: BLE001 - any crash loses the points, in words
        failure = f"The check cell raised {type(exc).__name__}: {exc}"
    finally:
        session.deadline = None
    if session.attempts and "course_code_handed_in" not in str(getattr(failure, "bug", "")):
        return str(hidden_code(grade_id.split("_", 1)[-1].split("__")[0], session.attempts))
    return str(failure)
