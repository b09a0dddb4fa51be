"""Notebook tooling for instructors: generate exercises, execute solutions, sync headers.

Usage (the Makefile wraps each)::

    python -m tools.build.nbtools exercises        # notebooks/ and course_utils/chapters/ <- solutions/
    python -m tools.build.nbtools check            # fail if notebooks/, chapters/ or headers are stale
    python -m tools.build.nbtools execute [NB ...] # re-run solutions in place
    python -m tools.build.nbtools headers          # rewrite badge + setup cell of solutions/
    python -m tools.build.nbtools to-percent NB.ipynb DEST.py     # author in percent format (jupytext,
    python -m tools.build.nbtools from-percent SRC.py NB.ipynb    # in .venv-authoring: tools.build.percent)

Answer markers follow nbgrader, so the solutions also work with nbgrader itself:

* code: lines between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` become
  ``# YOUR CODE HERE`` / ``raise NotImplementedError()`` at the same indentation;
* markdown: text between ``<!-- BEGIN ANSWER -->`` and ``<!-- END ANSWER -->`` becomes
  ``*YOUR ANSWER HERE*``;
* a cell tagged ``solution-only`` is left out of the exercise altogether.
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Iterable
from pathlib import Path

import nbformat

from tools.build import attachments, export
from tools.build.headers import (  # noqa: F401 - re-exported: nbtools.set_headers and friends
    SETUP_TAG,
    MarkerError,
    badge_markdown,
    notebook_ref,
    set_headers,
    setup_cell_source,
)
from tools.build.listings import LISTED, readme_listings
from tools.build.notebooks import (  # noqa: F401 - re-exported: nbtools.read and friends
    ANSWER_STUB,
    BEGIN_ANSWER,
    BEGIN_CODE,
    CODE_STUB,
    END_ANSWER,
    END_CODE,
    EXERCISES,
    FIGURES,
    ROOT,
    SOLUTION_ONLY_TAG,
    SOLUTIONS,
    chapter_files,
    dumps,
    read,
    write,
)

CHAPTERS = ROOT / "course_utils" / export.PACKAGE
KEPT_TAGS = {SETUP_TAG, "exercise", "self-check", "explorer"}
NOTEBOOK_METADATA_KEPT = ("kernelspec", "language_info", "colab")


def _split_regions(lines: list[str], begin: str, end: str, where: str):
    """Yield ("keep"|"answer", indent, lines) chunks of a cell's lines."""
    chunk: list[str] = []
    inside = False
    indent = ""
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped == begin:
            if inside:
                raise MarkerError(f"{where}, line {number}: {begin!r} inside another answer region")
            if chunk:
                yield "keep", "", chunk
            chunk, inside = [], True
            indent = line[: len(line) - len(line.lstrip())]
        elif stripped == end:
            if not inside:
                raise MarkerError(f"{where}, line {number}: {end!r} without a matching {begin!r}")
            yield "answer", indent, chunk
            chunk, inside = [], False
        else:
            chunk.append(line)
    if inside:
        raise MarkerError(f"{where}: {begin!r} is never closed by {end!r}")
    if chunk:
        yield "keep", "", chunk


def _source_lines(cell) -> list[str]:
    return cell.source.split("\n")


def solution_regions(nb) -> list[list[str]]:
    """Every answer region of a solution notebook, as lists of lines (code and markdown)."""
    regions: list[list[str]] = []
    for index, cell in enumerate(nb.cells):
        if SOLUTION_ONLY_TAG in cell.metadata.get("tags", []):
            regions.append(_source_lines(cell))
            continue
        begin, end = (
            (BEGIN_CODE, END_CODE) if cell.cell_type == "code" else (BEGIN_ANSWER, END_ANSWER)
        )
        for kind, _, lines in _split_regions(_source_lines(cell), begin, end, f"cell {index}"):
            if kind == "answer":
                regions.append(lines)
    return regions


def visible_lines(nb) -> set[str]:
    """Stripped lines a student may see in the solution notebook outside answer regions."""
    seen: set[str] = set()
    for index, cell in enumerate(nb.cells):
        if SOLUTION_ONLY_TAG in cell.metadata.get("tags", []):
            continue
        begin, end = (
            (BEGIN_CODE, END_CODE) if cell.cell_type == "code" else (BEGIN_ANSWER, END_ANSWER)
        )
        for kind, _, lines in _split_regions(_source_lines(cell), begin, end, f"cell {index}"):
            if kind == "keep":
                seen.update(line.strip() for line in lines)
    return seen


def _strip_cell(cell) -> None:
    tags = [t for t in cell.metadata.get("tags", []) if t in KEPT_TAGS]
    cell.metadata = nbformat.NotebookNode({"tags": tags} if tags else {})
    if cell.cell_type == "code":
        cell.outputs = []
        cell.execution_count = None


