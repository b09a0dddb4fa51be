"""Chapter 07's benchmark: check each attention variant (the chapter's own ``cu.chapters.VARIANTS``,
all built from one reference layer), then time it (``torch.utils.benchmark.Timer``), measure its
peak memory (CUDA's statistics or the profiler's memory events) and place it on a roofline (FLOPs
and bytes from the shapes against the machine's measured ceilings). A variant that disagrees
with the reference is reported as ``wrong`` and never timed. Command line: ``tools/bench.py``.
"""

from __future__ import annotations

import math
import platform
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch
from torch import nn

from . import chapters
from .chapters import VARIANTS, MultiHeadAttention, SDPAInvertedMaskAttention
from .validation import CourseInputError, expect_int, expect_tensor

MODES = ("forward", "forward+backward")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 3e-2, torch.float16: 5e-3}  # relative to the largest value

BUILDERS = {**VARIANTS, "sdpa_inverted_mask": SDPAInvertedMaskAttention}  # + the wrong one on purpose
DEFAULT_VARIANTS = tuple(VARIANTS)
LABELS = {
    "wrapper": "(1) wrapper of causal heads", "split": "(2) split Q/K/V weights",
    "fused_qkv": "(3) one fused QKV projection", "einsum": "(4) einsum",
    "sdpa_causal": "(5) SDPA is_causal=True", "sdpa_mask": "(6) SDPA + bool mask",
    "torch_mha": "(7) nn.MultiheadAttention", "flex": "(8) FlexAttention",
    "sdpa_inverted_mask": "SDPA, inverted mask (bug on purpose)",
}


