"""``make test-gpu``: the course on one CUDA machine in one command, within six minutes.

Three parts run one after another, each within its own time limit (180 + 60 + 90 = 330 s of a
360 s budget, the rest for starting and writing), so the command ends in time even if a part hangs:

1. ``notebooks``: strict nbval of every solution with ``COURSE_DEVICE=cuda``, so each
   notebook's ``device`` is the GPU and every stored output must reproduce there;
2. ``checks``: the self-check tests against the course's wrong and right answers
   (``tests/chNN/test_chNN_checks.py``) and the fuzz (``tests/test_checks_fuzz.py``);
3. ``bench``: a short ``make bench`` on CUDA (chapter 07's variants, CUDA rows).

It writes one JSON file (date, commit, torch and CUDA versions, the GPU, each part's counts and
seconds, what was not run and why) and prints what ran and what did not. A part stopped at its
limit counts the tests that finished (``tools.testing.tally``). Without CUDA it says so in one
sentence and exits 2; it exits 1 when anything failed or was cut short, 0 otherwise::

    python -m tools.testing.gpu [--out results/test-gpu] [--parts notebooks checks bench]

The limits are estimates from CPU timings, never measured on a GPU (none was lent). Measured on the
2-core CPU machine (2026-11-28, one torch thread, load 7 to 10), CPU-seconds per solution under
strict nbval, kernel and pytest start included: 01 11, 02 12, 03 13, 04 13, 05 19, 06 12, 07 21,
08 25, 09 14, 10 56, 11 19 (215 in all); the checks and the fuzz: 2,430 tests in 43 CPU-seconds,
chapter 08's file the longest (20 s). What scales: the notebooks' tensors are small, so a GPU
kernel launch costs about what the CPU operation does; only training and timing cells (08, 10, 07,
05) gain much. Taking each notebook at twice its CPU time plus 5 s for CUDA's start, chapter 10 is
about 120 s; on 8 workers (16 cores) with files handed out as workers free up, the part ends within
about 175 s even when chapter 10 starts last behind the next longest: limit 180. The checks compute
on the CPU there too: 43 s over 8 workers, but never less than chapter 08's 20 s plus the workers'
start: about 30 s, limit 60. The bench at one length (2048) does under 300 timed calls of a few ms;
its cost is starting CUDA and compiling FlexAttention (forward and backward, not measured here):
an estimated 25 to 55 s, limit 90. Expected in all: about 130 to 180 s.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tools.testing import tally

ROOT = Path(__file__).resolve().parents[2]
BUDGET_S = 360  # the six minutes on one H100
RESERVE_S = 15  # kept back for writing the result file and the summary
NBVAL = (
    "--nbval",
    "--nbval-current-env",
    "--nbval-sanitize-with",
    "tests/nbval_sanitize.cfg",
    "--nbval-cell-timeout",
    "120",
)  # the Makefile's NBVAL (tests/test_gpu_run.py keeps them equal)
BENCH_ARGS = ("--seq-lens", "2048", "--batch", "4", "--min-run-time", "0.1")
BENCH_ARGS += ("--max-rounds", "10", "--quiet")
NOT_COVERED = (
    (
        "a check's second device on the GPU",
        "the self-checks build and run every answer on the CPU by design and simulate the "
        "second device (Placement in course_utils/checks/_engine/watch.py); the checks part "
        "runs them on this machine, but no answer runs on CUDA inside a check",
    ),
    (
        "the other unit tests",
        "they do not depend on the device: make test runs them on the CPU",
    ),
    (
        "browser, nbgrader and Colab tests",
        "make test-browser, make test-nbgrader and make test-colab; none depends on CUDA",
    ),
    ("the long benchmark", "minutes on its own: make bench FULL=1"),
)


@dataclass(frozen=True)
class Part:
    name: str
    what: str
    limit_s: int


PARTS = (
    Part("notebooks", "strict nbval of every solution with COURSE_DEVICE=cuda", 180),
    Part(
        "checks", "the self-checks against the course's wrong and right answers, and the fuzz", 60
    ),
    Part("bench", "a short make bench on CUDA (chapter 07's variants, n = 2048)", 90),
)


def cuda_facts() -> dict | None:
    """The GPU and the versions, or None when torch sees no CUDA device."""
    import torch

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return {
        "gpu": torch.cuda.get_device_name(0),
        "gpu_memory_gib": round(props.total_memory / 2**30, 1),
        "gpus": torch.cuda.device_count(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }


def no_cuda_sentence() -> str:
    import torch

    return (
        f"CUDA is not available on this machine (torch {torch.__version__}: "
        "torch.cuda.is_available() is False), so make test-gpu ran nothing; run it on a machine "
        "with an NVIDIA GPU and a CUDA build of torch."
    )


def launch(argv: Sequence[str], env: dict, timeout: float, log: Path) -> tuple[int, bool]:
    """Run ``argv`` in the course's folder, output to ``log``; (exit status, stopped at the
    limit). A run past ``timeout`` is stopped with its whole process group (pytest's workers)."""
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(
            list(argv), cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        try:
            return proc.wait(timeout=timeout), False
        except subprocess.TimeoutExpired:
            for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, None)):
                try:
                    os.killpg(proc.pid, sig)
                    return proc.wait(timeout=grace), True
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    continue
            return proc.wait(), True


