"""``make bench``: check, time and measure chapter 07's attention variants, and put them on a roofline.

Instructor machinery (students never import it). The measuring itself is
``course_utils.bench``; this file adds the command line, the CSV, the tables and the plots::

    python -m tools.bench [--full] [--out results] [--device cpu|cuda] [--seq-lens 128 256]
                          [--batch 4] [--dtype bfloat16] [--threads 2] [--variants split ...]

It measures the machine's ceilings (matmul peak, copy bandwidth) once, then every variant at
every length and mode, and writes ``bench.csv``, ``bench.md`` (tables), ``bench.png`` (time
and memory against the length) and ``roofline.png`` to ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, fields, replace
from pathlib import Path

import torch

from course_utils import bench
from course_utils.bench import MODES, BenchConfig, BenchRow
from course_utils.validation import CourseInputError

RESULTS_DIR = Path(__file__).resolve().parent.parent / "results"
CSV_COLUMNS = tuple(f.name for f in fields(BenchRow))


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def quick_config(device: str | None = None) -> BenchConfig:
    """``make bench``: a few minutes on a laptop CPU, seconds on a GPU."""
    device = device or default_device()
    if device == "cuda":
        return BenchConfig(seq_lens=(128, 256, 512, 1024, 2048, 4096), batch=8, device=device)
    return BenchConfig(device=device)


def full_config(device: str | None = None) -> BenchConfig:
    """``make bench FULL=1``: longer sequences and longer timing."""
    device = device or default_device()
    top = 13 if device == "cuda" else 12
    return replace(quick_config(device), seq_lens=tuple(2**k for k in range(7, top + 1)), min_run_time=1.0,
                   min_runs=5, warmup=2)


def write_csv(rows: Sequence[BenchRow], path: str | os.PathLike) -> Path:
    """Write the rows to ``path`` (folders are created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(asdict(r) for r in rows)
    return path


def read_csv(path: str | os.PathLike) -> list[BenchRow]:
    """Read a ``bench.csv`` written by :func:`write_csv`."""
    path = Path(path)
    if not path.is_file():
        raise CourseInputError(f"no benchmark results at {path}: run `make bench` first.")
    kinds = {f.name: f.type for f in fields(BenchRow)}
    rows = []
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in ("variant", "mode", "seq_len", "status", "median_ms") if c not in (reader.fieldnames or [])]
        if missing:
            raise CourseInputError(f"{path} is not a benchmark CSV: columns {missing} are missing.")
        for line, record in enumerate(reader, start=2):
            values = {}
            for key, text in record.items():
                if key in kinds:
                    try:
                        kind = kinds[key]
                        values[key] = (int(text) if kind == "int" else float(text or "nan") if kind == "float"
                                       else text or "")
                    except ValueError:
                        raise CourseInputError(f"{path}, line {line}: {key}={text!r} is not a number.") from None
            values.setdefault("label", bench.LABELS.get(values["variant"], values["variant"]))
            rows.append(BenchRow(**values))
    return rows


def plot_results(rows: Sequence[BenchRow]):
    """Median time (bars: interquartile range) and peak memory against the sequence length, one
    column per mode; variants that were not timed are left out. Returns the figure."""
    import matplotlib.pyplot as plt

    rows = bench._nonempty(rows)
    modes = [m for m in MODES if any(r.mode == m for r in rows)]
    fig, axes = plt.subplots(2, len(modes), figsize=(5.5 * len(modes), 7), squeeze=False, sharex=True,
                             layout="constrained")
    plt.close(fig)
    for col, mode in enumerate(modes):
        t_ax, m_ax = axes[:, col]
        for i, (name, ok) in enumerate(bench._timed(rows, mode).items()):
            xs, style = [r.seq_len for r in ok], dict(fmt=bench.STYLES.get(name, "o-"), color=f"C{i % 10}", ms=4)
            t_ax.errorbar(xs, [r.median_ms for r in ok], yerr=[[r.iqr_ms / 2 for r in ok]] * 2, capsize=2,
                          label=ok[0].label, **style)
            mem = [(r.seq_len, max(r.peak_mib, 1e-3)) for r in ok if not math.isnan(r.peak_mib)]
            if mem:
                m_ax.plot(*zip(*mem), style["fmt"], color=style["color"], ms=4)
        t_ax.set(title=mode, ylabel="median time (ms)")
        m_ax.set(xlabel="sequence length n", ylabel="peak extra memory (MiB)")
        for ax in (t_ax, m_ax):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
    axes[0, 0].legend(fontsize=7)
    first = rows[0]
    fig.suptitle(f"{first.device_name} · torch {first.torch_version} · {first.dtype} · batch {first.batch}, "
                 f"d={first.d_model}, {first.num_heads} heads", fontsize=9)
    return fig


TABLE_METRICS = {
    "median_ms": "median time (ms)", "iqr_ms": "interquartile range of the time (ms)",
    "peak_mib": "peak extra memory (MiB)", "gflop": "GFLOP per call (dense, counted from the shapes)",
    "gflops": "achieved GFLOP/s", "share_of_peak": "share of the measured matmul peak",
    "mbytes": "MB moved per call (byte model, from the shapes)",
    "score_mbytes": "MB of it on the score path ((b, h, n, n) passes and mask)",
    "intensity": "arithmetic intensity (FLOP per byte of the model)",
}
SHAPE_METRICS = ("gflop", "mbytes", "score_mbytes", "intensity")
"""Counted from the shapes: shown for every variant, timed or not."""


