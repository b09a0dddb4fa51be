"""`#| export` cells of the solutions become course_utils/chapters/ (tools/build/export.py)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tools.build import export, nbtools

ROOT = Path(__file__).resolve().parent.parent


def test_committed_chapters_match_a_fresh_export():
    problems = export.stale_chapters(nbtools.SOLUTIONS, nbtools.CHAPTERS, ROOT)
    assert problems == [], "run `make exercises`:\n" + "\n".join(problems)


def test_every_public_chapter_name_is_reachable_as_cu_chapters():
    import course_utils as cu

    for path in sorted(nbtools.CHAPTERS.glob("ch[0-9][0-9]/__init__.py")):
        module = importlib.import_module(f"course_utils.chapters.{path.parent.name}")
        for name in module.__all__:
            assert getattr(cu.chapters, name) is getattr(module, name), name


def test_exercise_notebooks_keep_the_export_line():
    """The student sees `#| export`: later chapters reuse that cell. A `solution-only` export cell
    (chapter 11's mla_keys_cached, sparse_decode_step) is left out of the exercise on purpose."""
    for path in nbtools.chapter_files(nbtools.SOLUTIONS):
        wanted = sum(
            export.is_export_cell(c) and nbtools.SOLUTION_ONLY_TAG not in c.metadata.get("tags", [])
            for c in nbtools.read(path).cells
        )
        exercise = nbtools.EXERCISES / path.name
        if exercise.exists():
            got = sum(export.is_export_cell(c) for c in nbtools.read(exercise).cells)
            assert got == wanted, path.name


# ----------------------------------------------------------------------------- on temp notebooks
def _notebook(folder: Path, name: str, *cells: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# title")]
    nb.cells += [nbformat.v4.new_code_cell(src) for src in cells]
    path = folder / name
    nbformat.write(nb, str(path))
    return path


CH01 = """#| export
def scores(q, k):
    ### BEGIN SOLUTION
    return q @ k.T  # (n, n)
    ### END SOLUTION"""
CH01_DEMO = "print(scores(1, 2))"
CH02 = """#| export
import math
from torch.utils.data import Dataset


class Layer(nn.Module):
    def forward(self, q, k):
        w = F.softmax(scores(q, k) / math.sqrt(k.shape[-1]), dim=-1)  # (n, n)
        return w


def reuse():
    return cu.chapters.scores, Dataset"""
CH03 = """#| export
from course_utils.chapters import Layer


def deeper():
    return Layer"""


@pytest.fixture
def course(tmp_path):
    sol = tmp_path / "solutions"
    sol.mkdir()
    _notebook(sol, "01_a.ipynb", CH01, CH01_DEMO)
    _notebook(sol, "02_b.ipynb", "x = 1", CH02)
    _notebook(sol, "03_c.ipynb", "print('no exports here')")
    _notebook(sol, "04_d.ipynb", CH03)
    return tmp_path


def test_export_writes_definitions_without_markers_and_with_the_imports_they_need(course):
    target = course / "pkg" / "chapters"
    export.write_chapters(course / "solutions", target, course)
    assert sorted(p.relative_to(target).as_posix() for p in target.rglob("*.py")) == [
        "__init__.py",
        "ch01/__init__.py",
        "ch02/__init__.py",
        "ch04/__init__.py",
    ]
    # an import from the package itself becomes a relative import (no import cycle)
    assert "from ..ch02 import Layer\n" in (target / "ch04" / "__init__.py").read_text()
    assert "course_utils" not in (target / "ch04" / "__init__.py").read_text().split("__all__")[0]
    ch01 = (target / "ch01" / "__init__.py").read_text()
    assert "do not edit" in ch01 and "solutions/01_a.ipynb" in ch01
    body = ch01.split("__all__")[1]
    assert "SOLUTION" not in body and "#| export" not in body and "print" not in body
    assert "    return q @ k.T  # (n, n)\n" in body
    assert "import torch" not in ch01  # the preamble follows the names used, nothing more
    ch02 = (target / "ch02" / "__init__.py").read_text()
    head = ch02.split("__all__")[0]
    for line in (
        "import math",
        "import torch.nn.functional as F",
        "from torch import nn",
        "from torch.utils.data import Dataset",
        "import course_utils as cu",
        "from ..ch01 import scores",
    ):
        assert line + "\n" in head, line
    assert "import torch\n" not in head
    assert '__all__ = ["Layer", "reuse"]' in ch02
    init = (target / "__init__.py").read_text()
    assert "from . import ch01, ch02, ch04\nfrom .ch01 import *  # noqa: F403\n" in init
    assert "__all__ = [name for module in (ch01, ch02, ch04) for name in module.__all__]" in init


def test_generated_modules_import_and_pass_lint(course):
    pkg = course / "pkg"
    export.write_chapters(course / "solutions", pkg / "chapters", course)
    (pkg / "__init__.py").write_text("")
    code = "import torch, pkg.chapters as c; print(c.Layer()(torch.eye(2), torch.eye(2)).shape)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=course,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": f"{course}:{ROOT}", "PATH": ""},
    )
    assert out.returncode == 0 and out.stdout.strip() == "torch.Size([2, 2])", out.stderr
    ruff = Path(sys.executable).with_name("ruff")
    if ruff.exists():
        lint = subprocess.run(
            [
                str(ruff),
                "check",
                "--no-cache",
                "--config",
                str(ROOT / "pyproject.toml"),
                str(pkg / "chapters"),
            ],
            capture_output=True,
            text=True,
        )
        assert lint.returncode == 0, lint.stdout


