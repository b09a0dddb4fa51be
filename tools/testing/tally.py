"""pytest plugin: one JSON line per finished test in the file named by ``COURSE_TALLY``.

pytest writes its reports (JUnit XML, the summary) when the session ends, so a run killed at a
time limit leaves none. With ``-p tools.testing.tally`` every test's outcome is appended and
flushed as soon as it is known (with xdist, by the controller), so the counts of a stopped run are
the tests that finished. Without ``COURSE_TALLY`` the plugin does nothing.

A line: ``{"test": nodeid, "file": path, "outcome": "passed"|"failed"|"skipped", "seconds": s}``;
a test counts once: failed if its setup, call or teardown failed, skipped if it was skipped.
"""

from __future__ import annotations

import json
import os

ENV = "COURSE_TALLY"


class Tally:
    def __init__(self, path: str):
        self.path = path
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report) -> None:
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration
        if report.failed:
            outcome = "failed"
        elif report.skipped:
            outcome = "skipped"
        elif report.when == "call":
            outcome = "passed"
        else:  # a setup or teardown that passed
            return
        line = {
            "test": report.nodeid,
            "file": report.nodeid.split("::")[0],
            "outcome": outcome,
            "when": report.when,
            "seconds": round(self.seconds[report.nodeid], 3),
        }
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
            f.flush()


def pytest_configure(config) -> None:
    path = os.environ.get(ENV)
    worker = hasattr(config, "workerinput")  # xdist workers report to the controller
    if path and not worker:
        config.pluginmanager.register(Tally(path), "course-tally")


def read(path) -> dict:
    """Counts of a tally file: passed, failed, skipped, and seconds per test file. A test that
    failed in its setup, call or teardown counts once, as failed."""
    outcome: dict[str, str] = {}
    per_file: dict[str, float] = {}
    seconds: dict[str, float] = {}
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except FileNotFoundError:
        lines = []
    for text in lines:
        try:
            line = json.loads(text)
        except json.JSONDecodeError:  # a line cut off by a kill
            continue
        test = line["test"]
        if outcome.get(test) != "failed":
            outcome[test] = line["outcome"]
        seconds[test] = line["seconds"]
    for test, s in seconds.items():
        per_file[test.split("::")[0]] = per_file.get(test.split("::")[0], 0.0) + s
    counts = {
        k: sum(1 for v in outcome.values() if v == k) for k in ("passed", "failed", "skipped")
    }
    return {**counts, "seconds_per_file": {f: round(s, 1) for f, s in sorted(per_file.items())}}