def make_exercise(solution, filename: str, figures: Path = FIGURES):
    """Return the exercise version of a solution notebook (the input is not changed)."""
    nb = copy.deepcopy(solution)
    attachments.embed(nb, figures, f"solutions/{filename}")
    cells = []
    for index, cell in enumerate(nb.cells):
        if SOLUTION_ONLY_TAG in cell.metadata.get("tags", []):
            continue
        where = f"{filename}, cell {index}"
        out: list[str] = []
        if cell.cell_type == "code":
            for kind, indent, lines in _split_regions(
                _source_lines(cell), BEGIN_CODE, END_CODE, where
            ):
                out.extend(lines if kind == "keep" else [indent + s for s in CODE_STUB])
        else:
            for kind, _, lines in _split_regions(
                _source_lines(cell), BEGIN_ANSWER, END_ANSWER, where
            ):
                out.extend(lines if kind == "keep" else [ANSWER_STUB])
        cell.source = "\n".join(out)
        _strip_cell(cell)
        cells.append(cell)
    nb.cells = cells
    nb.metadata = nbformat.NotebookNode(
        {k: nb.metadata[k] for k in NOTEBOOK_METADATA_KEPT if k in nb.metadata}
    )
    set_headers(nb, "notebooks", filename)
    return nb


# ----------------------------------------------------------------------------- generation
def generate_exercises(
    solutions: Path = SOLUTIONS, exercises: Path = EXERCISES, only: Iterable[Path] = ()
) -> list[Path]:
    exercises.mkdir(exist_ok=True)
    written = []
    names = {Path(p).name for p in only}
    for path in chapter_files(solutions):
        if names and path.name not in names:
            continue
        # nbgrader cell metadata into the solution (issue 12)
        from tools.grading import meta as nbgrader_meta

        nbgrader_meta.apply_to_file(path)
        nb = read(path)
        attachments.embed(nb, FIGURES, f"solutions/{path.name}")
        set_kernel_metadata(nb)
        if dumps(nb) != dumps(read(path)):
            write(nb, path)  # image references, attachments and kernel metadata only
            written.append(path)
        target = exercises / path.name
        write(make_exercise(nb, path.name), target)
        written.append(target)
    return written


def _stale_solution(path: Path, exercises: Path) -> list[str]:
    """What a regeneration would change for one solution: its headers, figures, nbgrader metadata
    or exercise."""
    problems = []
    nb = read(path)
    fresh = copy.deepcopy(nb)
    set_headers(fresh, "solutions", path.name)
    if dumps(fresh) != dumps(nb):
        problems.append(
            f"solutions/{path.name} (badge or setup cell out of date: run `make headers`)"
        )
    embedded = copy.deepcopy(nb)
    attachments.embed(embedded, FIGURES, f"solutions/{path.name}")
    if dumps(embedded) != dumps(nb):
        problems.append(
            f"solutions/{path.name} (figures not embedded or differ from figures/: "
            "run `make exercises`)"
        )
    from tools.grading import meta as nbgrader_meta

    if nbgrader_meta.is_stale(nb, path.name):
        problems.append(
            f"solutions/{path.name} (nbgrader metadata out of date: run `make exercises`)"
        )
    target = exercises / path.name
    wanted = dumps(make_exercise(nb, path.name))
    if not target.exists() or target.read_text(encoding="utf-8") != wanted:
        problems.append(f"notebooks/{path.name} (stale: run `make exercises`)")
    return problems


def _stale_generated(solutions: Path) -> list[str]:
    """What a regeneration would change in the chapters' exported code and the listed files."""
    problems = export.stale_chapters(solutions, CHAPTERS, ROOT)
    for listed in LISTED:
        text = listed.read_text(encoding="utf-8")
        if readme_listings(text) != text:
            name = listed.relative_to(ROOT).as_posix()
            problems.append(f"{name} (a generated listing is stale: run `make exercises`)")
    return problems


def stale_files(solutions: Path = SOLUTIONS, exercises: Path = EXERCISES) -> list[str]:
    """Names of files that a regeneration would change (empty when all is in sync)."""
    problems = []
    for path in chapter_files(solutions):
        problems += _stale_solution(path, exercises)
    known = {p.name for p in chapter_files(solutions)}
    for path in chapter_files(exercises):
        if path.name not in known:
            problems.append(f"notebooks/{path.name} (no matching solution notebook)")
    if solutions == SOLUTIONS:
        problems += _stale_generated(solutions)
    return problems


KERNEL_PYTHON = "3.11.7"
"""The Python of the course's CI, written into ``language_info`` (see :data:`KERNEL_METADATA`)."""
KERNEL_METADATA = {
    # What JupyterLab writes into a notebook when ipykernel's python3 kernel connects: stored
    # as is, the notebook opens unmodified (JupyterLab compares before it writes). Only the
    # version varies by machine; with another Python, JupyterLab records that one field.
    "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
    "language_info": {
        "codemirror_mode": {"name": "ipython", "version": 3},
        "file_extension": ".py",
        "mimetype": "text/x-python",
        "name": "python",
        "nbconvert_exporter": "python",
        "pygments_lexer": "ipython3",
        "version": KERNEL_PYTHON,
    },
}


