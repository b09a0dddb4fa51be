"""A student's own laptop: `make install`'s CPU-wheel switch reaches pip, and `make lab` opens and
links chapter 01. Split from tests/test_colab.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tools.build import nbtools

ROOT = Path(__file__).resolve().parent.parent


def _make_dry_run(*args: str) -> str:
    proc = subprocess.run(
        ["make", "-n", "-B", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.replace("\\\n", " ")  # continued lines joined


def test_the_cpu_wheel_switch_reaches_pip():
    """`make install TORCH_INDEX=...` hands PyTorch's CPU index to pip; without it pip sees PyPI only."""
    index = "https://download.pytorch.org/whl/cpu"
    (line,) = [
        line
        for line in _make_dry_run("install", f"TORCH_INDEX={index}").splitlines()
        if " -m pip install " in line
    ]
    assert f"--extra-index-url {index} -r requirements.txt -c constraints.txt" in line
    (plain,) = [
        line for line in _make_dry_run("install").splitlines() if " -m pip install " in line
    ]
    assert "index" not in plain


def test_make_lab_opens_and_links_chapter_01():
    """JupyterLab prints its link with LabApp.default_url, so the link lands on chapter 01 too."""
    (line,) = [line for line in _make_dry_run("lab").splitlines() if "jupyter lab" in line]
    first = nbtools.chapter_files(nbtools.EXERCISES)[0]
    assert f"--LabApp.default_url=/lab/tree/notebooks/{first.name}" in line
