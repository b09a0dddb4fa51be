"""Honest answers survive tampering: a submitted notebook's nbgrader cells put back as released.

nbgrader refuses a whole notebook for a few changes a student can make without meaning harm (a
copied check or answer cell keeps its ``grade_id``, so the id appears twice; a cell given an id the
release does not have; a check whose ``grade`` flag was switched off), fixes others without a
word (an edited locked cell, changed points, a check turned into markdown), and lets a deleted
check, or one whose metadata was removed, wait for a person. Measured on chapter 01 with nbgrader
0.9.6 (2026-11-28): the first three score 0 for every check of the notebook.

:class:`RestoreFromRelease` runs first among ``nbgrader autograde``'s *sanitize* preprocessors
(the course's ``nbgrader_config.py`` puts it there): every cell with an id of the release gets the
release's metadata back, a locked cell its text and a cell its type; of two cells with one id the
later is graded and the other made an ordinary cell, as is a cell whose id the release does not
have; a deleted or stripped cell is put back where the release has it. nbgrader's own sanitizers
then find nothing to refuse, the student's answers are graded, and every change is named (in
words) in the notebook's grader note (:func:`tools.grading.feedback.note`): the feedback page
shows it, ``make grade``'s summary and ``make report`` read it.

The release is what ``nbgrader generate_assignment`` stored in the gradebook (each cell's text,
type, lock and points; a locked cell's text with the instructor's hidden tests) and the order of
the cells in ``source/``. :func:`restore` holds the rules and needs no nbgrader.
"""

from __future__ import annotations

from dataclasses import dataclass

from tools.grading.feedback import EVENTS, NOTE_MARKER, note
from tools.grading.optional import optional_base

SCHEMA_VERSION = 3
HIDDEN = ("BEGIN HIDDEN TESTS", "END HIDDEN TESTS")  # nbgrader's default delimiters


@dataclass(frozen=True)
class Released:
    """One nbgrader cell as the release has it (from the gradebook)."""

    grade_id: str
    cell_type: str
    source: str  # as graded: a locked cell's text with its hidden tests
    locked: bool
    grade: bool
    solution: bool
    points: float | None = None
    checksum: str | None = None
    task: bool = False

    def metadata(self) -> dict:
        meta = {
            "grade": self.grade,
            "grade_id": self.grade_id,
            "locked": self.locked,
            "schema_version": SCHEMA_VERSION,
            "solution": self.solution,
            "task": self.task,
        }
        if self.grade:
            meta["points"] = self.points
        if self.checksum:
            meta["checksum"] = self.checksum
        return meta

    def shown_source(self) -> str:
        """The text students were given: without the hidden tests (as ClearHiddenTests cuts them)."""
        lines, inside = [], False
        for line in self.source.split("\n"):
            if HIDDEN[0] in line:
                inside = True
            elif HIDDEN[1] in line:
                inside = False
            elif not inside:
                lines.append(line)
        return "\n".join(lines)


def _meta(cell) -> dict | None:
    meta = cell.get("metadata", {}).get("nbgrader")
    return meta if isinstance(meta, dict) else None


def _claims(meta: dict) -> bool:
    """True when nbgrader would treat the cell as one of its own (an id, or a flag set)."""
    return bool(meta.get("grade_id")) or any(meta.get(k) for k in ("grade", "solution", "locked"))


def _label(grade_id: str) -> str:
    return f"`{grade_id}`"


def _new_cell(released: Released):
    from nbformat.v4 import new_code_cell, new_markdown_cell

    make = new_code_cell if released.cell_type == "code" else new_markdown_cell
    cell = make(released.source)
    _set(cell, released)
    return cell


def _set(cell, released: Released) -> None:
    cell.metadata["nbgrader"] = released.metadata()
    if released.locked:
        cell.metadata["deletable"], cell.metadata["editable"] = False, False
    elif released.grade or released.solution:
        cell.metadata["deletable"] = False


def _retype(cell, cell_type: str) -> None:
    cell.cell_type = cell_type
    if cell_type == "code":
        cell.outputs, cell.execution_count = [], None
    else:
        cell.pop("outputs", None)
        cell.pop("execution_count", None)


