"""`make bench`'s interleaved rounds and what their spreads may rank (tools/bench/rounds.py), and
the rankings it reports (tools/bench/report.py, tools/bench/cli.py): a planted noisy variant is
reported as not separable, never ranked, both by the pure ranking and end to end. Every time
here comes from a seeded random timer: no real timing is asserted."""

from __future__ import annotations

import csv
import random

import pytest

from course_utils import bench
from course_utils.validation import CourseInputError
from tools.bench import cli, report, rounds, sweep

D, HEADS = 32, 4


def spreads_from(rng: random.Random, draws: dict, n: int = 25) -> dict[str, rounds.Spread]:
    return {name: rounds.spread(draw(rng) for _ in range(n)) for name, draw in draws.items()}


TIGHT_FAST = lambda rng: rng.gauss(1.0, 0.01)  # noqa: E731
TIGHT_SLOW = lambda rng: rng.gauss(2.0, 0.02)  # noqa: E731


def NOISY(rng: random.Random) -> float:
    """Half its rounds undisturbed, half hit by a load spike: its spread covers both others."""
    return rng.uniform(0.6, 1.0) if rng.random() < 0.5 else rng.uniform(2.0, 3.0)


# ----------------------------------------------------------------------------- pure functions
def test_spread_is_the_median_and_the_quartiles():
    s = rounds.spread([5.0, 1.0, 3.0, 2.0, 4.0, float("nan")])  # NaN left out
    assert (s.median, s.q1, s.q3, s.n, s.iqr) == (3.0, 2.0, 4.0, 5, 2.0)
    assert rounds.spread([7.0]) == rounds.Spread(7.0, 7.0, 7.0, 1)
    with pytest.raises(CourseInputError, match="at least one finite"):
        rounds.spread([float("nan")])


def test_clearly_different_variants_are_ranked():
    rng = random.Random(0)
    ranking = rounds.rank(spreads_from(rng, {"slow": TIGHT_SLOW, "fast": TIGHT_FAST}))
    assert ranking.tiers == (("fast",), ("slow",))
    assert ranking.faster == {("fast", "slow")}
    assert ranking.ranks() == {"fast": "1", "slow": "2"}
    assert ranking.text() == "fast < slow"


def test_overlapping_spreads_are_not_separable():
    a, b = rounds.Spread(1.0, 0.9, 1.2, 9), rounds.Spread(1.1, 1.2, 1.3, 9)  # touching: q3 == q1
    ranking = rounds.rank({"a": a, "b": b})
    assert not rounds.surely_faster(a, b) and ranking.faster == frozenset()
    assert ranking.ranks() == {"a": "1-2", "b": "1-2"}
    assert ranking.text() == "[a, b]; [...]: not separable on this machine now"


def test_a_planted_noisy_variant_is_reported_not_separable_rather_than_ranked():
    """Its times are drawn from a distribution that covers the other two: it is ranked against
    neither, and it does not hide that the other two are separated."""
    noisy = rounds.Spread(1.6, 0.95, 2.5, 25)
    fast, slow = rounds.Spread(1.0, 0.99, 1.01, 25), rounds.Spread(2.0, 1.98, 2.02, 25)
    ranking = rounds.rank({"noisy": noisy, "slow": slow, "fast": fast})
    assert ranking.tiers == (("fast", "noisy", "slow"),)
    assert ranking.text() == (
        "[fast, noisy, slow]; [...]: not separable on this machine now, except fast < slow"
    )
    assert ranking.text(most=0) == (
        "[fast, noisy, slow]; [...]: not separable on this machine now, except 1 pairs inside "
        "them (see the ranks)"
    )
    for seed in range(20):  # the same with drawn times
        rng = random.Random(seed)
        spreads = spreads_from(rng, {"fast": TIGHT_FAST, "noisy": NOISY, "slow": TIGHT_SLOW})
        ranking = rounds.rank(spreads)
        assert ranking.faster == {("fast", "slow")}, seed
        assert not any("noisy" in pair for pair in ranking.faster)
        assert {frozenset(p) for p in ranking.not_separable()} == {
            frozenset({"fast", "noisy"}),
            frozenset({"noisy", "slow"}),
        }
        assert ranking.ranks() == {"fast": "1-2", "noisy": "1-3", "slow": "2-3"}
        assert ranking.text().endswith("not separable on this machine now, except fast < slow")


def test_tiers_are_separated_from_each_other_entirely():
    rng = random.Random(1)
    draws = {
        "a": lambda r: r.gauss(1.0, 0.01),
        "b": lambda r: r.gauss(1.005, 0.01),  # the same as a, within noise
        "c": lambda r: r.gauss(3.0, 0.01),
        "d": lambda r: r.gauss(5.0, 0.5),
        "e": lambda r: r.gauss(5.1, 0.5),
    }
    ranking = rounds.rank(spreads_from(rng, draws, n=25))
    assert [set(t) for t in ranking.tiers] == [{"a", "b"}, {"c"}, {"d", "e"}]
    for i, tier in enumerate(ranking.tiers):
        for later in ranking.tiers[i + 1 :]:
            assert all((x, y) in ranking.faster for x in tier for y in later)
    chain, rest = ranking.text().split("; ")
    assert chain.count(" < ") == 2 and chain.count("[") == 2 and " c " in f" {chain} "
    assert rest == "[...]: not separable on this machine now"


