"""Chapter 07's measuring tools: check an attention variant against a reference layer (output,
output under no_grad, input gradient), time a call (``torch.utils.benchmark.Timer``: warm-up,
median, interquartile range), measure the machine's ceilings (matmul peak, copy bandwidth) and
draw a roofline. The sweep over every variant and length (a wrong variant is never timed, the
reference layer and the peak memory) is ``make bench`` (``tools/bench/``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from course_utils.validation import CourseInputError, expect_int, expect_tensor

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# the largest difference each dtype may have, relative to the reference's largest value
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 3e-2, torch.float16: 5e-3}

LABELS = {
    "wrapper": "(1) wrapper of causal heads",
    "split": "(2) split Q/K/V weights",
    "fused_qkv": "(3) one fused QKV projection",
    "einsum": "(4) einsum",
    "sdpa_causal": "(5) SDPA is_causal=True",
    "sdpa_mask": "(6) SDPA + bool mask",
    "torch_mha": "(7) nn.MultiheadAttention",
    "flex": "(8) FlexAttention",
    "sdpa_inverted_mask": "SDPA, inverted mask (bug on purpose)",
}


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


def expected_results(module: nn.Module, x: torch.Tensor, grad_output: torch.Tensor):
    """What a variant must reproduce: ``module(x)`` and the gradient of x for ``grad_output``."""
    out = module(x := x.detach().requires_grad_(True))
    return out.detach(), torch.autograd.grad(out, x, grad_output)[0]


def compare_to_expected(
    module: nn.Module,
    x: torch.Tensor,
    grad_output: torch.Tensor,
    expected_out: torch.Tensor,
    expected_grad: torch.Tensor,
    tolerance: float | None = None,
    backward: bool = True,
) -> CheckResult:
    """Check ``module`` against precomputed reference results (see :func:`check_variant`). The
    finite entries are judged first, so the verdict of a wrong variant does not depend on whether
    this torch turns fully masked rows into NaN or zeros. ``backward=False``: no gradient."""
    tol = TOLERANCE.get(x.dtype, 1e-4) if tolerance is None else tolerance
    with torch.no_grad():
        inference = module(x)
    out, grad = expected_results(module, x, grad_output) if backward else (inference, expected_grad)
    worst = 0.0
    for what, got, expected in (
        ("output", out, expected_out),
        ("output under no_grad", inference, expected_out),
        ("input gradient", grad, expected_grad),
    ):
        if got.shape != expected.shape:
            verdict = f"the {what} has the wrong shape"
            detail = f"{verdict}: {tuple(got.shape)}, not {tuple(expected.shape)}"
            return CheckResult(False, math.inf, verdict, detail)
        err, nonfinite = _difference(got, expected)
        if err > tol:
            verdict = f"the {what} differs from the reference"
            also = "; it also holds NaN or inf" if nonfinite else ""
            detail = f"{verdict} by {err:.2e} of its largest value (tolerance {tol:.0e}){also}"
            return CheckResult(False, err, verdict, detail)
        if nonfinite:
            verdict = f"the {what} holds NaN or inf where the reference has numbers"
            return CheckResult(False, math.nan, verdict, verdict)
        worst = max(worst, err)
    detail = f"matches the reference (largest difference {worst:.1e})"
    return CheckResult(True, worst, "matches the reference", detail)


def check_variant(
    module: nn.Module,
    reference: nn.Module,
    x: torch.Tensor,
    *,
    seed: int = 0,
    tolerance: float | None = None,
) -> CheckResult:
    """Compare ``module`` with ``reference`` on input ``x`` (b, n, d_in): the output with and
    without autograd, and the gradient with respect to ``x`` for a fixed random upstream
    gradient. Both must hold the same weights with dropout off. Never raises on a mismatch."""
    expect_tensor(x, "x", ndim=3, floating=True)
    for name, m in (("module", module), ("reference", reference)):
        if not isinstance(m, nn.Module):
            raise CourseInputError(f"{name} must be an nn.Module, but got {type(m).__name__}.")
    with torch.no_grad():
        width = reference(x.float()).shape[-1]
    upstream = torch.Generator().manual_seed(seed)
    g = torch.randn(*x.shape[:-1], width, generator=upstream).to(x.device)
    expected = expected_results(reference.float(), x.float(), g)
    return compare_to_expected(module, x, g.to(x.dtype), *expected, tolerance)


# ----------------------------------------------------------------------------- measuring
@dataclass(frozen=True)
class Timing:
    """Milliseconds per call: the median and interquartile range of ``runs`` timed runs."""

    median_ms: float
    iqr_ms: float
    runs: int


def measure_time(
    fn: Callable[[], object],
    device: torch.device | str = "cpu",
    *,
    warmup: int = 1,
    min_run_time: float = 0.2,
    min_runs: int = 3,
) -> Timing:
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
    q1, _, q3 = (
        statistics.quantiles(times, n=4, method="inclusive") if len(times) > 1 else (times[0],) * 3
    )
    return Timing(statistics.median(times) * 1e3, (q3 - q1) * 1e3, len(times))


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
        return (
            f"peak matmul {self.matmul_gflops:,.1f} GFLOP/s, memory copy {self.copy_gbs:,.1f} GB/s "
            f"({self.device}, {self.threads} threads): ridge at {self.ridge:.1f} FLOP/byte"
        )


def measure_ceilings(
    device: str = "cpu",
    *,
    dtype: str = "float32",
    threads: int | None = None,
    size: int | None = None,
    copy_mib: int | None = None,
    min_run_time: float = 0.2,
) -> Ceilings:
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
        return Ceilings(
            2 * size**3 / matmul.median_ms / 1e6,
            2 * src.nbytes / copy.median_ms / 1e6,
            str(device),
            torch.get_num_threads(),
        )
    finally:
        torch.set_num_threads(kept)


# ----------------------------------------------------------------------------- plots
@dataclass(frozen=True)
class RooflinePoint:
    """One measured call: its arithmetic intensity (FLOP per byte) and achieved GFLOP/s."""

    variant: str
    seq_len: int
    intensity: float
    gflops: float


def nonempty(rows: Sequence, what: str = "rows") -> list:
    """``rows`` as a list, or :class:`CourseInputError` when there is nothing to plot."""
    rows = list(rows) if isinstance(rows, Sequence) else []
    if not rows:
        raise CourseInputError(f"{what} must be a non-empty list: there is nothing to plot.")
    return rows


STYLES = dict(zip(LABELS, ("o-", "s-", "^-", "v-", "D-", "P-", "X-", "*-", "h--")))


def plot_roofline(points: Sequence[RooflinePoint], ceilings: Ceilings):
    """Measured calls on a roofline: achieved GFLOP/s against arithmetic intensity (FLOP per byte
    moved, from the shapes), under the measured roof min(peak, bandwidth x intensity). Larger
    markers are longer sequences. Returns the figure."""
    import matplotlib.pyplot as plt

    points = nonempty(points, "points")
    if not isinstance(ceilings, Ceilings):
        raise CourseInputError(
            f"ceilings must come from measure_ceilings(), but got {type(ceilings).__name__}."
        )
    peak, bandwidth = ceilings.matmul_gflops, ceilings.copy_gbs
    fig, ax = plt.subplots(figsize=(7.5, 5), layout="constrained")
    plt.close(fig)
    xs = [p.intensity for p in points]
    ridge = peak / bandwidth  # the roof's bend is always drawn, with room on both sides
    grid = torch.logspace(
        math.log10(min(*xs, ridge) / 3), math.log10(max(*xs, ridge) * 3), 100
    ).tolist()
    ax.plot(
        grid,
        [min(peak, bandwidth * i) for i in grid],
        "k--",
        lw=1.2,
        label=f"roof: {peak:,.0f} GFLOP/s, {bandwidth:,.1f} GB/s",
    )
    lens = sorted({p.seq_len for p in points})
    by_variant: dict[str, list[RooflinePoint]] = {}
    for p in sorted(points, key=lambda p: p.seq_len):
        by_variant.setdefault(p.variant, []).append(p)
    for i, (name, ps) in enumerate(by_variant.items()):
        x, y = [p.intensity for p in ps], [p.gflops for p in ps]
        ax.plot(x, y, "-", color=f"C{i % 10}", lw=0.8, alpha=0.6)
        ax.scatter(
            x,
            y,
            color=f"C{i % 10}",
            label=LABELS.get(name, name),
            marker=STYLES.get(name, "o-")[0],
            s=[12 + 40 * lens.index(p.seq_len) / max(1, len(lens) - 1) for p in ps],
        )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="arithmetic intensity (FLOP per byte moved, from the shapes)",
        ylabel="achieved GFLOP/s (forward)",
        title=f"Roofline, n = {', '.join(map(str, lens))}",
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return fig
