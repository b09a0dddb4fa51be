"""Assertions shared by the self-check tests of every chapter."""

import ast
import re
import string
import sys
import time
from pathlib import Path

import pytest
import torch

from course_utils.checks import CheckFailure
from course_utils.checks.mistakes import MISTAKES
from course_utils.registry import chapter_files


def assert_passes(check, *args, capsys) -> None:
    """The check accepts the answer and prints exactly one success line."""
    check(*args)
    out = capsys.readouterr().out
    assert out.startswith("✓ check_") and out.count("\n") == 1, out


def assert_names_bug(
    check, *args, bug: str | None = None, diagnosis: str | None = None
) -> CheckFailure:
    """The check rejects the answer with a CheckFailure (an AssertionError) naming the mistake
    ``bug`` (an id of the catalogue in course_utils/checks/mistakes/) and/or containing ``diagnosis``."""
    with pytest.raises(CheckFailure) as info:
        check(*args)
    failure = info.value
    assert isinstance(failure, AssertionError)
    assert not re.search(r"\{[a-z_]+\}", str(failure)), f"an unfilled placeholder in:\n{failure}"
    if bug is not None:
        assert bug in MISTAKES, f"unknown mistake id {bug!r}"
        assert failure.bug == bug, f"expected {bug}, got {failure.bug}:\n{failure}"
        # The catalogue's hint, its {placeholders} filled with anything.
        template = "(?s)" + ".+?".join(
            re.escape(text) for text, *_ in string.Formatter().parse(MISTAKES[bug].hint)
        )
        assert re.fullmatch(template, failure.hint or ""), (
            f"hint {failure.hint!r} is not {MISTAKES[bug].hint!r}"
        )
    if diagnosis is not None:
        assert diagnosis in str(failure), str(failure)
    return failure


THREADS_LEFT = 2


def cpu_seconds_on_one_thread(check, *args) -> tuple[float, int]:
    """(CPU seconds of ``check(*args)`` run on one torch thread, the thread count a second call
    left when called with 2: ``THREADS_LEFT`` when the check restores it). With a
    thread per core, CPU time also counts threads spinning while other tests share the cores: a
    0.1 s check read 1.6 s under pytest-xdist in CI (2026-11-28).

    Judged (``-p tests.judged_plugin``: the answer runs in a student process), the seconds are the
    check's as in one process: the judge's own, less its coding of the wire, plus the student
    process's in the answer's code (less its recording of the calls). The limit is the self-check's
    in a notebook, where nothing crosses; grading's cost of the wire is what make grade's per-cell
    limits measure (1.03 s and 1.33 s judged, counting the coding, for 0.2-0.4 s in one process)."""
    judged = getattr(check, "__judged__", False)  # wrapped by tests/judged_plugin.py
    session = sys.modules["tests.judged_plugin"]._session() if judged else None
    split = lambda: (session.coding_cpu, session.student_cpu) if session else (0.0, 0.0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        (coding, student), start = split(), time.process_time()
        check(*args)
        spent = time.process_time() - start
        coding, student = split()[0] - coding, split()[1] - student
        # the count left is read after a second, untimed call made with 2 threads: a check sets 1
        # for itself, so from 1 a check that forgot to put the caller's count back left it right
        torch.set_num_threads(2)
        check(*args)
        return spent - coding + student, torch.get_num_threads()
    finally:
        torch.set_num_threads(threads)


def needs_torch(answer) -> list:
    """pytest marks for an answer written with a torch feature newer than the oldest supported
    (its ``needs_torch`` attribute, e.g. "2.4" for nn.RMSNorm): skipped on an older torch, where no
    student could write it."""
    from torch.torch_version import TorchVersion

    wanted = getattr(answer, "needs_torch", None)
    if wanted is None or TorchVersion(torch.__version__) >= wanted:
        return []
    return [pytest.mark.skip(reason=f"written with torch {wanted}'s API")]


def unusual_right_answers(module) -> list:
    """``module.ANSWERS`` (tests/correct/chNN.py: (check name, args) pairs) as pytest params."""
    return [
        pytest.param(
            check, args, id=f"{check}-{getattr(args[0], '__name__', i)}", marks=needs_torch(args[0])
        )  # fmt: skip
        for i, (check, args) in enumerate(module.ANSWERS)
    ]


CHECKS = Path(__file__).resolve().parent.parent / "course_utils" / "checks"


def chapter_check_modules() -> list[Path]:
    """Each chapter's checks.py and the modules beside it that it may split off (all but the
    generated __init__.py and the explorer)."""
    return [
        p
        for folder in {path.parent for path in chapter_files("checks.py")}
        for p in sorted(folder.glob("*.py"))
        if p.name not in ("__init__.py", "explorer.py")
    ]


def calls_in_checks(name: str):
    """(path, call node) of every call of a function or method called ``name`` in the checks: the
    engine (course_utils/checks) and each chapter's checks (:func:`chapter_check_modules`)."""
    for path in [*sorted(CHECKS.rglob("*.py")), *sorted(chapter_check_modules())]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            func = getattr(node, "func", None)
            if (
                isinstance(node, ast.Call)
                and getattr(func, "id", getattr(func, "attr", None)) == name
            ):
                yield path, node
