"""What ``make bench`` writes and prints: the CSV, the Markdown tables, the rankings, the plots,
and the comparison of two runs' rankings (``python -m tools.bench.cli --compare A.csv B.csv``).

The rows are ``tools.bench.sweep.BenchRow``; the rankings are recomputed here from each row's
median and quartiles (``tools.bench.rounds.rank``), so a CSV read back gives the same rankings.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, fields
from pathlib import Path

from course_utils import bench
from course_utils.validation import CourseInputError
from tools.bench import rounds

MODES = ("forward", "forward+backward")


def write_csv(rows: Sequence, path: str | os.PathLike) -> Path:
    """Write the rows to ``path`` (folders are created); returns the path."""
    rows = bench.nonempty(rows)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=[c.name for c in fields(rows[0])])
        writer.writeheader()
        writer.writerows(asdict(r) for r in rows)
    return path


Groups = dict[tuple[str, int], dict[str, rounds.Spread]]


def groups_of(rows: Sequence) -> Groups:
    """The timed rows' spreads by (mode, length) and variant."""
    out: Groups = {}
    for r in rows:
        if r.status == "ok" and r.runs:
            spread = rounds.Spread(r.median_ms, r.q1_ms, r.q3_ms, r.runs, parse_rounds(r.rounds_ms))
            out.setdefault((r.mode, r.seq_len), {})[r.variant] = spread
    return out


def read_groups(path: str | os.PathLike) -> Groups:
    """:func:`groups_of` a ``bench.csv`` written by :func:`write_csv`."""
    with Path(path).open(newline="", encoding="utf-8") as f:
        out: Groups = {}
        for r in csv.DictReader(f):
            if r["status"] == "ok" and int(r["runs"]):
                numbers = (float(r[k]) for k in ("median_ms", "q1_ms", "q3_ms"))
                key = (r["mode"], int(r["seq_len"]))
                per_round = parse_rounds(r.get("rounds_ms", ""))
                spread = rounds.Spread(*numbers, int(r["runs"]), per_round)
                out.setdefault(key, {})[r["variant"]] = spread
    return out


def parse_rounds(text: str) -> tuple[float, ...]:
    """The per-round times of a row's ``rounds_ms`` column ("1.25;1.31;..."), () where empty."""
    return tuple(float(v) for v in text.split(";") if v.strip())


def ranking_lines(groups: Groups) -> list[str]:
    """One line per mode and length: the order the spreads allow (see ``bench_rounds.Ranking``)."""
    return [
        f"- {mode}, n={n}: {rounds.rank(spreads).text()}"
        for (mode, n), spreads in sorted(
            groups.items(), key=lambda kv: (MODES.index(kv[0][0]), kv[0][1])
        )
    ]


def compare_runs(first: str | os.PathLike, second: str | os.PathLike) -> tuple[str, int]:
    """Two runs' rankings side by side: the text, and how many claims contradict."""
    a, b = read_groups(first), read_groups(second)
    result = rounds.compare_claims(rounds.claims(a), rounds.claims(b))
    common = set(a) & set(b)
    pairs = sum(len(set(a[k]) & set(b[k])) * (len(set(a[k]) & set(b[k])) - 1) // 2 for k in common)
    lines = [
        f"{len(common)} lengths and modes in both runs, {pairs} pairs of variants timed in both.",
        f"Ranked alike by both runs: {len(result['agree'])} pairs.",
        f"Ranked in opposite orders: {len(result['contradict'])} pairs.",
        f"Ranked by the first run only (the second: not separable): {len(result['first only'])}.",
        f"Ranked by the second run only (the first: not separable): {len(result['second only'])}.",
        f"Not separable in either run: {pairs - sum(len(v) for v in result.values())}.",
    ]
    for what in ("contradict", "first only", "second only"):
        for (mode, n), fast, slow in result[what]:
            lines.append(f"  {what}: {mode}, n={n}: {fast} < {slow}")
    return "\n".join(lines), len(result["contradict"])


def _timed(rows: Sequence, mode: str) -> dict[str, list]:
    """The timed rows of ``mode`` by variant, each list sorted by length."""
    out: dict[str, list] = {}
    for r in sorted(rows, key=lambda r: r.seq_len):
        if r.mode == mode and r.status == "ok":
            out.setdefault(r.variant, []).append(r)
    return out


def roofline_points(rows: Sequence) -> list[bench.RooflinePoint]:
    """The timed forward passes that have a byte model, as points for ``bench.plot_roofline``."""
    return [
        bench.RooflinePoint(r.variant, r.seq_len, r.intensity, r.gflops)
        for ok in _timed(rows, "forward").values()
        for r in ok
        if not math.isnan(r.intensity)
    ]


def plot_results(rows: Sequence):
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
                yerr=[[r.median_ms - r.q1_ms for r in ok], [r.q3_ms - r.median_ms for r in ok]],
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
        f"{first.device_name}, {first.threads} threads · torch {first.torch_version} · "
        f"{first.dtype} · batch {first.batch}, d={first.d_model}, {first.num_heads} heads",
        fontsize=9,
    )
    return fig


