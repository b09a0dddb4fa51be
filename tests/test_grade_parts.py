"""tools/grading/parts.py and the Makefile's grading targets, without nbgrader (a class is graded
in tests/nbgrader/test_grade.py by `make test-nbgrader`)."""

import json
import subprocess
import types

import nbformat
import pytest

from tools.grading import parts as grade_parts
from tools.grading.roundtrip import ROOT


def test_limits_config_gives_each_cell_its_limit(tmp_path):
    known = nbformat.v4.new_code_cell("cu.checks.check_softmax(softmax)")
    limits = tmp_path / "limits.json"
    limits.write_text(
        json.dumps({"cells": {grade_parts.cell_key(known.source): 35}, "default": 20})
    )
    config = types.SimpleNamespace(Execute=types.SimpleNamespace())
    exec(grade_parts.limits_config(limits), {"c": config})
    assert config.Execute.timeout_func(known) == 35
    assert config.Execute.timeout_func(nbformat.v4.new_code_cell("while True: pass")) == 20
    assert config.Execute.timeout == 20


def test_digest_changes_with_a_files_bytes_or_name(tmp_path):
    (tmp_path / "a.ipynb").write_text("one")
    first = grade_parts.digest(grade_parts.files_under(tmp_path), tmp_path)
    (tmp_path / "a.ipynb").write_text("two")
    second = grade_parts.digest(grade_parts.files_under(tmp_path), tmp_path)
    (tmp_path / "a.ipynb").rename(tmp_path / "b.ipynb")
    third = grade_parts.digest(grade_parts.files_under(tmp_path), tmp_path)
    assert len({first, second, third}) == 3


@pytest.mark.parametrize("target", ["grade", "report"])
def test_make_targets_say_how_to_call_them(target):
    done = subprocess.run(["make", "-s", target], cwd=ROOT, capture_output=True, text=True)
    assert (
        done.returncode == 2 and f"usage: make {target} COURSE=dir ASSIGNMENT=name" in done.stdout
    )


NOTJSON_LOG = """[AutogradeApp | INFO] Sanitizing /c/submitted/zed/week1/03_causal_masking.ipynb
[AutogradeApp | ERROR] There was an error processing assignment: /c/submitted/zed/week1
[AutogradeApp | ERROR] Traceback (most recent call last):
      File "nbformat/reader.py", line 19, in parse_json
        nb_dict = json.loads(s, **kwargs)
    json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)

    nbformat.reader.NotJSONError: Notebook does not appear to be JSON: 'not json'
[AutogradeApp | WARNING] Removing failed notebook: /c/autograded/zed/week1/03_causal_masking.ipynb
[AutogradeApp | ERROR] There was an error processing assignment 'week1' for student 'zed'
"""


def test_a_refusal_is_named_by_nbgraders_own_reason():
    assert grade_parts.refusal_reason(NOTJSON_LOG) == (
        "nbformat.reader.NotJSONError: Notebook does not appear to be JSON: 'not json'"
    )
    no_traceback = "[AutogradeApp | ERROR] No notebooks found, did you forget to run generate?\n"
    assert grade_parts.refusal_reason(no_traceback).startswith("No notebooks found")
    assert grade_parts.refusal_reason("") == "no reason found in the log"


# nbgrader's log of a notebook it refused when a cell's outputs came too late (issue 39's s04:
# an answer walking the filesystem): nbclient's CellTimeoutError, through nbgrader's LogFormatter
TIMEOUT_LOG = """[AutogradeApp | ERROR] There was an error processing assignment: /c/submitted/s04/week1
[AutogradeApp | ERROR] Traceback (most recent call last):
      File "nbgrader/converters/base.py", line 427, in _convert_notebook
        output, resources = self.exporter.from_filename(notebook_filename, resources=resources)
      File "nbclient/client.py", line 791, in _async_poll_for_reply
        raise CellTimeoutError.error_from_timeout_and_cell(
    nbclient.exceptions.CellTimeoutError: A cell timed out while it was being executed, after 4 seconds.
    The message was: Timeout waiting for IOPub output.
    Here is a preview of the cell contents:
    -------------------
    ### BEGIN HIDDEN TESTS
    cu.checks.check_attention_scores(attention_scores)
    -------------------

[AutogradeApp | WARNING] Removing failed notebook: /c/autograded/s04/week1/01_toy_attention.ipynb
[AutogradeApp | ERROR] There was an error processing assignment 'week1' for student 's04'
"""


def test_a_refusal_reason_is_the_exception_never_a_line_of_dashes():
    """Issue 39: the summary said "nbgrader refused it (-------------------)"."""
    assert grade_parts.refusal_reason(TIMEOUT_LOG) == (
        "nbclient.exceptions.CellTimeoutError: A cell timed out while it was being executed, "
        "after 4 seconds. The message was: Timeout waiting for IOPub output."
    )
    dashes = "[AutogradeApp | ERROR] Traceback (most recent call last):\n    -----\n"
    assert grade_parts.refusal_reason(dashes) == "Traceback (most recent call last):"
    assert grade_parts.refusal_reason("[A | ERROR] -----\n") == "no reason found in the log"


def _limits(cell, seconds):
    key = grade_parts.cell_key(cell.source)
    return {"cells": {key: seconds}, "seconds": {key: 1.5}, "default": 20}


def test_each_stop_and_each_note_of_a_notebook_is_one_line(tmp_path):
    from nbformat.v4 import new_code_cell, new_notebook, new_output

    from tools.grading import feedback as nbgrader_feedback

    stopped = new_code_cell("cu.checks.check_softmax(softmax_stable)")
    stopped.outputs = [new_output("error", ename="Timeout", evalue="", traceback=[])]
    raised = new_code_cell("x = f()")
    raised.outputs = [new_output("error", ename="KeyboardInterrupt", evalue="", traceback=[])]
    nb = new_notebook(cells=[stopped, raised])
    nbgrader_feedback.note(nb, "restored", "Cell 3 had its locked text changed.")
    path = tmp_path / "01_toy_attention.ipynb"
    nbformat.write(nb, path)
    assert grade_parts.notebook_problems(path, _limits(stopped, 35)) == [
        "01_toy_attention: cell 0 (`cu.checks.check_softmax(softmax_stable)`) was stopped at its "
        "limit, 35 s (the solution's cell takes 1.5 s); a loop that never ends is the usual cause",
        "01_toy_attention: cell 1 (`x = f()`) raised KeyboardInterrupt itself (not a timeout: its "
        "limit is 20 s)",
        "01_toy_attention: Cell 3 had its locked text changed.",
    ]


def test_missing_renamed_and_extra_notebooks_are_named(tmp_path):
    for name in ("01_toy_attention-Copy1", "03_causal_masking", "scratch"):
        (tmp_path / f"{name}.ipynb").write_text("{}")
    assert grade_parts.naming_problems(tmp_path, ["01_toy_attention", "03_causal_masking"]) == [
        "01_toy_attention.ipynb is missing, so it scores 0; 01_toy_attention-Copy1.ipynb was "
        "handed in instead (renamed?)",
        "scratch.ipynb is not part of the assignment and was not graded",
    ]


def test_the_summary_points_at_the_logs_it_keeps():
    summary = {"graded": ["a"], "seconds": 3.0, "workers": 1, "skipped": 0, "db": "sqlite:///g.db"}
    summary.update(problems={}, logs="/c/.grade/logs-week1")
    text = grade_parts.summary_text(summary)
    assert "nothing to report" in text and "Logs (kept until the next run): /c/.grade/logs-" in text
