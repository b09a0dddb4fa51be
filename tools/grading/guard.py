"""Self-checks graded where the student's code cannot reach the verdict.

nbgrader runs a student's notebook in one kernel, where the student's cells run beside each
check: a line such as ``cu.checks.check_softmax = lambda f: None``, a patched ``torch.allclose``,
a tensor subclass that answers "equal", a trace hook that jumps a check's failing line, or a
function that walks up to the check's frame and reads the expected tensor turns a check into
free points, and no code that runs later in the same process can be trusted to catch it.

So the verdict of each check comes from elsewhere. :class:`FreshChecks` is an nbgrader
preprocessor that runs after the kernel's run (``nbgrader_config.py`` puts it there). For each
check that passed in the kernel, it runs the notebook again in two processes (:func:`rerun`):

* the **student process** runs the notebook's cells, in a sandbox (``tools/grading/sandbox.py``:
  bubblewrap; no network, a scratch folder of its own, a read-only view without the course
  repository, ``solutions/``, the nbgrader course, the checks, and the exported code of the chapter
  being graded or of any later one: earlier chapters' code arrives as source);
* the **judge** (a fork of this module's template, which imported the checks and ran nothing
  else) runs each check cell itself; every use the check makes of the student's objects is one
  request to the student process, and what comes back is plain values and tensors
  (``tools/grading/judge.py``). No student code runs in the judge: its frames, trace hooks,
  patches and torch modes stay in the student process, and the check's references never leave
  the judge.

A check that passed in the kernel but fails in the judge gets the judge's diagnosis as its error
output, so nbgrader's ``SaveAutoGrades`` gives it no points; a failure in the kernel is kept, so
the judge never raises a score. The checks also refuse the shortcuts their chapter forbids
(``tools/grading/honesty.py``).

Both processes start cheaply: one judge template and one sandboxed student template per grading
process import torch and the course once, and each notebook gets a fork of each; after every
notebook the sandbox is reset (every process killed, the scratch folders emptied). A write the
sandbox refused is named in the notebook's feedback (``tools.grading.feedback.note``).

Only the code cells the checks need run (``tools/grading/needs.py``): the cells nbgrader marks
(answers, checks, read-only given code), cells that reach names indirectly, and every earlier cell
binding a name one of those reads; teaching cells that print, plot, time or train for show are
skipped. This changes no score (:func:`confirm`): a check that does not pass in the pruned run
runs again with every cell, as before pruning, and only that verdict counts. A pass in the pruned
run is the genuine check's pass on the notebook without some cells that carry no nbgrader metadata
(cells nbgrader neither locks nor restores, which the student could have deleted before handing
in): no point is given that the full run would not give to a notebook the student could hand in.

Command line::

    python -m tools.grading.guard NOTEBOOK.ipynb    # prints {grade_id: null or diagnosis} as JSON
    python -m tools.grading.guard --serve           # the judge's template (run by FreshChecks)
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools.grading import feedback as nbgrader_feedback
from tools.grading.feedback import timed_out, wrap  # noqa: F401
from tools.grading.fresh import (  # noqa: F401 - the fresh run's parts, named here too
    CellTimeout,
    chapter,
    given_cell,
    graded_checks,
    only_draws,
    preload,
    rerun,
    time_limit,
)
from tools.grading.optional import optional_base

ROOT = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------- the template
def serve() -> int:
    """The judge's template: import what the checks need, then run each requested notebook (one
    JSON request per line on stdin) with a fork of this still untouched process and a fork of the
    sandboxed student template; reply one JSON line."""
    import nbformat  # noqa: F401

    from tools.grading.session import StudentTemplate

    preload()
    students = StudentTemplate()
    students.start()  # its imports overlap the kernel's first notebook
    try:
        for line in sys.stdin:
            reply = _in_a_fork(json.loads(line), students)
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
    finally:
        students.stop()
    return 0


def _in_a_fork(request: dict, students) -> dict:
    """{"verdicts": ..., "cells": ..., "ran": ..., "writes": ...} of one fresh run ({} if none)."""
    import nbformat

    from tools.grading.session import Session, setup_for

    nb = nbformat.read(request["notebook"], as_version=4)
    number = chapter(nb)
    try:
        sock = students.fork(setup_for(number, request["folder"], request["env"]))
    except (OSError, RuntimeError):
        return {}
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the judge: the checks run here, the student's cells in the student process
        code = 1
        try:
            os.close(read_end)
            if students.control is not None:
                students.control.close()
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
            os.environ.update(request["env"])
            session, counts = Session(sock, number), {}
            only, prune = set(request["only"]), request.get("prune", False)
            verdicts = rerun(nb, session, only, request["cell_timeout"], prune, counts)
            session.close()
            with os.fdopen(write_end, "wb") as out:
                out.write(json.dumps(dict(counts, verdicts=verdicts)).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    sock.close()
    received, deadline = b"", time.monotonic() + request["limit"]
    with os.fdopen(read_end, "rb") as pipe:
        while time.monotonic() < deadline:
            if select.select([pipe], [], [], 1.0)[0]:
                chunk = os.read(pipe.fileno(), 1 << 16)
                if not chunk:
                    break
                received += chunk
        else:
            os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    writes = students.reset()
    try:
        return dict(json.loads(received), writes=writes)
    except ValueError:
        return {"writes": writes}


class Template:
    """The grading run's judge template (``--serve``), started on first use."""

    process: subprocess.Popen | None = None

    @classmethod
    def start(cls) -> None:
        if cls.process is None or cls.process.poll() is not None:
            cls.process = subprocess.Popen(
                [sys.executable, "-m", "tools.grading.guard", "--serve"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=_env(),
                cwd=ROOT,
            )

    @classmethod
    def run(
        cls, path: str, folder: str, ids: list[str], cell_timeout, limit: int, prune=False
    ) -> dict:
        """{"verdicts": {grade_id: None or diagnosis}, "cells": .., "ran": .., "writes": ..} of
        one fresh run."""
        cls.start()
        request = dict(notebook=path, folder=os.path.abspath(folder), only=ids, limit=limit)
        request.update(cell_timeout=cell_timeout, env=_env(only_nbgrader=True), prune=prune)
        try:
            cls.process.stdin.write(json.dumps(request) + "\n")
            cls.process.stdin.flush()
            reply = cls.process.stdout.readline()
        except OSError:
            reply = ""
        return json.loads(reply) if reply else {}


def _env(only_nbgrader: bool = False) -> dict[str, str]:
    """The environment of the judge (``only_nbgrader``: just nbgrader's own variables)."""
    if only_nbgrader:
        return {k: v for k, v in os.environ.items() if k.startswith("NBGRADER_")}
    env = dict(os.environ, MPLBACKEND="Agg", COURSE_STATIC_WIDGETS="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def main(argv: list[str] | None = None) -> int:
    import nbformat

    from tools.grading.session import Session, StudentTemplate, setup_for

    parser = argparse.ArgumentParser(prog="python -m tools.grading.guard")
    parser.add_argument("notebook", nargs="?")
    parser.add_argument("--serve", action="store_true", help="be the template FreshChecks forks")
    parser.add_argument("--only", nargs="*", help="grade_ids of the checks to confirm")
    parser.add_argument(
        "--cell-timeout", type=json.loads, default=0, help="seconds per cell (0: none), or a list"
    )
    parser.add_argument("--prune", action="store_true", help="skip cells no check needs")
    args = parser.parse_args(argv)
    if args.serve:
        return serve()
    nb = nbformat.read(args.notebook, as_version=4)
    only = None if args.only is None else set(args.only)
    students = StudentTemplate()
    try:
        env = _env(only_nbgrader=True)
        folder = os.path.dirname(os.path.abspath(args.notebook))
        session = Session(students.fork(setup_for(chapter(nb), folder, env)), chapter(nb))
        counts: dict = {}
        verdicts = rerun(nb, session, only, args.cell_timeout, args.prune, counts)
        session.close()
        counts["writes"] = students.reset()
    finally:
        students.stop()
    sys.__stdout__.write("\nGUARD-COUNTS " + json.dumps(counts) + "\n")
    sys.__stdout__.write("\nGUARD-VERDICTS " + json.dumps(verdicts) + "\n")
    return 0


# ----------------------------------------------------------------------------- the preprocessor
class FreshChecks(optional_base("nbgrader.preprocessors", "NbGraderPreprocessor")):
    """nbgrader preprocessor: each check's verdict from the judge (see the module text)."""

    def cell_limits(self, nb) -> list[int]:
        """Each cell's limit in seconds, by index: the kernel's own (the config's
        ``Execute.timeout_func``, else ``Execute.timeout``), so a hang costs this run no more."""
        execute = self.config.get("Execute", {})
        limit = execute.get("timeout_func") or (lambda cell: execute.get("timeout", 300))
        return [int(limit(c)) if c.cell_type == "code" else 0 for c in nb.cells]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        from tools.grading import sandbox

        refusal = sandbox.refusal()
        if (
            refusal
        ):  # grading without a sandbox is the instructor's explicit choice, never a default
            raise RuntimeError(refusal)
        if hasattr(os, "fork"):  # its imports overlap the kernel's first notebook
            Template.start()

    def preprocess(self, nb, resources):
        cells = graded_checks(nb)
        for index in cells:  # the feedback shows the diagnosis, wrapped, not our traceback
            for output in nb.cells[index].outputs:
                if output.output_type == "error" and output.ename == "CheckFailure":
                    output.traceback = wrap(output.evalue).split("\n")
        passed = [
            i for i in cells if not any(o.output_type == "error" for o in nb.cells[i].outputs)
        ]
        if not passed:
            return nb, resources
        folder = resources.get("metadata", {}).get("path") or "."
        ids = [nb.cells[i].metadata["nbgrader"]["grade_id"] for i in passed]
        start = time.perf_counter()
        verdicts, report = self._run(nb, folder, ids)
        self.log.info(
            "Fresh run of %d checks: %.1f s; %s of %s code cells skipped; full run again for %s",
            len(ids),
            time.perf_counter() - start,
            report.get("cells", 0) - report.get("ran", 0),
            report.get("cells", "?"),
            ", ".join(report["fallback"]) or "none",
        )
        for index in passed:
            cell = nb.cells[index]
            grade_id = cell.metadata["nbgrader"]["grade_id"]
            if grade_id in verdicts and verdicts[grade_id] is None:
                _stderr_as_text(cell)
                continue
            text = verdicts.get(grade_id) or (
                "This check could not be confirmed: the notebook, run again in a fresh process "
                "from the top, did not reach this cell."
            )
            cell.outputs.insert(0, _error(wrap(text)))
        for text in sandbox_notes(nb, report.get("writes", [])):
            self.log.warning("sandbox: %s", text)
            nbgrader_feedback.note(nb, "sandbox", text)
        return nb, resources

    def _run(self, nb, folder: str, ids: list[str]) -> tuple[dict, dict]:
        import nbformat

        with tempfile.NamedTemporaryFile("w", suffix=".ipynb", delete=False) as handle:
            nbformat.write(nb, handle)
        limits = self.cell_limits(nb)
        limit = sum(limits) + 120  # every cell at its limit, and the fork's start
        try:
            return confirm(handle.name, folder, ids, limits, limit)
        finally:
            os.unlink(handle.name)


def _stderr_as_text(cell) -> None:
    """A confirmed check keeps its point when the student's code also wrote to stderr (a
    ``warnings.warn``, a log line): nbgrader scores any stderr output as a failure, while the
    course's checks fail only by raising. The text stays, as ordinary output."""
    for output in cell.outputs:
        if output.output_type == "stream" and output.name == "stderr":
            output.name = "stdout"


def sandbox_notes(nb, writes: list[str]) -> list[str]:
    """The sandbox's refusals, in words, each naming the cell whose code tried (``cell N: ...``,
    N an index into ``nb``; numbered in the text as in the notebook handed in)."""
    notes = []
    for write in dict.fromkeys(writes):
        where, _, what = write.partition(": ")
        index = int(where[5:]) if where.startswith("cell ") and where[5:].isdigit() else None
        label = (
            nbgrader_feedback.cell_label(nb, index)
            if index is not None and index < len(nb.cells)
            else "the notebook"
        )
        notes.append(
            f"Code in {label} tried to change a file outside its scratch folder ({what}); the "
            "grader's sandbox refused it, so nothing outside changed."
        )
    return notes


def confirm(path: str, folder: str, ids: list[str], cell_timeout, limit: int):
    """(verdicts, report) of the checks ``ids``: a pruned fresh run, then, for the checks that
    did not pass in it, a full one whose verdicts replace theirs (see the module text); the report
    holds the pruned run's ``cells`` and ``ran``, the ``fallback`` grade_ids and the ``writes``
    the sandbox refused."""
    one = Template.run if hasattr(os, "fork") else _spawned
    pruned = one(path, folder, ids, cell_timeout, limit, prune=True)
    verdicts = dict(pruned.get("verdicts", {}))
    writes = list(pruned.get("writes", []))
    fallback = [grade_id for grade_id in ids if verdicts.get(grade_id, "") is not None]
    if fallback:
        full = one(path, folder, fallback, cell_timeout, limit, prune=False)
        writes += full.get("writes", [])
        for grade_id in fallback:
            verdicts.pop(grade_id, None)
            if grade_id in full.get("verdicts", {}):
                verdicts[grade_id] = full["verdicts"][grade_id]
    report = dict(cells=pruned.get("cells", 0), ran=pruned.get("ran", 0), fallback=fallback)
    return verdicts, dict(report, writes=writes)


def _spawned(path: str, folder: str, ids: list[str], cell_timeout, limit: int, prune=False):
    """A fresh interpreter for one notebook (where there is no fork), as :meth:`Template.run`."""
    command = [sys.executable, "-m", "tools.grading.guard", path, *["--prune"] * prune]
    command += ["--cell-timeout", json.dumps(cell_timeout), "--only", *ids]
    try:
        done = subprocess.run(
            command, cwd=folder, env=_env(), capture_output=True, text=True, timeout=limit
        )
    except subprocess.TimeoutExpired:
        return {}
    found = {}
    for line in done.stdout.splitlines():
        if line.startswith("GUARD-COUNTS "):
            found.update(json.loads(line.split(" ", 1)[1]))
        elif line.startswith("GUARD-VERDICTS "):
            found["verdicts"] = json.loads(line.split(" ", 1)[1])
    return found


# its first line in the feedback, whose diagnoses are at most 80 columns wide (feedback.WIDTH)
FRESH = "Checked again by the grader, where the notebook's cells cannot change the check:"


def _error(text: str):
    from nbformat.v4 import new_output

    return new_output(
        "error", ename="CheckFailure", evalue=text, traceback=[FRESH, "", *text.split("\n")]
    )


if __name__ == "__main__":
    raise SystemExit(main())