def test_ratios_within_a_round_cancel_the_drift_that_hits_every_variant():
    """The machine slows down 3x over the run: every variant's own spread is wide and they
    overlap, but within each round the ratio is the same."""
    drift = [1.0 + 2.0 * r / 9 for r in range(10)]
    a, b = [1.0 * f for f in drift], [1.5 * f for f in drift]
    assert not rounds.surely_faster(rounds.spread(a), rounds.spread(b))
    ratio = rounds.paired_ratios(b, a)
    assert ratio.median == pytest.approx(1.5) and ratio.iqr == pytest.approx(0.0, abs=1e-12)


def test_two_runs_are_compared_claim_by_claim():
    first = {("forward", 8): {"a": 1, "b": 2, "c": 3}}
    second = {("forward", 8): {"a": 1, "b": 3, "c": 2}}
    one = {(k, a, b) for k, v in first.items() for a in v for b in v if v[a] < v[b]}
    two = {(k, a, b) for k, v in second.items() for a in v for b in v if v[a] < v[b]}
    two.discard((("forward", 8), "a", "c"))  # the second run could not separate a and c
    result = rounds.compare_claims(one, two)
    assert result["agree"] == [(("forward", 8), "a", "b")]
    assert result["contradict"] == [(("forward", 8), "b", "c")]
    assert result["first only"] == [(("forward", 8), "a", "c")]
    assert result["second only"] == []


# ----------------------------------------------------------------------------- the rounds
def test_rounds_interleave_the_variants_and_rotate_the_start():
    seen: list[str] = []

    def sample(name, fn, number):
        seen.append(name)
        return 0.004  # 4 ms per call: blocks of 3 calls make the 10 ms minimum

    timed = rounds.interleaved_rounds(
        dict.fromkeys("ABC", lambda: None),
        min_rounds=4,
        max_rounds=4,
        min_run_time=0,
        sample=sample,
    )
    assert seen[:3] == ["A", "B", "C"]  # the timed warm-up calls
    assert seen[3:] == list("ABCBCACABABC")
    assert timed.number == dict.fromkeys("ABC", 3) and all(
        len(v) == 4 for v in timed.samples.values()
    )


def test_rounds_stop_at_the_time_budget_and_drop_a_failing_variant():
    calls = {"ok": 0, "breaks": 0}

    def sample(name, fn, number):
        calls[name] += 1
        if name == "breaks" and calls[name] == 3:
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory")
        return 0.02  # 20 ms per call, one call per block

    timed = rounds.interleaved_rounds(
        {"ok": lambda: None, "breaks": lambda: None},
        min_rounds=3,
        max_rounds=50,
        min_run_time=0.1,
        sample=sample,
    )
    assert len(timed.samples["ok"]) == 5  # 5 x 20 ms reach 0.1 s
    assert len(timed.samples["breaks"]) == 1 and "allocate" in str(timed.failed["breaks"])


# ----------------------------------------------------------------------------- end to end
def noisy_timer(seed: int = 0, scale: float = 1.0):
    """Seconds per call drawn per variant: two tight ones, and a noisy one covering both."""
    rng = random.Random(seed)
    draws = {"sdpa_causal": TIGHT_FAST, "split": TIGHT_SLOW, "fused_qkv": NOISY}
    return lambda name, fn, number: draws[name](rng) * scale * 1e-3


def config(**changes):
    base = dict(
        seq_lens=(8,),
        d_model=D,
        num_heads=HEADS,
        variants=("sdpa_causal", "split", "fused_qkv"),
        min_rounds=25,
        max_rounds=25,
        min_run_time=0.001,
        memory=False,
    )
    return sweep.BenchConfig(**{**base, **changes})


def test_the_sweep_reports_a_planted_noisy_variant_as_not_separable():
    rows = sweep.run_benchmark(config(), sample=noisy_timer())
    assert len(rows) == 6 and all(r.status == "ok" and r.runs == 25 for r in rows)
    for mode in sweep.MODES:
        by = {r.variant: r for r in rows if r.mode == mode}
        assert {k: r.rank for k, r in by.items()} == {
            "sdpa_causal": "1-2",
            "fused_qkv": "1-3",
            "split": "2-3",
        }
        assert by["split"].rel_sdpa == pytest.approx(2.0, rel=0.05)
        assert by["sdpa_causal"].rel_sdpa == 1.0 and by["fused_qkv"].rel_sdpa_q3 > 1.5
    text = report.summary(rows)
    for mode in sweep.MODES:
        line = next(s for s in text.splitlines() if s.startswith(f"- {mode}, n=8: "))
        assert line.endswith("not separable on this machine now, except sdpa_causal < split")