def git_commit() -> tuple[str, bool]:
    """(commit, whether the working tree has changes); ("unknown", False) outside git."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
        return head, bool(status.strip())
    except (OSError, subprocess.CalledProcessError):
        return "unknown", False


def workers(cores: int, files: int) -> tuple[int, int]:
    """(pytest-xdist workers, torch threads each): half the cores as workers, at most one per
    file, the cores shared out as threads (idle threads of a busy worker only spin)."""
    count = max(1, min(files, cores // 2))
    return count, max(1, cores // count)


def check_test_files() -> list[str]:
    files = sorted(
        p.relative_to(ROOT).as_posix() for p in ROOT.glob("tests/ch*/test_ch*_checks.py")
    )
    return [*files, "tests/test_checks_fuzz.py"]


def solution_files() -> list[str]:
    return sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("solutions/[0-9][0-9]_*.ipynb"))


def commands(out: Path, cores: int) -> dict[str, tuple[list[str], dict]]:
    """Each part's command line and the environment it adds."""
    python, pytest = (
        sys.executable,
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
    )
    pytest += ["-p", "tools.testing.tally"]
    notebooks, checks = solution_files(), check_test_files()
    nb_workers, nb_threads = workers(cores, len(notebooks))
    ck_workers, ck_threads = workers(cores, len(checks))
    return {
        "notebooks": (
            [*pytest, "-n", str(nb_workers), "--dist", "loadfile", *NBVAL, *notebooks],
            {"OMP_NUM_THREADS": str(nb_threads), "COURSE_TALLY": str(out / "notebooks.tally")},
        ),
        "checks": (
            [*pytest, "-n", str(ck_workers), "--dist", "loadfile", *checks],
            {"OMP_NUM_THREADS": str(ck_threads), "COURSE_TALLY": str(out / "checks.tally")},
        ),
        "bench": (
            [python, "-m", "tools.bench.cli", "--device", "cuda", "--out", str(out / "bench")]
            + list(BENCH_ARGS),
            {},
        ),
    }


