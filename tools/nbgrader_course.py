"""The course directory's ``nbgrader_config.py``: what ``python -m tools.nbgrader_meta course``
writes (:data:`NBGRADER_CONFIG`), and the gradebook every command of the course uses
(:func:`set_db_url`)."""

from __future__ import annotations

from pathlib import Path

NBGRADER_CONFIG = """\
# nbgrader configuration for the "Attention from Scratch" course (written by tools/nbgrader_meta.py).
# Assignments are added by `nbgrader generate_assignment`, students by `nbgrader autograde`.
import sys

c = get_config()  # noqa: F821 - provided by nbgrader
c.CourseDirectory.course_id = "attention-from-scratch"
# nbgrader's own markers: "### BEGIN SOLUTION" in code cells, "<!-- BEGIN SOLUTION -->" in the
# written answers (the course's "<!-- BEGIN ANSWER -->", renamed in source/), and
# "### BEGIN HIDDEN TESTS" for tests the students do not see.
c.ClearSolutions.begin_solution_delimeter = "BEGIN SOLUTION"
c.ClearSolutions.end_solution_delimeter = "END SOLUTION"
# The same stubs as the course's own exercise notebooks (notebooks/).
c.ClearSolutions.code_stub = dict(python="# YOUR CODE HERE\\nraise NotImplementedError()")
c.ClearSolutions.text_stub = "*YOUR ANSWER HERE*"
# Each cell's time limit, for the kernel and for the guard's fresh run alike (it reads these);
# `make grade` replaces it with limits measured on the solutions. Chapter 07 times a few
# implementations: slow machines get room.
c.Execute.timeout = 300
# Kernels talk to nbgrader over local TCP: CurveZMQ keys (made per kernel by jupyter_client)
# encrypt it, so no other user of the machine can read the exchange, and the kernel has no
# "running over TCP without encryption" warning to print.
c.KernelManager.transport_encryption = "auto"
sys.path.insert(0, {root!r})
from nbconvert.preprocessors import ClearMetadataPreprocessor  # noqa: E402
from nbgrader.preprocessors import (  # noqa: E402
    AssignLatePenalties, CheckCellMetadata, ClearOutput, DeduplicateIds, IgnorePattern,
    LimitOutput, OverwriteCells, OverwriteKernelspec, SaveAutoGrades,
)
from tools.nbgrader_feedback import configure  # noqa: E402
from tools.nbgrader_guard import FreshChecks  # noqa: E402
from tools.nbgrader_restore import RestoreFromRelease  # noqa: E402
from tools.nbgrader_stops import StopsExecute  # noqa: E402

# A tampered notebook (an edited locked cell, a copied or deleted check, changed points) is put
# back as released before nbgrader checks it, and each change is named (tools/nbgrader_restore.py).
c.Autograde.sanitize_preprocessors = [
    ClearOutput, RestoreFromRelease, DeduplicateIds, OverwriteKernelspec, OverwriteCells,
    CheckCellMetadata,
]
# Each self-check's verdict comes from a fresh process the student's cells cannot patch
# (tools/nbgrader_guard.py, from the course repository below). StopsExecute is nbgrader's Execute
# naming each stopped cell with its limit and grading around a kernel that died.
c.Autograde.autograde_preprocessors = [
    StopsExecute, FreshChecks, IgnorePattern, ClearMetadataPreprocessor, LimitOutput,
    SaveAutoGrades, AssignLatePenalties, CheckCellMetadata,
]
# Feedback pages name each self-check in their summary table (tools/nbgrader_feedback.py).
configure(c)
# `nbgrader validate` cuts error lines at 90 characters by default; the checks wrap their
# diagnoses under it when nbgrader runs them, and a wider limit keeps other errors whole too.
c.Validator.width = 200
# `nbgrader autograde` forks each notebook's kernel from a process that has already imported
# torch and the course (tools/warm_kernel.py); COURSE_WARM_KERNEL=0 starts plain kernels.
from tools.warm_kernel import configure as warm_kernels  # noqa: E402

warm_kernels(c)
"""
DB_LINE = "c.CourseDirectory.db_url = {url!r}"


def set_db_url(course: Path, url: str) -> None:
    """Make every nbgrader command of the course (generate_assignment, autograde, generate_feedback,
    the formgrader) and `make grade`/`make report` use the gradebook at ``url``: a line appended
    to its ``nbgrader_config.py`` (a later line wins over an earlier one)."""
    config = Path(course) / "nbgrader_config.py"
    text = config.read_text(encoding="utf-8")
    line = DB_LINE.format(url=url)
    if line not in text.splitlines():
        text += f"# The gradebook every nbgrader command and make grade/report use:\n{line}\n"
        config.write_text(text, encoding="utf-8")
