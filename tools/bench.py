"""``make bench``: check, time and measure chapter 07's attention variants, and put them on a roofline.

Instructor machinery (students never import it). The measuring tools are ``cu.bench`` (course_utils/chapters/ch07/bench.py)
(what chapter 07 uses); this file adds the sweep over variants, lengths and modes (every
variant is checked at every length before it is timed; a wrong one is never timed), the
command line, the CSV, the tables and the plots::

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
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import torch
from torch import nn

from course_utils import bench, chapters
from course_utils.validation import CourseInputError, expect_int

RESULTS_DIR = Path(__file__).resolve().parent.parent / "results"
MODES = ("forward", "forward+backward")
BUILDERS = {
    **chapters.VARIANTS,
    "sdpa_inverted_mask": chapters.SDPAInvertedMaskAttention,
}  # + a wrong one
DEFAULT_VARIANTS = tuple(chapters.VARIANTS)


def flex_unavailable_reason(device: torch.device | str) -> str | None:
    """Why FlexAttention cannot run here (None when it can)."""
    if tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 5):
        return f"FlexAttention needs torch 2.5 or newer (this is {torch.__version__})"
    if torch.device(device).type == "mps":
        return "FlexAttention is not compiled for MPS"
    return None


# ----------------------------------------------------------------------------- the benchmark
@dataclass(frozen=True)
class BenchConfig:
    """What to measure (the defaults are ``make bench``'s quick run on a CPU)."""

    seq_lens: tuple[int, ...] = (128, 256, 512, 1024)
    batch: int = 1
    d_model: int = 768
    num_heads: int = 12
    qkv_bias: bool = False
    dtype: str = "float32"
    modes: tuple[str, ...] = MODES
    variants: tuple[str, ...] = DEFAULT_VARIANTS
    warmup: int = 1
    min_run_time: float = 0.2
    min_runs: int = 3
    device: str = "cpu"
    memory: bool = True
    seed: int = 123
    threads: int | None = None

    def validate(self) -> BenchConfig:
        """The config with normalised fields, or :class:`CourseInputError` naming the bad one."""
        lens = self.seq_lens
        if isinstance(lens, int) or not isinstance(lens, Sequence) or not lens:
            raise CourseInputError(f"seq_lens must be a non-empty list of ints, but got {lens!r}.")
        for n in lens:
            expect_int(n, "each sequence length", minimum=1)
        for name in ("batch", "d_model", "num_heads", "min_runs", "warmup", "threads"):
            if name != "threads" or self.threads is not None:
                expect_int(getattr(self, name), name, minimum=0 if name == "warmup" else 1)
        modes, variants = (
            (v,) if isinstance(v, str) else tuple(v) for v in (self.modes, self.variants)
        )
        for bad, message in (
            (
                self.d_model % self.num_heads,
                f"d_model must be divisible by num_heads, but d_model="
                f"{self.d_model} and num_heads={self.num_heads}.",
            ),
            (
                self.dtype not in bench.DTYPES,
                f"dtype must be one of {', '.join(bench.DTYPES)}, but got {self.dtype!r}.",
            ),
            (
                not modes or set(modes) - set(MODES),
                f"modes must be taken from {MODES}, but got {self.modes!r}.",
            ),
            (
                not variants or set(variants) - set(BUILDERS),
                f"variants must name at least one variant, and only "
                f"known ones, but got {self.variants!r}; the known variants are: {', '.join(BUILDERS)}.",
            ),
            (
                not self.min_run_time > 0,
                f"min_run_time must be a positive number of seconds, got {self.min_run_time!r}.",
            ),
            (
                self.device not in ("cpu", "cuda", "mps"),
                f"device must be 'cpu', 'cuda' or 'mps', but got {self.device!r}.",
            ),
            (
                self.device == "cuda" and not torch.cuda.is_available(),
                "device 'cuda' was requested, but CUDA is not available here.",
            ),
        ):
            if bad:
                raise CourseInputError(message)
        return replace(self, seq_lens=tuple(sorted(set(lens))), modes=modes, variants=variants)


@dataclass
class BenchRow:
    """One line of ``bench.csv``. ``status``: ok (checked, then timed), wrong (never timed),
    unavailable, oom or error. From the shapes, on every row: ``gflop`` (dense work, x3 with the
    backward pass); forward only, the chapter's byte model: ``mbytes`` in all, ``score_mbytes`` of
    the score path, ``intensity``. Measured, on timed rows: the time, ``gflops``, ``share_of_peak``."""

    variant: str
    label: str
    mode: str
    seq_len: int
    status: str
    median_ms: float = math.nan
    iqr_ms: float = math.nan
    runs: int = 0
    peak_mib: float = math.nan
    gflop: float = math.nan
    gflops: float = math.nan
    mbytes: float = math.nan
    score_mbytes: float = math.nan
    intensity: float = math.nan
    share_of_peak: float = math.nan
    peak_gflops: float = math.nan
    copy_gbs: float = math.nan
    check_error: float = math.nan
    batch: int = 1
    d_model: int = 768
    num_heads: int = 12
    dtype: str = "float32"
    device: str = "cpu"
    device_name: str = ""
    threads: int = 0
    torch_version: str = torch.__version__
    note: str = ""


def device_name(device: str) -> str:
    """The GPU's name, or the CPU's architecture and thread count."""
    if device == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return f"{platform.processor() or platform.machine()} CPU, {torch.get_num_threads()} threads"


def _is_oom(exc: BaseException) -> bool:
    text = str(exc).lower()
    return (
        isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError))
        or "out of memory" in text
        or "can't allocate memory" in text
    )