def bench_counts(folder: Path) -> dict:
    """Rows of the bench's CSV by status: ok rows pass, wrong and error rows fail, others
    (unavailable, oom) were not measured."""
    try:
        with open(folder / "bench.csv", newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except FileNotFoundError:
        return {"passed": 0, "failed": 0, "skipped": 0, "not_measured": []}
    bad = [r for r in rows if r["status"] in ("wrong", "error")]
    skipped = [r for r in rows if r["status"] not in ("ok", "wrong", "error")]
    return {
        "passed": sum(r["status"] == "ok" for r in rows),
        "failed": len(bad),
        "skipped": len(skipped),
        "not_measured": sorted(
            {f"{r['variant']} ({r['status']}: {r.get('note', '')[:120]})" for r in skipped}
        ),
    }


def run_part(part: Part, argv, extra: dict, out: Path, limit: float, run: Callable, clock) -> dict:
    env = {**os.environ, "COURSE_DEVICE": "cuda", "OMP_WAIT_POLICY": "PASSIVE", **extra}
    log = out / f"{part.name}.log"
    start = clock()
    code, stopped = run(argv, env, limit, log)
    seconds = round(clock() - start, 1)
    if part.name == "bench":
        counts = bench_counts(out / "bench")
    else:
        counts = tally.read(out / f"{part.name}.tally")
    ok = code == 0 and not stopped and counts["failed"] == 0 and counts["passed"] > 0
    return {
        "what": part.what,
        "command": " ".join(Path(a).name if a == sys.executable else a for a in argv),
        "limit_s": round(limit),
        "seconds": seconds,
        "returncode": code,
        "stopped_at_limit": stopped,
        **counts,
        "ok": ok,
        "log": str(log),
    }


def _say(line: str = "") -> None:
    print(line, flush=True)


def main(
    argv: Sequence[str] | None = None,
    *,
    facts: Callable[[], dict | None] = cuda_facts,
    run: Callable = launch,
    cores: int | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """The command; ``facts``, ``run``, ``cores`` and ``clock`` are replaced by the tests (a
    machine that pretends to have CUDA, parts that pretend to run, time that passes at will)."""
    p = argparse.ArgumentParser(prog="python -m tools.testing.gpu", description=__doc__)
    p.add_argument("--out", type=Path, default=ROOT / "results" / "test-gpu")
    p.add_argument("--parts", nargs="+", choices=[x.name for x in PARTS], default=None)
    args = p.parse_args(argv)
    machine = facts()
    if machine is None:
        _say(no_cuda_sentence())
        return 2
    began, cores = clock(), cores or os.cpu_count() or 1
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    commit, dirty = git_commit()
    wanted = args.parts or [x.name for x in PARTS]
    _say(
        f"make test-gpu on {machine['gpu']} ({machine['gpu_memory_gib']} GiB), torch "
        f"{machine['torch']}, CUDA {machine['cuda']}, {cores} cores, commit {commit[:10]}"
        f"{' with local changes' if dirty else ''}; budget {BUDGET_S} s"
    )
    lines = commands(out, cores)
    parts, not_run = {}, [{"what": what, "why": why} for what, why in NOT_COVERED]
    for part in PARTS:
        if part.name not in wanted:
            not_run.append({"what": part.what, "why": "not asked for (--parts)"})
            continue
        left = BUDGET_S - RESERVE_S - (clock() - began)
        limit = min(part.limit_s, left)
        if limit < 15:
            not_run.append({"what": part.what, "why": f"the {BUDGET_S} s budget was spent"})
            continue
        _say(f"-> {part.name}: {part.what} (limit {limit:.0f} s) ...")
        parts[part.name] = result = run_part(part, *lines[part.name], out, limit, run, clock)
        _say(
            f"   {'ok' if result['ok'] else 'FAILED'}: {result['passed']} passed, "
            f"{result['failed']} failed, {result['skipped']} skipped in {result['seconds']} s"
            + (
                " (stopped at its limit: the counts are of what finished)"
                if result["stopped_at_limit"]
                else ""
            )
        )
        if result["stopped_at_limit"]:
            not_run.append(
                {"what": f"the rest of {part.name}", "why": f"stopped at its {limit:.0f} s limit"}
            )
        for row in result.get("not_measured", []):
            not_run.append({"what": f"bench row {row}", "why": "the bench could not measure it"})
    everything = bool(parts) and all(r["ok"] for r in parts.values())
    report = {
        "command": "make test-gpu",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit,
        "local_changes": dirty,
        **machine,
        "cores": cores,
        "budget_s": BUDGET_S,
        "seconds": round(clock() - began, 1),
        "parts": parts,
        "not_run": not_run,
        "passed": everything and set(parts) == set(wanted),
    }
    path = out / "test-gpu.json"
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    _say()
    _say("Ran:")
    for name, r in parts.items():
        _say(f"  {name:10} {'ok' if r['ok'] else 'FAILED':6} {r['what']} ({r['seconds']} s)")
    _say("Not run:")
    for item in not_run:
        _say(f"  {item['what']}: {item['why']}")
    verdict = "PASSED" if report["passed"] else "NOT PASSED"
    _say(f"{verdict} in {report['seconds']} s; wrote {path} (logs beside it)")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
