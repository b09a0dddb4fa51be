"""nbgrader cell metadata for the solution notebooks, derived from what the notebooks already say.

`make exercises` calls :func:`apply` on every solution, and `python -m tools.build.nbtools check`
reports a solution whose metadata differs from a fresh derivation (:func:`is_stale`). Nothing
here is maintained by hand, and running it twice gives the same notebook.

Which cell gets what (nbgrader schema version 3):

* a code cell holding ``### BEGIN SOLUTION`` is an *autograded answer*
  (``solution: true, grade: false``); its ``grade_id`` is ``chNN_<name>``, where ``<name>`` is
  the first function or class the cell defines, else the last variable it assigns;
* a cell tagged ``self-check`` is an *autograder test* (``grade: true, locked: true``, POINTS_PER_CHECK
  points); its ``grade_id`` is ``chNN_<check name>`` (``chNN_<check>__<argument>`` when the same
  check is called by more than one cell of the notebook);
* a markdown cell holding ``<!-- BEGIN ANSWER -->`` is a *manually graded answer*
  (``solution: true, grade: true``, POINTS_PER_ANSWER points per answer region in the cell);
  its ``grade_id`` is ``chNN_answer_<heading>_<label>`` from the nearest heading above its first
  answer and the last question label (``**Q1.**``, ``**a)**``, ``**Question.**``) before it;
* a code cell that defines (``def``/``class``) a name some later exercise cell uses is
  *read-only* (``locked: true``): nbgrader restores it before grading, so the exercise is graded
  against the code the chapter gave (``chNN_given_<name>``);
* every other cell carries no nbgrader metadata (stale metadata is removed).

Ids never depend on a cell's position. nbgrader must be told our markdown markers and stub
(``tools/grading/nbgrader_config.py``): its ``ClearSolutions`` replaces only the lines between a line
containing ``begin_solution_delimeter`` and one containing ``end_solution_delimeter`` (the same
two strings for code and markdown), so the question text around an answer stays visible.

Command line (run from the repository root)::

    python -m tools.grading.meta course DIR [--assignment NAME] [--chapters 01 02] [--db URL]  # a course
    python -m tools.grading.meta points                           # points per chapter
    python -m tools.grading.meta submissions DIR [--assignment NAME] [--fix]  # missing or renamed notebooks
"""

from __future__ import annotations

import argparse
import ast
import copy
import re
from pathlib import Path

import nbformat

from tools.build import headers, notebooks
from tools.grading.course import CONFIG_FILE, course_config, set_db_url  # noqa: F401 - re-exported

SCHEMA_VERSION = 3
POINTS_PER_CHECK = 1
POINTS_PER_ANSWER = 2
SELF_CHECK_TAG = "self-check"
KEY = "nbgrader"

DELIMITERS = ("BEGIN SOLUTION", "END SOLUTION")  # what tools/grading/nbgrader_config.py sets
_NB_BEGIN_ANSWER = "<!-- BEGIN SOLUTION -->"
ANSWER_MARKERS = {  # the course's written-answer markers, as nbgrader's source/ spells them
    notebooks.BEGIN_ANSWER: _NB_BEGIN_ANSWER,
    notebooks.END_ANSWER: "<!-- END SOLUTION -->",
}


class MetaError(ValueError):
    """A notebook cannot be given nbgrader metadata (e.g. an exercise with no name)."""


def chapter_id(filename: str) -> str:
    """``"04_dropout.ipynb"`` -> ``"ch04"``."""
    match = re.match(r"(\d\d)_", Path(filename).name)
    if not match:
        raise MetaError(f"{filename}: chapter notebooks are named NN_topic.ipynb")
    return f"ch{match.group(1)}"


def _slug(text: str, words: int = 6) -> str:
    parts = re.findall(r"[a-z0-9]+", text.lower())
    return "_".join(parts[:words])


def _lines(cell) -> list[str]:
    return [line.strip() for line in cell.source.split("\n")]


def _is_exercise(cell) -> bool:
    return cell.cell_type == "code" and notebooks.BEGIN_CODE in _lines(cell)


def _answer_count(cell) -> int:
    """Answer regions of a markdown cell (the course's marker, or nbgrader's in source/)."""
    if cell.cell_type != "markdown":
        return 0
    lines = _lines(cell)
    return sum(lines.count(marker) for marker in (notebooks.BEGIN_ANSWER, _NB_BEGIN_ANSWER))


def _tags(cell) -> list[str]:
    return list(cell.metadata.get("tags", []))


