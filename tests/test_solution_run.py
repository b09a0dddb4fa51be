"""tests/solution_run.py: nbval's one run of a solution still fails on every fault the separate runs
caught. Two small notebooks under a ``solutions/`` folder, their outputs stored by a real run, then
one of them planted: a wrong stored output, a wrong shape comment, an unreadable inline figure. One
pytest run (strict nbval with the course's rules, as `make test`) over both."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import nbformat
from nbclient import NotebookClient

from tools.build.nbtools import ROOT

CELLS = [
    "import numpy as np\nimport matplotlib.pyplot as plt",
    "x = np.zeros((2, 3))  # (2, 3)\nprint(x.shape)",
    "y = x.T  # (3, 2)\nprint(y.sum())",
    "print(1 + 1)",
    "# NBVAL_IGNORE_OUTPUT\nprint(7)",
    "print(0.4419)",
    "z = np.ones(4)  # (4,)",  # ends in an assignment: shows nothing, instrumented too
    "plt.figure(figsize=(4, 3))\nplt.plot([1, 2])\nplt.title('fine', fontsize=12)\nplt.show()",
]


def test_one_run_fails_on_each_planted_fault_and_passes_the_right_notebook(tmp_path):
    folder = tmp_path / "solutions"
    folder.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()  # the stored outputs
    nbformat.write(nb, folder / "98_right.ipynb")
    planted = nbformat.from_dict(nb)
    planted.cells[2].source = planted.cells[2].source.replace("(3, 2)", "(2, 3)")  # wrong comment
    planted.cells[3].outputs[0].text = "3\n"  # a wrong stored output
    planted.cells[4].outputs[0].text = "8\n"  # ignored: NBVAL_IGNORE_OUTPUT
    planted.cells[5].outputs[0].text = "0.4420\n"  # one unit in the last digit: tolerated
    planted.cells[7].source = planted.cells[7].source.replace("12", "3")  # 3 pt: under 9 px
    nbformat.write(planted, folder / "99_planted.ipynb")
    report = tmp_path / "junit.xml"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
         "-p", "tools.testing.nbval_plugin", "-p", "tests.solution_run", "--nbval", "--nbval-current-env",
         "--nbval-sanitize-with", str(ROOT / "tests" / "nbval_sanitize.cfg"),
         f"--junitxml={report}", "--rootdir", str(tmp_path), "-c", os.devnull, str(folder)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    outcomes = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        failure = case.find("failure")
        outcomes[f"{case.get('classname')}::{case.get('name')}"] = (
            "failed" if failure is not None else "passed",
            "" if failure is None else failure.get("message", "") + (failure.text or ""),
        )
    got = {
        (key.split("solutions.")[-1].split("::")[0][:2], key.split("::")[-1]): value[0]
        for key, value in outcomes.items()
    }
    assert got == {
        **{("98", f"Cell {i}"): "passed" for i in range(len(CELLS))},
        ("98", "shape comments"): "passed",
        ("98", "inline figures"): "passed",
        **{("99", f"Cell {i}"): "passed" for i in range(len(CELLS))},
        ("99", "Cell 3"): "failed",
        ("99", "shape comments"): "failed",
        ("99", "inline figures"): "failed",
    }, done.stdout[-3000:] + done.stderr[-3000:]
    text = {key.split("::")[-1]: v[1] for key, v in outcomes.items() if "99" in key}
    assert "'# (2, 3)': got (3, 2)" in text["shape comments"]
    assert "text under 9 px" in text["inline figures"]
