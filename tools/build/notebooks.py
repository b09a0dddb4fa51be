"""The course's notebooks on disk and the answer markers inside them: a leaf module.

Every part of the build (the exercise generator, the export, the listings, the scaffold) and
the grading machinery read and write notebooks through here, so none of them needs another to
find a notebook (``tests/test_imports.py`` keeps the tools free of import circles).

Answer markers follow nbgrader, so the solutions also work with nbgrader itself.
"""

from __future__ import annotations

from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = ROOT / "solutions"
EXERCISES = ROOT / "notebooks"
FIGURES = ROOT / "figures"

BEGIN_CODE = "### BEGIN SOLUTION"
END_CODE = "### END SOLUTION"
BEGIN_ANSWER = "<!-- BEGIN ANSWER -->"
END_ANSWER = "<!-- END ANSWER -->"
CODE_STUB = ("# YOUR CODE HERE", "raise NotImplementedError()")
ANSWER_STUB = "*YOUR ANSWER HERE*"
SOLUTION_ONLY_TAG = "solution-only"


def read(path: Path):
    return nbformat.read(str(path), as_version=4)


def dumps(nb) -> str:
    return nbformat.writes(nb) + "\n"


def write(nb, path: Path) -> None:
    path.write_text(dumps(nb), encoding="utf-8")


def chapter_files(folder: Path = SOLUTIONS) -> list[Path]:
    return sorted(p for p in folder.glob("[0-9][0-9]_*.ipynb"))