def _parse(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except SyntaxError:  # IPython magics and the like: such a cell gets no derived name
        return None


def _defined(tree: ast.Module | None) -> list[str]:
    """Functions and classes defined at the top level of a cell, in order."""
    if tree is None:
        return []
    return [
        n.name
        for n in tree.body
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    ]


def _assigned(tree: ast.Module | None) -> list[str]:
    """Variables assigned outside functions and classes (also inside with/for/if blocks)."""
    names: list[str] = []

    def visit(nodes):
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    names.extend(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
            for field in ("body", "orelse", "finalbody"):
                visit(getattr(node, field, []) or [])

    if tree is not None:
        visit(tree.body)
    return names


def _used(tree: ast.Module | None) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} if tree is not None else set()


_CHECK_CALL = re.compile(r"cu\.checks\.(check_\w+)\(\s*([A-Za-z_][\w.]*)?")
_HEADING = re.compile(r"^#{1,6}\s+(.*)$")
_LABEL = re.compile(r"\*\*([^*]{1,40})\*\*")
_QUESTION_LABEL = re.compile(r"^(Q?\d+[.)]?|[a-z]\)|Question\.?)$")


def _answer_question(cells, index: int) -> tuple[str, str]:
    """(nearest heading above the cell's first answer, the last question label before it)."""
    first = re.split(
        f"{re.escape(notebooks.BEGIN_ANSWER)}|{re.escape(_NB_BEGIN_ANSWER)}", cells[index].source
    )[0]
    labels = [label for label in _LABEL.findall(first) if _QUESTION_LABEL.match(label.strip())][-1:]
    texts = [first] + [c.source for c in reversed(cells[:index]) if c.cell_type == "markdown"]
    for text in texts:
        headings = [m.group(1) for line in text.split("\n") if (m := _HEADING.match(line.strip()))]
        if headings:
            return headings[-1], labels[0] if labels else ""
    return "", labels[0] if labels else ""


def _meta(
    grade_id: str, *, solution: bool, grade: bool, locked: bool, points: int | None = None
) -> dict:
    meta = {
        "grade": grade,
        "grade_id": grade_id,
        "locked": locked,
        "schema_version": SCHEMA_VERSION,
        "solution": solution,
        "task": False,
    }
    if grade:
        meta["points"] = points
    return meta


class _Derivation:
    """One notebook's cells while their nbgrader metadata is derived, and the ids handed out."""

    def __init__(self, nb, chapter: str):
        self.chapter = chapter
        self.cells = nb.cells
        self.trees = [_parse(c.source) if c.cell_type == "code" else None for c in self.cells]
        self.ids: dict[str, int] = {}
        self.check_calls = {
            i: _CHECK_CALL.findall(c.source)
            for i, c in enumerate(self.cells)
            if SELF_CHECK_TAG in _tags(c)
        }
        self.check_use: dict[str, int] = {}
        for calls in self.check_calls.values():
            for name in {name for name, _ in calls}:
                self.check_use[name] = self.check_use.get(name, 0) + 1

    def claim(self, index: int, grade_id: str) -> str:
        """Give ``grade_id`` to cell ``index``: an id held by another cell is an error."""
        if grade_id in self.ids:
            raise MetaError(
                f"{self.chapter}: cells {self.ids[grade_id]} and {index} would both get the "
                f"nbgrader id {grade_id!r}; rename one of the functions, classes or questions"
            )
        self.ids[grade_id] = index
        return grade_id

    def graded(self, index: int) -> dict | None:
        """An exercise, a self-check or a written answer's metadata; None for any other cell."""
        cell = self.cells[index]
        if notebooks.SOLUTION_ONLY_TAG in _tags(cell):
            return None
        if _is_exercise(cell):
            return self.exercise(index)
        if index in self.check_calls:
            return self.self_check(index)
        if count := _answer_count(cell):
            return self.answer(index, count)
        return None

    def exercise(self, index: int) -> dict:
        """An exercise: an autograded answer named after the first name it defines."""
        tree = self.trees[index]
        names = _defined(tree) or _assigned(tree)[-1:]
        if not names:
            raise MetaError(
                f"{self.chapter}, cell {index}: an exercise cell must define a function or "
                "class or assign a variable, so that its nbgrader id has a name"
            )
        grade_id = self.claim(index, f"{self.chapter}_{names[0]}")
        return _meta(grade_id, solution=True, grade=False, locked=False)

    def self_check(self, index: int) -> dict:
        """A self-check: a locked test named after its checks (and their argument, when a check
        is called by more than one cell), worth POINTS_PER_CHECK per call."""
        calls = self.check_calls[index]
        if not calls:
            raise MetaError(
                f"{self.chapter}, cell {index}: a self-check cell must call cu.checks.check_..."
            )
        parts = []
        for name, argument in calls:
            repeated = self.check_use[name] > 1 and argument
            parts.append(f"{name}__{argument.replace('.', '_')}" if repeated else name)
        return _meta(
            self.claim(index, f"{self.chapter}_{'_'.join(parts)}"),
            solution=False,
            grade=True,
            locked=True,
            points=POINTS_PER_CHECK * len(calls),
        )

    def answer(self, index: int, count: int) -> dict:
        """A written answer: manually graded, named after its heading and question label, worth
        POINTS_PER_ANSWER per answer region."""
        heading, label = _answer_question(self.cells, index)
        parts = (f"{self.chapter}_answer", _slug(heading), _slug(label))
        return _meta(
            self.claim(index, "_".join(p for p in parts if p)),
            solution=True,
            grade=True,
            locked=False,
            points=POINTS_PER_ANSWER * count,
        )

    def given(self, index: int) -> dict | None:
        """A read-only teaching cell: a code cell defining a name that a later exercise uses."""
        cell = self.cells[index]
        if cell.cell_type != "code" or notebooks.SOLUTION_ONLY_TAG in _tags(cell):
            return None
        later = set().union(
            *(
                _used(self.trees[j])
                for j in range(index + 1, len(self.cells))
                if _is_exercise(self.cells[j])
            )
        )
        given = [name for name in _defined(self.trees[index]) if name in later]
        if not given:
            return None
        grade_id = self.claim(index, f"{self.chapter}_given_{given[0]}")
        return _meta(grade_id, solution=False, grade=False, locked=True)


def derive(nb, chapter: str) -> list[dict | None]:
    """The nbgrader metadata each cell of a solution notebook should carry (None: none)."""
    d = _Derivation(nb, chapter)
    wanted = [d.graded(index) for index in range(len(d.cells))]
    # Read-only teaching cells (after every graded id is claimed): what a later exercise builds on.
    return [meta if meta is not None else d.given(i) for i, meta in enumerate(wanted)]


def apply(nb, chapter: str) -> bool:
    """Write the derived metadata into ``nb`` in place; True when anything changed."""
    changed = False
    for cell, meta in zip(nb.cells, derive(nb, chapter)):
        current = cell.metadata.get(KEY)
        if meta is None and current is not None:
            del cell.metadata[KEY]
            changed = True
        elif meta is not None and current != meta:
            cell.metadata[KEY] = nbformat.NotebookNode(meta)
            changed = True
    return changed


def is_stale(nb, filename: str) -> bool:
    """True when ``nb``'s nbgrader metadata differs from a fresh derivation."""
    return apply(copy.deepcopy(nb), chapter_id(filename))


def apply_to_file(path: Path) -> bool:
    """Update one solution notebook on disk; True when it was rewritten."""
    nb = notebooks.read(path)
    if not apply(nb, chapter_id(path.name)):
        return False
    notebooks.write(nb, path)
    return True


def points(nb, filename: str) -> dict[str, int]:
    """Points of a notebook: {"auto": autograded self-checks, "manual": written answers}."""
    total = {"auto": 0, "manual": 0}
    for cell, meta in zip(nb.cells, derive(nb, chapter_id(filename))):
        if meta and meta["grade"]:
            total["manual" if cell.cell_type == "markdown" else "auto"] += meta["points"]
    return total


def source_notebook(solution, filename: str):
    """The notebook an instructor puts into nbgrader's ``source/`` folder.

    A copy of the solution with its metadata and embedded figures, without ``solution-only`` cells
    (nbgrader does not know that tag), and with the Colab badge pointing at the exercise notebook
    rather than the solution, so that nbgrader's release equals ``notebooks/`` cell by cell.
    """
    from tools.build import attachments

    nb = copy.deepcopy(solution)
    nb.cells = [c for c in nb.cells if notebooks.SOLUTION_ONLY_TAG not in _tags(c)]
    apply(nb, chapter_id(filename))
    attachments.embed(
        nb, notebooks.FIGURES, f"solutions/{filename}"
    )  # figures travel with the notebook
    headers.set_headers(nb, "notebooks", filename)
    for cell in nb.cells:
        if cell.cell_type == "markdown" and _answer_count(cell):
            cell.source = "\n".join(
                ANSWER_MARKERS.get(line.strip(), line) for line in cell.source.split("\n")
            )
    return nb


def make_course(
    course: Path,
    assignment: str = "attention",
    solutions: Path | None = None,
    chapters: tuple[str, ...] = (),
    db_url: str | None = None,
) -> list[Path]:
    """Create an nbgrader course directory: ``nbgrader_config.py`` and ``source/<assignment>/``
    holding every chapter, or only those whose number is in ``chapters`` (e.g. ``("01", "02")``);
    ``db_url``: a gradebook other than ``gradebook.db`` (e.g. PostgreSQL's, see the README)."""
    solutions = notebooks.SOLUTIONS if solutions is None else solutions
    files = notebooks.chapter_files(solutions)
    known = [p.name[:2] for p in files]
    unknown = [c for c in chapters if c not in known]
    if unknown:
        raise ValueError(
            f"chapters must be two-digit chapter numbers among {', '.join(known)}; "
            f"got {', '.join(map(repr, unknown))}"
        )
    files = [p for p in files if not chapters or p.name[:2] in chapters]
    source = Path(course) / "source" / assignment
    source.mkdir(parents=True, exist_ok=True)
    (Path(course) / "nbgrader_config.py").write_text(
        course_config(notebooks.ROOT), encoding="utf-8"
    )
    if db_url:
        set_db_url(course, db_url)
    written = []
    for path in files:
        target = source / path.name
        notebooks.write(source_notebook(notebooks.read(path), path.name), target)
        written.append(target)
    return written


def check_submissions(course: Path, assignment: str, fix: bool = False) -> list[str]:
    """In words, each student's notebook that autograde would not find in ``submitted/``: missing,
    or renamed (``01_toy_attention-Copy1.ipynb``: the only extra notebook whose name starts with the
    expected one's chapter number); with ``fix``, a renamed notebook gets its expected name back."""
    expected = sorted(p.name for p in (Path(course) / "source" / assignment).glob("*.ipynb"))
    lines = []
    for folder in sorted((Path(course) / "submitted").glob(f"*/{assignment}")):
        student = folder.parent.name
        present = {p.name for p in folder.glob("*.ipynb")}
        extra = sorted(present - set(expected))
        for name in (n for n in expected if n not in present):
            like = [e for e in extra if e[:3] == name[:3]]
            if len(like) == 1 and fix:
                (folder / like[0]).rename(folder / name)
                lines.append(f"{student}: {like[0]} renamed to {name}, the name nbgrader grades")
            elif len(like) == 1:
                lines.append(
                    f"{student}: {name} is missing, and {like[0]} looks like it renamed; "
                    "rename it (or run with --fix), or this chapter scores 0"
                )
            else:
                found = ", ".join(like) or "no notebook of that chapter"
                lines.append(f"{student}: {name} is missing ({found}): this chapter scores 0")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.grading.meta",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    course = sub.add_parser("course", help="create an nbgrader course directory from solutions/")
    course.add_argument("directory", type=Path)
    course.add_argument("--assignment", default="attention")
    course.add_argument(
        "--chapters",
        nargs="+",
        default=(),
        metavar="NN",
        help="only these chapters, by number (default: all), e.g. --chapters 01 02 03",
    )
    course.add_argument(
        "--db",
        metavar="URL",
        help="gradebook URL, e.g. postgresql+psycopg://grader@localhost/grades",
    )
    sub.add_parser("points", help="print the points of every chapter")
    check = sub.add_parser("submissions", help="name missing or renamed notebooks in submitted/")
    check.add_argument("directory", type=Path)
    check.add_argument("--assignment", default="attention")
    check.add_argument("--fix", action="store_true", help="give renamed notebooks their names back")
    args = parser.parse_args(argv)
    if args.command == "course":
        try:
            written = make_course(
                args.directory, args.assignment, chapters=tuple(args.chapters), db_url=args.db
            )
        except ValueError as exc:
            parser.error(str(exc))
        for path in written:
            print(f"wrote {path}")
        print(f"wrote {args.directory / 'nbgrader_config.py'}")
    elif args.command == "submissions":
        lines = check_submissions(args.directory, args.assignment, args.fix)
        print("\n".join(lines) or "every student handed in every notebook under its own name")
    else:
        print(points_table(), end="")
    return 0


def points_table() -> str:
    """The markdown table of every chapter's points (docs/instructors.md's, written by `make exercises`)."""
    rows = ["| chapter | self-checks (autograded) | written answers (manual) |", "|---|---:|---:|"]
    for path in notebooks.chapter_files():
        got = points(notebooks.read(path), path.name)
        rows.append(f"| {path.stem} | {got['auto']} | {got['manual']} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
