"""The sweep of ``make bench``: check every variant of chapter 07 at every length, time the
checked ones together in interleaved rounds (``tools.bench.rounds``), measure their memory, and
return one row per variant, length and mode (``tools.bench.cli`` is the command line around it).

Every variant is checked against the reference at every length before it is timed; a wrong
one is never timed. Running out of memory is reported and the sweep goes on. The reference layer
(:func:`make_reference`) and the peak memory (:func:`measure_peak_memory`) are the sweep's own;
checking and timing one call are chapter 07's ``cu.bench``.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch
from torch import nn

from course_utils import bench, chapters
from course_utils.validation import CourseInputError, expect_int
from tools.bench import report, rounds

MODES = report.MODES
BUILDERS = {
    **chapters.VARIANTS,
    "sdpa_inverted_mask": chapters.SDPAInvertedMaskAttention,
}  # + a wrong one
DEFAULT_VARIANTS = tuple(chapters.VARIANTS)
BASELINE = "sdpa_causal"  # times are also given relative to it


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
    min_run_time: float = 0.5
    min_rounds: int = 5
    max_rounds: int = 25
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
        for name in ("batch", "d_model", "num_heads", "min_rounds", "warmup", "threads"):
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
                not self.max_rounds >= self.min_rounds,
                f"max_rounds must be at least min_rounds ({self.min_rounds}), got {self.max_rounds!r}.",
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
    the score path, ``intensity``. Measured, on timed rows, over ``runs`` interleaved rounds of
    ``calls_per_round`` calls: the median time per call and its quartiles, the time relative to
    SDPA with ``is_causal=True`` (median and quartiles of the ratio within each round), ``rank``
    among the variants of its length and mode ("3-5" where the spreads allow several places),
    ``gflops``, ``share_of_peak``. ``load_1min``: the load average when its rounds ended.
    ``rounds_ms``: the time per call of each round, in round order (";"-separated), so that a
    CSV read back ranks with the round-by-round test too."""

    variant: str
    label: str
    mode: str
    seq_len: int
    status: str
    median_ms: float = math.nan
    q1_ms: float = math.nan
    q3_ms: float = math.nan
    iqr_ms: float = math.nan
    runs: int = 0
    calls_per_round: int = 0
    rel_sdpa: float = math.nan
    rel_sdpa_q1: float = math.nan
    rel_sdpa_q3: float = math.nan
    rank: str = ""
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
    cores: int = 0
    load_1min: float = math.nan
    torch_version: str = torch.__version__
    note: str = ""
    rounds_ms: str = ""


def device_name(device: str) -> str:
    """The GPU's name, or the CPU's architecture."""
    if device == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return f"{platform.processor() or platform.machine()} CPU"


