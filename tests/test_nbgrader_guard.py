"""tools/nbgrader_guard.py: each check's verdict from a fresh process the notebook cannot patch.

A small notebook (chapter 01's softmax exercise) is run by the guard's command in a subprocess, as
the FreshChecks preprocessor runs it during `nbgrader autograde`; `make test-nbgrader` runs the
same guard inside nbgrader on every chapter.
"""

import json
import os
import subprocess
import sys

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from tools import nbgrader_guard as guard
from tools.nbtools import ROOT

RIGHT = "def softmax_stable(x):\n    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)\n    return e / e.sum(dim=-1, keepdim=True)"
WRONG = "def softmax_stable(x):\n    return torch.exp(x) / torch.exp(x).sum(dim=-1, keepdim=True)"


def _notebook(answer: str, *more: str):
    check = new_code_cell("cu.checks.check_softmax(softmax_stable)")
    check.metadata["nbgrader"] = {"grade": True, "grade_id": "ch01_check_softmax", "points": 1}
    cells = [new_code_cell("import torch\nimport course_utils as cu"), new_code_cell(answer)]
    return new_notebook(cells=[*cells, *map(new_code_cell, more), check])


def _verdicts(tmp_path, nb, *args):
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    env = dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="Agg")
    done = subprocess.run(
        [sys.executable, "-m", "tools.nbgrader_guard", str(path), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    line = [x for x in done.stdout.splitlines() if x.startswith("GUARD-VERDICTS ")]
    assert line, done.stdout + done.stderr
    return json.loads(line[-1].split(" ", 1)[1])["ch01_check_softmax"]


PATCHES = {
    "the check replaced": "cu.checks.check_softmax = lambda *a, **k: None",
    "the check's code swapped": "cu.checks.check_softmax.__wrapped__.__code__ = (lambda *a, **k: None).__code__",
    "the engine's comparison replaced": "import course_utils.checks._engine.core as c\nc.same = lambda *a, **k: True",
    "torch.allclose replaced": "torch.allclose = lambda *a, **k: True",
    "failures hidden": "get_ipython().set_custom_exc((Exception,), lambda *a, **k: None)",
    "the checks module replaced": "import sys, types\nsys.modules['course_utils.checks'] = types.SimpleNamespace(check_softmax=print)\ncu.checks = sys.modules['course_utils.checks']",
}


def test_a_right_answer_passes_in_the_fresh_process(tmp_path):
    assert _verdicts(tmp_path, _notebook(RIGHT)) is None


@pytest.mark.parametrize("patch", PATCHES.values(), ids=PATCHES.keys())
def test_a_wrong_answer_with_a_patched_check_still_fails(tmp_path, patch):
    verdict = _verdicts(tmp_path, _notebook(WRONG, patch))
    assert verdict and "check_softmax found a problem" in verdict and "NaN or inf" in verdict


def test_a_patch_made_while_the_check_runs_is_named(tmp_path):
    sneaky = WRONG.replace(
        "    return",
        "    torch.isfinite = lambda t: torch.ones_like(t, dtype=torch.bool)\n    return",
    )
    verdict = _verdicts(tmp_path, _notebook(sneaky))
    assert verdict and ("replaced torch.isfinite" in verdict or "found a problem" in verdict)


def test_a_hanging_cell_is_stopped_and_explained(tmp_path):
    hangs = "def softmax_stable(x):\n    while True:\n        pass"
    verdict = _verdicts(tmp_path, _notebook(hangs), "--cell-timeout", "2")
    assert verdict == guard.timed_out(2)
    assert "stopped after 2 seconds" in verdict


def test_diagnoses_are_wrapped_for_the_feedback_page():
    text = "word " * 60 + "\n\nHint: " + "more " * 40
    assert all(len(line) <= guard.WIDTH for line in guard.wrap(text).split("\n"))