def restore(nb, release: list[Released]) -> list[str]:
    """Put ``nb``'s nbgrader cells back as ``release`` (its cells in notebook order) has them, in
    place; return one sentence per change (cell numbers are those of the notebook handed in)."""
    said: list[str] = []
    for holder in (nb, *nb.cells):  # only the grader writes these (its notes, a dead cell's mark)
        holder.metadata.pop(EVENTS, None)
    by_id = {r.grade_id: r for r in release}
    forged = [c for c in nb.cells if c.cell_type == "markdown" and NOTE_MARKER in c.source]
    if forged:
        said.append("a cell presenting itself as the grader's note was removed")
    numbered = [(i, c) for i, c in enumerate(nb.cells) if not any(c is f for f in forged)]
    origin = {id(c): i for i, c in numbered}  # a cell's number in the notebook handed in
    # 1. cells claiming an id: unknown ids and all but one copy of a repeated id become ordinary
    holders: dict[str, list[tuple[int, object]]] = {}
    for index, cell in numbered:
        meta = _meta(cell)
        if meta is None and "nbgrader" in cell.get("metadata", {}):
            del cell.metadata["nbgrader"]
            said.append(f"cell {index} carried malformed nbgrader metadata; it was removed")
        if meta is None:
            continue
        grade_id = meta.get("grade_id")
        if grade_id in by_id:
            holders.setdefault(grade_id, []).append((index, cell))
            continue
        del cell.metadata["nbgrader"]
        if _claims(meta):
            what = (
                f"the id {_label(grade_id)}, which the release does not have"
                if grade_id
                else "nbgrader metadata without an id"
            )
            said.append(f"cell {index} carried {what}; it ran as an ordinary cell")
    kept: dict[str, object] = {}
    for grade_id, cells in holders.items():
        released = by_id[grade_id]
        keep = cells[-1]
        if released.solution and not released.locked:  # an answer: the last one written in
            written = [(i, c) for i, c in cells if c.source != released.source]
            keep = written[-1] if written else keep
        kept[grade_id] = keep[1]
        others = [i for i, c in cells if c is not keep[1]]
        for _, cell in cells:
            if cell is not keep[1]:
                del cell.metadata["nbgrader"]
                cell.metadata.pop("deletable", None), cell.metadata.pop("editable", None)
        if others:
            copies = ", ".join(map(str, others))
            said.append(
                f"cells {copies} and {keep[0]} {'both' if len(others) == 1 else 'all'} carried "
                f"the id {_label(grade_id)} (a copied "
                f"cell?): cell {keep[0]} was graded, "
                + (
                    "the others ran as ordinary cells"
                    if len(others) > 1
                    else "the other ran as an ordinary cell"
                )
            )
    # 2. the cells kept: type, flags, points and a locked cell's text as released
    for grade_id, cell in kept.items():
        released, index = by_id[grade_id], origin[id(cell)]
        meta, changed = _meta(cell), []
        if cell.cell_type != released.cell_type:
            changed.append(f"its type ({cell.cell_type} instead of {released.cell_type})")
            _retype(cell, released.cell_type)
        for flag in ("locked", "grade", "solution"):
            if bool(meta.get(flag)) != getattr(released, flag):
                changed.append(f"its `{flag}` flag")
        if released.grade and _points(meta.get("points")) != _points(released.points):
            changed.append(f"its points ({meta.get('points')} instead of {released.points:g})")
        if released.locked and cell.source not in (released.source, released.shown_source()):
            changed.append("its locked text")
        if released.locked:
            cell.source = released.source
        _set(cell, released)
        if changed:
            said.append(
                f"cell {index} ({_label(grade_id)}) had {_join(changed)} changed; the release's "
                "version was graded"
            )
    # 3. cells of the release that are gone: their metadata put back, or the cell itself
    cells = [c for _, c in numbered]
    ordinary = [c for c in cells if _meta(c) is None]
    for position, released in enumerate(release):
        if released.grade_id in kept:
            continue
        twin = next(
            (
                c
                for c in ordinary
                if c.cell_type == released.cell_type
                and c.source in (released.source, released.shown_source())
                and not any(c is k for k in kept.values())
            ),
            None,
        )
        if twin is not None:
            _set(twin, released)
            twin.source = released.source if released.locked else twin.source
            kept[released.grade_id] = twin
            said.append(
                f"cell {origin[id(twin)]} had lost its nbgrader metadata "
                f"({_label(released.grade_id)}); it was put back"
            )
            continue
        cell = _new_cell(released)
        before = [kept[r.grade_id] for r in release[:position] if r.grade_id in kept]
        after = [kept[r.grade_id] for r in release[position + 1 :] if r.grade_id in kept]
        if before:
            at = next(i for i, c in enumerate(cells) if c is before[-1]) + 1
        elif after:
            at = next(i for i, c in enumerate(cells) if c is after[0])
        else:
            at = len(cells)
        cells.insert(at, cell)
        kept[released.grade_id] = cell
        kind = "answer cell" if released.solution else "cell"
        stub = " (its stub: it counts as unanswered)" if released.solution else ""
        said.append(
            f"the {kind} {_label(released.grade_id)} was missing; the release's was put back{stub}"
        )
    nb.cells = cells
    return said


