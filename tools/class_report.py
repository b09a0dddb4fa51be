"""What a class got wrong: `make report COURSE=dir ASSIGNMENT=name [DB=url]`.

Reads the gradebook (scores, written answers still waiting for a person) and the autograded
notebooks (each failed self-check's message), and writes ``report/report.md``, ``report.html`` and
``mistakes.png`` in the course directory: per chapter and self-check, how many students passed,
which catalogued mistakes (``course_utils/chapters/*/mistakes.txt``) the failures name and how
often, the checks stopped at their time limit, and the written answers waiting for grading.

A failure's mistake is found from its message: the check fills the catalogue's diagnosis and hint
with the student's values, so the mistake whose fixed text the message holds (the most of it) is
the one named. A failure no catalogue entry matches is counted as "other".

    python -m tools.class_report COURSE ASSIGNMENT [--db URL] [--out DIR]   (in .venv-nbgrader)
"""

from __future__ import annotations

import argparse
import html
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

STUB = "stub"  # the untouched exercise (its message says "the exercise stub is still in place")
TIMEOUT = "timeout"
OTHER = "other"
NOT_GRADED = "not graded"  # no output to read: the notebook was missing, renamed, or crashed


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


@dataclass
class CheckRow:
    notebook: str
    check: str
    passed: int = 0
    failed: int = 0
    mistakes: Counter = field(default_factory=Counter)


@dataclass
class Report:
    assignment: str
    students: int
    checks: list[CheckRow]
    waiting: int  # written answers no person has graded yet
    waiting_by_question: dict[tuple[str, str], int]
    timeouts: dict[str, int]


def collect(course: Path, assignment: str, db: str | None = None) -> Report:
    import nbformat
    from nbgrader.api import Gradebook

    from tools.grade_parts import TIMEOUT_NAMES, course_settings

    course = Path(course)
    course_id, configured = course_settings(course)
    db = db or configured or f"sqlite:///{course / 'gradebook.db'}"
    catalogue = _catalogue()
    rows: dict[tuple[str, str], CheckRow] = {}
    waiting: Counter = Counter()
    timeouts: Counter = Counter()
    with Gradebook(db, course_id) as gb:
        submissions = gb.assignment_submissions(assignment)
        for submission in submissions:
            student = submission.student.id
            for nb in submission.notebooks:
                graded = course / "autograded" / student / assignment / f"{nb.name}.ipynb"
                errors = {}
                if graded.exists():
                    for cell in nbformat.read(graded, as_version=4).cells:
                        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
                        errs = [
                            o for o in cell.get("outputs", []) if o.get("output_type") == "error"
                        ]
                        if gid and errs:
                            errors[gid] = errs[0]
                for grade in sorted(nb.grades, key=lambda g: g.name):
                    if grade.cell_type == "markdown":
                        if grade.needs_manual_grade:
                            waiting[nb.name, grade.name] += 1
                        continue
                    row = rows.setdefault((nb.name, grade.name), CheckRow(nb.name, grade.name))
                    if grade.score >= grade.max_score:
                        row.passed += 1
                        continue
                    row.failed += 1
                    error = errors.get(grade.name)
                    if error is None:
                        row.mistakes[NOT_GRADED] += 1
                    elif error.get("ename") in TIMEOUT_NAMES:
                        row.mistakes[TIMEOUT] += 1
                        timeouts[grade.name] += 1
                    else:
                        row.mistakes[name_mistake(error.get("evalue", ""), catalogue)] += 1
    return Report(
        assignment,
        len(submissions),
        sorted(rows.values(), key=lambda r: (r.notebook, r.check)),
        sum(waiting.values()),
        dict(waiting),
        dict(timeouts),
    )


def markdown(report: Report, plot: str | None = "mistakes.png") -> str:
    lines = [
        f"# Class report: {report.assignment}",
        "",
        f"{report.students} submissions. Written answers waiting for a person: {report.waiting}.",
        "",
    ]
    if plot:
        lines += [f"![passes and mistakes per self-check]({plot})", ""]
    lines += [
        "## Self-checks",
        "",
        "| chapter | self-check | passed | failed | mistakes named (count) |",
        "|---|---|---:|---:|---|",
    ]
    for row in report.checks:
        named = ", ".join(f"`{m}` ({n})" for m, n in row.mistakes.most_common()) or "–"
        lines.append(f"| {row.notebook} | {row.check} | {row.passed} | {row.failed} | {named} |")
    total = Counter()
    for row in report.checks:
        total.update(row.mistakes)
    lines += ["", "## Mistakes across the class", "", "| mistake | times |", "|---|---:|"]
    lines += [f"| `{m}` | {n} |" for m, n in total.most_common()] or ["| – | 0 |"]
    lines += [
        "",
        f"`{STUB}`: the exercise left as released; `{TIMEOUT}`: stopped at its time limit "
        f"(see the grading run's summary); `{OTHER}`: a failure no catalogued mistake matches; "
        f"`{NOT_GRADED}`: no output to read (the notebook was missing or renamed, or it crashed).",
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

    total = Counter()
    for row in report.checks:
        total.update(row.mistakes)
    mistakes = total.most_common()
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(12, 0.35 * max(len(report.checks), len(mistakes), 4) + 1.5),
        layout="constrained",
    )  # fmt: skip
    names = [r.check for r in report.checks]
    left.barh(names, [r.passed for r in report.checks], color="#4c956c", label="passed")
    left.barh(names, [r.failed for r in report.checks], left=[r.passed for r in report.checks],
              color="#d1495b", label="failed")  # fmt: skip
    left.invert_yaxis()
    left.set_xlabel("students")
    left.set_title("self-checks")
    left.legend(loc="lower right")
    right.barh([m for m, _ in mistakes], [n for _, n in mistakes], color="#edae49")
    right.invert_yaxis()
    right.set_xlabel("times named")
    right.set_title("mistakes")
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write(report: Report, folder: Path) -> Path:
    """Write report.md, report.html and mistakes.png into ``folder``; return the markdown's path."""
    import mistune

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    plot(report, folder / "mistakes.png")
    text = markdown(report)
    (folder / "report.md").write_text(text, encoding="utf-8")
    body = mistune.html(text)
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
    from tools.grade_parts import in_nbgrader_venv

    status = in_nbgrader_venv("tools.class_report", argv)
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