def _counts(row: BenchRow) -> None:
    """Fill in the row's FLOPs and bytes, counted from its shapes."""
    b, h, n, d = row.batch, row.num_heads, row.seq_len, row.d_model
    row.gflop = (
        sum(chapters.attention_flops(b, n, d, d)) / 1e9 * (1 if row.mode == "forward" else 3)
    )
    if row.mode == "forward" and row.variant in chapters.VARIANTS:
        size = torch.finfo(bench.DTYPES[row.dtype]).bits // 8
        row.mbytes = chapters.moved_bytes(row.variant, b, h, n, d, d, size) / 1e6
        row.score_mbytes = (
            chapters.SCORE_PASSES[row.variant] * chapters.score_bytes(b, h, n, size) / 1e6
        )
        row.score_mbytes += (
            n * n / 1e6 if row.variant == "sdpa_mask" else 0.0
        )  # its bool mask, read once
        row.intensity = row.gflop * 1e3 / row.mbytes


def _runner(module: nn.Module, x: torch.Tensor, g: torch.Tensor, mode: str) -> Callable[[], object]:
    """A forward pass under no_grad, or a forward pass plus the gradients of the input and
    of every parameter (without accumulating into ``.grad``)."""
    if mode == "forward":
        return torch.no_grad()(lambda: module(x))
    params = [p for p in module.parameters() if p.requires_grad]
    xg = x.detach().requires_grad_(True)
    return lambda: torch.autograd.grad(module(xg), [xg, *params], g)


def _build(name: str, reference: nn.Module, device: torch.device, dtype: torch.dtype):
    if name == "flex" and flex_unavailable_reason(device):
        return None, flex_unavailable_reason(device)
    try:
        return BUILDERS[name](reference).to(device=device, dtype=dtype).eval(), ""
    except ValueError as exc:  # e.g. nn.MultiheadAttention needs d_in == d_out
        return None, str(exc)


