"""tools/grading/guard.py: each check's verdict from the judge, the notebook's cells in a sandboxed
student process (tools/grading/).

Small notebooks (chapter 01's softmax exercise) and the chapters' own, with every cheat of
tests/cheats.py planted, go through the guard's template as the FreshChecks preprocessor sends them
during `nbgrader autograde` (one test through its command line); `make test-nbgrader` runs the same
guard inside nbgrader on every chapter.
"""

import json
import os
import subprocess
import sys

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from tests import cheats
from tools.build.notebooks import ROOT
from tools.grading import feedback, guard, needs

RIGHT = "def softmax_stable(x):\n    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)\n    return e / e.sum(dim=-1, keepdim=True)"
WRONG = "def softmax_stable(x):\n    return torch.exp(x) / torch.exp(x).sum(dim=-1, keepdim=True)"


def _notebook(answer: str, *more: str):
    check = new_code_cell("cu.checks.check_softmax(softmax_stable)")
    check.metadata["nbgrader"] = {"grade": True, "grade_id": "ch01_check_softmax", "points": 1}
    cells = [new_code_cell("import torch\nimport course_utils as cu"), new_code_cell(answer)]
    return new_notebook(cells=[*cells, *map(new_code_cell, more), check])


def _verdicts(tmp_path, nb, cell_timeout=60):
    """The fresh run's verdict on the notebook's softmax check, through the template."""
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    reply = guard.Template.run(str(path), str(tmp_path), ["ch01_check_softmax"], cell_timeout, 600)
    assert "verdicts" in reply, reply
    return reply["verdicts"]["ch01_check_softmax"]


@pytest.fixture(scope="module", autouse=True)
def template():
    """One judge template (and its sandboxed student template) for the module, as FreshChecks
    keeps one per nbgrader process."""
    guard.Template.start()
    yield guard.Template
    if guard.Template.process is not None and guard.Template.process.poll() is None:
        guard.Template.process.stdin.close()
        assert guard.Template.process.wait(timeout=60) == 0


