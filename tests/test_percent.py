"""Percent format <-> notebook by jupytext (tools/build/percent.py), run in .venv-authoring (made
on first use): every solution comes back byte-identical, a new notebook has the solution's cells,
and each wrong option is caught (tests/percent_check.py does the comparing there)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.build import percent

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def authoring_python() -> Path:
    return percent.ensure_venv()


def _check(python: Path, plant: str = "") -> dict[str, list[str]]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    done = subprocess.run(
        [str(python), "tests/percent_check.py", *([plant] if plant else [])],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def test_every_solution_round_trips_and_authored_text_reads_as_written(authoring_python):
    assert _check(authoring_python) == {}


@pytest.mark.parametrize(
    "plant, caught",
    [
        (
            "jupytext-defaults",
            [
                "the text shows the generated nbgrader metadata",
                "the text carries jupytext's version",
                "a new notebook: the course metadata differs",
            ],
        ),
        ("no-update", ["from-percent onto the notebook is not byte-identical"]),
        ("jupytext-metadata-kept", ["cells differ from what the text says"]),
        ("headerless-default", ["from-percent of the text without its header is not"]),
    ],
)
def test_a_wrong_option_is_caught(authoring_python, plant, caught):
    report = _check(authoring_python, plant)
    found = {p for problems in report.values() for p in problems}
    for problem in caught:
        assert any(p.startswith(problem) for p in found), (problem, report)


def _nbtools(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The command authors run, from the students' .venv (it runs jupytext in .venv-authoring)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "tools.build.nbtools", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )


def test_the_commands_round_trip_a_solution_from_the_course_venv(authoring_python, tmp_path):
    solution = ROOT / "solutions" / "07_efficient_attention.ipynb"  # its setup cell's id: "setup"
    copy = tmp_path / solution.name
    copy.write_bytes(solution.read_bytes())
    done = _nbtools("to-percent", str(solution), "07.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "07.py").read_text(encoding="utf-8")
    assert text.startswith("# ---\n# jupyter:\n#   course:\n#     builds: 'a bonus chapter: eight")
    assert '# %% tags=["setup"]\n' in text
    done = _nbtools("from-percent", "07.py", solution.name, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert copy.read_bytes() == solution.read_bytes()


def test_jupytext_stays_out_of_the_students_venv():
    """Its JupyterLab extension and contents manager would reach every student's `make lab`."""
    for name in ("requirements.txt", "constraints.txt"):
        assert "jupytext" not in (ROOT / name).read_text(encoding="utf-8").lower()
    assert "jupytext==" in percent.REQUIREMENTS.read_text(encoding="utf-8")
