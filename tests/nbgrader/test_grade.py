"""`make grade` and `make report` on a class of 28 (`make test-grade`; skipped elsewhere).

The class (tests/nbgrader/class_of_28.py): right answers, the untouched release, planted
mistakes, cascades, hangs, a self-raised KeyboardInterrupt, a dying kernel, a notebook that is not
JSON, tampered cells and a cheat. The parallel run (tools/grading/grade.py, 2 workers) must give every
cell the same score as nbgrader's own sequential `autograde` with the same per-cell limits (so
the restore, the stops and the guard hold under plain nbgrader too); each case must be scored,
named in the summary and the feedback, and counted apart in the report; a hang costs its limit,
not 300 s; the PostgreSQL path runs end to end against a real server (pgserver: PostgreSQL's
binaries from a PyPI wheel, so CI needs no system package).
"""

import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.nbgrader.class_of_28 import (
    ASSIGNMENT,
    CASCADES,
    CH01,
    CH03,
    CLASS,
    MISTAKES,
    PLANTED,
    build_class,
    plant,
)
from tools.build import nbtools
from tools.grading import roundtrip as rt

pytestmark = pytest.mark.skipif(
    os.environ.get("COURSE_NBGRADER_TESTS") != "1",
    reason="needs nbgrader in .venv-nbgrader: run `make test-nbgrader`",
)
COURSE_ID = "attention-from-scratch"  # as the course's nbgrader_config.py sets it
STUDENTS = [s for s, _ in CLASS]


def _scores(db_url: str, students) -> dict:
    from nbgrader.api import Gradebook

    with Gradebook(db_url, COURSE_ID) as gb:
        return {
            (s, nb.name, g.name): (g.score, g.needs_manual_grade)
            for s in students
            for nb in gb.find_submission(ASSIGNMENT, s).notebooks
            for g in nb.grades
        }


def _total(scores, student, notebook=""):
    return sum(
        v for (s, nb, _), (v, _) in scores.items() if s == student and nb.startswith(notebook)
    )


def _grade(course, *args, ok=True):
    start = time.perf_counter()
    done = subprocess.run(
        [str(Path(sys.executable)), "-m", "tools.grading.grade", str(course), ASSIGNMENT, *args],
        cwd=rt.ROOT,
        env=rt.nbgrader_env(),
        capture_output=True,
        text=True,
    )
    assert (done.returncode == 0) == ok, done.stdout + done.stderr
    return done.stdout, done.stderr, time.perf_counter() - start


def _at(course, notebook, grade_id) -> int:
    """The index of a cell in the released notebook (the summary numbers cells as handed in)."""
    cells = nbtools.read(course / "source" / ASSIGNMENT / f"{notebook}.ipynb").cells
    return next(
        i for i, c in enumerate(cells) if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id
    )


def _page(course, student, notebook):
    """The feedback page's text (tags dropped, whitespace joined)."""
    text = (course / "feedback" / student / ASSIGNMENT / f"{notebook}.html").read_text()
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", text)).split())


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    from tools.grading.parts import limits_config

    course = tmp_path_factory.mktemp("class") / "course"
    build_class(course)
    sequential = course.parent / "sequential"
    shutil.copytree(course, sequential)
    out, err, parallel_s = _grade(course, "--workers", "2")
    print(out)
    summary = json.loads((course / ".grade" / f"last-run-{ASSIGNMENT}.json").read_text())
    assert "%|" in err and "notebook" in err  # tqdm's progress bar, with its rate and ETA
    limits = course / ".grade" / f"limits-{ASSIGNMENT}.json"
    with open(sequential / "nbgrader_config.py", "a", encoding="utf-8") as config:
        config.write(limits_config(limits))
    start = time.perf_counter()
    subprocess.run(  # exits 1: nbgrader refuses notjson1's chapter 03
        [str(Path(sys.executable).parent / "nbgrader"), "autograde", ASSIGNMENT],
        cwd=sequential,
        env=rt.nbgrader_env(),
        capture_output=True,
    )
    sequential_s = time.perf_counter() - start
    students_s = summary["seconds"]
    print(
        f"\n{len(CLASS)} students x 2 chapters: sequential nbgrader autograde {sequential_s:.0f} s, "
        f"make grade with 2 workers {students_s:.0f} s for the students (speed-up "
        f"{sequential_s / students_s:.2f}x), {parallel_s:.0f} s with its one-off timing of the "
        f"solutions ({sequential_s / parallel_s:.2f}x); load average {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} cores"
    )
    feedback = ["tamper1", "tamper2", "crash1", "notjson1", "raise1", "hang1", "hang_own"]
    for student in feedback:
        rt.nbgrader(course, "generate_feedback", ASSIGNMENT, "--student", student, "--force")
    return course, sequential, out, err, summary