def run_benchmark(
    config: BenchConfig | None = None,
    *,
    ceilings: bench.Ceilings | None = None,
    progress: bool = False,
) -> list[BenchRow]:
    """Check, then time, every variant at every length and mode; one row each.

    At each length every variant is checked against the reference on the batch's first
    sequence; only those that match are timed (then, if ``config.memory``, measured once
    more for memory). Running out of memory is reported as ``oom`` and the sweep goes on.
    float32 means IEEE float32 here (no TF32). With ``ceilings``, every row carries them and
    its share of the matmul peak."""
    cfg = (config or BenchConfig()).validate()
    device, dtype = torch.device(cfg.device), bench.DTYPES[cfg.dtype]
    kept = torch.get_num_threads(), torch.get_float32_matmul_precision()
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    torch.set_float32_matmul_precision("highest")
    try:
        reference = bench.make_reference(
            cfg.d_model, cfg.num_heads, max(cfg.seq_lens), qkv_bias=cfg.qkv_bias, seed=cfg.seed
        )
        modules = {name: _build(name, reference, device, dtype) for name in cfg.variants}
        reference = reference.to(device)
        common = dict(
            batch=cfg.batch,
            d_model=cfg.d_model,
            num_heads=cfg.num_heads,
            dtype=cfg.dtype,
            device=cfg.device,
            device_name=device_name(cfg.device),
            threads=torch.get_num_threads(),
        )
        if ceilings:
            common.update(peak_gflops=ceilings.matmul_gflops, copy_gbs=ceilings.copy_gbs)
        gen = torch.Generator().manual_seed(cfg.seed + 1)
        rows = []
        for n in cfg.seq_lens:
            if modules.get("flex", (None,))[0] is not None:
                torch.compiler.reset()  # FlexAttention compiles once per length: stay under dynamo's limit
            x32 = torch.randn(cfg.batch, n, cfg.d_model, generator=gen)  # (b, n, d)
            g32 = torch.randn(cfg.batch, n, cfg.d_model, generator=gen)  # (b, n, d)
            x, g = x32.to(device, dtype), g32.to(device, dtype)
            verdicts = _check_all(
                modules, reference, x32[:1].to(device), g32[:1].to(device), x[:1], g[:1]
            )
            for mode in cfg.modes:
                for name in cfg.variants:
                    status, note, err = verdicts.get((name, mode), verdicts[name])
                    row = BenchRow(
                        name,
                        bench.LABELS.get(name, name),
                        mode,
                        n,
                        status,
                        check_error=err,
                        note=note,
                        **common,
                    )
                    _counts(row)
                    if status == "ok":
                        _measure(row, modules[name][0], x, g, cfg, device)
                    rows.append(row)
                    if progress:
                        print(
                            f"n={n:<5} {mode:<16} {name:<18} {row.status:<5} {row.median_ms:10.2f} ms "
                            f"{row.gflops:8.1f} GFLOP/s",
                            flush=True,
                        )
        return rows
    finally:
        torch.set_num_threads(kept[0])
        torch.set_float32_matmul_precision(kept[1])


def _check_all(modules, reference, x32, g32, x, g) -> dict:
    try:
        expected = bench.expected_results(reference, x32, g32)
    except Exception as exc:  # noqa: BLE001 - only running out of memory is expected here
        if not _is_oom(exc):
            raise
        return {
            name: ("oom", "the reference itself did not fit in memory: not checked", math.nan)
            for name in modules
        }
    verdicts = {}
    for name, (module, reason) in modules.items():
        if module is None:
            verdicts[name] = ("unavailable", reason, math.nan)
            continue
        try:
            try:
                check = bench.compare_to_expected(module, x, g, *expected)
            except NotImplementedError as exc:  # FlexAttention on a CPU: forward only
                check = bench.compare_to_expected(module, x, g, *expected, backward=False)
                verdicts[name, "forward+backward"] = ("unavailable", f"{exc}"[:200], math.nan)
        except Exception as exc:  # noqa: BLE001 - reported in the CSV, never timed
            status = "oom" if _is_oom(exc) else "error"
            verdicts[name] = (
                status,
                f"the check could not run: {type(exc).__name__}: {exc}"[:300],
                math.nan,
            )
            continue
        verdicts[name] = (
            ("ok", "", check.error)
            if check.ok
            else ("wrong", check.detail + "; not timed", check.error)
        )
    return verdicts


