"""One worker of a grading run (tools/grading/grade.py): a process that stays up for the whole run and
autogrades, one after another, the students it is sent, in its own scratch course.

Why not one ``nbgrader autograde --student X`` process per student: each such process imports
nbgrader (about 3 s of CPU here) and starts the honesty guard's template, which imports torch
and the course (3 s or more; tools/grading/guard.py). nbgrader's own sequential ``autograde``
of a class pays both once; a run that paid them for every student was no faster with 2 workers
than nbgrader alone (measured 2026-11-25: 194 s against 183 s for a class of 20). A worker pays
them once, and grades each student exactly as ``nbgrader autograde ASSIGNMENT --student X
--force`` run in its folder would: it is nbgrader's ``AutogradeApp``, initialised once from the
folder's ``nbgrader_config.py`` with those arguments, then started per student.

The conversation, one JSON line each way: the run sends ``{"student": ..., "notebook": ...,
"log": path}`` on the worker's standard input (``"notebook": "*"``: all of them, as without
``--notebook``); the worker appends nbgrader's log for it to ``path`` and answers
``{"ok": true}`` or ``{"ok": false}`` (nbgrader failed, e.g. a kernel died) on its standard
output. Everything else the worker or its kernels print goes to its standard error.

    python -m tools.grading.worker FOLDER ASSIGNMENT     (started by tools/grading/grade.py)
"""

from __future__ import annotations

import json
import logging
import os
import select
import subprocess
import sys
from pathlib import Path


class Worker:
    """The run's side: one worker process, restarted after it had to be stopped."""

    command = (sys.executable, "-m", "tools.grading.worker")  # then FOLDER ASSIGNMENT

    def __init__(self, folder: Path, assignment: str, env: dict, log: Path):
        self.folder, self.assignment, self.env, self.log = folder, assignment, env, log
        self.process: subprocess.Popen | None = None
        self.starts = 0  # processes started: 1, unless one had to be stopped

    def _start(self) -> subprocess.Popen:
        if self.process is None or self.process.poll() is not None:
            with open(self.log, "a", encoding="utf-8") as errors:
                self.process = subprocess.Popen(
                    [*self.command, str(self.folder), self.assignment],
                    cwd=Path(__file__).resolve().parents[2],
                    env=self.env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=errors,
                    text=True,
                    start_new_session=True,  # stopped with its kernels and its guard template
                )
            self.starts += 1
        return self.process

    def grade(self, student: str, log: Path, timeout: float, notebook: str = "*") -> int:
        """0 when nbgrader graded ``student`` (only ``notebook``, if named), 1 when it failed, -9
        when stopped at ``timeout``."""
        process = self._start()
        request = {"student": student, "notebook": notebook, "log": str(log)}
        reply, late = "", False
        try:
            process.stdin.write(json.dumps(request) + "\n")
            process.stdin.flush()
            late = not select.select([process.stdout], [], [], timeout)[0]
            reply = "" if late else process.stdout.readline()
        except OSError:  # the worker had died: nothing could be sent
            pass
        if not reply:  # past its time, or the worker itself died: stop it and its kernels
            self.stop()
            return -9 if late else 1
        return 0 if json.loads(reply).get("ok") else 1

    def stop(self) -> None:
        """Kill the worker's process group (the worker, its kernels, its guard template)."""
        if self.process is not None:
            try:
                os.killpg(self.process.pid, 9)
            except ProcessLookupError:  # the worker and all it started have gone
                pass
            self.process.wait()
        self.process = None


def serve(folder: str, assignment: str) -> int:
    """The worker's side: grade each student named on standard input (see the module text)."""
    replies = os.fdopen(os.dup(1), "w", buffering=1)  # the answers keep a descriptor of their own
    requests = os.fdopen(os.dup(0), "r")
    os.dup2(2, 1)  # whatever else is printed, by us or by the kernels we start, goes to the log
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # kernels inherit no end of the conversation
    sys.stdout = sys.stderr
    os.chdir(folder)
    from nbgrader.apps.autogradeapp import AutogradeApp
    from nbgrader.converters import Autograde
    from nbgrader.converters.base import NbGraderException

    arguments = [assignment, "--force"]
    sys.argv = [str(Path(sys.executable).parent / "nbgrader"), "autograde", *arguments]
    app = AutogradeApp()  # reads ./nbgrader_config.py, as `nbgrader autograde` does
    app.initialize(arguments)
    app.coursedir.assignment_id = assignment
    for line in requests:
        request = json.loads(line)
        handler = logging.FileHandler(request["log"], encoding="utf-8")
        handler.setFormatter(logging.Formatter("[%(name)s | %(levelname)s] %(message)s"))
        app.log.addHandler(handler)
        app.coursedir.student_id = request["student"]
        app.coursedir.notebook_id = request["notebook"]
        try:
            Autograde(coursedir=app.coursedir, parent=app).start()
            ok = True
        except NbGraderException:
            ok = False
        finally:
            app.log.removeHandler(handler)
            handler.close()
        replies.write(json.dumps({"ok": ok}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(serve(*sys.argv[1:]))
