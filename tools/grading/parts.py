"""The parts of a grading run (tools/grading/grade.py) that do not hold its state: hashing, running
nbgrader, the workers' config and per-cell limits, reading autograded notebooks (stops, the
grader's notes, nbgrader's reason for refusing one), merging one student's scores into the class
gradebook, and the re-run in .venv-nbgrader."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from tools.grading import roundtrip as rt

# An error output with one of these names: the cell was stopped at its limit (tools/grading/stops.py
# leaves "Timeout"; "CellTimeoutError" is nbgrader's own). A KeyboardInterrupt alone is the code's.
TIMEOUT_NAMES = ("CellTimeoutError", "Timeout")


# ----------------------------------------------------------------------------- small helpers
def digest(paths: list[Path], base: Path, extra: str = "") -> str:
    """sha256 of the files' relative names and bytes (and ``extra``)."""
    h = hashlib.sha256(extra.encode())
    for path in sorted(paths):
        h.update(str(path.relative_to(base)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and ".ipynb_checkpoints" not in p.parts]


def cell_key(source: str) -> str:
    return hashlib.sha1(source.encode()).hexdigest()


def course_settings(course: Path) -> tuple[str, str | None]:
    """(course_id, db_url or None) from the course's nbgrader_config.py."""
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    coursedir = config.get("CourseDirectory", {})
    return coursedir.get("course_id", "default_course"), coursedir.get("db_url") or None


def run_nbgrader(folder: Path, args: list[str], timeout: float | None = None, log=None) -> int:
    """``nbgrader *args`` in ``folder``; its output appended to ``log`` (a path); the exit status
    (-9 when it ran past ``timeout`` and was killed)."""
    with open(log or os.devnull, "a", encoding="utf-8") as out:
        proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "nbgrader"), *args],
            cwd=folder,
            env=rt.nbgrader_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)  # nbgrader and the kernels it started
            proc.wait()
            return -9


def worker_config(course: Path, folder: Path, limits: Path | None) -> str:
    """The course's nbgrader_config.py, then: this folder as root, its own SQLite gradebook,
    and the per-cell limits (nbclient's ``timeout_func``: a cell's limit from its source)."""
    text = (course / "nbgrader_config.py").read_text(encoding="utf-8")
    text += (
        "\n# --- added by tools/grading/grade.py for one worker of a grading run\n"
        f"c.CourseDirectory.root = {str(folder)!r}\n"
        f"c.CourseDirectory.db_url = {'sqlite:///' + str(folder / 'gradebook.db')!r}\n"
    )
    if limits is not None:
        text += limits_config(limits)
    return text


def limits_config(limits: Path) -> str:
    """Config lines that give each cell its limit from ``limits`` (a JSON file :func:`calibrate`
    wrote): for the kernel, and through it for the guard's fresh run (which reads Execute's)."""
    return (
        "import hashlib as _hashlib, json as _json\n"
        f"_LIMITS = _json.load(open({str(limits)!r}))\n"
        "def _cell_limit(cell):\n"
        "    key = _hashlib.sha1(cell.source.encode()).hexdigest()\n"
        "    return int(_LIMITS['cells'].get(key, _LIMITS['default']))\n"
        "c.Execute.timeout_func = _cell_limit\n"
        "c.Execute.timeout = int(_LIMITS['default'])\n"
    )


def measure_floor(notebooks: int, kernel_name: str = "python3") -> float:
    """Seconds for ``notebooks`` kernel starts, each running ``import torch, course_utils`` (the
    least any autograde of that many notebooks can cost with plain kernels; with
    ``kernel_name="course-warm"``, the same through tools/grading/warm_kernel.py's forked kernels)."""
    import nbformat
    from nbclient import NotebookClient
    from traitlets.config import Config

    from tools.grading import kernels

    config = Config()  # as the course's nbgrader_config.py: kernels with an encrypted transport
    config.KernelManager.transport_encryption = "auto"
    start = time.perf_counter()
    for _ in range(notebooks):
        nb = nbformat.v4.new_notebook(
            cells=[nbformat.v4.new_code_cell("import torch, course_utils")]
        )
        manager = kernels.manager_class(kernel_name)  # a sandboxed kernel talks over ipc
        NotebookClient(
            nb, kernel_name=kernel_name, kernel_manager_class=manager, timeout=600, config=config
        ).execute()
    return time.perf_counter() - start


