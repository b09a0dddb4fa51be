"""``make test-chapter NN=10``: ``make test`` less what only earlier chapters can break.

One pytest run with ``make test``'s options (strict nbval, two workers, ``-m "not slow"``) over
``tests/``, the chapter's solution and every later chapter's (later chapters import earlier
chapters' code: a stranger's chapter-05 edit broke only chapter 07's bench), leaving out:

- the earlier chapters' own tests (``tests/chMM/``) and notebooks: their solutions are not given,
  and ``-k`` drops every case whose id names an earlier chapter's notebook (``02_trainable_qkv...``);
- the test files in :data:`NOT_CHAPTER`, about machinery no chapter's files reach (each with why);
- the folders other steps run (nbgrader, browser, site: they skip outside those steps anyway).

Everything else runs whole: a new test file is included until someone lists it here with a reason,
so an edit to a chapter's explorer, hints, mistakes, figures or checks meets every test of
``make test`` that reads them (a stranger's explorer, hint and figure edits passed a first, shorter
list)::

    python -m tools.testing.chapter 10 [-- pytest options ...]
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tools.build.notebooks import chapter_files

ROOT = Path(__file__).resolve().parents[2]
NOT_CHAPTER = {
    "tests/test_core.py": "the shared core's helpers and running example",
    "tests/test_plotting.py": "the core's drawing functions, on made-up data",
    "tests/test_nbval_tolerance.py": "the nbval rules, on made-up notebooks",
    "tests/test_bench_rounds.py": "make bench's rounds and rankings, on seeded timers",
    "tests/test_results_tables.py": "the results page and its JSON files",
    "tests/test_tokenizer.py": "the offline GPT-2 tokenizer",
    "tests/test_colab_python.py": "finding Python 3.13 for make test-colab",
    "tests/test_optional.py": "tools/grading/optional.py",
    "tests/test_ci_steps.py": "the steps of .ci/run and this command",
}
OTHER_STEPS = ("tests/nbgrader", "tests/browser", "tests/site")


class Refusal(Exception):
    """What was asked cannot be run; the message says what was expected and what was given."""


def plan(args: list[str], root: Path = ROOT) -> tuple[list[str], list[str]]:
    """pytest's arguments for chapter ``args[0]`` (two digits) and notes for the instructor."""
    if args in ([], [""]):
        raise Refusal("usage: make test-chapter NN=10 (a chapter's two digits)")
    if len(args) != 1 or not re.fullmatch(r"[0-9][0-9]", args[0]):
        given = " ".join(args) or "nothing"
        raise Refusal(f"expected one chapter number of two digits, e.g. NN=10; given {given!r}")
    nn = args[0]
    notebooks = chapter_files(root / "solutions")
    found = [p for p in notebooks if p.name.startswith(nn + "_")]
    chapters = sorted({p.name[:2] for p in notebooks})
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
    if not (root / "tests" / f"ch{nn}").is_dir():
        notes.append(f"no tests/ch{nn}/ folder: the rest of make test's cases for it run")
    others = sorted(p.stem for p in notebooks if p.name[:2] < nn)  # earlier chapters only
    later = [p.relative_to(root).as_posix() for p in notebooks if p.name[:2] > nn]
    ignored = [
        *(p.relative_to(root).as_posix() for p in sorted((root / "tests").glob("ch[0-9][0-9]"))
          if p.name[2:] < nn),
        *NOT_CHAPTER,
        *OTHER_STEPS,
    ]  # fmt: skip
    selection = ["-m", "not slow", *(["-k", f"not ({' or '.join(others)})"] if others else [])]
    return [
        "tests",
        solution.relative_to(root).as_posix(),
        *later,
        *[f"--ignore={p}" for p in ignored],
        *selection,
    ], notes


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
