"""Chapter 07's variants, its measuring tools (cu.bench, course_utils/chapters/ch07/bench.py) and the sweep of `make bench`
(tools/bench/cli.py, sweep.py, report.py; its rounds and rankings: test_bench_rounds.py):
every variant equals the reference, a wrong one is caught with the same verdict on every torch
version and never timed, FLOPs counted from the shapes match PyTorch's own count, measuring and
results behave, bad input gets clear errors. No timing is compared with another."""

from __future__ import annotations

import csv
import importlib.util
import math
import warnings

import pytest
import torch
from torch import nn

from course_utils import bench, chapters
from course_utils.validation import CourseInputError
from tools.bench import cli, report, rounds, sweep

# Small sizes keep the tests fast; the variants' code paths do not depend on the width.
D, HEADS, CONTEXT = 32, 4, 24
CPU_VARIANTS = [name for name in chapters.VARIANTS if name != "flex"]
HAS_FLEX = importlib.util.find_spec("torch.nn.attention.flex_attention") is not None


def tiny_config(**changes) -> sweep.BenchConfig:
    base = dict(
        seq_lens=(8, 16),
        d_model=D,
        num_heads=HEADS,
        warmup=0,
        min_run_time=0.01,
        min_rounds=2,
        max_rounds=3,
        device="cpu",
        variants=("split", "sdpa_causal"),
        memory=False,
    )
    base.update(changes)
    return sweep.BenchConfig(**base)


@pytest.fixture(params=[False, True], ids=["no-qkv-bias", "qkv-bias"])
def reference(request):
    return sweep.make_reference(D, HEADS, CONTEXT, qkv_bias=request.param, seed=7)