def _measure(
    row: BenchRow,
    module: nn.Module,
    x: torch.Tensor,
    g: torch.Tensor,
    cfg: BenchConfig,
    device: torch.device,
) -> None:
    run = _runner(module, x, g, row.mode)
    try:
        timing = bench.measure_time(
            run, device, warmup=cfg.warmup, min_run_time=cfg.min_run_time, min_runs=cfg.min_runs
        )
        if cfg.memory:
            row.peak_mib = bench.measure_peak_memory(run, device) / 2**20
    except Exception as exc:  # noqa: BLE001 - reported in the CSV
        row.status, row.note = (
            ("oom" if _is_oom(exc) else "error"),
            f"{type(exc).__name__}: {exc}"[:300],
        )
        if device.type == "cuda":
            torch.cuda.empty_cache()
        return
    row.median_ms, row.iqr_ms, row.runs = timing.median_ms, timing.iqr_ms, timing.runs
    row.gflops = row.gflop / (row.median_ms / 1e3)
    row.share_of_peak = row.gflops / row.peak_gflops


CSV_COLUMNS = tuple(f.name for f in fields(BenchRow))


# ----------------------------------------------------------------------------- results


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
    return replace(
        quick_config(device),
        seq_lens=tuple(2**k for k in range(7, top + 1)),
        min_run_time=1.0,
        min_runs=5,
        warmup=2,
    )


