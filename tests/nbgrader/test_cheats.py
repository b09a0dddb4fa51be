"""A class that cheats, graded by `make grade` (tools/grading/grade.py) with nbgrader (`make test-grade`).

Chapters 01 and 04. Each cheater plays one trick of tests/cheats.py in an otherwise right
notebook and must lose exactly that check (and the later ones built on the cheated answer); two
honest students keep every point; a student copies an honest classmate's answer from the submitted
folder; a file-writing student's right answer also appends an always-passing check to the course's
checks.py, writes into the repository, rewrites classmates' submitted notebooks, overwrites the
gradebook and leaves a process and an atexit hook to try again later: the repository, the checks,
the gradebook's scores and every classmate's submission stay byte-for-byte as they were, its own
point stands, and the attempt is named in its notebook's feedback.
"""

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import cheats
from tools.build import nbtools
from tools.grading import meta as nbgrader_meta
from tools.grading import roundtrip as rt

pytestmark = pytest.mark.skipif(
    os.environ.get("COURSE_NBGRADER_TESTS") != "1",
    reason="needs nbgrader in .venv-nbgrader: run `make test-nbgrader`",
)

ASSIGNMENT = "cheats"
COURSE_ID = "attention-from-scratch"
HONEST = ("honest1", "honest2")
WRITER = "writer"
SPY = "spy"
# A stranger's attack: make grade's two workers shared one runtime folder, so a kernel saw the
# other worker's connection files (with their keys), connected and replaced the checks in a
# classmate's kernel (7 classmates scored 0). This student looks for 12 s and would do the same.
SPIES = """\
import glob
import os
import time


def _spy():
    from ipykernel import get_connection_file  # in the kernel only (not in the judged run)
    from jupyter_client import BlockingKernelClient

    mine, seen, end = os.path.abspath(get_connection_file()), set(), time.time() + 12  # under the cell's limit (20 s at least)
    while time.time() < end:
        for path in glob.glob(os.path.join(os.path.dirname(mine), "*.json")):
            if os.path.abspath(path) != mine and path not in seen:
                seen.add(path)
                try:
                    client = BlockingKernelClient(connection_file=path)
                    client.load_connection_file()
                    client.start_channels()
                    client.execute("import course_utils as cu; cu.checks.check_softmax = None")
                except Exception:
                    pass
        time.sleep(0.2)
    print(f"spy: {len(seen)} other kernels' connection files seen")


try:
    _spy()
except Exception as error:
    print("spy: no kernel here", type(error).__name__)


def softmax_stable(x):
    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1, keepdim=True)
"""
WRITES = """\
import atexit
import os
import sqlite3
import subprocess
from pathlib import Path

import course_utils

_roots = {Path(course_utils.__file__).resolve().parent.parent, Path("@ROOT@")}
_course = Path("@COURSE@")  # the paths a student could guess (or read in nbgrader's output)


def _try(action):
    try:
        action()
    except Exception:  # the sandbox refuses: go on as if nothing happened
        pass


def _vandalise():
    for root in _roots:
        checks = root / "course_utils" / "chapters" / "ch01" / "checks.py"
        _try(lambda: checks.open("a").write("\\n\\ndef check_softmax(fn):\\n    print('✓ check_softmax')\\n"))
        _try(lambda: (root / "PWNED.txt").write_text("the writer was here"))
    for path in sorted(_course.glob("submitted/*/cheats/*.ipynb")):
        if "writer" not in str(path):
            _try(lambda path=path: path.write_text("{}"))
    _try(lambda: sqlite3.connect(_course / "gradebook.db").execute("DROP TABLE grade"))
    _try(lambda: (_course / "gradebook.db").write_bytes(b"PWNED"))


_vandalise()
atexit.register(_vandalise)
_late = "sleep 20; echo PWNED >> " + " ".join(str(r / "PWNED.txt") for r in _roots)
_try(lambda: subprocess.Popen(["sh", "-c", _late]))


def softmax_stable(x):
    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1, keepdim=True)
"""


def _digest(paths) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths if p.is_file()}


def _repository() -> dict[str, str]:
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=rt.ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return _digest(rt.ROOT / f for f in files)


def _plant(nb, cheat):
    planted = cheat.cells()
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in planted:
            cell.source = planted.pop(grade_id)
    assert not planted, planted
    return nb


