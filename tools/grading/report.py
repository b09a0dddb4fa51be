"""What a class got wrong: `make report COURSE=dir ASSIGNMENT=name [DB=url]`.

Reads the gradebook (scores, written answers still waiting for a person) and the autograded
notebooks (each failed self-check's message, the grader's notes), and writes ``report/report.md``,
``report.html`` and ``mistakes.png`` in the course directory. Per chapter and self-check, in the
order the notebook has them, each student falls in exactly one column:

* **passed**, told apart from a pass in a notebook whose locked cells or metadata the grader put
  back first (tools/grading/restore.py);
* **failed: own mistake**, with the catalogued mistake its message names
  (``course_utils/chapters/*/mistakes.txt``; the check fills the catalogue's text with the
  student's values, so the entry whose fixed text the message holds, the most of it, is the one
  named), or ``stub``, ``timeout``, ``KeyboardInterrupt``, ``kernel died``, ``other``;
* **failed after an earlier failure** (a cascade): the student's exercise calls an earlier
  exercise of the notebook whose own check failed (a right ``context_vectors`` fails when the
  ``attention_weights`` it calls is wrong); fix the first and look again. Read statically from the
  student's cells: such a failure may also hide a mistake of its own;
* **withdrawn by the guard**: passed in the student's kernel, failed where the student's code
  could not change the verdict (tools/grading/guard.py: a patched check, the course's own
  answer); the points a cheat would have had;
* **not graded**: the notebook is missing or renamed, or nbgrader refused it (make grade's reason).

Each mistake and cascade lists its students; what the grader changed or saw (restored cells, a
kernel that died, a notebook refused, ...) is listed per student.

    python -m tools.grading.report COURSE ASSIGNMENT [--db URL] [--out DIR]   (in .venv-nbgrader)
"""

from __future__ import annotations

import argparse
import html
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

STUB = "stub"  # the untouched exercise (its message says "the exercise stub is still in place")
TIMEOUT = "timeout"
RAISED = "KeyboardInterrupt"  # raised by the student's code itself
DIED = "kernel died"
OTHER = "other"
REFUSED, MISSING = "refused by nbgrader", "missing or renamed"


def _plain(text: str) -> str:
    return " ".join(re.sub(r"\x1b\[[0-9;]*m", "", text).split())


def _catalogue() -> list[tuple[str, list[str]]]:
    """(mistake id, the fixed pieces of its diagnosis and hint) for every catalogued mistake."""
    from course_utils.checks.mistakes import MISTAKES

    out = []
    for name, bug in MISTAKES.items():
        pieces = [
            _plain(p).replace("{{", "{").replace("}}", "}")
            for text in (bug.diagnosis, bug.hint)
            for p in re.split(r"\{[^{}]*\}", text)
        ]
        pieces = [p for p in pieces if len(p) >= 12]
        if pieces:
            out.append((name, pieces))
    return out


def name_mistake(message: str, catalogue) -> str:
    """The catalogued mistake a failure message names (``other`` when none matches)."""
    text = _plain(message)
    if "stub is still in place" in text:
        return STUB
    best, best_len = OTHER, 0
    for name, pieces in catalogue:
        if all(p in text for p in pieces):
            length = sum(map(len, pieces))
            if length > best_len:
                best, best_len = name, length
    return best


