"""pytest setup for every run from the repository root.

- ``tools.testing.nbval_plugin``: the course's nbval rules (stderr skipped, last-digit tolerance).
- ``tests.solution_run``: nbval's one run of each solution also serves the shape comments, the
  inline figures' legibility and the re-run of chapters' proofs (one execution per solution).
- The ``slow`` marker: the tests listed in ``SLOW`` (grading machinery, a chapter built from
  nothing, the tests of the test machinery) run in ``make test-slow``, a step of ``.ci/run``, not
  in ``make test`` (``-m "not slow"``). CONTRIBUTING's *Testing* lists them with the planted faults they catch.
"""

import pytest

pytest_plugins = ["tools.testing.nbval_plugin", "tests.solution_run"]

# Test files (or node ids) that run in `make test-slow`; measured in CONTRIBUTING's *Testing*.
SLOW = (
    "tests/test_nbgrader_guard.py",  # fresh graded runs of every chapter, cheating students
    "tests/test_warm_kernel.py",  # make grade's forked kernels
    "tests/test_scaffold.py",  # builds a chapter in a copy, runs the house tests and nbval
    "tests/test_percent.py",  # jupytext round trips in .venv-authoring (built from PyPI once)
    # The rest of the grading machinery (tools/grading/): sandbox, judge, metadata, restore, stops,
    # workers, the class report; nbconvert's HTML is what nbgrader's feedback pages are made of.
    "tests/test_sandbox.py",
    "tests/test_grading_hygiene.py",
    "tests/test_nbgrader_meta.py",
    "tests/test_nbgrader_restore.py",
    "tests/test_nbgrader_stops.py",
    "tests/test_grade_parts.py",
    "tests/test_grade_worker.py",
    "tests/test_class_report.py",
    "tests/test_attachments.py::test_nbconvert_html_shows_every_figure_inline",
    "tests/test_grading_student.py::test_the_judge_gives_a_custom_functions_input_its_gradient_once",
    "tests/test_grading_student.py::test_the_judge_names_an_in_place_dropout_as_the_student_process_does",
    # Tests of the test machinery itself: the one-run plugin's planted faults, make test-gpu's logic.
    "tests/test_solution_run.py",
    "tests/test_gpu_run.py",
    "tests/test_ci_steps.py::test_test_chapter_runs_one_chapter_end_to_end",  # a pytest run of its own
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(item.nodeid == s or item.nodeid.startswith((s + "::", s + "[")) for s in SLOW):
            item.add_marker(pytest.mark.slow)