def make_reference(
    d_model: int = 768,
    num_heads: int = 12,
    context_length: int = 1024,
    *,
    qkv_bias: bool = False,
    seed: int = 123,
) -> nn.Module:
    """Chapter 05's layer with seeded weights (dropout 0, CPU, float32, eval mode)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return chapters.MultiHeadAttention(
            d_model, d_model, context_length, 0.0, num_heads, qkv_bias=qkv_bias
        ).eval()


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
    changes = sorted(
        (
            e.time_range.start if e.self_cpu_memory_usage > 0 else e.time_range.end,
            e.self_cpu_memory_usage,
        )
        for e in prof.events()
        if e.self_cpu_memory_usage
    )
    live = peak = 0
    for _, size in changes:
        live += size
        peak = max(peak, live)
    return peak


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
    sample: rounds.Sampler | None = None,
) -> list[BenchRow]:
    """Check, then time, every variant at every length and mode; one row each.

    At each length every variant is checked against the reference on the batch's first
    sequence; those that match are timed together in interleaved rounds (then, if
    ``config.memory``, measured once more for memory), and ranked as far as their spreads
    separate. Running out of memory is reported as ``oom`` and the sweep goes on. float32
    means IEEE float32 here (no TF32). With ``ceilings``, every row carries them and its share
    of the matmul peak. ``sample`` replaces the timer (see ``tools.bench.rounds.Sampler``)."""
    cfg = (config or BenchConfig()).validate()
    device, dtype = torch.device(cfg.device), bench.DTYPES[cfg.dtype]
    kept = torch.get_num_threads(), torch.get_float32_matmul_precision()
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    torch.set_float32_matmul_precision("highest")
    try:
        reference = make_reference(
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
            cores=rounds.usable_cores(),
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
                group = []
                for name in cfg.variants:
                    status, note, err = verdicts.get((name, mode), verdicts[name])
                    label = bench.LABELS.get(name, name)
                    group.append(
                        BenchRow(name, label, mode, n, status, check_error=err, note=note, **common)
                    )
                    _counts(group[-1])
                runners = {
                    r.variant: _runner(modules[r.variant][0], x, g, mode)
                    for r in group
                    if r.status == "ok"
                }
                _measure_group(group, runners, cfg, device, sample)
                rows.extend(group)
                if progress:
                    print(_progress(group), flush=True)
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


def _failed(row: BenchRow, exc: BaseException, device: torch.device) -> None:
    row.status = "oom" if _is_oom(exc) else "error"
    row.note = f"{type(exc).__name__}: {exc}"[:300]
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _measure_group(
    group: list[BenchRow],
    runners: dict[str, Callable[[], object]],
    cfg: BenchConfig,
    device: torch.device,
    sample: rounds.Sampler | None,
) -> None:
    """Time the checked variants of one length and mode in interleaved rounds, then measure
    their memory; fill in their spreads, their times relative to SDPA and their ranks."""
    if not runners:
        return
    timed = rounds.interleaved_rounds(
        runners,
        min_rounds=cfg.min_rounds,
        max_rounds=cfg.max_rounds,
        min_run_time=cfg.min_run_time,
        warmup=cfg.warmup,
        sample=sample,
    )
    load = rounds.load_average()[0]
    spreads = {}
    for row in group:
        row.load_1min = load
        if row.variant in timed.failed:
            _failed(row, timed.failed[row.variant], device)
        if row.status != "ok":
            continue
        if cfg.memory:
            try:
                row.peak_mib = measure_peak_memory(runners[row.variant], device) / 2**20
            except Exception as exc:  # noqa: BLE001 - reported in the CSV
                _failed(row, exc, device)
                continue
        s = spreads[row.variant] = rounds.spread(v * 1e3 for v in timed.samples[row.variant])
        row.median_ms, row.q1_ms, row.q3_ms, row.iqr_ms = s.median, s.q1, s.q3, s.iqr
        row.rounds_ms = ";".join(f"{v:.6g}" for v in s.rounds)
        row.runs, row.calls_per_round = s.n, timed.number[row.variant]
        row.gflops = row.gflop / (row.median_ms / 1e3)
        row.share_of_peak = row.gflops / row.peak_gflops
    if not spreads:
        return
    ranks = rounds.rank(spreads).ranks()
    for row in group:
        if row.variant in spreads:
            row.rank = ranks[row.variant]
            if BASELINE in spreads:
                rel = rounds.paired_ratios(timed.samples[row.variant], timed.samples[BASELINE])
                row.rel_sdpa, row.rel_sdpa_q1, row.rel_sdpa_q3 = rel.median, rel.q1, rel.q3


def _progress(group: Sequence[BenchRow]) -> str:
    timed = [r for r in group if r.status == "ok"]
    head = f"n={group[0].seq_len:<5} {group[0].mode:<16}"
    if timed:
        head += f" {max(r.runs for r in timed)} rounds, load {group[0].load_1min:.1f}"
    lines = [head]
    for r in group:
        if r.status != "ok":
            lines.append(f"    {r.variant:<18} {r.status}")
            continue
        rel = f"x{r.rel_sdpa:.2f} [{r.rel_sdpa_q1:.2f}-{r.rel_sdpa_q3:.2f}]"
        lines.append(
            f"    {r.variant:<18} {r.median_ms:9.2f} ms [{r.q1_ms:.2f}-{r.q3_ms:.2f}]  "
            f"{rel if not math.isnan(r.rel_sdpa) else '':<20} rank {r.rank}"
        )
    return "\n".join(lines)