def _nbgrader(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def check_order(cells) -> list[str]:
    """grade_ids of the notebook's self-checks (autograded code cells), in notebook order."""
    return [
        m["grade_id"] for c in cells if c.cell_type == "code" and (m := _nbgrader(c)).get("grade")
    ]


def upstream_checks(cells) -> dict[str, list[str]]:
    """{check grade_id: the earlier checks whose exercises its exercise builds on}, read from the
    cells: a check's exercises are the answer cells defining a name it reads; an exercise builds
    on the answer cells defining a name it reads (in function bodies too), and on theirs."""
    from tools.grading.needs import cell_names

    answers: list[tuple[set[str], set[str]]] = []  # (reads, binds) of each answer cell
    checks: dict[str, set[int]] = {}  # check grade_id: indices into answers
    for cell in cells:
        meta = _nbgrader(cell)
        if cell.cell_type != "code" or not meta.get("grade_id"):
            continue
        reads, binds, _ = cell_names(cell.source)
        if meta.get("solution") and not meta.get("grade"):
            answers.append((reads, binds))
        elif meta.get("grade"):
            checks[meta["grade_id"]] = {i for i, (_, b) in enumerate(answers) if reads & b}

    def below(index: int, seen: set[int]) -> set[int]:
        for j, (_, binds) in enumerate(answers[:index]):
            if j not in seen and answers[index][0] & binds:
                seen.add(j)
                below(j, seen)
        return seen

    upstream = {}
    for check, own in checks.items():
        builds_on = set().union(*(below(i, set()) for i in own)) - own
        upstream[check] = [c for c, theirs in checks.items() if c != check and theirs & builds_on]
    return upstream


@dataclass
class CheckRow:
    notebook: str
    check: str
    passed: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)  # passed, after the grader restored cells
    mistakes: dict[str, list[str]] = field(default_factory=dict)  # own mistakes: name: students
    cascades: dict[str, list[str]] = field(default_factory=dict)  # earlier check: students
    withdrawn: list[str] = field(default_factory=list)
    not_graded: dict[str, list[str]] = field(default_factory=dict)  # why: students

    def add(self, column: dict, key: str, student: str) -> None:
        column.setdefault(key, []).append(student)


@dataclass
class Report:
    assignment: str
    students: int
    checks: list[CheckRow]  # notebooks in name order, checks in notebook order
    waiting: int  # written answers no person has graded yet
    waiting_by_question: dict[tuple[str, str], int]
    timeouts: dict[str, int]
    events: list[tuple[str, str, str, str]] = field(default_factory=list)  # student, nb, kind, text

    def totals(self) -> Counter:
        total: Counter = Counter()
        for row in self.checks:
            for mistake, students in row.mistakes.items():
                total[mistake] += len(students)
        return total


def _first_error(cell) -> dict | None:
    errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    return errors[0] if errors else None


def collect(course: Path, assignment: str, db: str | None = None) -> Report:
    import nbformat
    from nbgrader.api import Gradebook

    from tools.grading.feedback import events
    from tools.grading.guard import FRESH  # the first line of a verdict the guard withdrew
    from tools.grading.parts import TIMEOUT_NAMES, course_settings

    course = Path(course)
    course_id, configured = course_settings(course)
    db = db or configured or f"sqlite:///{course / 'gradebook.db'}"
    catalogue = _catalogue()
    rows: dict[tuple[str, str], CheckRow] = {}
    waiting: Counter = Counter()
    timeouts: Counter = Counter()
    happened: list[tuple[str, str, str, str]] = []
    source = course / "source" / assignment
    released = {p.stem: nbformat.read(p, as_version=4).cells for p in source.glob("*.ipynb")}
    for name, cells in sorted(released.items()):
        for check in check_order(cells):
            rows[name, check] = CheckRow(name, check)
    with Gradebook(db, course_id) as gb:
        submissions = gb.assignment_submissions(assignment)
        for submission in submissions:
            student = submission.student.id
            for nb in submission.notebooks:
                graded = course / "autograded" / student / assignment / f"{nb.name}.ipynb"
                autograded = nbformat.read(graded, as_version=4) if graded.exists() else None
                cells = autograded.cells if autograded else None
                said = events(autograded) if autograded else []
                happened += [(student, nb.name, e["kind"], e["text"]) for e in said]
                kinds = {e["kind"] for e in said}
                errors = {_nbgrader(c).get("grade_id"): _first_error(c) for c in cells or []}
                upstream = upstream_checks(cells or released.get(nb.name, []))
                failed = {g.name for g in nb.grades if g.score < g.max_score}
                for grade in nb.grades:
                    if grade.cell_type == "markdown":
                        if grade.needs_manual_grade:
                            waiting[nb.name, grade.name] += 1
                        continue
                    row = rows.setdefault((nb.name, grade.name), CheckRow(nb.name, grade.name))
                    error = errors.get(grade.name)
                    if grade.score >= grade.max_score:
                        (row.restored if "restored" in kinds else row.passed).append(student)
                    elif cells is None or "refused" in kinds:
                        row.add(row.not_graded, REFUSED if cells else MISSING, student)
                    elif error is None:
                        row.add(row.mistakes, OTHER, student)  # e.g. a person's lower score
                    elif error.get("traceback", [""])[:1] == [FRESH]:
                        row.withdrawn.append(student)
                    elif error.get("ename") in TIMEOUT_NAMES:
                        row.add(row.mistakes, TIMEOUT, student)
                        timeouts[grade.name] += 1
                    elif error.get("ename") in (RAISED, "KernelDied"):
                        row.add(row.mistakes, RAISED if error["ename"] == RAISED else DIED, student)
                    else:
                        mistake = name_mistake(error.get("evalue", ""), catalogue)
                        before = [c for c in upstream.get(grade.name, []) if c in failed]
                        if before and mistake != STUB:
                            row.add(row.cascades, before[0], student)
                        else:
                            row.add(row.mistakes, mistake, student)
    order = {key: i for i, key in enumerate(rows)}
    return Report(
        assignment,
        len(submissions),
        sorted(rows.values(), key=lambda r: (r.notebook, order[r.notebook, r.check])),
        sum(waiting.values()),
        dict(waiting),
        dict(timeouts),
        sorted(happened),
    )


