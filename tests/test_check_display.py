"""What a student sees when a self-check fails: the diagnosis, not the check's own code.

JupyterLab, nbgrader's feedback (the error output stored by its autograder) and nbval all show
the traceback the kernel reports for a cell, which IPython builds with ``CheckFailure``'s
``_render_traceback_`` hook. These tests run real cells in a real kernel (nbclient, as nbgrader
and ``make solutions`` do) and one notebook under nbval, and read what comes back.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Any sign of the check's internals: the engine's files, the chapter's checks, the package path.
ENGINE = re.compile(r"_engine|checks\.py|course_utils[/\\]|core\.py")

SETUP = "import torch\nimport course_utils as cu"
WRONG = """\
def softmax(x):
    return (x - x.max()).exp()  # never divided by the sum

cu.checks.check_softmax(softmax)"""
CRASH = """\
def softmax(x):
    scores = (x - x.max()).exp()
    total = scores.sum(dim=1, keepdim=True)  # the student's own line
    return scores / total

cu.checks.check_softmax(softmax)"""
OWN_ERROR = "raise KeyError('not a check at all')"


def _notebook() -> nbformat.NotebookNode:
    return nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(src) for src in (SETUP, WRONG, CRASH, OWN_ERROR)],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}},
    )


@pytest.fixture(scope="module")
def errors() -> list[dict]:
    """The error output of each cell, as the kernel reported it (ANSI colours removed)."""
    nb = _notebook()
    NotebookClient(
        nb,
        timeout=120,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(ROOT)}},
    ).execute()
    found = []
    for cell in nb.cells:
        error = next((o for o in cell.outputs if o.output_type == "error"), None)
        found.append(
            None if error is None else {**error, "text": ANSI.sub("", "\n".join(error.traceback))}
        )
    return found


def test_a_failed_check_shows_only_its_diagnosis(errors):
    assert errors[0] is None
    error = errors[1]
    assert error["ename"] == "CheckFailure"
    assert error["text"].startswith("check_softmax found a problem.\n\n")
    assert "Hint: " in error["text"]
    assert not ENGINE.search(error["text"]) and "Traceback" not in error["text"], error["text"]
    assert error["text"] == error["evalue"]  # the message and nothing else


def test_a_crash_in_the_students_code_keeps_the_students_lines(errors):
    text = errors[2]["text"]
    assert "total = scores.sum(dim=1, keepdim=True)  # the student's own line" in text
    assert "IndexError" in text
    assert text.rstrip().endswith(errors[2]["evalue"].rstrip())
    assert "check_softmax found a problem." in text
    assert not ENGINE.search(text), text


def test_an_error_that_is_not_a_check_is_shown_as_usual(errors):
    text = errors[3]["text"]
    assert errors[3]["ename"] == "KeyError"
    assert "raise KeyError('not a check at all')" in text


def test_nbval_reports_the_diagnosis_without_the_checks_frames(tmp_path):
    path = tmp_path / "failing.ipynb"
    nb = _notebook()
    nb.cells = nb.cells[:2]
    nbformat.write(nb, path)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--nbval-lax", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    report = ANSI.sub("", done.stdout)
    assert done.returncode == 1, report[-3000:]
    assert "check_softmax found a problem." in report
    assert not re.search(r"_engine|chapters[/\\]ch01[/\\]checks\.py", report), report[-3000:]
