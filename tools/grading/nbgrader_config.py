# nbgrader configuration of the "Attention from Scratch" course. Every course directory that
# `python -m tools.grading.meta course DIR` makes loads this file from its own nbgrader_config.py,
# which puts the course repository on sys.path first (the imports below come from it).
# Assignments are added by `nbgrader generate_assignment`, students by `nbgrader autograde`.

c = get_config()  # noqa: F821 - provided by nbgrader
c.CourseDirectory.course_id = "attention-from-scratch"
# nbgrader's own markers: "### BEGIN SOLUTION" in code cells, "<!-- BEGIN SOLUTION -->" in the
# written answers (the course's "<!-- BEGIN ANSWER -->", renamed in source/), and
# "### BEGIN HIDDEN TESTS" for tests the students do not see.
c.ClearSolutions.begin_solution_delimeter = "BEGIN SOLUTION"
c.ClearSolutions.end_solution_delimeter = "END SOLUTION"
# The same stubs as the course's own exercise notebooks (notebooks/).
c.ClearSolutions.code_stub = dict(python="# YOUR CODE HERE\nraise NotImplementedError()")
c.ClearSolutions.text_stub = "*YOUR ANSWER HERE*"
# Each cell's time limit, for the kernel and for the guard's fresh run alike (it reads these);
# `make grade` replaces it with limits measured on the solutions. Chapter 07 times a few
# implementations: slow machines get room.
c.Execute.timeout = 300
# Kernels talk to nbgrader over local TCP: CurveZMQ keys (made per kernel by jupyter_client)
# encrypt it, so no other user of the machine can read the exchange, and the kernel has no
# "running over TCP without encryption" warning to print.
c.KernelManager.transport_encryption = "auto"
from nbconvert.preprocessors import ClearMetadataPreprocessor  # noqa: E402
from nbgrader.preprocessors import (  # noqa: E402
    AssignLatePenalties,
    CheckCellMetadata,
    ClearOutput,
    DeduplicateIds,
    IgnorePattern,
    LimitOutput,
    OverwriteCells,
    OverwriteKernelspec,
    SaveAutoGrades,
)

from tools.grading.feedback import configure  # noqa: E402
from tools.grading.guard import FreshChecks  # noqa: E402
from tools.grading.restore import RestoreFromRelease  # noqa: E402
from tools.grading.stops import StopsExecute  # noqa: E402

# A tampered notebook (an edited locked cell, a copied or deleted check, changed points) is put
# back as released before nbgrader checks it, and each change is named (tools/grading/restore.py).
c.Autograde.sanitize_preprocessors = [
    ClearOutput,
    RestoreFromRelease,
    DeduplicateIds,
    OverwriteKernelspec,
    OverwriteCells,
    CheckCellMetadata,
]
# Each self-check's verdict comes from a fresh process the student's cells cannot patch
# (tools/grading/guard.py). StopsExecute is nbgrader's Execute
# naming each stopped cell with its limit and grading around a kernel that died.
c.Autograde.autograde_preprocessors = [
    StopsExecute,
    FreshChecks,
    IgnorePattern,
    ClearMetadataPreprocessor,
    LimitOutput,
    SaveAutoGrades,
    AssignLatePenalties,
    CheckCellMetadata,
]
# Feedback pages name each self-check in their summary table (tools/grading/feedback.py).
configure(c)
# `nbgrader validate` cuts error lines at 90 characters by default; the checks wrap their
# diagnoses under it when nbgrader runs them, and a wider limit keeps other errors whole too.
c.Validator.width = 200
# `nbgrader autograde` forks each notebook's kernel from a process that has already imported
# torch and the course (tools/grading/warm_kernel.py); COURSE_WARM_KERNEL=0 starts plain kernels.
from tools.grading.kernels import configure as warm_kernels  # noqa: E402

warm_kernels(c)