def test_the_command_line_gives_the_same_verdicts(tmp_path):
    path = tmp_path / "nb.ipynb"
    nbformat.write(_notebook(WRONG), path)
    done = subprocess.run(
        [sys.executable, "-m", "tools.grading.guard", str(path)],
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="Agg"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    line = [x for x in done.stdout.splitlines() if x.startswith("GUARD-VERDICTS ")]
    assert line, done.stdout + done.stderr
    assert "NaN or inf" in json.loads(line[-1].split(" ", 1)[1])["ch01_check_softmax"]


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
    assert verdict and "found a problem" in verdict


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
    verdict = _verdicts(tmp_path, _notebook(hangs), cell_timeout=2)
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
        verdicts.append(guard.Template.run(str(path), str(tmp_path), ids, timeout, 600)["verdicts"])
    wrong, right, handed_in, stopped = (v["ch01_check_softmax"] for v in verdicts)
    assert "NaN or inf" in wrong and right is None
    assert "the course's own code for this exercise" in handed_in
    assert "cu.chapters.attention_weights" in handed_in
    assert stopped == guard.timed_out(2)
    assert guard.Template.process.poll() is None  # still up for the next notebook


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
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    light = guard.Template.run(str(path), str(tmp_path), ids, 30, 300)["verdicts"]
    monkeypatch.delenv("NBGRADER_EXECUTION")
    full = guard.Template.run(str(path), str(tmp_path), ids, 30, 300)["verdicts"]
    assert light["ch01_check_softmax"] is None
    assert "softmax_stable" in full["ch01_check_softmax"]


# ----------------------------------------------------------------------------- the pruned run
ANSWER_META = {"grade": False, "grade_id": "ch01_softmax_stable", "locked": False, "solution": True}
ID = "ch01_check_softmax"


def _graded(before: list[str], answer: str, after: list[str] = ()):
    """Chapter 01's exercise as nbgrader grades it: teaching cells, the answer cell (nbgrader
    ``solution``), more teaching cells, the check (``grade``)."""
    nb = _notebook(answer, *after)
    nb.cells[1].metadata["nbgrader"] = dict(ANSWER_META)
    nb.cells[1:1] = [new_code_cell(source) for source in before]
    return nb


def _confirm(tmp_path, nb, ids=(ID,)):
    path = tmp_path / "graded.ipynb"
    nbformat.write(nb, path)
    return guard.confirm(str(path), str(tmp_path), list(ids), 60, 600)


# Per chapter, cells that time, train or draw for show: the pruned run must skip them. A chapter
# not listed (a new one, from `make chapter`) is run the same way, with nothing required skipped.
SKIPPED = {
    "01": ["cu.plotting.heatmap(attn_weights", "scores_loop = torch.empty"],
    "02": ["big_layer = SelfAttentionBatched(768, 1024)"],
    "03": ["fig, axes = plt.subplots(1, 2"],
    "04": ["torch_mask = nn.Dropout(0.5)"],
    "05": ["def median_ms(layers, x, repeats)"],
    "06": ["suspicious(x).sum().backward()"],
    "07": ["timings = {}", "cu.bench.measure_ceilings("],
    "08": ["# Training for show: LOOKBACK_STEPS", "def greedy_text("],
    "09": ["FlexAttention's first call takes seconds"],
    "10": ["# Training for show: WARMUP_RUN", "# Training for show: LENGTH_RUN"],
    "11": ["# Training for show: RECALL_RUN"],
}


def test_each_solution_passes_every_check_in_the_pruned_run_without_the_full_one(
    tmp_path, template, monkeypatch
):
    """The analysis keeps all that the right answers need: every chapter's solution, in
    nbgrader's source form and run as autograde runs it, passes each check with its teaching
    cells for show skipped, and no check needs the full run."""
    from tools.grading import meta as nbgrader_meta

    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    paths = sorted((ROOT / "solutions").glob("*.ipynb"))
    assert set(SKIPPED) <= {p.name[:2] for p in paths}, "a listed chapter has no solution"
    for path in paths:
        nb = nbgrader_meta.source_notebook(nbformat.read(path, 4), path.name)
        checks = guard.graded_checks(nb)
        kept = needs.needed_cells(nb, max(checks))
        for marker in SKIPPED.get(path.name[:2], []):
            (index,) = [i for i, c in enumerate(nb.cells) if marker in c.source]
            assert index < max(checks) and index not in kept, (path.name, marker)
        ids = [nb.cells[i].metadata["nbgrader"]["grade_id"] for i in checks]
        verdicts, report = _confirm(tmp_path, nb, ids)
        assert verdicts == dict.fromkeys(ids) and report["fallback"] == [], (path.name, verdicts)
        if path.name[:2] in SKIPPED:
            assert report["ran"] < report["cells"], path.name


NAMES = {  # source: (names read, names bound, always run)
    "W.mul_(2)": ({"W"}, set(), False),
    "W[0] = 1\nmodel.head.bias = None": ({"W", "model"}, {"W", "model"}, False),
    "def f(a):\n    n = a.shape[0]\n    return n + z": ({"z"}, {"f"}, False),
    "class C:\n    k = 3\n    def m(self):\n        return k + torch.ones(1)": (
        {"k", "torch"},
        {"C"},
        False,
    ),
    "import time as clock\nfor i, (a, b) in enumerate(pairs):\n    total += a": (
        {"enumerate", "pairs", "total", "a"},
        {"clock", "i", "a", "b", "total"},
        False,
    ),
    "def g():\n    global counter\n    counter += 1": ({"counter"}, {"g", "counter"}, False),
    "with open(p) as f:\n    del cache[k]\nif (n := len(x)):\n    pass": (
        {"open", "p", "cache", "k", "len", "x"},
        {"f", "cache", "n"},
        False,
    ),
    "%time out = f(x)": (None, None, True),
    "!pip install thing": (None, None, True),
    "globals()['x'] = 1": (None, None, True),
    "setattr(cu.checks, 'check_softmax', print)": (None, None, True),
    "vars(m).update(x=1)": (None, None, True),
    "m.__dict__['x'] = 1": (None, None, True),
    "sys.modules['course_utils'] = None": (None, None, True),
    "def f(:": (None, None, True),
}


@pytest.mark.parametrize("source", NAMES, ids=range(len(NAMES)))
def test_what_a_cell_reads_binds_or_always_runs(source):
    reads, binds, always = needs.cell_names(source)
    want_reads, want_binds, want_always = NAMES[source]
    assert always is want_always
    if want_reads is not None:
        assert (reads - {"print"}, binds) == (want_reads, want_binds)


def test_a_teaching_global_the_answer_reads_is_kept_by_the_analysis(tmp_path, template):
    answer = RIGHT.replace("return e", "return SCALE * e")
    nb = _graded(["SCALE = 1.0", "print('for show')", "SCALE = SCALE * 1"], answer)
    verdicts, report = _confirm(tmp_path, nb)
    assert verdicts == {ID: None} and report["fallback"] == []
    assert report["ran"] == report["cells"] - 1  # only the print is skipped


MUTATIONS = {
    "an in-place operation": (["W = torch.ones(1)", "W.mul_(0)"], "(1 + W)"),
    "load_state_dict": (
        [
            "model = torch.nn.Linear(1, 1, bias=False)",
            "_ = model.load_state_dict({'weight': torch.zeros(1, 1)})",
        ],
        "(1 + model.weight.detach().reshape(()))",
    ),
    "torch.manual_seed": (
        ["torch.manual_seed(0)"],
        "(1 + (LUCKY - 0.4963).abs().round(decimals=3))",
    ),
}


@pytest.mark.parametrize("teaching, factor", MUTATIONS.values(), ids=MUTATIONS.keys())
def test_an_answer_relying_on_a_teaching_cells_side_effect_keeps_its_point(
    tmp_path, template, teaching, factor
):
    """A teaching cell that changes a global in place (or the random state) binds no name: the
    analysis skips it, the answer is wrong without it, and the full run gives the point."""
    answer = RIGHT.replace("    return e", f"    return {factor} * e")
    if "LUCKY" in factor:
        answer = "LUCKY = torch.rand(1)  # 0.4963 after torch.manual_seed(0)\n" + answer
    verdicts, report = _confirm(tmp_path, _graded(teaching, answer))
    assert verdicts == {ID: None} and report["fallback"] == [ID]
    assert report["ran"] == report["cells"] - 1  # the side effect was skipped in the pruned run
    # the same notebook without that cell is wrong: the full run is what gave the point
    (without, _) = _confirm(tmp_path, _graded(teaching[:-1] if len(teaching) > 1 else [], answer))
    assert without[ID] and "check_softmax found a problem" in without[ID]


@pytest.mark.parametrize("patch", PATCHES.values(), ids=PATCHES.keys())
def test_a_cheating_student_still_gets_nothing_from_the_pruned_run(tmp_path, template, patch):
    verdicts, report = _confirm(tmp_path, _graded(["print('for show')"], WRONG, [patch]))
    assert "NaN or inf" in verdicts[ID] and report["fallback"] == [ID]


def test_the_courses_own_code_still_earns_nothing_in_the_pruned_run(tmp_path, template):
    nb = _graded([], "attention_weights = cu.chapters.attention_weights")
    nb.cells[-1].source = "cu.checks.check_attention_weights(attention_weights)"
    verdicts, report = _confirm(tmp_path, nb)
    assert "the course's own code for this exercise" in verdicts[ID]


def test_a_patch_in_a_skipped_teaching_looking_cell_changes_nothing(tmp_path, template):
    """A patch hidden in cells that bind nothing a check reads is skipped in the pruned run (and
    undone before each check in the full one): the wrong answer still fails."""
    hide = "def warm_up():\n    cu.checks.check_softmax = lambda *a, **k: None\n    torch.allclose = lambda *a, **k: True"
    nb = _graded([hide, "warm_up()"], WRONG)
    assert needs.needed_cells(nb, len(nb.cells) - 1) == {0, 3, 4}
    verdicts, report = _confirm(tmp_path, nb)
    assert "NaN or inf" in verdicts[ID] and report["fallback"] == [ID]
    assert report["ran"] == report["cells"] - 2


# ----------------------------------------------------------------------------- the cheats
def _chapter(number: str):
    from tools.grading import meta as nbgrader_meta

    path = next((ROOT / "solutions").glob(f"{number}_*.ipynb"))
    return nbgrader_meta.source_notebook(nbformat.read(path, 4), path.name)


@pytest.mark.parametrize("cheat", cheats.CHEATS, ids=[c.name for c in cheats.CHEATS])
def test_each_cheat_loses_its_point_and_nothing_else(tmp_path, monkeypatch, cheat):
    """Each way to points without the work (tests/cheats.py), planted in the chapter's own
    notebook with every other answer right: the fresh run fails its check, and only its check
    and those of later exercises built on the cheated answer (a cheat that ends the process it
    runs in loses the checks after it too)."""
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    nb, planted = _chapter(cheat.chapter), cheat.cells()
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in planted:
            cell.source = planted.pop(grade_id)
    assert not planted, f"no cell {planted} in chapter {cheat.chapter}"
    ids = [nb.cells[i].metadata["nbgrader"]["grade_id"] for i in guard.graded_checks(nb)]
    verdicts, _ = _confirm(tmp_path, nb, ids)
    assert verdicts.get(cheat.check), f"{cheat.name} kept its point: {verdicts}"
    others = ids[: ids.index(cheat.check)] if cheat.ends_run else ids
    kept = [i for i in others if i != cheat.check and i not in cheat.cascade()]
    assert all(verdicts.get(i) is None for i in kept), verdicts


def test_a_confirmed_check_keeps_its_point_when_the_answer_writes_to_stderr(monkeypatch):
    """nbgrader scores any stderr output of a graded cell as a failure: a right answer that
    called warnings.warn lost its point (a stranger's trial, 3 of 4). A check the judge
    confirmed keeps the text as ordinary output; one it failed keeps it as it was."""
    nb = _notebook(RIGHT)
    nb.cells.append(new_code_cell("cu.checks.check_softmax(softmax_stable)"))
    nb.cells[-1].metadata["nbgrader"] = {"grade": True, "grade_id": "second", "points": 1}
    for cell in nb.cells[-2:]:
        cell.outputs = [nbformat.v4.new_output("stream", name="stderr", text="UserWarning: hm\n")]
    fresh = object.__new__(guard.FreshChecks)
    monkeypatch.setattr(fresh, "_run", lambda *a: ({"ch01_check_softmax": None, "second": "no"}, {"cells": 4, "ran": 4, "fallback": []}), raising=False)  # fmt: skip
    monkeypatch.setattr(fresh, "log", __import__("logging").getLogger("t"), raising=False)
    fresh.preprocess(nb, {})
    confirmed, failed = nb.cells[-2], nb.cells[-1]
    assert [(o.output_type, o.get("name")) for o in confirmed.outputs] == [("stream", "stdout")]
    assert confirmed.outputs[0].text == "UserWarning: hm\n"
    assert [o.output_type for o in failed.outputs] == ["error", "stream"]
    assert failed.outputs[1].name == "stderr"
