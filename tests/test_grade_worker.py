"""tools/grading/worker.py, the run's side, without nbgrader: a worker process that answers, one
that dies, and one that never answers (a class is graded through real workers in
tests/nbgrader/test_grade.py)."""

import sys
import time

from tools.grading.worker import Worker

# Stand-ins for `python -m tools.grading.worker FOLDER ASSIGNMENT`, reading the same requests
ANSWERS = """
import json, sys
for line in sys.stdin:
    request = json.loads(line)
    with open(request["log"], "a") as log:
        log.write(request["student"] + " " + request["notebook"] + "\\n")
    print(json.dumps({"ok": request["student"] != "bad"}), flush=True)
"""
DIES = "import sys; sys.stdin.readline(); sys.exit(3)"
# the request cannot even be written: standard input closed, then a file says so
DEAF = "import os, sys, time; os.close(0); open(sys.argv[1] + '/deaf', 'w').close(); time.sleep(60)"
HANGS = "import sys, time; sys.stdin.readline(); time.sleep(600)"


def _worker(tmp_path, script: str) -> Worker:
    worker = Worker(tmp_path, "week1", env={}, log=tmp_path / "worker.log")
    worker.command = (sys.executable, "-c", script)
    return worker


def test_a_worker_grades_one_request_after_another_in_one_process(tmp_path):
    worker = _worker(tmp_path, ANSWERS)
    log = tmp_path / "students.log"
    try:
        assert worker.grade("ada", log, timeout=30) == 0
        assert worker.grade("bad", log, timeout=30) == 1  # nbgrader failed: a kernel died
        assert worker.grade("bob", log, timeout=30, notebook="01_toy_attention") == 0
    finally:
        worker.stop()
    assert log.read_text().split("\n") == ["ada *", "bad *", "bob 01_toy_attention", ""]
    assert worker.starts == 1


def test_a_worker_that_dies_is_a_failure_and_is_started_again(tmp_path):
    worker = _worker(tmp_path, DIES)
    assert worker.grade("ada", tmp_path / "log", timeout=30) == 1
    assert worker.process is None
    assert worker.grade("bob", tmp_path / "log", timeout=30) == 1 and worker.starts == 2


def test_a_worker_that_takes_no_request_is_a_failure_and_is_stopped(tmp_path):
    worker = _worker(tmp_path, DEAF)
    process = worker._start()
    while not (tmp_path / "deaf").exists():
        time.sleep(0.05)
    assert worker.grade("ada", tmp_path / "log", timeout=30) == 1
    assert process.poll() == -9 and worker.process is None


def test_a_worker_past_its_time_is_stopped(tmp_path):
    worker = _worker(tmp_path, HANGS)
    process = worker._start()
    start = time.perf_counter()
    assert worker.grade("ada", tmp_path / "log", timeout=1) == -9
    assert time.perf_counter() - start < 30 and worker.process is None
    assert process.poll() == -9  # killed, with its process group (its kernels)