def test_same_scores_as_sequential_autograde(graded):
    course, sequential, _, _, _ = graded
    ours = _scores(f"sqlite:///{course / 'gradebook.db'}", STUDENTS)
    assert ours == _scores(f"sqlite:///{sequential / 'gradebook.db'}", STUDENTS)
    totals = {s: _total(ours, s) for s in STUDENTS}
    assert totals["right1"] == 7 and totals["blank1"] == 0 and totals["renamed1"] == 3
    assert totals["overflow1"] == 6 and totals["nosum2"] == 5 and totals["hang1"] == 6
    assert totals["weights1"] == 5 and totals["diag1"] == 4  # a mistake and its cascades
    assert totals["cheat1"] == 6 and totals["raise1"] == 6


def test_tampered_notebooks_are_restored_graded_and_named(graded):
    """Before: nbgrader refused tamper1's chapter 03 and tamper2's chapter 01 ("its kernel died",
    0 points) and let tamper2's stripped check wait for a person; all was silent."""
    course, _, out, _, _ = graded
    scores = _scores(f"sqlite:///{course / 'gradebook.db'}", ["tamper1", "tamper2"])
    assert _total(scores, "tamper1") == 7 and _total(scores, "tamper2") == 7
    at = lambda nb, gid: _at(course, nb, gid)  # noqa: E731
    mask = at(CH03, "ch03_check_causal_mask")
    for words in (
        f"tamper1: {CH01}: Cell {at(CH01, 'ch01_check_softmax')} (`ch01_check_softmax`) had its "
        "locked text changed; the release's version was graded",
        f"tamper1: {CH01}: Cell {at(CH01, 'ch01_check_attention_scores')} "
        "(`ch01_check_attention_scores`) had its points (5 instead of 1) changed",
        f"tamper1: {CH03}: Cells {mask} and {mask + 1} both carried the id `ch03_check_causal_mask`",
        f"tamper2: {CH01}: The cell `ch01_check_attention_scores` was missing; the release's was "
        "put back",
        f"tamper2: {CH01}: Cell {at(CH01, 'ch01_check_context_vectors') - 1} "  # one deleted above
        "(`ch01_check_context_vectors`) had its `grade` flag changed",
        "the id `ch01_bonus`, which the release does not have; it ran as an ordinary cell",
        f"tamper2: {CH03}: Cell {at(CH03, 'ch03_check_mask_after_softmax')} had lost its nbgrader "
        "metadata (`ch03_check_mask_after_softmax`); it was put back",
    ):
        assert words in out, words
    page = _page(course, "tamper1", CH01)
    assert "From the grader." in page and "had its locked text changed" in page


def test_stops_state_the_limit_that_applied(graded):
    """Before: "stopped after 300 seconds" for a 20 s stop, and raise1's own KeyboardInterrupt
    called a timeout."""
    course, _, out, _, summary = graded
    limit = summary["limits"]["default"]
    cell = f"cell {_at(course, CH03, 'ch03_check_mask_before_softmax')} (`ch03_check_mask_before_softmax`)"
    assert f"hang1: 03_causal_masking: {cell} was stopped at its limit, " in out
    page = _page(course, "hang1", CH03)
    seconds = re.search(r"stopped after (\d+) seconds", page).group(1)
    assert f"{cell} was stopped at its limit, {seconds} s" in out and seconds != "300"
    after = _at(course, CH03, "ch03_check_mask_after_softmax")
    assert f"raise1: {CH03}: cell {after} (`ch03_check_mask_after_softmax`) raised Keyboard" in out
    page = _page(course, "raise1", CH03)
    assert "Your code raised KeyboardInterrupt itself" in page and "stopped after" not in page
    helper = _at(course, CH01, "ch01_softmax_stable")  # the helper went in just above the answer
    assert (
        f"hang_own: {CH01}: cell {helper} (`def my_softmax(x):`) was stopped at its limit, {limit} s"
        in out
    )