# ----------------------------------------------------------------------------- reading results
def cell_seconds(cell) -> float | None:
    """Seconds a code cell ran, from the timing nbclient records in its metadata."""
    from datetime import datetime

    ex = cell.get("metadata", {}).get("execution", {})
    try:
        start, end = ex["iopub.execute_input"], ex["shell.execute_reply"]
    except KeyError:
        return None
    parse = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00"))  # noqa: E731
    return (parse(end) - parse(start)).total_seconds()


def cell_label(cell, index: int) -> str:
    grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    first = cell.source.strip().split("\n")[0][:60]
    return f"cell {index} ({grade_id})" if grade_id else f"cell {index} ({first})"


def notebook_problems(notebook: Path, limits: dict) -> list[str]:
    """Plain-words lines for an autograded notebook: each cell stopped at its limit (with that
    limit), each KeyboardInterrupt the code raised itself, and each event of the grader's note
    (a tampered cell restored, a kernel that died, ...)."""
    import nbformat

    from tools.grading.feedback import cell_label, events

    nb = nbformat.read(notebook, as_version=4)
    lines = []
    for index, cell in enumerate(nb.cells):
        names = {o.get("ename") for o in cell.get("outputs", []) if o.get("output_type") == "error"}
        if cell.cell_type != "code" or not names:
            continue
        key = cell_key(cell.source)
        limit = limits["cells"].get(key, limits["default"])
        if names & set(TIMEOUT_NAMES):
            ref = limits["seconds"].get(key)
            usual = (
                "a cell of the student's own"
                if ref is None
                else f"the solution's cell takes {ref:.1f} s"
                if ref >= 0.05
                else "the solution's cell takes under 0.1 s"
            )
            lines.append(
                f"{notebook.stem}: {cell_label(nb, index)} was stopped at its limit, {limit:.0f} s "
                f"({usual}); a loop that never ends is the usual cause"
            )
        elif "KeyboardInterrupt" in names:
            lines.append(
                f"{notebook.stem}: {cell_label(nb, index)} raised KeyboardInterrupt itself (not a "
                f"timeout: its limit is {limit:.0f} s)"
            )
    lines += [f"{notebook.stem}: {e['text']}" for e in events(nb)]
    return lines


def refusal_reason(log: str) -> str:
    """nbgrader's reason for refusing a notebook, from the log of that attempt: the exception
    line of the last traceback it printed (its class and message; a message that starts on the
    next line, as nbclient's ``CellTimeoutError`` has it, joined on), else its last error line.
    Never a line without a word (the dashes around a ``CellTimeoutError``'s preview of the cell)."""
    lines = log.splitlines()
    starts = [i for i, line in enumerate(lines) if "Traceback (most recent call last)" in line]
    if starts:
        body = []
        for line in lines[starts[-1] + 1 :]:
            if line.startswith("[") and "|" in line:  # the next log record
                break
            body.append(line.rstrip())
        found = _exception_line(body)
        if found:
            return found
    errors = [line.split("]", 1)[-1].strip() for line in lines if "| ERROR]" in line]
    errors = [e for e in errors if _wordy(e)]
    return errors[-1] if errors else "no reason found in the log"


def _wordy(line: str) -> bool:
    return any(c.isalpha() for c in line)


_EXCEPTION = re.compile(
    r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Timeout|Failure|Warning)(: |:?$)"
)


def _exception_line(body: list[str]) -> str | None:
    """The exception line of a traceback's ``body`` (the lines after "Traceback ..."): the last
    line at the traceback's own indent after its last frame that names an exception class, with
    the message's next lines (two at most, up to a line without a word or nbclient's preview of
    the cell); else the last line with a word."""
    text = [b for b in body if b.strip()]
    if not text:
        return None
    base = min(_indent(b) for b in text)
    frames = [i for i, b in enumerate(body) if b.lstrip().startswith('File "')]
    heads = [
        i
        for i in range(frames[-1] + 1 if frames else 0, len(body))
        if _indent(body[i]) == base and _EXCEPTION.match(body[i].strip())
    ]
    if not heads:
        return next((b.strip() for b in reversed(text) if _wordy(b)), None)
    words = [body[heads[-1]].strip()]
    for line in body[heads[-1] + 1 : heads[-1] + 3]:
        line = line.strip()
        if not _wordy(line) or line.startswith("Here is a preview"):
            break
        words.append(line)
    return " ".join(words)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def refused_notebook(release: Path, reason: str, log: Path):
    """The page a refused notebook gets: the release (no answers were graded) under a note
    saying why, so that ``nbgrader generate_feedback`` writes the student a page too."""
    import nbformat

    from tools.grading.feedback import note

    nb = nbformat.read(release, as_version=4)
    note(
        nb,
        "refused",
        f"nbgrader could not grade the notebook you handed in ({reason}), so none of its "
        "self-checks ran; they wait for your instructor, who has the grader's log "
        f"({log.name}). Shown below: the notebook as it was released.",
    )
    return nb