def _class(course: Path) -> dict[str, cheats.Cheat | None]:
    sources = {
        p.name[:2]: p for p in nbgrader_meta.make_course(course, ASSIGNMENT, chapters=("01", "04"))
    }
    rt.nbgrader(course, "generate_assignment", ASSIGNMENT, "--force")
    students = dict.fromkeys(HONEST)
    students.update({f"cheat{i:02d}": c for i, c in enumerate([*cheats.CHEATS, cheats.CLASSMATE])})
    writes = WRITES.replace("@ROOT@", str(rt.ROOT)).replace("@COURSE@", str(course))
    students[WRITER] = cheats.Cheat("the file-writing student", "01", cheats.S1, cheats.CS1, writes)
    students[SPY] = cheats.Cheat("the spying student", "01", cheats.S1, cheats.CS1, SPIES)
    for student, cheat in students.items():
        folder = course / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        for chapter, path in sources.items():
            if cheat is not None and cheat.chapter != chapter:
                continue
            nb = nbtools.read(path)
            nbtools.write(_plant(nb, cheat) if cheat else nb, folder / path.name)
    return students


def _scores(course: Path) -> dict[tuple[str, str], float]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", COURSE_ID) as gb:
        return {
            (s.student.id, g.name): g.score
            for s in gb.assignment_submissions(ASSIGNMENT)
            for nb in s.notebooks
            for g in nb.grades
            if g.cell_type == "code"
        }


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    course = tmp_path_factory.mktemp("cheats") / "course"
    students = _class(course)
    repository = _repository()
    submissions = _digest(p for p in (course / "submitted").rglob("*") if WRITER not in p.parts)
    config = _digest([course / "nbgrader_config.py"])
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "tools.grading.grade", str(course), ASSIGNMENT, "--workers", "2"],
        cwd=rt.ROOT,
        env=rt.nbgrader_env(),
        capture_output=True,
        text=True,
    )
    print(
        done.stdout[-3000:],
        done.stderr[-3000:],
        f"\nmake grade: {time.perf_counter() - start:.0f} s",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    time.sleep(25)  # the writer's late process would have struck by now
    after = (
        _repository(),
        _digest(p for p in (course / "submitted").rglob("*") if WRITER not in p.parts),
    )
    return course, students, (repository, submissions, config), after, done.stdout


def test_nothing_outside_a_students_scratch_folder_changed(graded):
    course, _, (repository, submissions, config), (repository_after, submissions_after), _ = graded
    assert repository_after == repository  # the checks, the course's code, everything tracked
    assert not (rt.ROOT / "PWNED.txt").exists()
    assert submissions_after == submissions  # every classmate's submission
    assert _digest([course / "nbgrader_config.py"]) == config
    assert b"PWNED" not in (course / "gradebook.db").read_bytes()[:64]


def test_honest_students_keep_every_point(graded):
    course, _, _, _, _ = graded
    scores = _scores(course)
    for student in HONEST:
        mine = {g: s for (who, g), s in scores.items() if who == student}
        assert mine and all(s == 1 for s in mine.values()), (student, mine)


@pytest.mark.parametrize("number", range(len(cheats.CHEATS) + 1))
def test_each_cheat_loses_its_check_and_only_what_builds_on_it(graded, number):
    course, students, _, _, _ = graded
    student = f"cheat{number:02d}"
    cheat, scores = students[student], _scores(course)
    chapter = {
        g: s
        for (who, g), s in scores.items()
        if who == student and g.startswith(f"ch{cheat.chapter}_")
    }
    assert chapter[cheat.check] == 0, (cheat.name, chapter)
    after = list(chapter)[list(chapter).index(cheat.check) + 1 :] if cheat.ends_run else []
    kept = {
        g: s
        for g, s in chapter.items()
        if g != cheat.check and g not in cheat.cascade() and g not in after
    }
    assert all(s == 1 for s in kept.values()), (cheat.name, kept)


def test_the_writer_keeps_its_right_answer_and_its_attempt_is_named(graded):
    course, _, _, _, out = graded
    assert _scores(course)[(WRITER, cheats.CS1)] == 1
    autograded = next((course / "autograded" / WRITER / ASSIGNMENT).glob("01_*.ipynb"))
    text = autograded.read_text(encoding="utf-8")
    assert "the grader's sandbox refused it" in text and "checks.py" in text


def test_the_spy_sees_no_other_kernel_and_keeps_only_its_own_points(graded):
    course, _, _, _, _ = graded
    autograded = next((course / "autograded" / SPY / ASSIGNMENT).glob("01_*.ipynb"))
    assert "spy: 0 other kernels' connection files seen" in autograded.read_text(encoding="utf-8")
    assert _scores(course)[(SPY, cheats.CS1)] == 1