def write_csv(rows: Sequence[BenchRow], path: str | os.PathLike) -> Path:
    """Write the rows to ``path`` (folders are created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(asdict(r) for r in rows)
    return path


def _timed(rows: Sequence[BenchRow], mode: str) -> dict[str, list[BenchRow]]:
    """The timed rows of ``mode`` by variant, each list sorted by length."""
    out: dict[str, list[BenchRow]] = {}
    for r in sorted(rows, key=lambda r: r.seq_len):
        if r.mode == mode and r.status == "ok":
            out.setdefault(r.variant, []).append(r)
    return out


def roofline_points(rows: Sequence[BenchRow]) -> list[bench.RooflinePoint]:
    """The timed forward passes that have a byte model, as points for ``bench.plot_roofline``."""
    return [
        bench.RooflinePoint(r.variant, r.seq_len, r.intensity, r.gflops)
        for ok in _timed(rows, "forward").values()
        for r in ok
        if not math.isnan(r.intensity)
    ]


def plot_results(rows: Sequence[BenchRow]):
    """Median time (bars: interquartile range) and peak memory against the sequence length, one
    column per mode; variants that were not timed are left out. Returns the figure."""
    import matplotlib.pyplot as plt

    rows = bench.nonempty(rows)
    modes = [m for m in MODES if any(r.mode == m for r in rows)]
    fig, axes = plt.subplots(
        2,
        len(modes),
        figsize=(5.5 * len(modes), 7),
        squeeze=False,
        sharex=True,
        layout="constrained",
    )
    plt.close(fig)
    for col, mode in enumerate(modes):
        t_ax, m_ax = axes[:, col]
        for i, (name, ok) in enumerate(_timed(rows, mode).items()):
            xs, style = (
                [r.seq_len for r in ok],
                dict(fmt=bench.STYLES.get(name, "o-"), color=f"C{i % 10}", ms=4),
            )
            t_ax.errorbar(
                xs,
                [r.median_ms for r in ok],
                yerr=[[r.iqr_ms / 2 for r in ok]] * 2,
                capsize=2,
                label=ok[0].label,
                **style,
            )
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
    fig.suptitle(
        f"{first.device_name} · torch {first.torch_version} · {first.dtype} · batch {first.batch}, "
        f"d={first.d_model}, {first.num_heads} heads",
        fontsize=9,
    )
    return fig


TABLE_METRICS = {
    "median_ms": "median time (ms)",
    "iqr_ms": "interquartile range of the time (ms)",
    "peak_mib": "peak extra memory (MiB)",
    "gflop": "GFLOP per call (dense, counted from the shapes)",
    "gflops": "achieved GFLOP/s",
    "share_of_peak": "share of the measured matmul peak",
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


def markdown_table(
    rows: Sequence[BenchRow], mode: str = "forward", metric: str = "median_ms"
) -> str:
    """One metric (a key of ``TABLE_METRICS``) per variant and length, as a Markdown table;
    a variant that was not timed shows its status (``wrong``, ``unavailable``, ...)."""
    if metric not in TABLE_METRICS:
        raise CourseInputError(
            f"metric must be one of {', '.join(TABLE_METRICS)}, but got {metric!r}."
        )
    chosen = [r for r in rows if r.mode == mode]
    if not chosen:
        return f"(no {mode} results)"
    lens = sorted({r.seq_len for r in chosen})
    cells = {(r.variant, r.seq_len): r for r in chosen}
    lines = [
        "| variant | " + " | ".join(f"n={n}" for n in lens) + " |",
        "|---|" + "---:|" * len(lens),
    ]
    for name, label in dict((r.variant, r.label) for r in chosen).items():
        lines.append(
            f"| {label} | " + " | ".join(_cell(cells.get((name, n)), metric) for n in lens) + " |"
        )
    return "\n".join(lines)


def markdown_report(rows: Sequence[BenchRow], ceilings: bench.Ceilings | None = None) -> str:
    """Every table (per mode: time, spread, memory, GFLOP/s, share of the peak) under a header
    naming the machine and its measured ceilings."""
    rows = bench.nonempty(rows)
    first = rows[0]
    parts = [
        f"Machine: {first.device_name} ({first.device}), torch {first.torch_version}, {first.dtype}, "
        f"batch {first.batch}, d={first.d_model}, {first.num_heads} heads."
    ]
    if ceilings:
        parts.append(f"Measured ceilings: {ceilings}.")
    for mode in MODES:
        for metric, title in TABLE_METRICS.items():
            values = [getattr(r, metric) for r in rows if r.mode == mode]
            if values and not all(math.isnan(v) for v in values):
                parts.append(f"### {mode}: {title}\n\n{markdown_table(rows, mode, metric)}")
    return "\n\n".join(parts) + "\n"


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m tools.bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--full", action="store_true", help="longer sequences and longer timing")
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
        "--min-run-time", type=float, default=None, help="seconds of timed runs per measurement"
    )
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's)")
    p.add_argument("--qkv-bias", action="store_true")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory runs")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
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
        "threads": args.threads,
        "qkv_bias": args.qkv_bias or None,
        "memory": False if args.no_memory else None,
    }
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
    print(f"Machine: {device_name(cfg.device)}, torch {torch.__version__}\nCeilings: {ceilings}")
    print(
        f"Benchmarking {len(cfg.variants)} variants ({cfg.dtype}, batch {cfg.batch}, d={cfg.d_model}, "
        f"{cfg.num_heads} heads, n={list(cfg.seq_lens)}, at least {cfg.min_run_time} s per measurement)",
        flush=True,
    )
    rows = run_benchmark(cfg, ceilings=ceilings, progress=not args.quiet)
    out = args.out
    csv_path = write_csv(rows, out / "bench.csv")
    plot_results(rows).savefig(out / "bench.png", dpi=120)
    bench.plot_roofline(roofline_points(rows), ceilings).savefig(out / "roofline.png", dpi=120)
    report = markdown_report(rows, ceilings)
    (out / "bench.md").write_text(report, encoding="utf-8")
    print(report)
    for r in rows:
        if r.status != "ok" and r.mode == cfg.modes[0]:
            print(f"  n={r.seq_len} {r.variant}: {r.status} ({r.note})")
    print(
        f"Wrote {csv_path}, bench.md, bench.png and roofline.png in {out} "
        f"({time.perf_counter() - start:.0f} s)."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