def _points(value) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _join(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


# ----------------------------------------------------------------------------- nbgrader's side
def released_cells(gradebook, notebook: str, assignment: str, order: list[str]) -> list[Released]:
    """The release's nbgrader cells of one notebook from the gradebook, in ``order`` (grade_ids
    as ``source/`` has them; ids it does not list keep the gradebook's order, after them)."""
    nb = gradebook.find_notebook(notebook, assignment)
    points = {c.name: float(c.max_score) for c in nb.grade_cells}
    solutions = {c.name for c in nb.solution_cells}
    tasks = {c.name for c in nb.task_cells}
    cells = [
        Released(
            grade_id=c.name,
            cell_type=c.cell_type,
            source=c.source,
            locked=bool(c.locked),
            grade=c.name in points,
            solution=c.name in solutions,
            points=points.get(c.name),
            checksum=c.checksum,
            task=c.name in tasks,
        )
        for c in nb.source_cells
    ]
    rank = {grade_id: i for i, grade_id in enumerate(order)}
    return sorted(cells, key=lambda r: rank.get(r.grade_id, len(rank)))


def source_order(path) -> list[str]:
    """grade_ids of a ``source/`` notebook, in order ([] when it cannot be read)."""
    import nbformat

    try:
        nb = nbformat.read(str(path), as_version=4)
    except (OSError, ValueError):
        return []
    return [m["grade_id"] for c in nb.cells if (m := _meta(c)) and m.get("grade_id")]


class RestoreFromRelease(optional_base("nbgrader.preprocessors", "NbGraderPreprocessor")):
    """nbgrader sanitize preprocessor: :func:`restore` against the gradebook (see the module)."""

    def preprocess(self, nb, resources):
        import os

        from nbgrader.api import Gradebook

        info = resources["nbgrader"]
        try:
            coursedir = self.parent.parent.coursedir  # exporter -> converter (nbgrader's Autograde)
            folder = coursedir.format_path(coursedir.source_directory, ".", info["assignment"])
            order = source_order(os.path.join(folder, f"{info['notebook']}.ipynb"))
            course_id = coursedir.course_id
        except AttributeError:
            order, course_id = [], "default_course"
        try:
            with Gradebook(info["db_url"], course_id) as gb:
                release = released_cells(gb, info["notebook"], info["assignment"], order)
            said = restore(nb, release)
        except Exception as exc:  # noqa: BLE001 - nbgrader's own checks then decide, as before
            self.log.warning("Could not restore %s from the release: %r", info["notebook"], exc)
            return nb, resources
        for sentence in said:
            self.log.warning("Restored from the release: %s", sentence)
            note(nb, "restored", sentence[0].upper() + sentence[1:] + ".")
        return nb, resources
