"""``make bench``: check, time and measure chapter 07's attention variants, and put them on a roofline.

Instructor machinery (students never import it). The measuring tools are ``cu.bench``
(course_utils/chapters/ch07/bench.py, what chapter 07 uses). This file is the command line: ``tools/bench/sweep.py`` checks every
variant at every length and mode before it is timed (a wrong one is never timed),
``tools/bench/rounds.py`` times the checked ones in interleaved rounds and decides what their
spreads can rank, ``tools/bench/report.py`` writes the CSV, the tables and the plots::

    python -m tools.bench.cli [--full] [--out results] [--device cpu|cuda] [--seq-lens 128 256]
                          [--batch 4] [--dtype bfloat16] [--threads 2] [--variants split ...]
    python -m tools.bench.cli --compare results/run1/bench.csv results/run2/bench.csv

It measures the machine's ceilings (matmul peak, copy bandwidth) once, then every variant at
every length and mode, and writes ``bench.csv``, ``bench.md`` (tables and rankings),
``bench.png`` (time and memory against the length) and ``roofline.png`` to ``--out``.
``--compare`` reads two such CSVs and lists where their rankings agree or contradict.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import torch

from course_utils import bench
from course_utils.validation import CourseInputError
from tools.bench import report, rounds
from tools.bench.sweep import BUILDERS, MODES, BenchConfig, device_name, run_benchmark

RESULTS_DIR = Path(__file__).resolve().parents[2] / "results"
FEW_CORES = 4  # below this many cores, make bench runs one thread


def default_threads(device: str, cores: int | None = None) -> tuple[int | None, str]:
    """``make bench``'s thread count (None: torch's own) and the reason, for the header."""
    cores = rounds.usable_cores() if cores is None else cores
    if device != "cpu":
        return None, ""
    if cores < FEW_CORES:
        return 1, (
            f"the default on a CPU with fewer than {FEW_CORES} cores (this one has "
            f"{cores}): with a thread on every core each operation waits for its slowest thread, "
            "and any other busy process stalls one of them, so the times jump with the load; "
            "one thread leaves a core to the rest. --threads N changes it"
        )
    return None, f"torch's default on {cores} cores"


# ----------------------------------------------------------------------------- command line
def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def quick_config(device: str | None = None) -> BenchConfig:
    """``make bench``: a few minutes on a laptop CPU, seconds on a GPU."""
    device = device or default_device()
    if device == "cuda":
        return BenchConfig(seq_lens=(128, 256, 512, 1024, 2048, 4096), batch=8, device=device)
    return BenchConfig(device=device, threads=default_threads(device)[0])


def full_config(device: str | None = None) -> BenchConfig:
    """``make bench FULL=1``: longer sequences and more rounds."""
    device = device or default_device()
    top = 13 if device == "cuda" else 12
    return replace(
        quick_config(device),
        seq_lens=tuple(2**k for k in range(7, top + 1)),
        min_run_time=2.0,
        min_rounds=9,
        max_rounds=50,
        warmup=2,
    )


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m tools.bench.cli",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--full", action="store_true", help="longer sequences and more rounds")
    p.add_argument("--out", type=Path, default=RESULTS_DIR, help="folder for the results")
    p.add_argument("--device", choices=("cpu", "cuda", "mps"), default=None)
    p.add_argument("--seq-lens", type=int, nargs="+", default=None)
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--d-model", type=int, default=None)
    p.add_argument("--heads", type=int, default=None)
    p.add_argument("--dtype", choices=tuple(bench.DTYPES), default=None)
    p.add_argument("--modes", choices=MODES, nargs="+", default=None)
    p.add_argument("--variants", nargs="+", default=None, help=f"any of: {', '.join(BUILDERS)}")
    p.add_argument(
        "--min-run-time", type=float, default=None, help="timed seconds per variant, length, mode"
    )
    p.add_argument("--min-rounds", type=int, default=None, help="interleaved rounds, at least")
    p.add_argument("--max-rounds", type=int, default=None, help="interleaved rounds, at most")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: see output)")
    p.add_argument("--qkv-bias", action="store_true")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory runs")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument(
        "--compare", type=Path, nargs=2, metavar="CSV", help="compare two runs' rankings"
    )
    p.add_argument(
        "--record",
        action="store_true",
        help="write the result rows into docs/results/ (make bench)",
    )
    return p.parse_args(argv)


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    cfg = (full_config if args.full else quick_config)(args.device)
    overrides = {
        "seq_lens": tuple(args.seq_lens) if args.seq_lens else None,
        "batch": args.batch,
        "d_model": args.d_model,
        "num_heads": args.heads,
        "dtype": args.dtype,
        "modes": tuple(args.modes) if args.modes else None,
        "variants": tuple(args.variants) if args.variants else None,
        "min_run_time": args.min_run_time,
        "min_rounds": args.min_rounds,
        "max_rounds": args.max_rounds,
        "threads": args.threads,
        "qkv_bias": args.qkv_bias or None,
        "memory": False if args.no_memory else None,
    }
    if args.min_rounds and not args.max_rounds:
        overrides["max_rounds"] = max(cfg.max_rounds, args.min_rounds)
    return replace(cfg, **{k: v for k, v in overrides.items() if v is not None}).validate()


def header(cfg: BenchConfig, chosen: bool = False) -> list[str]:
    """What every run records about the machine and its load before it starts (``chosen``:
    the thread count was given, not the default)."""
    threads = cfg.threads or torch.get_num_threads()
    why = "" if chosen else default_threads(cfg.device)[1]
    load = ", ".join(f"{v:.2f}" for v in rounds.load_average())
    return [
        f"Machine: {device_name(cfg.device)}, {rounds.usable_cores()} usable cores, "
        f"torch {torch.__version__}",
        f"Threads: {threads}" + (f" ({why})" if why else " (set with --threads)"),
        f"Load average at the start: {load} (1, 5, 15 min)",
        f"Timing: {cfg.min_rounds} to {cfg.max_rounds} interleaved rounds per length and mode "
        f"(every variant once per round), until each variant had {cfg.min_run_time} s; "
        f"figures: median [interquartile range] of the rounds",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.compare:
        text, contradictions = report.compare_runs(*args.compare)
        print(text)
        if args.record:
            from tools.site import results

            results.record_compare(*map(str, args.compare))
        return 1 if contradictions else 0
    try:
        cfg = config_from_args(args)
    except CourseInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    start, load_at_start = time.perf_counter(), rounds.load_average()[0]
    notes = header(cfg, chosen=args.threads is not None)
    print("\n".join(notes), flush=True)
    ceilings = bench.measure_ceilings(cfg.device, dtype=cfg.dtype, threads=cfg.threads)
    print(f"Ceilings: {ceilings}")
    print(
        f"Benchmarking {len(cfg.variants)} variants ({cfg.dtype}, batch {cfg.batch}, d={cfg.d_model}, "
        f"{cfg.num_heads} heads, n={list(cfg.seq_lens)})",
        flush=True,
    )
    rows = run_benchmark(cfg, ceilings=ceilings, progress=not args.quiet, sample=None)
    notes.append(f"Load average at the end: {', '.join(f'{v:.2f}' for v in rounds.load_average())}")
    out = args.out
    csv_path = report.write_csv(rows, out / "bench.csv")
    report.plot_results(rows).savefig(out / "bench.png", dpi=120)
    bench.plot_roofline(report.roofline_points(rows), ceilings).savefig(
        out / "roofline.png", dpi=120
    )
    (out / "bench.md").write_text(report.markdown_report(rows, ceilings, notes), encoding="utf-8")
    print(report.summary(rows, notes[-1]))
    for r in rows:
        if r.status != "ok" and r.mode == cfg.modes[0]:
            print(f"  n={r.seq_len} {r.variant}: {r.status} ({r.note})")
    if args.record:
        from tools.site import results

        results.record_bench(rows, device_name(cfg.device), load_at_start)
    print(
        f"Wrote {csv_path}, bench.md (every table), bench.png and roofline.png in {out} "
        f"({time.perf_counter() - start:.0f} s)."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