def test_a_hang_costs_the_limit_not_300_seconds(graded):
    """hang_own's helper cell loops: the kernel stops it at its limit, and the guard's fresh run,
    which needs the helper, now stops it at the same limit (before: 300 s, then the check)."""
    _, _, _, _, summary = graded
    took, usual = summary["student_seconds"], summary["student_seconds"]["right2"]
    limit = summary["limits"]["default"]
    print(f"\nhang_own graded in {took['hang_own']:.0f} s (right2: {usual:.0f} s; limit {limit} s)")
    assert took["hang_own"] - usual < 3 * limit < 300


def test_a_dead_kernel_is_graded_around_and_gets_a_page(graded):
    """Before: crash1's chapter 03 was "its kernel died", every cell waiting for a person."""
    course, _, out, _, _ = graded
    scores = _scores(f"sqlite:///{course / 'gradebook.db'}", ["crash1"])
    assert scores["crash1", CH03, "ch03_check_mask_before_softmax"] == (0.0, False)
    assert _total(scores, "crash1", CH03) == 2
    died = f"The kernel died while cell {_at(course, CH03, 'ch03_check_mask_before_softmax')} "
    assert f"crash1: {CH03}: {died}" in out
    page = _page(course, "crash1", CH03)
    assert died in page and "died while this cell ran" in page


def test_a_refusal_is_named_logged_and_explained_to_the_student(graded):
    """Before: "its kernel died", and the log it named was deleted at the end of the run."""
    course, _, out, _, summary = graded
    assert "notjson1: 03_causal_masking: nbgrader refused it (nbformat.reader.NotJSONError" in out
    log = Path(summary["logs"]) / "notjson1.log"
    assert str(log) in out and "NotJSONError" in log.read_text()
    assert summary["refused"] == {"notjson1": {CH03: summary["refused"]["notjson1"][CH03]}}
    page = _page(course, "notjson1", CH03)
    assert (
        "nbgrader could not grade the notebook you handed in (nbformat.reader.NotJSONError" in page
    )
    scores = _scores(f"sqlite:///{course / 'gradebook.db'}", ["notjson1"])
    assert _total(scores, "notjson1", CH01) == 4  # the other chapter graded as usual


def test_each_worker_starts_nbgrader_once_and_prints_no_warnings(graded):
    """Two long-lived nbgrader processes grade the class (tools/grading/worker.py); kernels talk to
    nbgrader encrypted, so none prints "running over TCP without encryption"."""
    _, _, _, err, summary = graded
    assert summary["workers"] == 2 and summary["nbgrader_processes"] == 2
    assert "without encryption" not in err and "WARNING" not in err


def test_a_rerun_grades_only_new_or_changed_submissions(graded):
    course, _, _, _, _ = graded
    out, _, _ = _grade(course, "--workers", "2")
    assert f"1 of {len(CLASS)} submissions to grade ({len(CLASS) - 1} unchanged" in out  # notjson1
    path = course / "submitted" / "late_fix" / ASSIGNMENT / f"{CH01}.ipynb"
    nb = nbtools.read(path)
    plant(nb, "ch01_softmax_stable", "torch.exp(x)", MISTAKES["softmax"][2])
    nbtools.write(nb, path)
    out, _, _ = _grade(course, "--workers", "2", "--students", "late_fix", "right1")
    assert "1 of 2 submissions to grade (1 unchanged" in out
    assert _total(_scores(f"sqlite:///{course / 'gradebook.db'}", ["late_fix"]), "late_fix") == 7