def test_the_command_line_ranks_only_what_separates_and_records_the_load(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(rounds, "timer_sample", noisy_timer())
    monkeypatch.setattr(rounds, "load_average", lambda: (3.25, 2.0, 1.0))
    monkeypatch.setattr(bench, "measure_ceilings", lambda *a, **k: bench.Ceilings(50, 5, "cpu", 1))
    argv = ["--seq-lens", "8", "--d-model", str(D), "--heads", str(HEADS), "--device", "cpu"]
    argv += ["--variants", "sdpa_causal", "split", "--min-rounds", "25", "--no-memory"]
    assert cli.main([*argv, "--out", str(tmp_path / "clear")]) == 0
    assert "- forward, n=8: sdpa_causal < split\n" in capsys.readouterr().out
    argv[argv.index("split") + 1 : argv.index("split") + 1] = ["fused_qkv"]
    assert cli.main([*argv, "--out", str(tmp_path / "noisy"), "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "Load average at the start: 3.25, 2.00, 1.00" in out and "Threads: 1" in out
    ranking = next(s for s in out.splitlines() if s.startswith("- forward, n=8: "))
    assert "not separable on this machine now" in ranking and "< fused_qkv" not in ranking
    with (tmp_path / "noisy" / "bench.csv").open(newline="") as f:
        back = list(csv.DictReader(f))
    assert {r["load_1min"] for r in back} == {"3.25"} and {r["threads"] for r in back} == {"1"}
    assert {r["variant"]: r["rank"] for r in back if r["mode"] == "forward"}["fused_qkv"] == "1-3"


def test_two_runs_compared_from_their_csvs(tmp_path, capsys):
    paths = []
    for seed, scale in ((1, 1.0), (2, 1.7)):  # the second run on a busier machine
        rows = sweep.run_benchmark(config(seq_lens=(8, 16)), sample=noisy_timer(seed, scale))
        paths.append(report.write_csv(rows, tmp_path / f"run{seed}" / "bench.csv"))
    assert report.read_groups(paths[0]) == report.groups_of(
        sweep.run_benchmark(config(seq_lens=(8, 16)), sample=noisy_timer(1))
    )
    assert cli.main(["--compare", *map(str, paths)]) == 0
    out = capsys.readouterr().out
    assert "Ranked alike by both runs: 4 pairs." in out  # sdpa < split, 2 lengths x 2 modes
    assert "Ranked in opposite orders: 0 pairs." in out
    assert "Not separable in either run: 8." in out  # the noisy one against each, 4 times
    swapped = tmp_path / "swapped.csv"
    text = paths[1].read_text().replace("split,", "tmp,").replace("sdpa_causal,", "split,")
    swapped.write_text(text.replace("tmp,", "sdpa_causal,"))
    assert cli.main(["--compare", str(paths[0]), str(swapped)]) == 1
    assert "Ranked in opposite orders: 4 pairs." in capsys.readouterr().out


def test_one_thread_by_default_on_a_small_cpu():
    threads, why = cli.default_threads("cpu", cores=2)
    assert threads == 1 and "fewer than 4 cores" in why and "load" in why
    assert cli.default_threads("cpu", cores=8)[0] is None
    assert cli.default_threads("cuda", cores=2) == (None, "")
    assert cli.quick_config("cpu").threads == cli.default_threads("cpu")[0]


def test_spreads_that_separate_by_chance_but_swap_places_round_by_round_are_not_ranked():
    """Five rounds: a's quartiles lie below b's, yet in round four a was the slower (the load
    hit a then): the rounds side by side do not confirm the order, so it is not claimed."""
    a = rounds.spread([1.0, 1.1, 1.2, 2.5, 1.05])
    b = rounds.spread([2.0, 2.2, 2.1, 2.3, 2.4])
    assert a.q3 < b.q1 and not rounds.surely_faster(a, b)
    ranking = rounds.rank({"a": a, "b": b})
    assert ranking.tiers == (("a", "b"),) and not ranking.faster
    assert ranking.text() == "[a, b]; [...]: not separable on this machine now"
    clean = rounds.spread([1.0, 1.1, 1.2, 1.3, 1.25])  # faster in every round: ranked
    assert rounds.surely_faster(clean, b) and rounds.rank({"a": clean, "b": b}).tiers == (
        ("a",),
        ("b",),
    )


def test_one_round_in_ten_may_disagree():
    b = [2.0] * 20
    a_one = [1.0] * 19 + [3.0]
    a_three = [1.0] * 17 + [3.0] * 3
    assert rounds.surely_faster(rounds.spread(a_one), rounds.spread(b))
    assert not rounds.surely_faster(rounds.spread(a_three), rounds.spread(b))
    # without the rounds (a CSV from before they were kept) the quartiles alone decide
    bare = rounds.Spread(1.0, 1.0, 1.0, 20)
    assert rounds.surely_faster(bare, rounds.Spread(2.0, 2.0, 2.0, 20))
