"""pytest setup for every run from the repository root.

- ``tools.testing.nbval_plugin``: the course's nbval rules (stderr skipped, last-digit tolerance).
- ``tests.solution_run``: nbval's one run of each solution also serves the shape comments, the
  inline figures' legibility and the re-run of chapters' proofs (one execution per solution).
- The ``slow`` marker: the tests listed in ``SLOW`` (grading machinery, a chapter built from
  nothing) run in ``make test-slow``, a step of ``.ci/run``, not in ``make test``
  (``-m "not slow"``). CONTRIBUTING's *Testing* lists them with the planted faults they catch.
"""

import pytest

pytest_plugins = ["tools.testing.nbval_plugin", "tests.solution_run"]

# Test files (or node ids) that run in `make test-slow`; measured in CONTRIBUTING's *Testing*.
SLOW = (
    "tests/test_nbgrader_guard.py",  # fresh graded runs of every chapter, cheating students
    "tests/test_warm_kernel.py",  # make grade's forked kernels
    "tests/test_scaffold.py",  # builds a chapter in a copy, runs the house tests and nbval
    "tests/test_percent.py",  # jupytext round trips in .venv-authoring (built from PyPI once)
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(item.nodeid == s or item.nodeid.startswith(s + "::") for s in SLOW):
            item.add_marker(pytest.mark.slow)
