"""Every test runs in some step of `.ci/run`: what leaves `make test` (conftest.py's ``SLOW``, run by
`make test-slow`) and the folders each other step runs. A renamed file or test left in ``SLOW``, a
step dropped from `.ci/run`, or a test file no step collects fails here."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

import conftest
from tools.site import results

ROOT = Path(__file__).resolve().parent.parent
# Folders of tests another step runs (each skips them elsewhere), and the step that runs them.
FOLDERS = {
    "tests/nbgrader": "make test-grading",  # make test-nbgrader + make test-grade
    "tests/browser": "make test-browser",
    "tests/site": "make test-site",
}
# Run by hand only, with the reason (CONTRIBUTING's *Testing*).
BY_HAND = {
    "tests/test_scaffold_full.py": "32 min: make chapter, then the whole make test in a copy"
}


def recipe(target: str) -> str:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    found = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", text, re.MULTILINE)
    assert found, f"the Makefile has no target {target}"
    return found.group(1)


@pytest.mark.parametrize("entry", conftest.SLOW)
def test_each_slow_entry_names_a_test_that_exists(entry):
    path, _, name = entry.partition("::")
    assert (ROOT / path).is_file(), f"conftest.SLOW names {path}, which does not exist"
    if name:
        source = (ROOT / path).read_text(encoding="utf-8")
        assert re.search(rf"^def {re.escape(name)}\(", source, re.MULTILINE), (
            f"conftest.SLOW names {name} in {path}, which has no such test"
        )


def test_ci_runs_every_step_and_slow_tests_leave_only_for_test_slow():
    steps = results.ci_steps()
    for step in ("make test", "make test-slow", *FOLDERS.values(), "make test-colab"):
        assert step in steps, f".ci/run does not run {step}: {steps}"
    assert '-m "not slow"' in recipe("test") and "-m slow tests" in recipe("test-slow")
    grading = recipe("test-grading")
    assert "test-nbgrader" in grading and "test-grade" in grading and "--venv-only" in grading


def test_every_test_file_is_run_by_some_step():
    unrun = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        name = path.relative_to(ROOT).as_posix()
        if name in BY_HAND or any(name.startswith(folder + "/") for folder in FOLDERS):
            continue
        if path.parent != ROOT / "tests" and not re.fullmatch(r"tests/ch\d\d/test_\w+\.py", name):
            unrun.append(name)  # a folder no step names: make test's `tests` would collect it, but
            # a new folder of another kind should be placed on purpose
    assert unrun == [], f"test files in folders no step of .ci/run is known to run: {unrun}"


def test_ci_steps_leave_comments_off(tmp_path):
    script = tmp_path / "run"
    script.write_text("set -e\nmake test\nmake test-grading  # two, side by side\n# make nothing\n")
    assert results.ci_steps(script) == ["make test", "make test-grading"]


def make(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, capture_output=True,
                          text=True)  # fmt: skip


def test_test_chapter_names_one_chapters_tests_and_refuses_what_is_not_one():
    planned = make("-n", "test-chapter", "NN=10").stdout
    assert "tests/ch10 solutions/10_transformer.ipynb" in planned and "tests/ch09" not in planned
    assert "test_exercise_runs_to_its_first_stub[10_transformer.ipynb]" in planned
    assert '-m "not slow"' in planned and "--nbval " in planned
    for args, said in (((), "usage: make test-chapter NN=10"), (("NN=99",), "no chapter 99"),
                       (("NN=1",), "no chapter 1: expected solutions/1_*.ipynb")):  # fmt: skip
        done = make("test-chapter", *args)
        assert done.returncode == 2 and said in done.stdout, (args, done.stdout, done.stderr)


def test_test_chapter_runs_one_chapter_end_to_end():
    """In `make test-slow`: the target run for chapter 01, its counts read from pytest's summary."""
    done = make("test-chapter", "NN=01")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    passed = int(re.search(r"(\d+) passed", done.stdout).group(1))
    ran = done.stdout
    assert passed > 30 and " failed" not in ran.splitlines()[-1], ran[-2000:]