def inputs(n: int = 20, batch: int = 2, seed: int = 3) -> torch.Tensor:
    return torch.randn(batch, n, D, generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------- equality
def test_the_chapter_exports_eight_variants_and_a_byte_model_for_each():
    assert list(chapters.VARIANTS) == [
        "wrapper",
        "split",
        "fused_qkv",
        "einsum",
        "sdpa_causal",
        "sdpa_mask",
        "torch_mha",
        "flex",
    ]
    assert set(chapters.SCORE_PASSES) == set(chapters.VARIANTS)
    assert sweep.DEFAULT_VARIANTS == tuple(chapters.VARIANTS)


@pytest.mark.parametrize("name", CPU_VARIANTS)
def test_every_variant_matches_the_reference(reference, name):
    result = bench.check_variant(sweep.BUILDERS[name](reference), reference, inputs())
    assert result.ok, result.detail
    assert result.error < 1e-5 and result.verdict == "matches the reference"


def test_variants_copy_the_weights_they_are_given(reference):
    """Built from *other* weights the check must fail, so equality is meaningful; and the
    variant holds copies: changing it later leaves the reference alone."""
    other = sweep.make_reference(
        D, HEADS, CONTEXT, qkv_bias=reference.W_query.bias is not None, seed=8
    )
    assert not bench.check_variant(chapters.FusedQKVAttention(other), reference, inputs()).ok
    wrapper = chapters.WrapperAttention(reference)
    before = reference.out_proj.weight.clone()
    with torch.no_grad():
        wrapper.out_proj.weight.add_(1.0)
    assert torch.equal(reference.out_proj.weight, before)


@pytest.mark.skipif(not HAS_FLEX, reason="this torch has no FlexAttention")
def test_flex_variant_matches_the_reference_unfused(reference):
    module = chapters.FlexCausalAttention(reference, compile=False)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter(
            "ignore"
        )  # "flex_attention called without torch.compile": expected here
        got, expected = module(inputs()), reference(inputs())
    assert torch.allclose(got, expected, atol=1e-5, rtol=1e-4)


def test_flex_needs_torch_2_5(monkeypatch):
    monkeypatch.setattr(torch, "__version__", "2.4.1+cu121")
    assert "2.5" in sweep.flex_unavailable_reason("cpu")
    monkeypatch.setattr(torch, "__version__", "2.13.0+cpu")
    assert (
        sweep.flex_unavailable_reason("cpu") is None
        and sweep.flex_unavailable_reason("cuda") is None
    )


def test_torch_mha_needs_square_weights():
    ref = chapters.MultiHeadAttention(16, 32, 8, 0.0, num_heads=4)
    with pytest.raises(ValueError, match="d_in == d_out"):
        chapters.TorchMHAAttention(ref)
    x = torch.randn(2, 6, 16)  # every other variant copes with d_in != d_out
    for name in ("wrapper", "split", "fused_qkv", "einsum", "sdpa_causal", "sdpa_mask"):
        assert bench.check_variant(sweep.BUILDERS[name](ref), ref, x).ok, name


# ----------------------------------------------------------------------------- wrong variants
def test_inverted_mask_is_caught_with_a_stable_verdict(reference):
    result = bench.check_variant(chapters.SDPAInvertedMaskAttention(reference), reference, inputs())
    assert not result.ok
    assert result.verdict == "the output differs from the reference"


class _WrongWithNaNRow(nn.Module):
    """What old torch releases make of the inverted mask: rows that differ, and NaN in the
    fully masked row (newer releases return zeros there)."""

    def __init__(self, ref, nan_only=False):
        super().__init__()
        self.ref, self.nan_only = ref, nan_only

    def forward(self, x):
        out = self.ref(x) if self.nan_only else -self.ref(x)
        return torch.cat([out[:, :-1], torch.full_like(out[:, -1:], math.nan)], dim=1)


def test_verdict_is_the_same_whether_a_masked_row_is_nan_or_zero(reference):
    """torch 2.3 turns a fully masked row into NaN where newer torch gives zeros: the verdict of
    a variant that is wrong elsewhere must not depend on that (issue 14)."""
    nan_row = bench.check_variant(_WrongWithNaNRow(reference), reference, inputs())
    assert nan_row.verdict == "the output differs from the reference"
    assert "NaN" in nan_row.detail
    only_nan = bench.check_variant(_WrongWithNaNRow(reference, nan_only=True), reference, inputs())
    assert not only_nan.ok and "NaN or inf" in only_nan.verdict


def test_wrong_variant_is_reported_and_never_timed(monkeypatch):
    timed: set[str] = set()
    original = rounds.timer_sample

    def spy(name, fn, number):
        timed.add(name)
        return original(name, fn, number)

    monkeypatch.setattr(rounds, "timer_sample", spy)
    rows = sweep.run_benchmark(tiny_config(variants=("split", "sdpa_inverted_mask", "sdpa_mask")))
    assert len(rows) == 2 * 2 * 3  # lengths x modes x variants
    wrong = [r for r in rows if r.variant == "sdpa_inverted_mask"]
    assert all(r.status == "wrong" and math.isnan(r.median_ms) and r.runs == 0 for r in wrong)
    assert all("not timed" in r.note and r.rank == "" for r in wrong)
    assert timed == {"split", "sdpa_mask"}
    ok = [r for r in rows if r.variant != "sdpa_inverted_mask"]
    assert all(r.status == "ok" and r.median_ms > 0 and 2 <= r.runs <= 3 for r in ok)
    assert all(r.q1_ms <= r.median_ms <= r.q3_ms and r.iqr_ms >= 0 for r in ok)
    assert all(r.rank in ("1", "2", "1-2") and r.calls_per_round >= 1 for r in ok)


def test_a_custom_wrong_variant_is_caught(monkeypatch):
    class NoScale(chapters.FusedQKVAttention):
        """Forgets the 1/sqrt(head_dim) scaling: a classic bug."""

        def attend(self, q, k, v):
            n = q.shape[-2]
            scores = (q @ k.transpose(-2, -1)).masked_fill(self.mask[:n, :n], -torch.inf)
            return torch.softmax(scores, dim=-1) @ v

    monkeypatch.setitem(sweep.BUILDERS, "no_scale", NoScale)
    rows = sweep.run_benchmark(tiny_config(variants=("no_scale", "split")))
    assert {r.status for r in rows if r.variant == "no_scale"} == {"wrong"}
    assert {r.status for r in rows if r.variant == "split"} == {"ok"}


def test_unavailable_variant_is_reported_not_run(monkeypatch):
    monkeypatch.setattr(torch, "__version__", "2.4.0")  # the same outcome on every installed torch
    rows = sweep.run_benchmark(tiny_config(variants=("flex", "split"), seq_lens=(8,)))
    flex = [r for r in rows if r.variant == "flex"]
    assert [r.status for r in flex] == ["unavailable", "unavailable"]
    assert "torch 2.5" in flex[0].note


def test_bfloat16_run_passes_its_looser_check():
    rows = sweep.run_benchmark(tiny_config(dtype="bfloat16", seq_lens=(16,)))
    assert {r.status for r in rows} == {"ok"} and all(r.dtype == "bfloat16" for r in rows)


# ----------------------------------------------------------------------------- counting
def test_flops_counted_from_the_shapes_match_pytorchs_count():
    from torch.utils.flop_counter import FlopCounterMode

    ref = sweep.make_reference(D, HEADS, CONTEXT)
    x = inputs(n=CONTEXT, batch=3)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        chapters.split_attention(ref)(x)
    projections, products = chapters.attention_flops(3, CONTEXT, D, D)
    assert counter.get_total_flops() == projections + products


def test_byte_model_charges_the_naive_score_path():
    n, b, h, d = 1024, 1, 12, 768
    naive, fused = (
        chapters.moved_bytes("split", b, h, n, d, d),
        chapters.moved_bytes("sdpa_causal", b, h, n, d, d),
    )
    assert naive - fused == 8 * chapters.score_bytes(b, h, n)
    assert chapters.moved_bytes("sdpa_mask", b, h, n, d, d) - fused == n * n


def test_rows_carry_flops_rates_bytes_and_share_of_peak():
    ceilings = bench.Ceilings(100.0, 10.0, "cpu", 1)
    rows = sweep.run_benchmark(tiny_config(seq_lens=(16,)), ceilings=ceilings)
    fwd = next(r for r in rows if r.variant == "split" and r.mode == "forward")
    bwd = next(r for r in rows if r.variant == "split" and r.mode == "forward+backward")
    assert fwd.gflop == pytest.approx(sum(chapters.attention_flops(1, 16, D, D)) / 1e9)
    assert bwd.gflop == pytest.approx(3 * fwd.gflop) and math.isnan(bwd.intensity)
    assert fwd.gflops == pytest.approx(fwd.gflop / (fwd.median_ms / 1e3))
    assert fwd.share_of_peak == pytest.approx(fwd.gflops / 100.0) and fwd.peak_gflops == 100.0
    assert fwd.intensity == pytest.approx(fwd.gflop * 1e9 / (fwd.mbytes * 1e6))
    assert ceilings.ridge == 10.0 and "ridge at 10.0 FLOP/byte" in str(ceilings)


# ----------------------------------------------------------------------------- measuring
def test_measure_time_warms_up_then_reaches_min_runs():
    calls = []
    timing = bench.measure_time(lambda: calls.append(1), warmup=3, min_run_time=0.001, min_runs=4)
    assert timing.runs >= 4 and len(calls) >= 3 + timing.runs
    assert timing.median_ms >= 0 and timing.iqr_ms >= 0


def test_slow_function_is_slower():
    import time

    fast = bench.measure_time(lambda: None, warmup=0, min_run_time=0.01)
    slow = bench.measure_time(lambda: time.sleep(0.01), warmup=0, min_run_time=0.01)
    assert slow.median_ms > fast.median_ms and slow.median_ms >= 9


def test_cuda_peak_memory_is_max_allocated_minus_before(monkeypatch):
    state = {"allocated": 1000, "peak": 1000}

    def run():
        state["peak"] = 1000 + 5000  # the call briefly needs 5000 more bytes
        return "result"

    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(
        torch.cuda, "reset_peak_memory_stats", lambda device=None: state.update(peak=1000)
    )
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: state["allocated"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: state["peak"])
    assert sweep.measure_peak_memory(run, "cuda") == 5000


def test_cpu_peak_memory_follows_the_profilers_allocations():
    mib = 2**20

    def sequential():
        a = torch.ones(4 * mib // 4)  # 4 MiB
        del a
        return torch.zeros(2 * mib // 4)  # 2 MiB, after a was freed

    def overlapping():
        a = torch.ones(4 * mib // 4)
        b = a * 2  # both alive: 8 MiB
        return (a + b).sum()  # and a + b: 12 MiB

    assert 4 * mib <= sweep.measure_peak_memory(sequential) < 5 * mib
    assert 12 * mib <= sweep.measure_peak_memory(overlapping) < 13 * mib


def test_peak_memory_sees_the_score_matrix():
    ref = sweep.make_reference(D, HEADS, 64)
    x = torch.randn(1, 64, D)

    def forward(module):
        def run():
            with torch.no_grad():
                return module(x)

        return run

    naive = sweep.measure_peak_memory(forward(chapters.split_attention(ref)))
    fused = sweep.measure_peak_memory(forward(chapters.SDPACausalAttention(ref)))
    scores = HEADS * 64 * 64 * 4  # one (1, h, n, n) float32 tensor
    assert naive >= 2 * scores > fused


def test_out_of_memory_is_recognised():
    assert sweep._is_oom(
        torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    )
    assert sweep._is_oom(
        RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate")
    )
    assert not sweep._is_oom(RuntimeError("shape mismatch"))


def test_ceilings_are_measured():
    ceilings = bench.measure_ceilings("cpu", threads=1, size=128, copy_mib=4, min_run_time=0.01)
    assert ceilings.matmul_gflops > 0 and ceilings.copy_gbs > 0 and ceilings.threads == 1


# ----------------------------------------------------------------------------- results
def test_csv_columns_tables_and_plots(tmp_path):
    ceilings = bench.Ceilings(50.0, 5.0, "cpu", 1)
    rows = sweep.run_benchmark(
        tiny_config(variants=("split", "sdpa_inverted_mask"), seq_lens=(8,), memory=True),
        ceilings=ceilings,
    )
    path = report.write_csv(rows, tmp_path / "sub" / "bench.csv")
    with path.open(newline="") as f:
        back = list(csv.DictReader(f))
    for column in (
        "variant",
        "mode",
        "seq_len",
        "status",
        "median_ms",
        "q1_ms",
        "q3_ms",
        "iqr_ms",
        "runs",
        "rel_sdpa",
        "rank",
        "load_1min",
        "cores",
        "peak_mib",
        "gflop",
        "gflops",
        "mbytes",
        "score_mbytes",
        "intensity",
        "share_of_peak",
        "peak_gflops",
        "copy_gbs",
        "check_error",
        "device_name",
        "threads",
        "torch_version",
        "note",
    ):
        assert column in back[0], column
    assert [(r["variant"], r["mode"], r["status"]) for r in back] == [
        (r.variant, r.mode, r.status) for r in rows
    ]
    assert float(back[0]["median_ms"]) == pytest.approx(rows[0].median_ms)
    assert (
        back[-1]["median_ms"] == "nan" and float(back[-1]["gflop"]) > 0
    )  # wrong: counted, never timed
    table = report.markdown_table(rows, "forward")
    assert "n=8" in table and "wrong" in table
    assert "wrong" not in report.markdown_table(
        rows, "forward", "gflop"
    )  # counted from the shapes: always shown
    assert (
        report.markdown_report(rows).count("| variant |") >= 12
    )  # 2 modes x (time, spread, memory, rate...)
    with pytest.raises(CourseInputError, match="metric"):
        report.markdown_table(rows, "forward", metric="speed")
    assert len(report.plot_results(rows).axes) == 4  # time and memory, for each of the two modes
    points = report.roofline_points(rows)
    assert [(p.variant, p.seq_len) for p in points] == [
        ("split", 8)
    ]  # forward, timed, with a byte model
    roofline = bench.plot_roofline(points, ceilings)
    assert (
        roofline.axes[0].get_xscale() == "log" and len(roofline.axes[0].lines) >= 2
    )  # roof + split


def test_plots_reject_empty_rows_and_missing_ceilings():
    with pytest.raises(CourseInputError, match="empty"):
        report.plot_results([])
    with pytest.raises(CourseInputError, match="empty"):
        bench.plot_roofline([], bench.Ceilings(1.0, 1.0, "cpu", 1))
    with pytest.raises(CourseInputError, match="measure_ceilings"):
        bench.plot_roofline([bench.RooflinePoint("split", 8, 2.0, 1.0)], None)


def test_command_line_writes_csv_plots_and_tables(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(
        bench, "measure_ceilings", lambda *a, **k: bench.Ceilings(50.0, 5.0, "cpu", 1)
    )
    code = cli.main(
        [
            "--out",
            str(tmp_path),
            "--seq-lens",
            "8",
            "--d-model",
            str(D),
            "--heads",
            str(HEADS),
            "--min-run-time",
            "0.01",
            "--variants",
            "split",
            "sdpa_causal",
            "--no-memory",
            "--quiet",
            "--device",
            "cpu",
        ]
    )
    assert code == 0
    for name in ("bench.csv", "bench.md", "bench.png", "roofline.png"):
        assert (tmp_path / name).is_file(), name
    out = capsys.readouterr().out
    assert "Ceilings: peak matmul" in out and "Load average at the start: " in out
    assert "Threads: " in out and "- forward, n=8: " in out  # header and the ranking
    assert "share of the measured matmul peak" in (tmp_path / "bench.md").read_text()


def test_command_line_reports_bad_input(tmp_path, capsys):
    assert cli.main(["--out", str(tmp_path), "--heads", "5", "--quiet"]) == 2
    assert "divisible" in capsys.readouterr().err


def test_full_config_reaches_long_sequences():
    assert (
        max(cli.full_config("cpu").seq_lens) >= 4096
        and max(cli.quick_config("cpu").seq_lens) >= 1024
    )
    assert cli.full_config("cpu").min_run_time > cli.quick_config("cpu").min_run_time
    assert cli.full_config("cpu").min_rounds > cli.quick_config("cpu").min_rounds


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(seq_lens=()), "seq_lens"),
        (dict(seq_lens=(0, 8)), "at least 1"),
        (dict(seq_lens=8), "seq_lens"),
        (dict(num_heads=5), "divisible"),
        (dict(dtype="float64"), "dtype"),
        (dict(modes=("backward",)), "modes"),
        (dict(variants=("nope",)), "known variants are: wrapper"),
        (dict(variants=()), "at least one"),
        (dict(min_rounds=0), "min_rounds"),
        (dict(min_rounds=4, max_rounds=3), "max_rounds"),
        (dict(warmup=-1), "warmup"),
        (dict(min_run_time=0), "min_run_time"),
        (dict(device="tpu"), "device"),
        (dict(threads=0), "threads"),
    ],
)
def test_bad_config_gets_a_clear_error(changes, message):
    with pytest.raises(CourseInputError, match=message):
        sweep.run_benchmark(tiny_config(**changes))


def test_bad_arguments_to_helpers():
    ref = sweep.make_reference(D, HEADS, CONTEXT)
    with pytest.raises(CourseInputError, match="x must be a 3-d"):
        bench.check_variant(ref, ref, torch.randn(4, D))
    with pytest.raises(CourseInputError, match="module must be an nn.Module"):
        bench.check_variant(lambda x: x, ref, inputs())
    with pytest.raises(CourseInputError, match="callable"):
        bench.measure_time(42)
    with pytest.raises(CourseInputError, match="min_runs"):
        bench.measure_time(lambda: None, min_runs=0)
    with pytest.raises(CourseInputError, match="callable"):
        sweep.measure_peak_memory(None)
    with pytest.raises(CourseInputError, match="dtype"):
        bench.measure_ceilings("cpu", dtype="int8")
