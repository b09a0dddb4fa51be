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
3. the students, in parallel, with a progress bar (tqdm) counting notebooks and an ETA. Each
   worker is one nbgrader process that stays up for the run and grades its students one after
   another (tools/grading/worker.py), so nbgrader's imports and the honesty guard's template are
   paid once per worker, as nbgrader's own sequential autograde pays them once; every worker's
   kernels are forked from one process that has imported torch and the course
   (tools/grading/warm_kernel.py; ``COURSE_WARM_KERNEL=0`` starts plain kernels). The course's config
   puts tampered cells back as released (tools/grading/restore.py), stops each cell at its
   limit, in the kernel and in the guard's fresh run alike, and grades around a cell whose kernel
   died (tools/grading/stops.py). A student whose notebooks nbgrader still refuses is graded
   again notebook by notebook, so a refused notebook costs only itself; it gets a feedback page
   saying why (the release under a note);
4. the summary, in words: cells stopped at their limit, KeyboardInterrupts the code raised,
   kernels that died, cells restored, notebooks refused (with nbgrader's reason), missing or
   renamed notebooks. The logs it names stay in ``.grade/logs-<assignment>/`` until the next run.

``--db URL`` (``make grade DB=...``) is written into the course's ``nbgrader_config.py`` when it
names no gradebook, so that nbgrader's own commands (``generate_feedback``, the formgrader) and
``make report`` use the same one; a config naming another gradebook stops the run.

A re-run grades only new or changed submissions: the files under ``submitted/<student>/<assignment>/``
are hashed (with the limits and ``source/``) into ``.grade/state-<assignment>.json``.

    python3 tools/grading/grade.py COURSE ASSIGNMENT [--workers N] [--db URL] [--students a b]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools.grading import kernels  # noqa: E402
from tools.grading.course import set_db_url  # noqa: E402
from tools.grading.kernels import start as start_warm_kernels  # noqa: E402
from tools.grading.parts import (  # noqa: E402
    cell_key,
    cell_seconds,
    course_settings,
    digest,
    files_under,
    in_nbgrader_venv,
    measure_floor,
    merge,
    naming_problems,
    notebook_problems,
    refusal_reason,
    refused_notebook,
    run_nbgrader,
    summary_text,
    worker_config,
)
from tools.grading.roundtrip import nbgrader_env  # noqa: E402
from tools.grading.warm_kernel import KERNEL_NAME  # noqa: E402
from tools.grading.worker import Worker  # noqa: E402

FACTOR = 10  # a cell may take this many times the solution's time ...
MIN_LIMIT = 20  # ... and at least this many seconds
REFERENCE = "_solutions"  # the student id the calibration run grades
STATE = ".grade"


# ----------------------------------------------------------------------------- the run
def _cores() -> int:
    """The CPU cores this process may use."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


@dataclass
class Outcome:
    student: str
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)  # notebook: nbgrader's reason


class Run:
    def __init__(self, course: Path, assignment: str, workers: int, db: str | None, quiet=False):
        self.course, self.assignment, self.workers = Path(course).resolve(), assignment, workers
        self.quiet = quiet
        self.course_id, configured = course_settings(self.course)
        if db and configured and db != configured:
            raise SystemExit(
                f"DB={db} but the course's nbgrader_config.py names the gradebook {configured}, "
                "which nbgrader's own commands (generate_feedback, the formgrader) read: change "
                "that line, or leave DB out, so that every command uses one gradebook"
            )
        if db and not configured:
            set_db_url(self.course, db)
            self._say(
                f"Wrote c.CourseDirectory.db_url = {db!r} into {self.course / 'nbgrader_config.py'}"
                ": nbgrader's own commands (generate_assignment, generate_feedback, the formgrader)"
                " and make report now use that gradebook too"
            )
        self.db = db or configured or f"sqlite:///{self.course / 'gradebook.db'}"
        self.source = self.course / "source" / assignment
        self.notebooks = sorted(p.stem for p in self.source.glob("*.ipynb"))
        if not self.notebooks:
            raise SystemExit(
                f"No notebooks in {self.source}: is the assignment called {assignment!r}?"
            )
        self.state_dir = self.course / STATE
        self.state_dir.mkdir(exist_ok=True)
        self.logs = self.state_dir / f"logs-{assignment}"  # kept until the next run
        shutil.rmtree(self.logs, ignore_errors=True)
        self.logs.mkdir()
        self.scratch = Path(tempfile.mkdtemp(prefix="grade-", dir=self.state_dir))
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
        log = self.logs / "template.log"
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
        warm = start_warm_kernels(ready=True)  # preloaded before anything is timed
        half = len(self.notebooks) // 2  # the floor is measured around the run, half before
        floor = measure_floor(half)
        start = time.perf_counter()
        status = run_nbgrader(
            template,
            ["autograde", self.assignment, "--student", REFERENCE, "--force"],
            log=self.logs / "calibrate.log",
        )
        reference_seconds = time.perf_counter() - start
        floor += measure_floor(len(self.notebooks) - half)
        warm_floor = measure_floor(len(self.notebooks), KERNEL_NAME) if warm else None
        if status:
            raise SystemExit(f"The solutions did not autograde; see {self.logs / 'calibrate.log'}")
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
            "warm_floor_seconds": None if warm_floor is None else round(warm_floor, 1),
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
        text = (
            f"One student's {n} notebooks (the solutions) autograde in {ref:.0f} s; the floor, "
            f"{n} plain kernel starts with `import torch, course_utils`, is {floor:.0f} s: ratio "
            f"{ref / floor:.2f} (load average {limits['load_average']})"
        )
        warm = limits.get("warm_floor_seconds")
        if warm:
            text += (
                f". Grading forks its kernels from a preloaded process (tools/grading/warm_kernel.py): "
                f"the same {n} starts and imports take {warm:.1f} s that way"
            )
        return text

    # -- one student
    def grade_student(self, worker: Worker, student: str, limits: dict, tick) -> Outcome:
        import nbformat

        folder, out = worker.folder, Outcome(student)
        start = time.perf_counter()
        sub = folder / "submitted"
        if sub.exists():
            shutil.rmtree(sub)
        (sub / student).mkdir(parents=True)
        (sub / student / self.assignment).symlink_to(
            self.course / "submitted" / student / self.assignment
        )
        done = folder / "autograded" / student / self.assignment
        log = self.logs / f"{student}.log"
        backstop = sum(limits["cells"].values()) + 60 * len(self.notebooks) + 120
        seen: set[str] = set()

        def watch(proc_done: threading.Event):
            while not proc_done.wait(0.5):
                self._tick_new(done, seen, tick)

        flag = threading.Event()
        watcher = threading.Thread(target=watch, args=(flag,), daemon=True)
        watcher.start()
        status = worker.grade(student, log, timeout=backstop)
        if status:  # nbgrader refused a notebook (or was stopped): each notebook on its own
            for notebook in self.submitted_notebooks(student):
                before = log.stat().st_size if log.exists() else 0
                failed = worker.grade(student, log, backstop, notebook)
                if failed:
                    with open(log, "rb") as handle:
                        handle.seek(before)
                        attempt = handle.read().decode("utf-8", "replace")
                    out.refused[notebook] = (
                        f"stopped after {backstop:.0f} s, the limit for a whole student"
                        if failed == -9
                        else refusal_reason(attempt)
                    )
        flag.set()
        watcher.join()
        self._tick_new(done, seen, tick, final=len(self.notebooks))
        for notebook, reason in out.refused.items():  # a page saying why, for the feedback
            release = self.scratch / "template" / "release" / self.assignment / f"{notebook}.ipynb"
            done.mkdir(parents=True, exist_ok=True)
            nbformat.write(refused_notebook(release, reason, log), done / f"{notebook}.ipynb")
        for path in sorted(done.glob("*.ipynb")):
            if path.stem not in out.refused:
                out.problems += notebook_problems(path, limits)
        for notebook, reason in out.refused.items():
            out.problems.append(
                f"{notebook}: nbgrader refused it ({reason}); its self-checks wait for a person, "
                f"and its feedback page says why. Log: {log}"
            )
        out.problems += naming_problems(
            self.course / "submitted" / student / self.assignment, self.notebooks
        )
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
        # The workers' kernels share the cores: torch's threads are divided among them (set before
        # anything imports torch). With a thread per core in each of 2 kernels on 2 cores, the
        # class of tests/nbgrader/test_grade.py took 232 s of grading in all, 210 s so (2026-11-28).
        os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _cores() // self.workers)))
        start_warm_kernels()  # one server for every worker's nbgrader (nbgrader_config.py uses it)
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
        limits_file = self.scratch / "limits.json"
        limits_file.write_text(json.dumps(limits), encoding="utf-8")
        workers = []  # one long-lived nbgrader each, in a scratch course of its own
        for i in range(max(1, min(self.workers, len(todo)))):
            folder = self.scratch / f"worker{i}"
            (folder / "source").mkdir(parents=True)
            (folder / "source" / self.assignment).symlink_to(self.source)
            shutil.copy(self.scratch / "clean.db", folder / "gradebook.db")
            (folder / "nbgrader_config.py").write_text(
                worker_config(self.course, folder, limits_file), encoding="utf-8"
            )
            log = self.logs / f"worker{i}.log"
            workers.append(Worker(folder, self.assignment, nbgrader_env(), log))
        free = list(workers)
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
                worker = free.pop()
            try:
                outcome = self.grade_student(worker, student, limits, bar.update)
            finally:
                with self.lock:
                    free.append(worker)
            with self.lock:
                if not outcome.refused:  # a refused notebook is tried again next time
                    state["students"][student] = hashes[student]
                    state_file.write_text(json.dumps(state, indent=1), encoding="utf-8")
            return outcome

        try:
            with ThreadPoolExecutor(len(workers)) as pool:
                outcomes = list(pool.map(one, todo))
        finally:
            for worker in workers:
                worker.stop()
        bar.close()
        seconds = time.perf_counter() - start
        summary = {
            "assignment": self.assignment,
            "db": self.db,
            "graded": todo,
            "skipped": skipped,
            "workers": len(workers),
            "seconds": round(seconds, 1),
            "limits": {"factor": FACTOR, "minimum": MIN_LIMIT, "default": limits["default"]},
            "problems": {o.student: o.problems for o in outcomes if o.problems},
            "refused": {o.student: o.refused for o in outcomes if o.refused},
            "logs": str(self.logs),
            "nbgrader_processes": sum(w.starts for w in workers),
            "student_seconds": {o.student: round(o.seconds, 1) for o in outcomes},
        }
        (self.state_dir / f"last-run-{self.assignment}.json").write_text(
            json.dumps(summary, indent=1), encoding="utf-8"
        )
        self._say(summary_text(summary))
        shutil.rmtree(self.scratch, ignore_errors=True)
        return summary

    def _say(self, text: str) -> None:
        if not self.quiet:
            print(text, flush=True)


def no_sandbox(allowed: bool) -> str | None:
    """The sentence that stops a run which would grade without a sandbox the instructor did not
    ask to do without (tools/grading/sandbox.py); ``allowed``: --no-sandbox (UNSANDBOXED=1)."""
    from tools.grading import sandbox

    if allowed:
        os.environ[sandbox.ENV_OFF] = "1"  # the workers, their kernels and the guard do without
    return sandbox.refusal()


def main(argv: list[str] | None = None) -> int:
    status = in_nbgrader_venv("tools.grading.grade", argv)
    if status is not None:
        return status
    parser = argparse.ArgumentParser(
        prog="make grade",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("course", type=Path, help="the nbgrader course directory")
    parser.add_argument("assignment")
    parser.add_argument("--workers", type=int, default=_cores())
    parser.add_argument("--db", help="gradebook URL (default: the course's, or its gradebook.db)")
    parser.add_argument("--students", nargs="+", help="only these students")
    parser.add_argument("--force", action="store_true", help="grade unchanged submissions again")
    parser.add_argument(
        "--no-sandbox",
        action="store_true",
        help="grade without the sandbox: students' code then runs with your permissions",
    )
    args = parser.parse_args(argv)
    refusal = no_sandbox(args.no_sandbox)
    if refusal:
        print(refusal, file=sys.stderr)
        return 2
    if args.workers < 1:
        parser.error(f"--workers must be 1 or more, got {args.workers}")
    if not (args.course / "nbgrader_config.py").exists():
        parser.error(
            f"{args.course} has no nbgrader_config.py: is it an nbgrader course directory?"
        )
    with kernels.folder_for_the_run():  # every worker's kernels' sockets, removed after
        Run(args.course, args.assignment, args.workers, args.db).run(args.students, args.force)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