TABLE_METRICS = {
    "median_ms": "median time (ms) [interquartile range over the rounds]",
    "rel_sdpa": "time relative to (5) SDPA is_causal=True [interquartile range of the ratio]",
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
RANGES = {"median_ms": ("q1_ms", "q3_ms"), "rel_sdpa": ("rel_sdpa_q1", "rel_sdpa_q3")}


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}" if value >= 1 else f"{value:.2f}"


def _cell(row, metric: str) -> str:
    if row is None:
        return ""
    value = getattr(row, metric)
    if (row.status != "ok" and metric not in SHAPE_METRICS) or math.isnan(value):
        return row.status if row.status != "ok" else "n/a"
    if metric == "share_of_peak":
        return f"{value:.0%}"
    if metric in RANGES:
        low, high = (getattr(row, k) for k in RANGES[metric])
        if metric == "rel_sdpa":
            return f"{value:.2f} [{low:.2f}-{high:.2f}]"
        return f"{_number(value)} [{_number(low)}-{_number(high)}]"
    return _number(value)


def markdown_table(rows: Sequence, mode: str = "forward", metric: str = "median_ms") -> str:
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


def _machine(rows: Sequence) -> str:
    first = rows[0]
    loads = [r.load_1min for r in rows if not math.isnan(r.load_1min)]
    load = (
        f"; load average (1 min) after each length and mode: {min(loads):.1f} to {max(loads):.1f}"
    )
    load = load if loads else ""
    threads = f"{first.threads} thread" + ("s" if first.threads != 1 else "")
    return (
        f"Setting: {first.device_name} ({first.device}, {first.cores} usable cores), {threads}, "
        f"torch {first.torch_version}, {first.dtype}, batch {first.batch}, d={first.d_model}, "
        f"{first.num_heads} heads{load}."
    )


RANKING_NOTE = (
    "Ranking, fastest first: a < b only where a's interquartile range lies wholly below b's; "
    f"a group in brackets is {rounds.NOT_SEPARABLE}, except the pairs named after it. A rank "
    'such as "3-5" (CSV, progress lines) gives the places its spread allows.'
)


def markdown_report(
    rows: Sequence, ceilings: bench.Ceilings | None = None, notes: Sequence[str] = ()
) -> str:
    """Every table (per mode: time and spread, time relative to SDPA, memory, GFLOP/s, share of
    the peak) and the rankings, under a header naming the machine, its load and ceilings."""
    rows = bench.nonempty(rows)
    parts = [_machine(rows), *notes]
    if ceilings:
        parts.append(f"Measured ceilings: {ceilings}.")
    parts.append(f"### Ranking\n\n{RANKING_NOTE}\n\n" + "\n".join(ranking_lines(groups_of(rows))))
    for mode in MODES:
        for metric, title in TABLE_METRICS.items():
            values = [getattr(r, metric) for r in rows if r.mode == mode]
            if values and not all(math.isnan(v) for v in values):
                parts.append(f"### {mode}: {title}\n\n{markdown_table(rows, mode, metric)}")
    return "\n\n".join(parts) + "\n"


def summary(rows: Sequence, *notes: str) -> str:
    """What the command line prints at the end: the time tables and the rankings."""
    rows = bench.nonempty(rows)
    parts = [_machine(rows), *notes]
    for mode in MODES:
        for metric in ("median_ms", "rel_sdpa"):
            if any(not math.isnan(getattr(r, metric)) for r in rows if r.mode == mode):
                table = markdown_table(rows, mode, metric)
                parts.append(f"{mode}: {TABLE_METRICS[metric]}\n{table}")
    parts.append(RANKING_NOTE + "\n" + "\n".join(ranking_lines(groups_of(rows))))
    return "\n\n".join(parts)
