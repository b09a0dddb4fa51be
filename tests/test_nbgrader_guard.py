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

from tools import nbgrader_feedback as feedback
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
    "the check's code swapped": "cu.checks.check_softmax.__code__ = (lambda *a, **k: None).__code__",
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


def test_diagnoses_are_wrapped_for_the_feedback_page_and_nbgrader_validate():
    text = "word " * 60 + "\n\nHint: " + "more " * 40
    assert all(
        len(line) <= feedback.WIDTH <= 90 - 3 - 4 for line in feedback.wrap(text).split("\n")
    )


def test_the_feedback_table_names_each_check():
    row = (
        '<li><a href="#ch04_check_causal_attention__QuietBugFixed">Test cell</a> (Score: 0.0 / 1.0)'
    )
    assert "Self-check check_causal_attention(QuietBugFixed)</a>" in feedback.name_the_checks(row)
    assert feedback.check_label("ch01_check_softmax") == "check_softmax"


def test_a_hanging_cell_is_stopped_and_explained(tmp_path):
    hangs = "def softmax_stable(x):\n    while True:\n        pass"
    verdict = _verdicts(tmp_path, _notebook(hangs), "--cell-timeout", "2")
    assert verdict == guard.timed_out(2)
    assert "stopped after 2 seconds" in verdict


def test_the_template_reruns_each_notebook_in_a_fresh_fork(tmp_path):
    """FreshChecks' path: one template process, one fork per notebook; a patch made by one
    notebook's cells is gone for the next, the course's own code earns nothing, a hanging cell is
    stopped, and the template stays up for the next notebook."""
    patched = _notebook(WRONG, PATCHES["the check's code swapped"])
    course = _notebook("attention_weights = cu.chapters.attention_weights")
    course.cells[-1].source = "cu.checks.check_attention_weights(attention_weights)"
    hangs = _notebook("def softmax_stable(x):\n    while True:\n        pass")
    verdicts = []
    for nb, timeout in ((patched, 30), (_notebook(RIGHT), 30), (course, 30), (hangs, 2)):
        path = tmp_path / "nb.ipynb"
        nbformat.write(nb, path)
        ids = ["ch01_check_softmax"]
        verdicts.append(guard.Template.rerun(str(path), str(tmp_path), ids, timeout, 120))
    try:
        wrong, right, handed_in, stopped = (v["ch01_check_softmax"] for v in verdicts)
        assert "NaN or inf" in wrong and right is None
        assert "the course's own code for this exercise" in handed_in
        assert stopped == guard.timed_out(2)
    finally:
        guard.Template.process.stdin.close()
        assert guard.Template.process.wait(timeout=30) == 0


def test_a_check_stopped_by_nbgrader_says_so_in_words():
    """nbgrader's per-cell limit interrupts the kernel: the check cell shows why, not a bare
    KeyboardInterrupt."""
    import types

    cell = new_code_cell("cu.checks.check_softmax(softmax_stable)")
    cell.outputs = [
        nbformat.v4.new_output(
            "error", ename="KeyboardInterrupt", evalue="", traceback=["KeyboardInterrupt"]
        )
    ]
    nb = new_notebook(cells=[cell])
    guard.FreshChecks._explain_timeouts(types.SimpleNamespace(cell_timeout=300), nb, [0])
    (output,) = cell.outputs
    assert output.ename == "Timeout" and "stopped after 300 seconds" in output.evalue
    assert all(len(line) <= feedback.WIDTH for line in output.traceback)


def test_an_explorer_cell_is_not_run_again_but_any_other_code_is(tmp_path):
    """The fresh run skips a cell that is only one explorer call (it draws, defines nothing); a cell
    with anything more, such as an answer written beside the call, runs as before."""
    assert guard.only_draws("cu.widgets.query_explorer()")
    assert guard.only_draws("cu.widgets.training_explorer(snapshots)")
    for source in (
        "f = cu.widgets.query_explorer()",
        "cu.widgets.query_explorer(softmax_stable(x))",
        "cu.widgets.query_explorer()\nx = 1",
        "widgets.query_explorer()",
        "cu.checks.check_softmax(softmax_stable)",
        "cu.widgets.query_explorer(",
    ):
        assert not guard.only_draws(source), source
    beside = _notebook("", "cu.widgets.query_explorer()\n" + RIGHT)
    assert _verdicts(tmp_path, beside) is None
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):  # every chapter's explorer is skipped
        explorers = [
            c for c in nbformat.read(path, 4).cells if "explorer" in c.metadata.get("tags", [])
        ]
        assert explorers and all(guard.only_draws(c.source) for c in explorers), path.name


def test_the_fresh_run_sees_nbgraders_execution_variable(tmp_path, monkeypatch):
    """nbgrader sets NBGRADER_EXECUTION while its preprocessors run: the fresh run passes it on,
    so a teaching cell's light version (`cu.light_run()`) is light there too."""
    answer = "if cu.light_run():\n" + "\n".join("    " + line for line in RIGHT.split("\n"))
    path = tmp_path / "nb.ipynb"
    nbformat.write(_notebook(answer), path)
    ids = ["ch01_check_softmax"]
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    guard.Template.start()  # as FreshChecks starts it: before nbgrader sets the variable
    try:
        monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
        light = guard.Template.rerun(str(path), str(tmp_path), ids, 30, 120)
        monkeypatch.delenv("NBGRADER_EXECUTION")
        full = guard.Template.rerun(str(path), str(tmp_path), ids, 30, 120)
        assert light["ch01_check_softmax"] is None
        assert "softmax_stable" in full["ch01_check_softmax"]
    finally:
        guard.Template.process.stdin.close()
        assert guard.Template.process.wait(timeout=30) == 0
