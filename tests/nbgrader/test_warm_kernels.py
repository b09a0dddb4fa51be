"""`nbgrader autograde` with the course's nbgrader_config.py runs notebooks in warm kernels
(tools/grading/warm_kernel.py), and in plain ones with COURSE_WARM_KERNEL=0 (`make test-nbgrader`)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tools.grading import meta as nbgrader_meta
from tools.grading import roundtrip as rt

pytestmark = pytest.mark.skipif(
    os.environ.get("COURSE_NBGRADER_TESTS") != "1",
    reason="needs nbgrader in .venv-nbgrader: run `make test-nbgrader`",
)

PROBE = "import sys\nprint('preloaded' if 'torch' in sys.modules else 'cold')"


def _autograde(course: Path, student: str, env: dict) -> str:
    done = subprocess.run(
        [str(Path(sys.executable).parent / "nbgrader"), "autograde", "a", "--student", student],
        cwd=course,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    nb = nbformat.read(course / "autograded" / student / "a" / "probe.ipynb", as_version=4)
    return "".join(o.get("text", "") for o in nb.cells[0].outputs).strip()


def test_autograde_forks_warm_kernels_unless_turned_off(tmp_path):
    course = tmp_path / "course"
    (course / "source" / "a").mkdir(parents=True)
    (course / "nbgrader_config.py").write_text(
        nbgrader_meta.course_config(rt.ROOT), encoding="utf-8"
    )
    cell = nbformat.v4.new_code_cell(PROBE)
    cell.metadata["nbgrader"] = nbgrader_meta._meta(
        "probe", solution=False, grade=True, locked=True, points=1
    )
    nb = nbformat.v4.new_notebook(cells=[cell])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, course / "source" / "a" / "probe.ipynb")
    env = rt.nbgrader_env()
    env.pop("COURSE_WARM_KERNEL", None)
    generated = subprocess.run(
        [str(Path(sys.executable).parent / "nbgrader"), "generate_assignment", "a"],
        cwd=course,
        env=env,
        capture_output=True,
        text=True,
    )
    assert generated.returncode == 0, generated.stdout + generated.stderr
    for student in ("warm", "plain"):
        (course / "submitted" / student).mkdir(parents=True)
        shutil.copytree(course / "release" / "a", course / "submitted" / student / "a")
    assert _autograde(course, "warm", env) == "preloaded"
    assert _autograde(course, "plain", dict(env, COURSE_WARM_KERNEL="0")) == "cold"
    autograded = nbformat.read(course / "autograded" / "warm" / "a" / "probe.ipynb", 4)
    assert autograded.metadata["kernelspec"]["name"] == "python3"  # the notebook's own, kept
