"""Every test runs in some step of `.ci/run`: what leaves `make test` (conftest.py's ``SLOW``, run by
`make test-slow`) and the folders each other step runs. A renamed file or test left in ``SLOW``, a
step dropped from `.ci/run`, or a test file no step collects fails here."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

import conftest
from tools.grading import roundtrip
from tools.site import results
from tools.testing import chapter

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


def test_a_test_that_needs_nbgrader_runs_where_nbgrader_is():
    """A stranger found test_nbgrader_stops.py's nbgrader test skipped in every step (.venv has no
    nbgrader; make test-nbgrader ran only tests/nbgrader): such files are run by test-nbgrader."""
    needing = sorted(
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "tests").glob("test_*.py")
        if re.search(r"importorskip\(\s*[\"']nbgrader", path.read_text(encoding="utf-8"))
    )
    assert needing and needing == sorted(roundtrip.NEEDS_NBGRADER), needing


def test_ci_steps_leave_comments_off(tmp_path):
    script = tmp_path / "run"
    script.write_text("set -e\nmake test\nmake test-grading  # two, side by side\n# make nothing\n")
    assert results.ci_steps(script) == ["make test", "make test-grading"]


def make(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, capture_output=True,
                          text=True)  # fmt: skip


def test_test_chapter_plans_one_chapters_part_and_refuses_what_is_not_one(tmp_path):
    args, notes = chapter.plan(["10"])
    assert args[:3] == [
        "tests",
        "solutions/10_transformer.ipynb",
        "solutions/11_past_the_kv_wall.ipynb",
    ]
    assert notes == []
    ignored = {a.removeprefix("--ignore=") for a in args if a.startswith("--ignore=")}
    earlier = {f"tests/ch{n:02d}" for n in range(1, 10)}  # later chapters import earlier code
    assert earlier <= ignored and not {"tests/ch10", "tests/ch11"} & ignored
    assert set(chapter.NOT_CHAPTER) <= ignored and set(chapter.OTHER_STEPS) <= ignored
    keep = args[args.index("-k") + 1]
    assert keep.startswith("not (01_toy_attention or ") and keep.endswith("09_modern_attention)")
    assert args[args.index("-m") + 1] == "not slow"
    first, _ = chapter.plan(["01"])  # the first chapter leaves out no chapter at all
    assert not [a for a in first if a.startswith("--ignore=tests/ch")]
    for name in chapter.NOT_CHAPTER:  # each left out on purpose names a file that exists
        assert (ROOT / name).is_file(), name
    for given in (["1"], ["10x"], ["01", "02"], ["*"], ["../01"], ["٠١"], ['0"1']):
        with pytest.raises(chapter.Refusal, match="expected one chapter number of two digits"):
            chapter.plan(given)
    with pytest.raises(chapter.Refusal, match=r"no chapter 99: .*\(chapters: 01 02 "):
        chapter.plan(["99"])
    (tmp_path / "solutions").mkdir()  # a JupyterLab copy beside the chapter, and no tests folder
    for name in ("12_fake.ipynb", "12_fake-Copy1.ipynb", "13_new.ipynb"):
        (tmp_path / "solutions" / name).write_text("{}")
    with pytest.raises(chapter.Refusal, match="chapter 12 has 2 notebooks .*Copy1"):
        chapter.plan(["12"], tmp_path)
    args, notes = chapter.plan(["13"], tmp_path)
    assert args[1] == "solutions/13_new.ipynb" and notes == [
        "no tests/ch13/ folder: the rest of make test's cases for it run"
    ]


def test_test_chapter_refuses_in_one_line_through_make():
    for nn, said in (("", "usage: make test-chapter NN=10"), ("01 02", "given '01 02'"),
                     ('0"1; echo x', "given '0\"1; echo x'")):  # fmt: skip
        done = make("test-chapter", f"NN={nn}")
        assert done.returncode == 2 and said in done.stdout + done.stderr, (nn, done.stderr)
        assert "Traceback" not in done.stderr and "unexpected operator" not in done.stderr


def test_test_chapter_runs_one_chapter_end_to_end():
    """In `make test-slow`: the target run for chapter 11 (the last, so the shortest); its own
    cases ran, no earlier chapter's."""
    done = make("test-chapter", "NN=11", "PYTEST_ADDOPTS=-rA")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    passed = re.findall(r"^PASSED (.+)$", done.stdout, re.MULTILINE)
    for wanted in ("tests/ch11/", "solutions/11_past_the_kv_wall.ipynb::Cell 0",
                   "test_exercise_runs_to_its_first_stub[11_past_the_kv_wall.ipynb]",
                   "test_no_code_cell_ends_in_commented_markdown[11_past_the_kv_wall.ipynb]",
                   "test_the_counted_files_are_ruff_formatted", "tests/test_widgets.py::",
                   "test_no_hint_writes_a_line_of_an_exercise_solution",
                   "test_committed_figures_match_the_code"):  # fmt: skip
        assert any(wanted in item for item in passed), wanted
    others = [i for i in passed if re.search(r"(?<!11_past_the_kv_wall)\.ipynb|tests/ch(?!11)", i)]
    assert len(passed) > 100 and others == [], others[:5]