def test_class_report_names_students_cascades_cheats_and_tampering_apart(graded):
    """Before: checks in alphabetical order, no students, diag1's two right masks counted as
    `mask_diagonal` mistakes, cheat1's withdrawn point not told apart, tampering unseen."""
    from tools.grading import report as class_report

    course, _, _, _, _ = graded
    report = class_report.collect(course, ASSIGNMENT)
    wanted = dict(PLANTED, softmax_overflow=PLANTED["softmax_overflow"] - 1)  # late_fix fixed it
    assert {m: n for m, n in report.totals().items() if m in wanted} == wanted
    rows = {r.check: r for r in report.checks}
    assert list(rows)[:4] == [f"ch01_check_{n}" for n in ("attention_scores", "softmax",
                                                          "attention_weights", "context_vectors")]  # fmt: skip
    assert sorted(rows["ch01_check_softmax"].mistakes["softmax_overflow"]) == [
        "hang2", "overflow1", "overflow2", "overflow3"]  # fmt: skip
    for mistake, checks in CASCADES.items():
        student = next(s for s, bugs in CLASS if bugs == [mistake])
        for check in checks:
            assert student in sum(rows[check].cascades.values(), []), (mistake, check)
            assert student not in sum(rows[check].mistakes.values(), [])
    assert rows["ch01_check_softmax"].withdrawn == ["cheat1"]
    assert "cheat1" not in rows["ch01_check_softmax"].passed
    assert sorted(rows["ch01_check_softmax"].restored) == ["tamper1", "tamper2"]
    assert rows["ch03_check_causal_mask"].not_graded == {class_report.REFUSED: ["notjson1"]}
    assert report.students == len(CLASS) and report.waiting > 0
    assert report.timeouts == {"ch03_check_mask_before_softmax": 2}
    md = class_report.write(report, course / "report").read_text(encoding="utf-8")
    assert "| `softmax_overflow` | hang2, overflow1, overflow2, overflow3 |" in md
    assert "| check_context_vectors | check_attention_weights | weights1 |" in md
    assert (course / "report" / "mistakes.png").stat().st_size > 1000


def test_postgresql_end_to_end(graded, tmp_path):
    """The README's PostgreSQL path: a course whose config names the server, then
    generate_assignment, make grade, make report, generate_feedback and the formgrader, none told
    the URL again. Before: the config had no db_url, so generate_feedback failed for everyone."""
    import pgserver

    from tests.nbgrader.test_readme_steps import formgrader_json

    class_course = graded[0]
    # Not under pytest's folder: the server runs as another user (pgserver's, under root), and any
    # pytest starting meanwhile makes /tmp/pytest-of-<user> private again (the server then PANICs).
    pgdata = Path(tempfile.mkdtemp(prefix="course-pgdata-"))
    server = pgserver.get_server(pgdata, cleanup_mode="stop")
    try:
        url = server.get_uri().replace("postgresql://", "postgresql+psycopg://", 1)
        course, students = tmp_path / "pg-course", ["right2", "overflow2", "tamper1"]
        env = dict(rt.nbgrader_env(), PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
        run = lambda *a, cwd=rt.ROOT, **k: subprocess.run(
            a, cwd=cwd, env=env, capture_output=True, text=True, **k
        )  # noqa: E731
        made = run(sys.executable, "-m", "tools.grading.meta", "course", str(course),
                   "--assignment", ASSIGNMENT, "--chapters", "01", "03", "--db", url)  # fmt: skip
        assert made.returncode == 0, made.stderr
        for s in students:
            shutil.copytree(class_course / "submitted" / s, course / "submitted" / s)
        (course / ".grade").mkdir()  # the same source/, so the same measured limits
        shutil.copy(class_course / ".grade" / f"limits-{ASSIGNMENT}.json", course / ".grade")
        rt.nbgrader(course, "generate_assignment", ASSIGNMENT)
        for target in ("grade", "report"):
            done = run("make", target, f"COURSE={course}", f"ASSIGNMENT={ASSIGNMENT}")
            assert done.returncode == 0, done.stdout + done.stderr
        rt.nbgrader(course, "generate_feedback", ASSIGNMENT)
        api = formgrader_json(course, env, f"/formgrader/api/submissions/{ASSIGNMENT}")
        mismatch = run("make", "grade", f"COURSE={course}", f"ASSIGNMENT={ASSIGNMENT}",
                       "DB=sqlite:///elsewhere.db")  # fmt: skip
        scores = _scores(url, students)
    finally:
        server.cleanup()
        shutil.rmtree(pgdata, ignore_errors=True)
    assert not (course / "gradebook.db").exists()  # nothing went to a SQLite file
    assert scores == _scores(f"sqlite:///{class_course / 'gradebook.db'}", students)
    assert {s["student"]: s["code_score"] for s in api} == {s: _total(scores, s) for s in students}
    report = (course / "report" / "report.md").read_text()
    assert "| `softmax_overflow` | overflow2 |" in report and "| tamper1 |" in report
    assert len(list((course / "feedback").glob(f"*/{ASSIGNMENT}/*.html"))) == 2 * len(students)
    assert (
        mismatch.returncode != 0
        and f"names the gradebook {url}" in mismatch.stdout + mismatch.stderr
    )
