"""``make test-chapter NN=10``: the part of ``make test`` that one chapter's edit can break.

It runs, in one pytest run with ``make test``'s options (strict nbval, two workers): the chapter's
tests (``tests/chNN/``), its solution once under strict nbval (with its shape comments, inline
figures and re-run items), and the cases of the per-notebook test files that are about this
chapter's notebooks (its exercise up to the first stub, structure, text guards, Colab header,
figures), plus those files' few tests about no notebook in particular, the sync of ``notebooks/``
and of the exported code, and the house rules (sizes, formatting, imports). The other chapters'
cases are left out with ``-k``: a case whose id names a notebook (``...ipynb``) runs only when it
names this chapter's.

Not run (``make test`` runs them): other chapters, the figures catalogue (``tests/test_figures.py``,
every figure re-drawn), the explorers' and core's own tests::

    python -m tools.testing.chapter 10 [pytest options ...]
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PER_NOTEBOOK = (
    "tests/test_exercises_run.py",
    "tests/test_notebooks.py",
    "tests/test_text_guards.py",
    "tests/test_colab.py",
    "tests/test_attachments.py",
)
WHOLE = ("tests/test_nbtools.py", "tests/test_export.py", "tests/test_house.py")


class Refusal(Exception):
    """What was asked cannot be run; the message says what was expected and what was given."""


def plan(args: list[str], root: Path = ROOT) -> tuple[list[str], list[str]]:
    """pytest's arguments for chapter ``args[0]`` (two digits) and notes for the instructor."""
    if len(args) != 1 or not re.fullmatch(r"\d\d", args[0]):
        given = " ".join(args) or "nothing"
        raise Refusal(f"expected one chapter number of two digits, e.g. NN=10; given {given!r}")
    nn = args[0]
    found = sorted((root / "solutions").glob(f"{nn}_*.ipynb"))
    chapters = sorted({p.name[:2] for p in (root / "solutions").glob("[0-9][0-9]_*.ipynb")})
    if not found:
        raise Refusal(
            f"no chapter {nn}: no solutions/{nn}_*.ipynb (chapters: {' '.join(chapters)})"
        )
    if len(found) > 1:
        names = ", ".join(p.name for p in found)
        raise Refusal(
            f"chapter {nn} has {len(found)} notebooks in solutions/ ({names}): keep one "
            "(a copy JupyterLab made?)"
        )
    solution, notes = found[0], []
    paths = [f"tests/ch{nn}"] if (root / "tests" / f"ch{nn}").is_dir() else []
    if not paths:
        notes.append(f"no tests/ch{nn}/ folder: running the chapter's notebook cases only")
    paths += [solution.relative_to(root).as_posix(), *PER_NOTEBOOK, *WHOLE]
    return [*paths, "-m", "not slow", "-k", f"{solution.stem} or not ipynb"], notes


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ours, options = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])  # fmt: skip
    try:
        args, notes = plan(ours)
    except Refusal as refusal:
        print(f"make test-chapter: {refusal}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"make test-chapter: {note}")
    return subprocess.run([sys.executable, "-m", "pytest", *options, *args], cwd=ROOT).returncode


if __name__ == "__main__":
    raise SystemExit(main())