def make_reference(d_model: int = 768, num_heads: int = 12, context_length: int = 1024, *,
                   qkv_bias: bool = False, seed: int = 123) -> MultiHeadAttention:
    """Chapter 05's layer with seeded weights (dropout 0, CPU, float32, eval mode)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return MultiHeadAttention(d_model, d_model, context_length, 0.0, num_heads, qkv_bias=qkv_bias).eval()


def flex_unavailable_reason(device: torch.device | str) -> str | None:
    """Why FlexAttention cannot run here (None when it can)."""
    if tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 5):
        return f"FlexAttention needs torch 2.5 or newer (this is {torch.__version__})"
    if torch.device(device).type == "mps":
        return "FlexAttention is not compiled for MPS"
    return None


# ----------------------------------------------------------------------------- checking
@dataclass(frozen=True)
class CheckResult:
    """``verdict``: the first quantity that disagrees, worded alike on every torch; ``detail``: numbers."""
    ok: bool
    error: float
    verdict: str
    detail: str


def _difference(got: torch.Tensor, expected: torch.Tensor) -> tuple[float, bool]:
    """(largest difference over the finite entries / the reference's largest value, any NaN or inf?)"""
    got, expected = got.detach().double().cpu(), expected.detach().double().cpu()
    finite = torch.isfinite(got)
    diff = (got - expected).abs()[finite]
    scale = float(expected.abs().max()) or 1.0
    return (float(diff.max()) / scale if diff.numel() else 0.0), not bool(finite.all())


def _forward_backward(module: nn.Module, x: torch.Tensor, grad_output: torch.Tensor):
    out = module(x := x.detach().requires_grad_(True))
    return out.detach(), torch.autograd.grad(out, x, grad_output)[0]


def compare_to_expected(module: nn.Module, x: torch.Tensor, grad_output: torch.Tensor,
                        expected_out: torch.Tensor, expected_grad: torch.Tensor,
                        tolerance: float | None = None, backward: bool = True) -> CheckResult:
    """Check ``module`` against precomputed reference results (see :func:`check_variant`). The
    finite entries are judged first, so the verdict of a wrong variant does not depend on whether
    this torch turns fully masked rows into NaN or zeros. ``backward=False``: no gradient."""
    tol = TOLERANCE.get(x.dtype, 1e-4) if tolerance is None else tolerance
    with torch.no_grad():
        inference = module(x)
    out, grad = _forward_backward(module, x, grad_output) if backward else (inference, expected_grad)
    worst = 0.0
    for what, got, expected in (("output", out, expected_out), ("output under no_grad", inference, expected_out),
                                ("input gradient", grad, expected_grad)):
        if got.shape != expected.shape:
            verdict = f"the {what} has the wrong shape"
            return CheckResult(False, math.inf, verdict, f"{verdict}: {tuple(got.shape)}, not {tuple(expected.shape)}")
        err, nonfinite = _difference(got, expected)
        if err > tol:
            verdict = f"the {what} differs from the reference"
            also = "; it also holds NaN or inf" if nonfinite else ""
            return CheckResult(False, err, verdict, f"{verdict} by {err:.2e} of its largest value "
                                                    f"(tolerance {tol:.0e}){also}")
        if nonfinite:
            verdict = f"the {what} holds NaN or inf where the reference has numbers"
            return CheckResult(False, math.nan, verdict, verdict)
        worst = max(worst, err)
    return CheckResult(True, worst, "matches the reference", f"matches the reference (largest difference {worst:.1e})")


def check_variant(module: nn.Module, reference: nn.Module, x: torch.Tensor, *, seed: int = 0,
                  tolerance: float | None = None) -> CheckResult:
    """Compare ``module`` with ``reference`` on input ``x`` (b, n, d_in): the output with and
    without autograd, and the gradient with respect to ``x`` for a fixed random upstream
    gradient. Both must hold the same weights with dropout off. Never raises on a mismatch."""
    expect_tensor(x, "x", ndim=3, floating=True)
    for name, m in (("module", module), ("reference", reference)):
        if not isinstance(m, nn.Module):
            raise CourseInputError(f"{name} must be an nn.Module, but got {type(m).__name__}.")
    with torch.no_grad():
        width = reference(x.float()).shape[-1]
    g = torch.randn(*x.shape[:-1], width, generator=torch.Generator().manual_seed(seed)).to(x.device)
    expected = _forward_backward(reference.float(), x.float(), g)
    return compare_to_expected(module, x, g.to(x.dtype), *expected, tolerance)


# ----------------------------------------------------------------------------- measuring
@dataclass(frozen=True)
class Timing:
    """Milliseconds per call: the median and interquartile range of ``runs`` timed runs."""
    median_ms: float
    iqr_ms: float
    runs: int


def measure_time(fn: Callable[[], object], device: torch.device | str = "cpu", *, warmup: int = 1,
                 min_run_time: float = 0.2, min_runs: int = 3) -> Timing:
    """Time ``fn()`` with ``torch.utils.benchmark.Timer`` (it synchronises CUDA): ``warmup`` untimed
    calls, then ``blocked_autorange`` until ``min_run_time`` seconds and ``min_runs`` runs."""
    from torch.utils.benchmark import Timer

    if not callable(fn):
        raise CourseInputError(f"fn must be callable, but got {type(fn).__name__}.")
    expect_int(warmup, "warmup", minimum=0)
    expect_int(min_runs, "min_runs", minimum=1)
    for _ in range(warmup):
        fn()
    timer = Timer("fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    first = timer.blocked_autorange(min_run_time=min_run_time)
    times = list(first.times)
    while len(times) < min_runs:
        times.extend(timer.timeit(first.number_per_run).times)
    q1, _, q3 = statistics.quantiles(times, n=4, method="inclusive") if len(times) > 1 else (times[0],) * 3
    return Timing(statistics.median(times) * 1e3, (q3 - q1) * 1e3, len(times))


def measure_peak_memory(fn: Callable[[], object], device: torch.device | str = "cpu") -> int:
    """Bytes of extra memory one call of ``fn()`` holds at its peak: on CUDA from its memory
    statistics, on the CPU from the profiler's memory events replayed in order (an operation's
    allocations count from its start, its releases from its end)."""
    if not callable(fn):
        raise CourseInputError(f"fn must be callable, but got {type(fn).__name__}.")
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return max(0, torch.cuda.max_memory_allocated(device) - before)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    changes = sorted((e.time_range.start if e.self_cpu_memory_usage > 0 else e.time_range.end,
                      e.self_cpu_memory_usage) for e in prof.events() if e.self_cpu_memory_usage)
    live = peak = 0
    for _, size in changes:
        live += size
        peak = max(peak, live)
    return peak


@dataclass(frozen=True)
class Ceilings:
    """The machine's measured limits: float matmul rate and memory copy bandwidth."""
    matmul_gflops: float
    copy_gbs: float
    device: str
    threads: int

    @property
    def ridge(self) -> float:
        """The arithmetic intensity (FLOP per byte) where the two limits meet."""
        return self.matmul_gflops / self.copy_gbs

    def __str__(self) -> str:
        return (f"peak matmul {self.matmul_gflops:,.1f} GFLOP/s, memory copy {self.copy_gbs:,.1f} GB/s "
                f"({self.device}, {self.threads} threads): ridge at {self.ridge:.1f} FLOP/byte")


def measure_ceilings(device: str = "cpu", *, dtype: str = "float32", threads: int | None = None,
                     size: int | None = None, copy_mib: int | None = None,
                     min_run_time: float = 0.2) -> Ceilings:
    """Measure the matmul peak (a ``size`` x ``size`` product) and the copy bandwidth (a
    ``copy_mib`` tensor read once and written once) of ``device``."""
    if dtype not in DTYPES:
        raise CourseInputError(f"dtype must be one of {', '.join(DTYPES)}, but got {dtype!r}.")
    kept = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(expect_int(threads, "threads", minimum=1))
    try:
        cuda = torch.device(device).type == "cuda"
        size = size or (8192 if cuda else 1024)
        gen = torch.Generator().manual_seed(0)
        a, b = (torch.randn(size, size, generator=gen).to(device, DTYPES[dtype]) for _ in range(2))
        matmul = measure_time(lambda: a @ b, device, min_run_time=min_run_time)
        numbers = (copy_mib or (1024 if cuda else 256)) * 2**20 // 4
        src, dst = torch.ones(numbers, device=device), torch.empty(numbers, device=device)
        copy = measure_time(lambda: dst.copy_(src), device, min_run_time=min_run_time)
        return Ceilings(2 * size**3 / matmul.median_ms / 1e6, 2 * src.nbytes / copy.median_ms / 1e6,
                        str(device), torch.get_num_threads())
    finally:
        torch.set_num_threads(kept)


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
        modes, variants = ((v,) if isinstance(v, str) else tuple(v) for v in (self.modes, self.variants))
        for bad, message in (
            (self.d_model % self.num_heads, f"d_model must be divisible by num_heads, but d_model="
                                            f"{self.d_model} and num_heads={self.num_heads}."),
            (self.dtype not in DTYPES, f"dtype must be one of {', '.join(DTYPES)}, but got {self.dtype!r}."),
            (not modes or set(modes) - set(MODES), f"modes must be taken from {MODES}, but got {self.modes!r}."),
            (not variants or set(variants) - set(BUILDERS), f"variants must name at least one variant, and only "
             f"known ones, but got {self.variants!r}; the known variants are: {', '.join(BUILDERS)}."),
            (not self.min_run_time > 0, f"min_run_time must be a positive number of seconds, got "
                                        f"{self.min_run_time!r}."),
            (self.device not in ("cpu", "cuda", "mps"), f"device must be 'cpu', 'cuda' or 'mps', but got "
                                                        f"{self.device!r}."),
            (self.device == "cuda" and not torch.cuda.is_available(),
             "device 'cuda' was requested, but CUDA is not available here."),
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
    return isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)) or "out of memory" in text \
        or "can't allocate memory" in text


def _counts(row: BenchRow) -> None:
    """Fill in the row's FLOPs and bytes, counted from its shapes."""
    b, h, n, d = row.batch, row.num_heads, row.seq_len, row.d_model
    row.gflop = sum(chapters.attention_flops(b, n, d, d)) / 1e9 * (1 if row.mode == "forward" else 3)
    if row.mode == "forward" and row.variant in VARIANTS:
        size = torch.finfo(DTYPES[row.dtype]).bits // 8
        row.mbytes = chapters.moved_bytes(row.variant, b, h, n, d, d, size) / 1e6
        row.score_mbytes = chapters.SCORE_PASSES[row.variant] * chapters.score_bytes(b, h, n, size) / 1e6
        row.score_mbytes += n * n / 1e6 if row.variant == "sdpa_mask" else 0.0  # its bool mask, read once
        row.intensity = row.gflop * 1e3 / row.mbytes


def _runner(module: nn.Module, x: torch.Tensor, g: torch.Tensor, mode: str) -> Callable[[], object]:
    """A forward pass under no_grad, or a forward pass plus the gradients of the input and
    of every parameter (without accumulating into ``.grad``)."""
    if mode == "forward":
        return torch.no_grad()(lambda: module(x))
    params = [p for p in module.parameters() if p.requires_grad]
    xg = x.detach().requires_grad_(True)
    return lambda: torch.autograd.grad(module(xg), [xg, *params], g)


def _build(name: str, reference: MultiHeadAttention, device: torch.device, dtype: torch.dtype):
    if name == "flex" and flex_unavailable_reason(device):
        return None, flex_unavailable_reason(device)
    try:
        return BUILDERS[name](reference).to(device=device, dtype=dtype).eval(), ""
    except ValueError as exc:  # e.g. nn.MultiheadAttention needs d_in == d_out
        return None, str(exc)


def run_benchmark(config: BenchConfig | None = None, *, ceilings: Ceilings | None = None,
                  progress: bool = False) -> list[BenchRow]:
    """Check, then time, every variant at every length and mode; one row each.

    At each length every variant is checked against the reference on the batch's first
    sequence; only those that match are timed (then, if ``config.memory``, measured once
    more for memory). Running out of memory is reported as ``oom`` and the sweep goes on.
    float32 means IEEE float32 here (no TF32). With ``ceilings``, every row carries them and
    its share of the matmul peak."""
    cfg = (config or BenchConfig()).validate()
    device, dtype = torch.device(cfg.device), DTYPES[cfg.dtype]
    kept = torch.get_num_threads(), torch.get_float32_matmul_precision()
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    torch.set_float32_matmul_precision("highest")
    try:
        reference = make_reference(cfg.d_model, cfg.num_heads, max(cfg.seq_lens), qkv_bias=cfg.qkv_bias,
                                   seed=cfg.seed)
        modules = {name: _build(name, reference, device, dtype) for name in cfg.variants}
        reference = reference.to(device)
        common = dict(batch=cfg.batch, d_model=cfg.d_model, num_heads=cfg.num_heads, dtype=cfg.dtype,
                      device=cfg.device, device_name=device_name(cfg.device), threads=torch.get_num_threads())
        if ceilings:
            common.update(peak_gflops=ceilings.matmul_gflops, copy_gbs=ceilings.copy_gbs)
        gen = torch.Generator().manual_seed(cfg.seed + 1)
        rows = []
        for n in cfg.seq_lens:
            if modules.get("flex", (None,))[0] is not None:
                torch.compiler.reset()  # FlexAttention compiles once per length: stay under dynamo's limit
            x32 = torch.randn(cfg.batch, n, cfg.d_model, generator=gen)     # (b, n, d)
            g32 = torch.randn(cfg.batch, n, cfg.d_model, generator=gen)     # (b, n, d)
            x, g = x32.to(device, dtype), g32.to(device, dtype)
            verdicts = _check_all(modules, reference, x32[:1].to(device), g32[:1].to(device), x[:1], g[:1])
            for mode in cfg.modes:
                for name in cfg.variants:
                    status, note, err = verdicts.get((name, mode), verdicts[name])
                    row = BenchRow(name, LABELS.get(name, name), mode, n, status, check_error=err, note=note,
                                   **common)
                    _counts(row)
                    if status == "ok":
                        _measure(row, modules[name][0], x, g, cfg, device)
                    rows.append(row)
                    if progress:
                        print(f"n={n:<5} {mode:<16} {name:<18} {row.status:<5} {row.median_ms:10.2f} ms "
                              f"{row.gflops:8.1f} GFLOP/s", flush=True)
        return rows
    finally:
        torch.set_num_threads(kept[0])
        torch.set_float32_matmul_precision(kept[1])


def _check_all(modules, reference, x32, g32, x, g) -> dict:
    try:
        expected = _forward_backward(reference, x32, g32)
    except Exception as exc:  # noqa: BLE001 - only running out of memory is expected here
        if not _is_oom(exc):
            raise
        return {name: ("oom", "the reference itself did not fit in memory: not checked", math.nan)
                for name in modules}
    verdicts = {}
    for name, (module, reason) in modules.items():
        if module is None:
            verdicts[name] = ("unavailable", reason, math.nan)
            continue
        try:
            try:
                check = compare_to_expected(module, x, g, *expected)
            except NotImplementedError as exc:  # FlexAttention on a CPU: forward only
                check = compare_to_expected(module, x, g, *expected, backward=False)
                verdicts[name, "forward+backward"] = ("unavailable", f"{exc}"[:200], math.nan)
        except Exception as exc:  # noqa: BLE001 - reported in the CSV, never timed
            status = "oom" if _is_oom(exc) else "error"
            verdicts[name] = (status, f"the check could not run: {type(exc).__name__}: {exc}"[:300], math.nan)
            continue
        verdicts[name] = ("ok", "", check.error) if check.ok else ("wrong", check.detail + "; not timed", check.error)
    return verdicts


def _measure(row: BenchRow, module: nn.Module, x: torch.Tensor, g: torch.Tensor, cfg: BenchConfig,
             device: torch.device) -> None:
    run = _runner(module, x, g, row.mode)
    try:
        timing = measure_time(run, device, warmup=cfg.warmup, min_run_time=cfg.min_run_time,
                              min_runs=cfg.min_runs)
        if cfg.memory:
            row.peak_mib = measure_peak_memory(run, device) / 2**20
    except Exception as exc:  # noqa: BLE001 - reported in the CSV
        row.status, row.note = ("oom" if _is_oom(exc) else "error"), f"{type(exc).__name__}: {exc}"[:300]
        if device.type == "cuda":
            torch.cuda.empty_cache()
        return
    row.median_ms, row.iqr_ms, row.runs = timing.median_ms, timing.iqr_ms, timing.runs
    row.gflops = row.gflop / (row.median_ms / 1e3)
    row.share_of_peak = row.gflops / row.peak_gflops


# ----------------------------------------------------------------------------- plots
def _timed(rows: Sequence[BenchRow], mode: str) -> dict[str, list[BenchRow]]:
    """The timed rows of ``mode`` by variant, each list sorted by length."""
    out: dict[str, list[BenchRow]] = {}
    for r in sorted(rows, key=lambda r: r.seq_len):
        if r.mode == mode and r.status == "ok":
            out.setdefault(r.variant, []).append(r)
    return out


def _nonempty(rows: Sequence[BenchRow]) -> list[BenchRow]:
    rows = list(rows)
    if not rows:
        raise CourseInputError("rows is empty: there is nothing to plot.")
    return rows


STYLES = dict(zip(BUILDERS, ("o-", "s-", "^-", "v-", "D-", "P-", "X-", "*-", "h--")))


def plot_roofline(rows: Sequence[BenchRow], ceilings: Ceilings | None = None):
    """Forward passes on a roofline: achieved GFLOP/s against arithmetic intensity (FLOP per
    byte of the chapter's byte model), under the measured roof min(peak, bandwidth x intensity).
    Larger markers are longer sequences. Returns the figure."""
    import matplotlib.pyplot as plt

    rows = _nonempty(rows)
    peak, bandwidth = ((ceilings.matmul_gflops, ceilings.copy_gbs) if ceilings else
                       (rows[0].peak_gflops, rows[0].copy_gbs))
    fig, ax = plt.subplots(figsize=(7.5, 5), layout="constrained")
    plt.close(fig)
    points = {name: [r for r in ok if not math.isnan(r.intensity)] for name, ok in _timed(rows, "forward").items()}
    xs = [r.intensity for ok in points.values() for r in ok] or [1.0]
    if not math.isnan(peak):
        grid = torch.logspace(math.log10(min(xs) / 3), math.log10(max(xs) * 3), 100).tolist()
        ax.plot(grid, [min(peak, bandwidth * i) for i in grid], "k--", lw=1.2,
                label=f"roof: {peak:,.0f} GFLOP/s, {bandwidth:,.1f} GB/s")
    lens = sorted({r.seq_len for ok in points.values() for r in ok})
    for i, (name, ok) in enumerate(points.items()):
        if ok:
            ax.plot([r.intensity for r in ok], [r.gflops for r in ok], "-", color=f"C{i % 10}", lw=0.8, alpha=0.6)
            ax.scatter([r.intensity for r in ok], [r.gflops for r in ok], color=f"C{i % 10}", label=ok[0].label,
                       s=[12 + 40 * lens.index(r.seq_len) / max(1, len(lens) - 1) for r in ok],
                       marker=STYLES.get(name, "o-")[0])
    ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP per byte moved, from the shapes)",
           ylabel="achieved GFLOP/s (forward)", title=f"Roofline, n = {', '.join(map(str, lens))}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return fig
