"""A grading run for a class: `make grade COURSE=dir ASSIGNMENT=name [WORKERS=4] [DB=url]`.

nbgrader autogrades one submission after another (it has no parallel autograde,
jupyter/nbgrader#174). This module runs ``nbgrader autograde`` in ``--workers`` processes at once,
each in its own scratch copy of the course with its own SQLite gradebook, and merges each
student's scores into the course's gradebook (``gradebook.db``, or ``--db``: any URL nbgrader's
``db_url`` accepts, e.g. ``postgresql+psycopg://user@host/grades``). Steps:

1. a *template* gradebook: ``nbgrader generate_assignment`` of the course's ``source/`` in a scratch
   folder (the same cells as the course's own gradebook, which must already hold the assignment);
2. *limits*: the solutions are autograded once as a student; each cell may then take
   ``FACTOR`` times its measured time, at least ``MIN_LIMIT`` s (a student's own cells: ``FACTOR``
   times the 95th percentile of the solution's cells). Kept in ``.grade/`` until ``source/`` changes;
3. the students, in parallel, with a progress bar (tqdm) counting notebooks and an ETA. A student
   whose kernel dies is graded again notebook by notebook, so one crashing notebook costs only
   itself; a cell that hangs is stopped at its limit and named in the summary;
4. the summary, in words: timeouts, crashed and missing or renamed notebooks.

A re-run grades only new or changed submissions: the files under ``submitted/<student>/<assignment>/``
are hashed (with the limits and ``source/``) into ``.grade/state-<assignment>.json``.

    python3 tools/grade.py COURSE ASSIGNMENT [--workers N] [--db URL] [--students a b]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools import nbgrader_roundtrip as rt  # noqa: E402  (standard library only at import)

FACTOR = 10  # a cell may take this many times the solution's time ...
MIN_LIMIT = 20  # ... and at least this many seconds
REFERENCE = "_solutions"  # the student id the calibration run grades
STATE = ".grade"
TIMEOUT_NAMES = ("CellTimeoutError", "KeyboardInterrupt", "Timeout")


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
        "\n# --- added by tools/grade.py for one worker of a grading run\n"
        f"c.CourseDirectory.root = {str(folder)!r}\n"
        f"c.CourseDirectory.db_url = {'sqlite:///' + str(folder / 'gradebook.db')!r}\n"
    )
    if limits is not None:
        text += limits_config(limits)
    return text


def limits_config(limits: Path) -> str:
    """Config lines that give each cell its limit from ``limits`` (a JSON file :func:`calibrate` wrote)."""
    return (
        "import hashlib as _hashlib, json as _json\n"
        f"_LIMITS = _json.load(open({str(limits)!r}))\n"
        "def _cell_limit(cell):\n"
        "    key = _hashlib.sha1(cell.source.encode()).hexdigest()\n"
        "    return int(_LIMITS['cells'].get(key, _LIMITS['default']))\n"
        "c.Execute.timeout_func = _cell_limit\n"
        "c.Execute.timeout = int(_LIMITS['default'])\n"
    )


def measure_floor(notebooks: int) -> float:
    """Seconds for ``notebooks`` kernel starts, each running ``import torch, course_utils`` (the
    least any autograde of that many notebooks can cost)."""
    import nbformat
    from nbclient import NotebookClient

    start = time.perf_counter()
    for _ in range(notebooks):
        nb = nbformat.v4.new_notebook(
            cells=[nbformat.v4.new_code_cell("import torch, course_utils")]
        )
        NotebookClient(nb, kernel_name="python3", timeout=600).execute()
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


def timeouts(notebook: Path, limits: dict) -> list[str]:
    """Plain-words lines for the cells of an autograded notebook stopped at their limit."""
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    lines = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if any(
            o.get("output_type") == "error" and o.get("ename") in TIMEOUT_NAMES
            for o in cell.get("outputs", [])
        ):
            key = cell_key(cell.source)
            limit = limits["cells"].get(key, limits["default"])
            ref = limits["seconds"].get(key)
            usual = (
                f"the solution's cell takes {ref:.1f} s"
                if ref is not None
                else "a cell of the student's own"
            )
            lines.append(
                f"{notebook.stem}: {cell_label(cell, index)} was stopped after {limit:.0f} s "
                f"({usual}); a loop that never ends is the usual cause"
            )
    return lines


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


# ----------------------------------------------------------------------------- the run
@dataclass
class Outcome:
    student: str
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    crashed: list[str] = field(default_factory=list)


class Run:
    def __init__(self, course: Path, assignment: str, workers: int, db: str | None, quiet=False):
        self.course, self.assignment, self.workers = Path(course).resolve(), assignment, workers
        self.course_id, configured = course_settings(self.course)
        self.db = db or configured or f"sqlite:///{self.course / 'gradebook.db'}"
        self.source = self.course / "source" / assignment
        self.notebooks = sorted(p.stem for p in self.source.glob("*.ipynb"))
        if not self.notebooks:
            raise SystemExit(
                f"No notebooks in {self.source}: is the assignment called {assignment!r}?"
            )
        self.state_dir = self.course / STATE
        self.state_dir.mkdir(exist_ok=True)
        self.scratch = Path(tempfile.mkdtemp(prefix="grade-", dir=self.state_dir))
        self.quiet = quiet
        self.lock = threading.Lock()

    # -- setup
    def template(self) -> Path:
        """A scratch course holding the assignment in its own SQLite gradebook."""
        folder = self.scratch / "template"
        (folder / "source").mkdir(parents=True)
        shutil.copytree(self.source, folder / "source" / self.assignment)
        (folder / "nbgrader_config.py").write_text(
            worker_config(self.course, folder, None), encoding="utf-8"
        )
        log = self.scratch / "template.log"
        if run_nbgrader(folder, ["generate_assignment", self.assignment, "--force"], log=log):
            raise SystemExit(f"nbgrader generate_assignment failed; see {log}")
        shutil.copy(folder / "gradebook.db", self.scratch / "clean.db")
        return folder

    def calibrate(self, template: Path) -> dict:
        """Per-cell limits from one autograde of the solutions (cached until source/ changes)."""
        import nbformat

        key = digest(files_under(self.source), self.source, f"{FACTOR} {MIN_LIMIT}")
        cache = self.state_dir / f"limits-{self.assignment}.json"
        if cache.exists():
            limits = json.loads(cache.read_text(encoding="utf-8"))
            if limits.get("key") == key:
                return limits
        submitted = template / "submitted" / REFERENCE / self.assignment
        shutil.copytree(self.source, submitted)
        self._say("Timing the solutions once, to size each cell's time limit ...")
        half = len(self.notebooks) // 2  # the floor is measured around the run, half before
        floor = measure_floor(half)
        start = time.perf_counter()
        status = run_nbgrader(
            template,
            ["autograde", self.assignment, "--student", REFERENCE, "--force"],
            log=self.scratch / "calibrate.log",
        )
        reference_seconds = time.perf_counter() - start
        floor += measure_floor(len(self.notebooks) - half)
        if status:
            raise SystemExit(
                f"The solutions did not autograde; see {self.scratch / 'calibrate.log'}"
            )
        seconds: dict[str, float] = {}
        for path in sorted((template / "autograded" / REFERENCE / self.assignment).glob("*.ipynb")):
            for cell in nbformat.read(path, as_version=4).cells:
                took = cell_seconds(cell) if cell.cell_type == "code" else None
                if took is not None:
                    k = cell_key(cell.source)
                    seconds[k] = max(took, seconds.get(k, 0.0))
        times = sorted(seconds.values()) or [0.0]
        p95 = times[min(len(times) - 1, int(0.95 * len(times)))]
        limits = {
            "key": key,
            "seconds": seconds,
            "cells": {k: max(MIN_LIMIT, round(FACTOR * s)) for k, s in seconds.items()},
            "default": max(MIN_LIMIT, round(FACTOR * p95)),
            "reference_seconds": round(reference_seconds, 1),
            "floor_seconds": round(floor, 1),
            "load_average": round(os.getloadavg()[0], 1),
        }
        cache.write_text(json.dumps(limits, indent=1), encoding="utf-8")
        return limits

    def speed_text(self, limits: dict) -> str:
        n, ref, floor = (
            len(self.notebooks),
            limits["reference_seconds"],
            limits.get("floor_seconds"),
        )
        if not floor:
            return f"One student's {n} notebooks (the solutions) autograde in {ref:.0f} s"
        return (
            f"One student's {n} notebooks (the solutions) autograde in {ref:.0f} s; the floor, "
            f"{n} kernel starts with `import torch, course_utils`, is {floor:.0f} s: ratio "
            f"{ref / floor:.2f} (load average {limits['load_average']})"
        )

    # -- one student
    def grade_student(self, folder: Path, student: str, limits: dict, tick) -> Outcome:
        out = Outcome(student)
        start = time.perf_counter()
        sub = folder / "submitted"
        if sub.exists():
            shutil.rmtree(sub)
        (sub / student).mkdir(parents=True)
        (sub / student / self.assignment).symlink_to(
            self.course / "submitted" / student / self.assignment
        )
        done = folder / "autograded" / student / self.assignment
        log = self.scratch / f"{student}.log"
        backstop = sum(limits["cells"].values()) + 60 * len(self.notebooks) + 120
        seen: set[str] = set()

        def watch(proc_done: threading.Event):
            while not proc_done.wait(0.5):
                self._tick_new(done, seen, tick)

        flag = threading.Event()
        watcher = threading.Thread(target=watch, args=(flag,), daemon=True)
        watcher.start()
        status = run_nbgrader(
            folder,
            ["autograde", self.assignment, "--student", student, "--force"],
            timeout=backstop,
            log=log,
        )
        if status:  # a kernel died (or nbgrader was stopped): each notebook on its own
            for notebook in self.submitted_notebooks(student):
                failed = run_nbgrader(
                    folder,
                    ["autograde", self.assignment, "--student", student]
                    + ["--notebook", notebook, "--force"],
                    timeout=backstop,
                    log=log,
                )
                if failed:
                    out.crashed.append(notebook)
        flag.set()
        watcher.join()
        self._tick_new(done, seen, tick, final=len(self.notebooks))
        for path in sorted(done.glob("*.ipynb")):
            out.problems += timeouts(path, limits)
        for notebook in out.crashed:
            out.problems.append(
                f"{notebook}: the notebook stopped the grader (its kernel died, e.g. the code exited "
                f"Python or ran out of memory); its cells wait for a person. Log: {log}"
            )
        out.problems += self.naming_problems(student)
        with self.lock:
            merge(
                f"sqlite:///{folder / 'gradebook.db'}",
                self.db,
                self.course_id,
                self.assignment,
                student,
            )
            target = self.course / "autograded" / student / self.assignment
            if target.exists():
                shutil.rmtree(target)
            target.parent.mkdir(parents=True, exist_ok=True)
            if done.exists():
                shutil.move(str(done), str(target))
        out.seconds = time.perf_counter() - start
        return out

    def _tick_new(self, done: Path, seen: set, tick, final: int | None = None) -> None:
        names = {p.stem for p in done.glob("*.ipynb")} if done.exists() else set()
        fresh = names - seen
        seen |= fresh
        if final is not None and len(seen) < final:  # notebooks not graded still count as done
            fresh |= {f"_{i}" for i in range(final - len(seen))}
            seen |= fresh
        if fresh:
            tick(len(fresh))

    def submitted_notebooks(self, student: str) -> list[str]:
        folder = self.course / "submitted" / student / self.assignment
        return [n for n in self.notebooks if (folder / f"{n}.ipynb").exists()]

    def naming_problems(self, student: str) -> list[str]:
        folder = self.course / "submitted" / student / self.assignment
        present = {p.stem for p in folder.glob("*.ipynb")}
        lines = []
        for name in self.notebooks:
            if name not in present:
                near = sorted(p for p in present if p.startswith(name) and p != name)
                why = f"; {near[0]}.ipynb was handed in instead (renamed?)" if near else ""
                lines.append(f"{name}.ipynb is missing, so it scores 0{why}")
        for extra in sorted(present - set(self.notebooks)):
            if not any(extra.startswith(n) for n in self.notebooks):
                lines.append(f"{extra}.ipynb is not part of the assignment and was not graded")
        return lines

    # -- the class
    def students(self, only: list[str] | None) -> list[str]:
        root = self.course / "submitted"
        found = (
            sorted(p.parent.name for p in root.glob(f"*/{self.assignment}") if p.is_dir())
            if root.exists()
            else []
        )
        if only:
            missing = sorted(set(only) - set(found))
            if missing:
                raise SystemExit(f"No submission in {root} for: {', '.join(missing)}")
            return [s for s in found if s in only]
        return found

    def check_class_gradebook(self) -> None:
        from nbgrader.api import Gradebook, MissingEntry

        with Gradebook(self.db, self.course_id) as gb:
            try:
                assignment = gb.find_assignment(self.assignment)
            except MissingEntry:
                raise SystemExit(
                    f"The gradebook {self.db} has no assignment {self.assignment!r}: run "
                    f"`nbgrader generate_assignment {self.assignment}` first"
                ) from None
            names = sorted(nb.name for nb in assignment.notebooks)
        if names != self.notebooks:
            raise SystemExit(
                f"The gradebook's notebooks ({', '.join(names)}) differ from source/ "
                f"({', '.join(self.notebooks)}): run `nbgrader generate_assignment {self.assignment}` again"
            )

    def run(self, only: list[str] | None = None, force: bool = False) -> dict:
        from concurrent.futures import ThreadPoolExecutor

        from tqdm import tqdm

        self.check_class_gradebook()
        students = self.students(only)
        template = self.template()
        limits = self.calibrate(template)
        self._say(self.speed_text(limits))
        state_file = self.state_dir / f"state-{self.assignment}.json"
        state = json.loads(state_file.read_text(encoding="utf-8")) if state_file.exists() else {}
        if state.get("db") != self.db or state.get("limits") != limits["key"]:
            state = {"db": self.db, "limits": limits["key"], "students": {}}
        hashes = {
            s: digest(
                files_under(self.course / "submitted" / s / self.assignment),
                self.course / "submitted" / s / self.assignment,
            )
            for s in students
        }
        todo = [s for s in students if force or state["students"].get(s) != hashes[s]]
        skipped = len(students) - len(todo)
        self._say(
            f"{len(todo)} of {len(students)} submissions to grade ({skipped} unchanged since the "
            f"last run), {len(self.notebooks)} notebooks each, {self.workers} workers; each cell may "
            f"take {FACTOR}x the solution's time, at least {MIN_LIMIT} s"
        )
        folders = []
        for i in range(max(1, min(self.workers, len(todo)))):
            folder = self.scratch / f"worker{i}"
            (folder / "source").mkdir(parents=True)
            (folder / "source" / self.assignment).symlink_to(self.source)
            shutil.copy(self.scratch / "clean.db", folder / "gradebook.db")
            limits_file = self.scratch / "limits.json"
            limits_file.write_text(json.dumps(limits), encoding="utf-8")
            (folder / "nbgrader_config.py").write_text(
                worker_config(self.course, folder, limits_file), encoding="utf-8"
            )
            folders.append(folder)
        free = list(folders)
        outcomes: list[Outcome] = []
        start = time.perf_counter()
        bar = tqdm(
            total=len(todo) * len(self.notebooks),
            unit="notebook",
            desc="autograde",
            disable=self.quiet,
            smoothing=0.1,
        )

        def one(student: str) -> Outcome:
            with self.lock:
                folder = free.pop()
            try:
                outcome = self.grade_student(folder, student, limits, bar.update)
            finally:
                with self.lock:
                    free.append(folder)
            with self.lock:
                if not outcome.crashed:
                    state["students"][student] = hashes[student]
                    state_file.write_text(json.dumps(state, indent=1), encoding="utf-8")
            return outcome

        with ThreadPoolExecutor(len(folders)) as pool:
            outcomes = list(pool.map(one, todo))
        bar.close()
        seconds = time.perf_counter() - start
        summary = {
            "assignment": self.assignment,
            "db": self.db,
            "graded": todo,
            "skipped": skipped,
            "workers": len(folders),
            "seconds": round(seconds, 1),
            "limits": {"factor": FACTOR, "minimum": MIN_LIMIT, "default": limits["default"]},
            "problems": {o.student: o.problems for o in outcomes if o.problems},
            "crashed": {o.student: o.crashed for o in outcomes if o.crashed},
        }
        (self.state_dir / f"last-run-{self.assignment}.json").write_text(
            json.dumps(summary, indent=1), encoding="utf-8"
        )
        self._say(self.summary_text(summary))
        shutil.rmtree(self.scratch, ignore_errors=True)
        return summary

    def summary_text(self, summary: dict) -> str:
        lines = [
            f"Graded {len(summary['graded'])} submissions in {summary['seconds']:.0f} s with "
            f"{summary['workers']} workers ({summary['skipped']} unchanged, not graded again); "
            f"scores are in {summary['db']}"
        ]
        for student, problems in sorted(summary["problems"].items()):
            lines += [f"  {student}: {p}" for p in problems]
        if not summary["problems"]:
            lines.append("  no timeouts, crashes, or missing notebooks")
        return "\n".join(lines)

    def _say(self, text: str) -> None:
        if not self.quiet:
            print(text, flush=True)


def in_nbgrader_venv(module: str, argv: list[str] | None) -> int | None:
    """Outside .venv-nbgrader (the system Python of `make grade`): create it if needed, run
    ``python -m module argv`` there and return its exit status; inside it: None."""
    try:
        import nbgrader  # noqa: F401
    except ImportError:
        python = rt.ensure_venv()
        env = dict(rt.nbgrader_env(), PATH=f"{rt.VENV / 'bin'}{os.pathsep}{os.environ['PATH']}")
        args = sys.argv[1:] if argv is None else argv
        return subprocess.run([str(python), "-m", module, *args], cwd=ROOT, env=env).returncode
    return None


def main(argv: list[str] | None = None) -> int:
    status = in_nbgrader_venv("tools.grade", argv)
    if status is not None:
        return status
    parser = argparse.ArgumentParser(
        prog="make grade",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("course", type=Path, help="the nbgrader course directory")
    parser.add_argument("assignment")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--db", help="gradebook URL (default: the course's, or its gradebook.db)")
    parser.add_argument("--students", nargs="+", help="only these students")
    parser.add_argument("--force", action="store_true", help="grade unchanged submissions again")
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error(f"--workers must be 1 or more, got {args.workers}")
    if not (args.course / "nbgrader_config.py").exists():
        parser.error(
            f"{args.course} has no nbgrader_config.py: is it an nbgrader course directory?"
        )
    Run(args.course, args.assignment, args.workers, args.db).run(args.students, args.force)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
