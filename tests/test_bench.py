"""course_utils.bench: every variant equals the reference, wrong ones are caught and never
timed, timing and memory helpers behave, results round-trip, bad input gets clear errors."""

from __future__ import annotations

import importlib.util
import math
import sys
import warnings

import pytest
import torch
from torch import nn

import course_utils as cu
from course_utils import bench
from course_utils.validation import CourseInputError

# Small sizes keep the tests fast; the variants' code paths do not depend on the width.
D, HEADS, CONTEXT = 32, 4, 24
CPU_VARIANTS = [name for name in bench.DEFAULT_VARIANTS if name != "flex"]


def tiny_config(**changes) -> bench.BenchConfig:
    base = dict(seq_lens=(8, 16), d_model=D, num_heads=HEADS, warmup=0, repeats=2, device="cpu",
                variants=("split", "sdpa_causal"), memory=False)
    base.update(changes)
    return bench.BenchConfig(**base)


@pytest.fixture(params=[False, True], ids=["no-qkv-bias", "qkv-bias"])
def reference(request):
    return bench.make_reference(D, HEADS, CONTEXT, qkv_bias=request.param, seed=7)


def inputs(n: int = 20, batch: int = 2, seed: int = 3) -> torch.Tensor:
    return torch.randn(batch, n, D, generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------- weights
def test_weights_are_copied_in_linear_layout(reference):
    w = bench.weights_from_reference(reference)
    assert w.w_query.shape == (D, D) and w.num_heads == HEADS and w.head_dim == D // HEADS
    assert torch.equal(w.w_key, reference.W_key.weight.detach())
    assert torch.equal(w.fused_qkv_weight()[D:2 * D], w.w_key)
    assert w.fused_qkv_bias().shape == (3 * D,)
    q0, k0, v0 = w.head(0)
    assert torch.equal(q0, w.w_query[: D // HEADS])
    if reference.W_query.bias is None:
        assert w.b_query is None and not w.fused_qkv_bias().any()
    # A copy: changing the reference later does not change the weights taken.
    with torch.no_grad():
        reference.W_query.weight.add_(1.0)
    assert not torch.equal(w.w_query, reference.W_query.weight.detach())


def test_weights_from_reference_rejects_other_modules():
    with pytest.raises(CourseInputError, match="MultiHeadAttention"):
        bench.weights_from_reference(nn.Linear(3, 3))


def test_mask_conventions_are_opposite():
    keep, block = bench.sdpa_keep_mask(5), bench.mha_block_mask(5)
    assert torch.equal(keep, ~block)
    assert keep[4].all() and keep[0, 0] and not keep[0, 1]       # SDPA: True = may attend
    assert block[0, 1:].all() and not block[4].any()             # nn.MultiheadAttention: True = blocked


# ----------------------------------------------------------------------------- equality
@pytest.mark.parametrize("name", CPU_VARIANTS)
def test_every_variant_matches_the_reference(reference, name):
    module = bench.build_variant(name, bench.weights_from_reference(reference), CONTEXT)
    result = bench.check_variant(module, reference, inputs())
    assert result.ok, result.detail
    assert result.error < 1e-5


def test_variants_hold_the_weights_they_are_given(reference):
    """Building from *other* weights must make the check fail: equality is meaningful."""
    other = bench.make_reference(D, HEADS, CONTEXT, qkv_bias=reference.W_query.bias is not None, seed=8)
    module = bench.build_variant("fused_qkv", bench.weights_from_reference(other), CONTEXT)
    assert not bench.check_variant(module, reference, inputs()).ok


@pytest.mark.skipif(importlib.util.find_spec("torch.nn.attention.flex_attention") is None,
                    reason="this torch has no FlexAttention")
def test_flex_variant_builds_the_right_block_mask(reference):
    """FlexAttention is timed on CUDA only, but its construction is checked here (eager forward)."""
    w = bench.weights_from_reference(reference)
    module = bench.FlexCausalAttention(w, CONTEXT, compile=False).eval()
    x = inputs()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # "called without torch.compile": expected here
        got = module(x)
        expected = reference(x)
    assert torch.allclose(got, expected, atol=1e-5, rtol=1e-4)


def test_flex_is_unavailable_on_cpu():
    assert bench.flex_unavailable_reason("cpu") is not None


def test_inverted_mask_variant_is_caught(reference):
    module = bench.build_variant("sdpa_inverted_mask", bench.weights_from_reference(reference), CONTEXT)
    result = bench.check_variant(module, reference, inputs())
    assert not result.ok
    assert "output" in result.detail


def test_inverted_mask_is_reported_wrong_and_never_timed(monkeypatch):
    timed: list[str] = []
    original = bench.measure_interleaved

    def spy(fns, *args, **kwargs):
        timed.extend(fns)
        return original(fns, *args, **kwargs)

    monkeypatch.setattr(bench, "measure_interleaved", spy)
    cfg = tiny_config(variants=("split", "sdpa_inverted_mask", "sdpa_mask"), memory=True)
    rows = bench.run_benchmark(cfg, progress=False)
    assert len(rows) == 2 * 2 * 3  # lengths x modes x variants
    wrong = [r for r in rows if r.variant == "sdpa_inverted_mask"]
    assert wrong and all(r.status == "wrong" for r in wrong)
    assert all(math.isnan(r.median_ms) and r.repeats == 0 for r in wrong)
    assert all("not timed" in r.note for r in wrong)
    assert "sdpa_inverted_mask" not in timed
    assert set(timed) == {"split", "sdpa_mask"}
    ok = [r for r in rows if r.variant != "sdpa_inverted_mask"]
    assert all(r.status == "ok" and r.median_ms > 0 and r.repeats == 2 for r in ok)
    assert all(r.min_ms <= r.p25_ms <= r.median_ms <= r.p75_ms <= r.max_ms for r in ok)


def test_a_custom_wrong_variant_is_caught():
    class NoScale(bench.FusedQKVAttention):
        """Forgets the 1/sqrt(head_dim) scaling: a classic bug."""

        def forward(self, x):
            n = x.shape[1]
            q, k, v = self.heads(x)
            scores = (q @ k.transpose(-2, -1)).masked_fill(self.mask[:n, :n], float("-inf"))
            return self.merge(torch.softmax(scores, dim=-1) @ v)

    variant = bench.Variant("no_scale", "missing scale", NoScale)
    rows = bench.run_benchmark(tiny_config(variants=(variant, "split")), progress=False)
    assert {r.status for r in rows if r.variant == "no_scale"} == {"wrong"}
    assert {r.status for r in rows if r.variant == "split"} == {"ok"}


def test_unavailable_variant_is_reported_not_run():
    rows = bench.run_benchmark(tiny_config(variants=("flex", "split"), seq_lens=(8,)), progress=False)
    flex = [r for r in rows if r.variant == "flex"]
    assert [r.status for r in flex] == ["unavailable", "unavailable"]
    assert "CUDA" in flex[0].note


def test_torch_mha_needs_square_weights():
    ref = cu.models.MultiHeadAttention(16, 32, 8, 0.0, num_heads=4)
    w = bench.weights_from_reference(ref)
    assert bench.VARIANTS["torch_mha"].unavailable(w, torch.device("cpu"))
    with pytest.raises(CourseInputError, match="d_in == d_out"):
        bench.build_variant("torch_mha", w, 8)
    # Every other variant copes with d_in != d_out.
    x = torch.randn(2, 6, 16)
    for name in ("wrapper", "split", "fused_qkv", "einsum", "sdpa_causal", "sdpa_mask"):
        assert bench.check_variant(bench.build_variant(name, w, 8), ref, x).ok, name


def test_bfloat16_run_passes_its_looser_check():
    rows = bench.run_benchmark(tiny_config(dtype="bfloat16", seq_lens=(16,)), progress=False)
    assert {r.status for r in rows} == {"ok"}
    assert all(r.dtype == "bfloat16" for r in rows)


# ----------------------------------------------------------------------------- measuring
def test_measure_time_counts_warmup_and_repeats():
    calls = []
    timing = bench.measure_time(lambda: calls.append(1), warmup=3, repeats=4)
    assert len(calls) == 7 and timing.repeats == 4
    assert timing.min_ms <= timing.median_ms <= timing.max_ms
    assert timing.cpu_ms >= 0


def test_measure_interleaved_is_round_robin_and_survives_a_failure():
    order: list[str] = []

    def boom():
        order.append("boom")
        raise RuntimeError("CUDA out of memory (pretend)")

    fns = {"a": lambda: order.append("a"), "b": lambda: order.append("b"), "boom": boom}
    results = bench.measure_interleaved(fns, warmup=1, repeats=3)
    assert isinstance(results["boom"], RuntimeError)
    assert order.count("boom") == 1  # dropped after its first failure
    assert results["a"].repeats == results["b"].repeats == 3
    timed = [name for name in order[3:]]  # after one warm-up call each
    assert timed == ["a", "b", "b", "a", "a", "b"]  # rounds, rotating who goes first


def test_slow_function_is_slower():
    import time

    fast = bench.measure_time(lambda: None, warmup=0, repeats=3)
    slow = bench.measure_time(lambda: time.sleep(0.01), warmup=0, repeats=3)
    assert slow.min_ms > fast.max_ms and slow.min_ms >= 9


def test_cuda_timing_synchronises_around_every_timed_call(monkeypatch):
    """No GPU here: torch.cuda is replaced by a recorder to prove the order of events."""
    events: list[str] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: events.append("sync"))
    bench.measure_time(lambda: events.append("call"), "cuda", warmup=1, repeats=2)
    assert events == ["call", "sync", "call", "sync", "sync", "call", "sync"]
    events.clear()
    bench.measure_interleaved({"a": lambda: events.append("a")}, "cuda", warmup=0, repeats=2)
    assert events == ["sync", "a", "sync", "sync", "a", "sync"]


def test_cuda_peak_memory_is_max_allocated_minus_before(monkeypatch):
    state = {"allocated": 1000, "peak": 1000}

    def run():
        state["peak"] = 1000 + 5000  # the call briefly needs 5000 more bytes
        return "result"

    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: state.update(peak=1000))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: state["allocated"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: state["peak"])
    assert bench.measure_peak_memory(run, "cuda") == 5000


def test_out_of_memory_is_recognised():
    assert bench._is_oom(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert bench._is_oom(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate"))
    assert not bench._is_oom(RuntimeError("shape mismatch"))


def test_tensor_peak_counts_live_tensors_only():
    mib = 2**20
    kept = torch.ones(mib // 4)  # made before the call: not counted

    def sequential():
        a = torch.ones(4 * mib // 4)           # 4 MiB
        view = a[: mib // 4]                   # a view: no new memory
        del a, view
        b = torch.zeros(2 * mib // 4)          # 2 MiB, after a was freed
        return b

    def overlapping():
        a = torch.ones(4 * mib // 4)
        b = a * 2                              # both alive: 8 MiB
        c = kept + 1                           # 1 MiB more, computed from an old tensor
        return (a + b).sum() + c.sum()

    assert bench.measure_peak_memory(sequential) == 4 * mib
    # a, b, c and a + b alive together (13 MiB), then a few bytes for the sum
    assert 13 * mib <= bench.measure_peak_memory(overlapping) <= 13 * mib + 64
    assert bench.measure_peak_memory(lambda: kept.add_(1)) == 0  # in place


def test_tensor_peak_is_deterministic_and_sees_the_score_matrix():
    ref = bench.make_reference(D, HEADS, 64)
    w = bench.weights_from_reference(ref)
    x = torch.randn(1, 64, D)
    split, fused = bench.build_variant("split", w, 64), bench.build_variant("sdpa_causal", w, 64)

    def run(module):
        def forward():
            with torch.no_grad():
                return module(x)
        return forward

    first = bench.measure_peak_memory(run(split))
    assert first == bench.measure_peak_memory(run(split))
    scores = HEADS * 64 * 64 * 4  # one (1, h, n, n) float32 tensor
    assert first >= 2 * scores > bench.measure_peak_memory(run(fused))


@pytest.mark.skipif(not bench.cpu_peak_memory_supported(), reason="needs Linux /proc/self/clear_refs")
def test_peak_rss_sees_a_temporary_allocation():
    size = 64 * 2**20

    def allocate():
        t = torch.ones(size // 4)  # 64 MiB, touched
        return float(t[0])

    peak = bench.measure_peak_rss(allocate)
    assert 0.8 * size < peak < 1.5 * size
    assert bench.measure_peak_rss(lambda: None) < 0.25 * size


def test_peak_rss_is_unknown_off_linux(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    assert bench.measure_peak_rss(lambda: None) is None


# ----------------------------------------------------------------------------- results
def test_csv_round_trip_markdown_and_plot(tmp_path):
    rows = bench.run_benchmark(
        tiny_config(variants=("split", "sdpa_inverted_mask"), seq_lens=(8,), memory=True), progress=False)
    path = bench.write_csv(rows, tmp_path / "sub" / "bench.csv")
    back = bench.read_csv(path)
    assert [(r.variant, r.mode, r.status) for r in back] == [(r.variant, r.mode, r.status) for r in rows]
    assert back[0].median_ms == pytest.approx(rows[0].median_ms)
    assert math.isnan(back[-1].median_ms)
    table = bench.markdown_table(back, "forward")
    assert "n=8" in table and "wrong" in table
    report = bench.markdown_report(back)
    assert report.count("| variant |") >= 6  # 2 modes x (wall time, CPU time, memory[, RSS])
    with pytest.raises(CourseInputError, match="metric"):
        bench.markdown_table(back, "forward", metric="speed")
    fig = bench.plot_results(back)
    assert len(fig.axes) == 4  # time and memory, for each of the two modes


def test_read_csv_errors(tmp_path):
    with pytest.raises(CourseInputError, match="make bench"):
        bench.read_csv(tmp_path / "missing.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(CourseInputError, match="missing"):
        bench.read_csv(bad)
    garbled = tmp_path / "garbled.csv"
    garbled.write_text("variant,mode,seq_len,status,median_ms\nsplit,forward,many,ok,1.0\n")
    with pytest.raises(CourseInputError, match="line 2"):
        bench.read_csv(garbled)


def test_plot_rejects_empty_rows():
    with pytest.raises(CourseInputError, match="empty"):
        bench.plot_results([])


def test_command_line_writes_csv_plot_and_table(tmp_path, capsys):
    code = bench.main(["--out", str(tmp_path), "--seq-lens", "8", "--d-model", str(D), "--heads", str(HEADS),
                       "--repeats", "1", "--warmup", "0", "--variants", "split", "sdpa_causal",
                       "--no-progress", "--device", "cpu"])
    assert code == 0
    assert (tmp_path / "bench.csv").is_file() and (tmp_path / "bench.png").is_file()
    assert "sdpa_causal" in (tmp_path / "bench.csv").read_text()
    assert "| variant |" in capsys.readouterr().out


def test_command_line_reports_bad_input(tmp_path, capsys):
    assert bench.main(["--out", str(tmp_path), "--heads", "5", "--no-progress"]) == 2
    assert "divisible" in capsys.readouterr().err


def test_full_config_reaches_long_sequences():
    assert max(bench.full_config("cpu").seq_lens) >= 4096
    assert max(bench.quick_config("cpu").seq_lens) >= 1024
    assert bench.full_config("cpu").repeats > bench.quick_config("cpu").repeats


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("changes, message", [
    (dict(seq_lens=()), "seq_lens"),
    (dict(seq_lens=(0, 8)), "at least 1"),
    (dict(seq_lens=8), "seq_lens"),
    (dict(num_heads=5), "divisible"),
    (dict(dtype="float64"), "dtype"),
    (dict(modes=("backward",)), "modes"),
    (dict(variants=("nope",)), "known variants are: wrapper"),
    (dict(variants=()), "at least one"),
    (dict(repeats=0), "repeats"),
    (dict(warmup=-1), "warmup"),
    (dict(device="tpu"), "device"),
    (dict(threads=0), "threads"),
    (dict(memory_fraction=0.0), "memory_fraction"),
])
def test_bad_config_gets_a_clear_error(changes, message):
    with pytest.raises(CourseInputError, match=message):
        bench.run_benchmark(tiny_config(**changes), progress=False)


def test_bad_arguments_to_helpers(tmp_path):
    ref = bench.make_reference(D, HEADS, CONTEXT)
    w = bench.weights_from_reference(ref)
    with pytest.raises(CourseInputError, match="unknown variant 'x'"):
        bench.build_variant("x", w, CONTEXT)
    with pytest.raises(CourseInputError, match="AttentionWeights"):
        bench.build_variant("split", ref, CONTEXT)
    with pytest.raises(CourseInputError, match="context_length"):
        bench.build_variant("split", w, 0)
    with pytest.raises(CourseInputError, match="x must be a 3-d"):
        bench.check_variant(ref, ref, torch.randn(4, D))
    with pytest.raises(CourseInputError, match="module must be an nn.Module"):
        bench.check_variant(lambda x: x, ref, inputs())
    with pytest.raises(CourseInputError, match="callable"):
        bench.measure_time(42)
    with pytest.raises(CourseInputError, match="repeats"):
        bench.measure_time(lambda: None, repeats=0)
    with pytest.raises(CourseInputError, match="callable"):
        bench.measure_peak_memory(None)
    with pytest.raises(CourseInputError, match="callable"):
        bench.measure_peak_rss("x")
    with pytest.raises(CourseInputError, match="map names"):
        bench.measure_interleaved([lambda: None])
    with pytest.raises(CourseInputError, match="BenchRow"):
        bench.write_csv([{"variant": "x"}], tmp_path / "never.csv")
    assert not (tmp_path / "never.csv").exists()