def naming_problems(folder: Path, notebooks: list[str]) -> list[str]:
    """Plain-words lines for a student's ``folder`` of ``submitted/``: each notebook of the
    assignment (``notebooks``: their names without .ipynb) missing or renamed, each extra one."""
    present = {p.stem for p in folder.glob("*.ipynb")}
    lines = []
    for name in notebooks:
        if name not in present:
            near = sorted(p for p in present if p.startswith(name) and p != name)
            why = f"; {near[0]}.ipynb was handed in instead (renamed?)" if near else ""
            lines.append(f"{name}.ipynb is missing, so it scores 0{why}")
    for extra in sorted(present - set(notebooks)):
        if not any(extra.startswith(n) for n in notebooks):
            lines.append(f"{extra}.ipynb is not part of the assignment and was not graded")
    return lines


def summary_text(summary: dict) -> str:
    """What `make grade` prints at the end (``summary``: what it writes to last-run-*.json)."""
    lines = [
        f"Graded {len(summary['graded'])} submissions in {summary['seconds']:.0f} s with "
        f"{summary['workers']} workers ({summary['skipped']} unchanged, not graded again); "
        f"scores are in {summary['db']}"
    ]
    for student, problems in sorted(summary["problems"].items()):
        lines += [f"  {student}: {p}" for p in problems]
    if not summary["problems"]:
        lines.append(
            "  nothing to report: no cell stopped, restored or refused, no notebook missing"
        )
    lines.append(f"Logs (kept until the next run): {summary['logs']}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- merging scores
def merge(src_url: str, dst_url: str, course_id: str, assignment: str, student: str) -> None:
    """Copy one student's autograde results from a worker's gradebook into the class gradebook,
    as ``nbgrader autograde`` would have written them there (manual scores already in the class
    gradebook are kept, and such a grade is marked for review, as autograde marks it)."""
    import warnings

    from nbgrader.api import Gradebook
    from sqlalchemy.exc import SAWarning

    with (
        warnings.catch_warnings(),  # nbgrader's add_submission autoflushes half-built objects
        Gradebook(src_url, course_id) as src,
        Gradebook(dst_url, course_id) as dst,
    ):
        warnings.simplefilter("ignore", SAWarning)
        theirs = src.find_submission(assignment, student)
        dst.update_or_create_student(student)
        kwargs = {"timestamp": theirs.timestamp} if theirs.timestamp else {}
        ours = dst.update_or_create_submission(assignment, student, **kwargs)
        by_name = {nb.name: nb for nb in ours.notebooks}
        for their_nb in theirs.notebooks:
            if their_nb.name not in by_name:
                raise RuntimeError(
                    f"{their_nb.name} is in source/ but not in the class gradebook: run "
                    f"`nbgrader generate_assignment {assignment}` again"
                )
            our_nb = by_name[their_nb.name]
            our_nb.late_submission_penalty = their_nb.late_submission_penalty
            grades = {g.name: g for g in our_nb.grades}
            for grade in their_nb.grades:
                mine = grades[grade.name]
                mine.auto_score = grade.auto_score  # and nbgrader's SaveAutoGrades rule:
                mine.needs_manual_grade = mine.manual_score is not None or mine.auto_score is None
            comments = {c.name: c for c in our_nb.comments}
            for comment in their_nb.comments:
                comments[comment.name].auto_comment = comment.auto_comment
        dst.db.commit()


def in_nbgrader_venv(module: str, argv: list[str] | None) -> int | None:
    """Outside .venv-nbgrader (the system Python of `make grade`): create it if needed, run
    ``python -m module argv`` there and return its exit status; inside it: None."""
    try:
        import nbgrader  # noqa: F401
    except ImportError:
        python = rt.ensure_venv()
        env = dict(rt.nbgrader_env(), PATH=f"{rt.VENV / 'bin'}{os.pathsep}{os.environ['PATH']}")
        args = sys.argv[1:] if argv is None else argv
        return subprocess.run([str(python), "-m", module, *args], cwd=rt.ROOT, env=env).returncode
    return None