def set_kernel_metadata(nb) -> None:
    for key, value in KERNEL_METADATA.items():
        nb.metadata[key] = nbformat.from_dict(copy.deepcopy(value))


def clean_solution_metadata(nb) -> None:
    """Drop volatile metadata (timings, widget state) that execution adds."""
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        cell.metadata.pop("collapsed", None)
    nb.metadata.pop("widgets", None)
    nb.metadata.pop("papermill", None)
    set_kernel_metadata(nb)


def execute(paths: Iterable[Path], timeout: int = 300) -> None:
    """Re-execute solution notebooks in place (in their own folder), storing fresh outputs."""
    import os

    from nbclient import NotebookClient

    os.environ["COURSE_STATIC_WIDGETS"] = "1"  # stored outputs show the explorers' static figure

    for path in paths:
        path = Path(path).resolve()
        nb = read(path)
        set_headers(nb, "solutions", path.name)
        client = NotebookClient(
            nb,
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": str(path.parent)}},
        )
        client.execute()
        clean_solution_metadata(nb)
        write(nb, path)
        print(f"executed {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


_FROM = "percent format to a solution notebook, onto it if it exists (keeps outputs)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.build.nbtools",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    exs = sub.add_parser(
        "exercises", help="regenerate notebooks/ from solutions/ (all, or the named ones)"
    )
    exs.add_argument("notebooks", nargs="*", type=Path)
    sub.add_parser("check", help="exit 1 if notebooks/ or solution headers are out of date")
    hd = sub.add_parser("headers", help="rewrite the Colab badge and setup cell of every solution")
    hd.add_argument(
        "--ref", help="branch or tag the notebooks belong to (default: what they say, else main)"
    )
    ex = sub.add_parser("execute", help="re-execute solution notebooks in place")
    ex.add_argument("notebooks", nargs="*", type=Path)
    for name, what in [("to-percent", "notebook to percent format"), ("from-percent", _FROM)]:
        fp = sub.add_parser(name, help=f"{what} (jupytext, in .venv-authoring)")
        fp.add_argument("source", type=Path)
        fp.add_argument("dest", type=Path)
    args = parser.parse_args(argv)
    commands = {
        "exercises": _exercises,
        "check": _check,
        "headers": _headers,
        "execute": lambda args: execute(args.notebooks or chapter_files()),
        "to-percent": _percent,
        "from-percent": _percent,
    }
    return commands[args.command](args) or 0


def _exercises(args) -> None:
    """In build order: a new chapter's code first (its checks, explorer and figures use it), then
    its figures (the notebooks embed them), the notebooks, the generated listings."""
    for path in export.write_chapters(SOLUTIONS, CHAPTERS, ROOT):
        print(f"wrote {path.relative_to(ROOT)}")
    from tools.figures import catalogue as figures

    missing = [n for n in figures.FIGURES if not figures.path(n).is_file()]  # `make figures`: all
    for path in figures.generate(names=missing):
        print(f"wrote {path.relative_to(ROOT)}")
    for path in generate_exercises(only=args.notebooks):
        print(f"wrote {path.relative_to(ROOT)}")
    for listed in LISTED:
        text = listed.read_text(encoding="utf-8")
        listings = readme_listings(text)
        if listings != text:
            listed.write_text(listings, encoding="utf-8")
            print(f"wrote {listed.relative_to(ROOT).as_posix()}")


def _check(args) -> int:
    problems = stale_files()
    if problems:
        print("Out of date:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    print(
        f"notebooks/, course_utils/chapters/ and solution headers are in sync "
        f"({len(chapter_files())} chapters)"
    )
    return 0


def _headers(args) -> None:
    for path in chapter_files():
        nb = read(path)
        set_headers(nb, "solutions", path.name, args.ref)
        write(nb, path)


def _percent(args) -> int | None:
    """to-percent NOTEBOOK PY, or from-percent PY NOTEBOOK (onto NOTEBOOK if it exists)."""
    from tools.build import percent

    argv = [args.command, str(args.source), str(args.dest)]
    status = percent.in_authoring_venv(argv)
    if status is not None:
        return status
    if args.command == "to-percent":
        args.dest.write_text(percent.to_percent(read(args.source)), encoding="utf-8")
    else:
        existing = read(args.dest) if args.dest.is_file() else None
        nb = percent.from_percent(args.source.read_text(encoding="utf-8"), existing)
        set_headers(nb, "solutions", args.dest.name)
        clean_solution_metadata(nb)
        write(nb, args.dest)
    print(f"wrote {args.dest}")
    return None


if __name__ == "__main__":
    raise SystemExit(main())
