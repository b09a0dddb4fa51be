"""tools/grade_parts.py and the Makefile's grading targets, without nbgrader (a class is graded
in tests/nbgrader/test_grade.py by `make test-nbgrader`)."""

import json
import subprocess
import types

import nbformat
import pytest

from tools import grade_parts
from tools.nbgrader_roundtrip import ROOT


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