def _who(students: list[str]) -> str:
    return ", ".join(sorted(students))


def markdown(report: Report, plot: str | None = "mistakes.png") -> str:
    from tools.grading.feedback import check_label

    lines = [
        f"# Class report: {report.assignment}",
        "",
        f"{report.students} submissions. Written answers waiting for a person: {report.waiting}.",
        "",
    ]
    if plot:
        lines += [f"![passes and mistakes per self-check]({plot})", ""]
    lines += [
        "## Self-checks, in notebook order",
        "",
        "Each student counts once per check. *restored*: passed in a notebook whose locked cells or "
        "metadata the grader put back first (see the last table); *after an earlier failure*: the "
        "exercise calls an earlier one whose check failed; *withdrawn*: passed in the student's "
        "kernel, failed where the student's code could not change the verdict (points a cheat "
        "would have had).",
        "",
        "| chapter | self-check | passed | restored | own mistake | after an earlier failure "
        "| withdrawn | not graded |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    count = lambda column: sum(map(len, column.values()))  # noqa: E731
    for r in report.checks:
        lines.append(
            f"| {r.notebook} | {check_label(r.check)} | {len(r.passed)} | {len(r.restored)} | "
            f"{count(r.mistakes)} | {count(r.cascades)} | {len(r.withdrawn)} | "
            f"{count(r.not_graded)} |"
        )
    lines += ["", "## Mistakes, with the students who made them", ""]
    lines += ["| chapter | self-check | mistake | students |", "|---|---|---|---|"]
    for r in report.checks:
        for mistake, students in sorted(r.mistakes.items(), key=lambda kv: -len(kv[1])):
            lines.append(
                f"| {r.notebook} | {check_label(r.check)} | `{mistake}` | {_who(students)} |"
            )
    lines += ["", "## Failures after an earlier failure (not counted as mistakes)", ""]
    lines += ["| chapter | self-check | failed after | students |", "|---|---|---|---|"]
    for r in report.checks:
        for before, students in r.cascades.items():
            lines.append(
                f"| {r.notebook} | {check_label(r.check)} | {check_label(before)} | "
                f"{_who(students)} |"
            )
    lines += ["", "## Withdrawn by the guard, and not graded", ""]
    lines += ["| chapter | self-check | what | students |", "|---|---|---|---|"]
    for r in report.checks:
        columns = [("withdrawn by the guard", r.withdrawn), *r.not_graded.items()]
        for what, students in columns:
            if students:
                lines.append(
                    f"| {r.notebook} | {check_label(r.check)} | {what} | {_who(students)} |"
                )
    lines += ["", "## What the grader changed or saw", ""]
    lines += ["| student | chapter | what | in words |", "|---|---|---|---|"]
    lines += [f"| {s} | {nb} | {k} | {_cell(t)} |" for s, nb, k, t in report.events]
    lines += ["", "## Mistakes across the class", "", "| mistake | times |", "|---|---:|"]
    lines += [f"| `{m}` | {n} |" for m, n in report.totals().most_common()] or ["| – | 0 |"]
    lines += [
        "",
        f"`{STUB}`: the exercise left as released; `{TIMEOUT}`: stopped at its time limit; "
        f"`{RAISED}`: raised by the student's code; `{DIED}`: the kernel died in the cell (see the "
        f"grading run's summary); `{OTHER}`: a failure no catalogued mistake matches.",
        "",
        "## Written answers waiting",
        "",
        "| chapter | question | students |",
        "|---|---|---:|",
    ]
    lines += [f"| {nb} | {q} | {n} |" for (nb, q), n in sorted(report.waiting_by_question.items())]
    return "\n".join(lines) + "\n"


def plot(report: Report, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mistakes = report.totals().most_common()
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(12, 0.35 * max(len(report.checks), len(mistakes), 4) + 1.5),
        layout="constrained",
    )  # fmt: skip
    names = [f"{r.notebook[:2]} {r.check.split('_', 1)[-1]}" for r in report.checks]
    parts = [
        ("passed", "#4c956c", lambda r: len(r.passed)),
        ("restored", "#97c9a5", lambda r: len(r.restored)),
        ("own mistake", "#d1495b", lambda r: sum(map(len, r.mistakes.values()))),
        ("after an earlier failure", "#f4a6a6", lambda r: sum(map(len, r.cascades.values()))),
        ("withdrawn", "#6c4675", lambda r: len(r.withdrawn)),
        ("not graded", "#bbbbbb", lambda r: sum(map(len, r.not_graded.values()))),
    ]
    start = [0] * len(report.checks)
    for label, color, size in parts:
        widths = [size(r) for r in report.checks]
        left.barh(names, widths, left=start, color=color, label=label)
        start = [a + b for a, b in zip(start, widths)]
    left.invert_yaxis()
    left.set_xlabel("students")
    left.set_title("self-checks, in notebook order")
    left.legend(loc="lower right", fontsize=9)
    right.barh([m for m, _ in mistakes], [n for _, n in mistakes], color="#edae49")
    right.invert_yaxis()
    right.set_xlabel("times made")
    right.set_title("own mistakes")
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _cell(text: str) -> str:
    """A student-chosen text as one table cell: a ``|`` would end the cell, a newline the row."""
    return text.replace("|", "\\|").replace("\n", " ")


def write(report: Report, folder: Path) -> Path:
    """Write report.md, report.html and mistakes.png into ``folder``; return the markdown's path."""
    import mistune

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    plot(report, folder / "mistakes.png")
    text = markdown(report)
    (folder / "report.md").write_text(text, encoding="utf-8")
    # escape=True: raw HTML in the markdown is shown as text. The report quotes what students
    # wrote (diagnoses, the grader's notes naming their files and cells): a <script> in a file
    # name ran in the instructor's browser when it was rendered as HTML.
    body = mistune.create_markdown(escape=True, plugins=["strikethrough", "table"])(text)
    (folder / "report.html").write_text(
        "<!doctype html><meta charset='utf-8'>"
        f"<title>{html.escape(report.assignment)}: class report</title>"
        "<style>body{font-family:sans-serif;max-width:70em;margin:2em auto}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em}"
        "img{max-width:100%}</style>" + body,
        encoding="utf-8",
    )
    return folder / "report.md"


def main(argv: list[str] | None = None) -> int:
    from tools.grading.parts import in_nbgrader_venv

    status = in_nbgrader_venv("tools.grading.report", argv)
    if status is not None:
        return status
    parser = argparse.ArgumentParser(prog="make report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("course", type=Path)
    parser.add_argument("assignment")
    parser.add_argument("--db", help="gradebook URL (default: the course's, or its gradebook.db)")
    parser.add_argument("--out", type=Path, help="folder for the report (default: COURSE/report)")
    args = parser.parse_args(argv)
    report = collect(args.course, args.assignment, args.db)
    path = write(report, args.out or args.course / "report")
    print(f"wrote {path}, {path.with_suffix('.html')} and {path.parent / 'mistakes.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