def test_drift_is_reported_and_fixed_by_a_new_export(course):
    target = course / "chapters"
    export.write_chapters(course / "solutions", target, course)
    assert export.stale_chapters(course / "solutions", target, course) == []
    (target / "ch01" / "__init__.py").write_text(
        (target / "ch01" / "__init__.py").read_text() + "# hand edit\n"
    )
    (target / "ch07").mkdir()
    (target / "ch07" / "__init__.py").write_text("")
    problems = export.stale_chapters(course / "solutions", target, course)
    assert problems == [
        "chapters/ch01/__init__.py (differs from the notebooks' #| export cells: run `make exercises`)",
        "chapters/ch07/__init__.py (no notebook exports it any more: run `make exercises`)",
    ]
    export.write_chapters(course / "solutions", target, course)
    assert export.stale_chapters(course / "solutions", target, course) == []


@pytest.mark.parametrize(
    ("cell", "message"),
    [
        ("#| export\ndef f():\n    return undefined_thing", "uses 'undefined_thing'"),
        ("#| export\ndef scores():\n    pass", "'scores' is already exported by ch01"),
        ("#| export\ndef f():\n    pass\nprint(f())", "holds only imports and definitions"),
        ("#| export\ndef f(:\n", "does not parse"),
        (
            "#| export\ndef f():\n    return cu.chapters.nothing",
            "cu.chapters.nothing is not exported",
        ),
    ],
)
def test_bad_export_cells_stop_with_a_message_naming_the_notebook(tmp_path, cell, message):
    sol = tmp_path / "solutions"
    sol.mkdir()
    _notebook(sol, "01_a.ipynb", CH01)
    _notebook(sol, "02_b.ipynb", cell)
    with pytest.raises(export.ExportError, match="solutions/02_b.ipynb") as info:
        export.fresh_files(sol, tmp_path)
    assert message in str(info.value)


def test_later_chapter_names_are_not_visible_to_earlier_ones(tmp_path):
    sol = tmp_path / "solutions"
    sol.mkdir()
    _notebook(sol, "01_a.ipynb", "#| export\ndef f():\n    return g()")
    _notebook(sol, "02_b.ipynb", "#| export\ndef g():\n    return 1")
    with pytest.raises(export.ExportError, match="uses 'g'"):
        export.fresh_files(sol, tmp_path)