def _cell(row: BenchRow | None, metric: str) -> str:
    if row is None:
        return ""
    value = getattr(row, metric)
    if (row.status != "ok" and metric not in SHAPE_METRICS) or math.isnan(value):
        return row.status if row.status != "ok" else "n/a"
    if metric == "share_of_peak":
        return f"{value:.0%}"
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}" if value >= 1 else f"{value:.2f}"


def markdown_table(rows: Sequence[BenchRow], mode: str = "forward", metric: str = "median_ms") -> str:
    """One metric (a key of ``TABLE_METRICS``) per variant and length, as a Markdown table;
    a variant that was not timed shows its status (``wrong``, ``unavailable``, ...)."""
    if metric not in TABLE_METRICS:
        raise CourseInputError(f"metric must be one of {', '.join(TABLE_METRICS)}, but got {metric!r}.")
    chosen = [r for r in rows if r.mode == mode]
    if not chosen:
        return f"(no {mode} results)"
    lens = sorted({r.seq_len for r in chosen})
    cells = {(r.variant, r.seq_len): r for r in chosen}
    lines = ["| variant | " + " | ".join(f"n={n}" for n in lens) + " |", "|---|" + "---:|" * len(lens)]
    for name, label in dict((r.variant, r.label) for r in chosen).items():
        lines.append(f"| {label} | " + " | ".join(_cell(cells.get((name, n)), metric) for n in lens) + " |")
    return "\n".join(lines)


def markdown_report(rows: Sequence[BenchRow], ceilings: bench.Ceilings | None = None) -> str:
    """Every table (per mode: time, spread, memory, GFLOP/s, share of the peak) under a header
    naming the machine and its measured ceilings."""
    rows = bench._nonempty(rows)
    first = rows[0]
    parts = [f"Machine: {first.device_name} ({first.device}), torch {first.torch_version}, {first.dtype}, "
             f"batch {first.batch}, d={first.d_model}, {first.num_heads} heads."]
    if ceilings:
        parts.append(f"Measured ceilings: {ceilings}.")
    for mode in MODES:
        for metric, title in TABLE_METRICS.items():
            values = [getattr(r, metric) for r in rows if r.mode == mode]
            if values and not all(math.isnan(v) for v in values):
                parts.append(f"### {mode}: {title}\n\n{markdown_table(rows, mode, metric)}")
    return "\n\n".join(parts) + "\n"


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--full", action="store_true", help="longer sequences and longer timing")
    p.add_argument("--out", type=Path, default=RESULTS_DIR, help="folder for the results")
    p.add_argument("--device", choices=("cpu", "cuda", "mps"), default=None)
    p.add_argument("--seq-lens", type=int, nargs="+", default=None)
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--d-model", type=int, default=None)
    p.add_argument("--heads", type=int, default=None)
    p.add_argument("--dtype", choices=tuple(bench.DTYPES), default=None)
    p.add_argument("--modes", choices=MODES, nargs="+", default=None)
    p.add_argument("--variants", nargs="+", default=None, help=f"any of: {', '.join(bench.BUILDERS)}")
    p.add_argument("--min-run-time", type=float, default=None, help="seconds of timed runs per measurement")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's)")
    p.add_argument("--qkv-bias", action="store_true")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory runs")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p.parse_args(argv)


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    cfg = (full_config if args.full else quick_config)(args.device)
    overrides = {"seq_lens": tuple(args.seq_lens) if args.seq_lens else None, "batch": args.batch,
                 "d_model": args.d_model, "num_heads": args.heads, "dtype": args.dtype,
                 "modes": tuple(args.modes) if args.modes else None,
                 "variants": tuple(args.variants) if args.variants else None,
                 "min_run_time": args.min_run_time, "threads": args.threads,
                 "qkv_bias": args.qkv_bias or None, "memory": False if args.no_memory else None}
    return replace(cfg, **{k: v for k, v in overrides.items() if v is not None}).validate()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    try:
        cfg = config_from_args(args)
    except CourseInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    ceilings = bench.measure_ceilings(cfg.device, dtype=cfg.dtype, threads=cfg.threads)
    print(f"Machine: {bench.device_name(cfg.device)}, torch {torch.__version__}\nCeilings: {ceilings}")
    print(f"Benchmarking {len(cfg.variants)} variants ({cfg.dtype}, batch {cfg.batch}, d={cfg.d_model}, "
          f"{cfg.num_heads} heads, n={list(cfg.seq_lens)}, at least {cfg.min_run_time} s per measurement)",
          flush=True)
    rows = bench.run_benchmark(cfg, ceilings=ceilings, progress=not args.quiet)
    out = args.out
    csv_path = write_csv(rows, out / "bench.csv")
    plot_results(rows).savefig(out / "bench.png", dpi=120)
    bench.plot_roofline(rows).savefig(out / "roofline.png", dpi=120)
    report = markdown_report(rows, ceilings)
    (out / "bench.md").write_text(report, encoding="utf-8")
    print(report)
    for r in rows:
        if r.status != "ok" and r.mode == cfg.modes[0]:
            print(f"  n={r.seq_len} {r.variant}: {r.status} ({r.note})")
    print(f"Wrote {csv_path}, bench.md, bench.png and roofline.png in {out} "
          f"({time.perf_counter() - start:.0f} s).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
