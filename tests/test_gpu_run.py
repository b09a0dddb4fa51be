"""`make test-gpu` (tools/testing/gpu.py) tested on the CPU: the sentence and exit status without
CUDA, and, on a machine that pretends to have CUDA, what it runs, counts, stops and writes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools.testing import gpu, tally

ROOT = Path(__file__).resolve().parent.parent
FAKE_GPU = {
    "gpu": "Pretend H100",
    "gpu_memory_gib": 79.6,
    "gpus": 1,
    "torch": "2.x-pretend",
    "cuda": "12.x",
}


class FakeRuns:
    """Stands in for the subprocesses: each part 'runs' for the seconds given and leaves what
    the real one would (tally lines, the bench's CSV), on a clock the test moves."""

    def __init__(
        self, seconds=None, failed=(), overrun=0, bench_status=("ok", "ok", "unavailable")
    ):
        self.now, self.calls, self.overrun = 0.0, [], overrun
        self.seconds = {"notebooks": 150, "checks": 60, "bench": 30, **(seconds or {})}
        self.failed, self.bench_status = failed, bench_status

    def clock(self) -> float:
        return self.now

    def __call__(self, argv, env, timeout, log):
        name = next(p for p in ("notebooks", "checks", "bench") if p in str(log.name))
        self.calls.append((name, list(argv), dict(env), timeout))
        stopped = self.seconds[name] > timeout
        self.now += min(self.seconds[name], timeout) + (
            self.overrun if stopped and name == "notebooks" else 0
        )
        log.write_text(f"{name} output\n")
        if name == "bench":
            folder = Path(argv[argv.index("--out") + 1])
            folder.mkdir(parents=True, exist_ok=True)
            rows = ["variant,status,note"] + [
                f"v{i},{s},{'needs torch 2.5' if s == 'unavailable' else ''}"
                for i, s in enumerate(self.bench_status)
            ]
            (folder / "bench.csv").write_text("\n".join(rows) + "\n")
        else:
            outcome = "failed" if name in self.failed else "passed"
            lines = [
                {"test": f"{name}/a.py::t{i}", "outcome": o, "seconds": 1.0}
                for i, o in enumerate(["passed", "passed", outcome, "skipped"])
            ]
            Path(env["COURSE_TALLY"]).write_text("".join(json.dumps(x) + "\n" for x in lines))
        return (1 if name in self.failed else 0), stopped


def _main(tmp_path, runs, *args):
    return gpu.main(
        ["--out", str(tmp_path), *args],
        facts=lambda: FAKE_GPU,
        run=runs,
        cores=16,
        clock=runs.clock,
    )


def test_without_cuda_one_sentence_exit_2_and_no_file(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert gpu.main(["--out", str(tmp_path / "out")]) == 2
    said = capsys.readouterr().out.strip()
    assert "\n" not in said and said.count(". ") == 0 and said.endswith(".")
    assert said.startswith("CUDA is not available on this machine") and "ran nothing" in said
    assert not (tmp_path / "out").exists()


def test_with_cuda_every_part_runs_and_one_file_says_what_ran(tmp_path, capsys):
    runs = FakeRuns()
    assert _main(tmp_path, runs) == 0
    assert [c[0] for c in runs.calls] == ["notebooks", "checks", "bench"]
    report = json.loads((tmp_path / "test-gpu.json").read_text())
    for key in ("date", "commit", "torch", "cuda", "gpu", "budget_s", "seconds", "not_run"):
        assert key in report
    assert report["gpu"] == "Pretend H100" and report["passed"] is True
    assert report["seconds"] == 240.0 and report["budget_s"] == 360
    nbs = report["parts"]["notebooks"]
    assert (nbs["passed"], nbs["failed"], nbs["skipped"], nbs["seconds"]) == (3, 0, 1, 150.0)
    assert report["parts"]["bench"]["passed"] == 2 and report["parts"]["bench"]["skipped"] == 1
    whats = [x["what"] for x in report["not_run"]]
    assert "a check's second device on the GPU" in whats
    assert any(w.startswith("bench row v2 (unavailable: needs torch 2.5)") for w in whats)
    out = capsys.readouterr().out
    assert "Pretend H100" in out and "\nRan:\n" in out and "\nNot run:\n" in out
    assert out.strip().splitlines()[-1].startswith("PASSED in 240.0 s; wrote ")


def test_the_parts_run_on_cuda_with_the_makefiles_nbval_and_shared_cores(tmp_path):
    runs = FakeRuns()
    _main(tmp_path, runs)
    (_, nb_argv, nb_env, nb_limit), (_, ck_argv, ck_env, _), (_, bench_argv, _, _) = runs.calls
    makefile = (ROOT / "Makefile").read_text()
    nbval = re.search(r"^NBVAL\s*:=\s*(.*)$", makefile, re.M).group(1).split()
    assert list(gpu.NBVAL) == nbval
    assert nb_argv[nb_argv.index("-n") + 1] == "8" and nb_env["OMP_NUM_THREADS"] == "2"
    assert nb_env["COURSE_DEVICE"] == "cuda" and nb_env["OMP_WAIT_POLICY"] == "PASSIVE"
    chapters = len(list(ROOT.glob("solutions/[0-9][0-9]_*.ipynb")))  # found, as a new one is
    assert nb_argv[-chapters:] == gpu.solution_files() and len(gpu.solution_files()) == chapters
    assert ck_env["COURSE_DEVICE"] == "cuda" and "tests/test_checks_fuzz.py" in ck_argv
    assert sum(a.endswith("_checks.py") for a in ck_argv) == chapters
    assert all((ROOT / f).is_file() for f in gpu.check_test_files())
    assert bench_argv[bench_argv.index("--device") + 1] == "cuda" and nb_limit == 180


def test_a_failure_or_a_stop_is_not_a_pass_and_says_what_was_cut(tmp_path, capsys):
    runs = FakeRuns(failed=("checks",), seconds={"bench": 99})  # the bench's limit is 90 s
    assert _main(tmp_path, runs) == 1
    report = json.loads((tmp_path / "test-gpu.json").read_text())
    assert report["passed"] is False
    assert report["parts"]["checks"]["failed"] == 1 and not report["parts"]["checks"]["ok"]
    bench = report["parts"]["bench"]
    assert bench["stopped_at_limit"] and bench["limit_s"] == 90 and not bench["ok"]
    assert {"what": "the rest of bench", "why": "stopped at its 90 s limit"} in report["not_run"]
    out = capsys.readouterr().out
    assert "stopped at its limit: the counts are of what finished" in out
    assert out.strip().splitlines()[-1].startswith("NOT PASSED")


def test_the_budget_holds_when_a_part_runs_long(tmp_path):
    """Parts that use their whole limits end within the budget; a part that overruns its limit
    (a slow stop) takes the time from the later parts, down to not running the last."""
    runs = FakeRuns(seconds={"notebooks": 500, "checks": 500, "bench": 500})
    _main(tmp_path / "long", runs)
    assert [c[3] for c in runs.calls] == [180, 60, 90]
    assert runs.now == 330 <= gpu.BUDGET_S - gpu.RESERVE_S
    runs = FakeRuns(seconds={"notebooks": 500, "checks": 500, "bench": 500}, overrun=100)
    assert _main(tmp_path / "slow", runs) == 1
    report = json.loads((tmp_path / "slow" / "test-gpu.json").read_text())
    assert [c[3] for c in runs.calls] == [180, 60]  # 280 + 60 s spent: 5 s left for the bench
    assert {"what": gpu.PARTS[2].what, "why": "the 360 s budget was spent"} in report["not_run"]


def test_parts_not_asked_for_are_listed(tmp_path):
    runs = FakeRuns()
    assert _main(tmp_path, runs, "--parts", "checks") == 0
    report = json.loads((tmp_path / "test-gpu.json").read_text())
    assert list(report["parts"]) == ["checks"]
    assert {"what": gpu.PARTS[0].what, "why": "not asked for (--parts)"} in report["not_run"]


def test_workers_share_the_cores():
    assert gpu.workers(16, 11) == (8, 2)
    assert gpu.workers(2, 11) == (1, 2)
    assert gpu.workers(64, 11) == (11, 5)


def test_tally_counts_a_test_once_and_survives_a_cut_line(tmp_path):
    path = tmp_path / "t.tally"
    lines = [
        {"test": "a.py::x", "outcome": "passed", "seconds": 1.0},
        {"test": "a.py::x", "outcome": "failed", "seconds": 1.5},  # its teardown failed
        {"test": "b.ipynb::Cell 0", "outcome": "skipped", "seconds": 0.0},
        {"test": "b.ipynb::Cell 1", "outcome": "passed", "seconds": 2.0},
    ]
    text = "".join(json.dumps(x) + "\n" for x in lines) + '{"test": "b.ipynb::Ce'
    path.write_text(text)
    assert tally.read(path) == {
        "passed": 1,
        "failed": 1,
        "skipped": 1,
        "seconds_per_file": {"a.py": 1.5, "b.ipynb": 2.0},
    }
    assert tally.read(tmp_path / "missing")["passed"] == 0


def test_a_real_part_runs_through_xdist_and_the_tally(tmp_path, monkeypatch):
    """The real subprocess, pytest-xdist and tally plugin, on a machine that pretends to have
    CUDA, with three tests in place of the checks: one passes, one fails, one is skipped."""
    tests = tmp_path / "test_three.py"
    tests.write_text(
        "import os, pytest\n"
        "def test_passes():\n    assert os.environ['COURSE_DEVICE'] == 'cuda'\n"
        "def test_fails():\n    assert False\n"
        "def test_skipped():\n    pytest.skip('not here')\n"
    )
    monkeypatch.setattr(gpu, "check_test_files", lambda: [str(tests)])
    out = tmp_path / "out"
    code = gpu.main(["--out", str(out), "--parts", "checks"], facts=lambda: FAKE_GPU, cores=4)
    checks = json.loads((out / "test-gpu.json").read_text())["parts"]["checks"]
    assert code == 1 and checks["returncode"] == 1, (out / "checks.log").read_text()[-3000:]
    assert (checks["passed"], checks["failed"], checks["skipped"]) == (1, 1, 1)
    assert [Path(f).name for f in checks["seconds_per_file"]] == [tests.name] and not checks["ok"]


def test_the_notebooks_command_collects_the_solutions_with_nbval(tmp_path):
    argv, _ = gpu.commands(tmp_path, cores=2)["notebooks"]
    argv = [a for a in argv if a not in ("-n", "1", "--dist", "loadfile")]
    argv = [*argv[: -len(gpu.solution_files())], "solutions/01_toy_attention.ipynb"]
    done = subprocess.run(
        [*argv, "--collect-only", "-q"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout[-2000:]
    assert re.search(r"^solutions/01_toy_attention\.ipynb: \d\d+$", done.stdout, re.M)  # its cells


def test_launch_stops_a_run_past_its_limit_with_its_children(tmp_path):
    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    log = tmp_path / "slow.log"
    start = time.monotonic()
    code, stopped = gpu.launch([sys.executable, "-c", script], {}, 2, log)
    assert stopped and code != 0 and time.monotonic() - start < 20
    child = int(log.read_text().split()[0])
    for _ in range(20):  # killed, then reaped by whoever adopted it
        status = Path(f"/proc/{child}/status")
        if not status.exists() or "\nState:\tZ" in status.read_text():
            break
        time.sleep(0.25)
    else:
        pytest.fail(f"the child process {child} of the stopped run is still alive")


def test_the_makefile_target_and_its_help_line():
    makefile = (ROOT / "Makefile").read_text()
    target = re.search(r"^test-gpu:.*## (.+)$\n\t(.+)$", makefile, re.M)
    assert target and "tools.testing.gpu" in target.group(2)
    assert "test-gpu" in re.search(r"^\.PHONY:(.*(?:\\\n.*)*)", makefile, re.M).group(1)
