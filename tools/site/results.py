"""The results page's tables, generated from the result files that the commands write.

Each ``docs/results/NAME.json`` holds ``columns`` (``[[field, heading], ...]``), ``key`` (the fields
that name a measurement) and ``rows``. Every row says when, where and under what load it was
measured (:data:`ALWAYS`), so a new measurement of the same key *replaces* its row
(:func:`record`) instead of adding a paragraph. ``docs/results.md`` shows each file as the table
between ``<!-- results: NAME -->`` and ``<!-- end results -->``; ``make results`` rewrites them and
``tests/test_results_tables.py`` fails when a table and its file differ.

Writers: ``make bench`` and ``python -m tools.bench.cli --compare`` (bench, bench_compare),
``make bench-explorers`` (explorers), ``make test-compat`` (compat, through :func:`main`'s
``compat``), ``make ci-times`` (ci), ``make site`` (site, site_explorers), ``make test-site``
(site_response: the explorers' response times in the page). ``python -m tools.site.results set NAME field=value ...`` records
a row by hand (a measurement no command writes yet: say how it was made in ``source``).

    python -m tools.site.results [--check] | set NAME k=v ... | compat --junit FILE | ci
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FILES = ROOT / "docs" / "results"
PAGE = ROOT / "docs" / "results.md"
ALWAYS = [["date", "date"], ["commit", "commit"], ["machine", "machine"], ["load", "load"]]
"""Columns every table ends with (and every row must fill), then ``source``: how the row was made."""
SOURCE = ["source", "source"]
BLOCK = re.compile(
    r"(<!-- results: (?P<name>[a-z_]+) -->\n)(?P<body>.*?)(<!-- end results -->)", re.S
)


# ----------------------------------------------------------------------------- files and tables
def load(name: str, folder: Path | None = None) -> dict:
    return json.loads(((folder or FILES) / f"{name}.json").read_text(encoding="utf-8"))


def save(name: str, data: dict, folder: Path | None = None) -> None:
    text = json.dumps(data, indent=1, ensure_ascii=False) + "\n"
    ((folder or FILES) / f"{name}.json").write_text(text, encoding="utf-8")


def record(name: str, rows: list[dict], folder: Path | None = None) -> None:
    """Put ``rows`` into result file ``name``: each replaces the row with the same key, if any."""
    data = load(name, folder)
    for row in rows:
        missing = [f for f, _ in ALWAYS + [SOURCE] if not row.get(f)]
        if missing:
            raise ValueError(f"a row of {name} must say {missing}: {row}")
        same = [r for r in data["rows"] if all(r.get(k) == row.get(k) for k in data["key"])]
        if same:
            data["rows"][data["rows"].index(same[0])] = row
        else:
            data["rows"].append(row)
    save(name, data, folder)
    page = (folder or FILES).parent / PAGE.name  # the page follows its files at once
    if page.exists():
        page.write_text(render(page.read_text(encoding="utf-8"), folder), encoding="utf-8")


def _cell(value) -> str:
    if isinstance(value, float):
        value = f"{value:,.1f}" if abs(value) >= 10 else f"{value:.3g}"
    elif isinstance(value, int) and not isinstance(value, bool):
        value = f"{value:,}"
    return str("" if value is None else value).replace("|", "\\|").replace("\n", " ")


def table(data: dict) -> str:
    """One result file as a markdown table (rows in file order). When every row was measured alike
    (same date, commit, machine, load and source), that is said once under the table."""
    rows, stamped = data["rows"], ALWAYS + [SOURCE]
    alike = len(rows) > 1 and all(r.get(f) == rows[0].get(f) for r in rows for f, _ in stamped)
    columns = data["columns"] + ([] if alike else stamped)
    lines = ["| " + " | ".join(h for _, h in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(r.get(f)) for f, _ in columns) + " |" for r in rows]
    if not rows:
        lines.append("\n*No measurement yet: run the command above.*")
    if alike:
        first = rows[0]
        lines.append(
            f"\n*Every row: {_cell(first['date'])}, commit {_cell(first['commit'])}, "
            f"{_cell(first['machine'])}, load {_cell(first['load'])}; {_cell(first['source'])}.*"
        )
    return "\n".join(lines) + "\n"


def render(text: str, folder: Path | None = None) -> str:
    """``text`` (the results page) with every table rewritten from its file."""
    return BLOCK.sub(lambda m: m.group(1) + table(load(m["name"], folder)) + m.group(4), text)


# ----------------------------------------------------------------------------- what a row says
def today() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def commit() -> str:
    """The short commit, with ``+changes`` when tracked files differ from it."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "--short=7", "HEAD") or "unknown"
    return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def machine(device: str = "") -> str:
    cpu = f"{os.cpu_count()}-core {platform.machine()} {platform.system()}"
    return f"{cpu}, {device}" if device else f"{cpu}, no GPU used"


def load_now() -> float:
    return round(os.getloadavg()[0], 1)


def span(first: float, last: float) -> str:
    low, high = sorted((first, last))
    return f"{low:.1f}" if abs(high - low) < 0.05 else f"{low:.1f}-{high:.1f}"


def stamp(load_at_start: float, device: str = "", source: str = "") -> dict:
    return {
        "date": today(),
        "commit": commit(),
        "machine": machine(device),
        "load": span(load_at_start, load_now()),
        "source": source,
    }


# ----------------------------------------------------------------------------- the commands' rows
def record_bench(rows, device: str, load_at_start: float, folder: Path | None = None) -> None:
    """``make bench``: every variant at the run's longest length, in each mode."""
    longest = max(r.seq_len for r in rows)
    out = []
    for r in rows:
        if r.seq_len != longest:
            continue
        timed = r.status == "ok"
        out.append(
            {
                "mode": r.mode,
                "n": r.seq_len,
                "variant": r.label,
                "ms": f"{r.median_ms:,.0f} [{r.q1_ms:,.0f}-{r.q3_ms:,.0f}]" if timed else r.status,
                "x_sdpa": round(r.rel_sdpa, 2) if timed else "",
                "rank": r.rank,
                "threads": r.threads,
                "torch": r.torch_version,
                **stamp(load_at_start, device, "make bench"),
            }
        )
    record("bench", out, folder)


def record_compare(first: str, second: str, folder: Path | None = None) -> None:
    """``python -m tools.bench.cli --compare A B``: how many pairs two runs rank alike and opposite."""
    from tools.bench import report, rounds

    a, b = report.read_groups(first), report.read_groups(second)
    result = rounds.compare_claims(rounds.claims(a), rounds.claims(b))
    common = set(a) & set(b)
    pairs = sum(len(set(a[k]) & set(b[k])) * (len(set(a[k]) & set(b[k])) - 1) // 2 for k in common)
    import csv

    timed = [r for path in (first, second) for r in csv.DictReader(open(path, encoding="utf-8"))]
    loads = [float(r["load_1min"]) for r in timed if r.get("load_1min") not in (None, "", "nan")]
    row = {
        "what": "the last two runs compared",
        "pairs": pairs,
        "alike": len(result["agree"]),
        "opposite": len(result["contradict"]),
        "one_only": f"{len(result['first only'])} + {len(result['second only'])}",
        "neither": pairs - sum(len(v) for v in result.values()),
        **stamp(load_now(), "", f"python -m tools.bench.cli --compare {first} {second}"),
    }
    row["machine"] = f"{timed[0]['cores']} cores, {timed[0]['device_name']}" if timed else "?"
    row["load"] = span(min(loads), max(loads)) if loads else "?"
    record("bench_compare", [row], folder)


def record_explorers(
    timings, chapters: dict, load_at_start: float, folder: Path | None = None
) -> None:
    """``make bench-explorers``: each explorer's median change time in the kernel."""
    source = "make bench-explorers"
    record(
        "explorers",
        [
            {
                "explorer": t.name.removesuffix("_explorer").replace("_", " "),
                "chapter": chapters.get(t.name, ""),
                "median_ms": round(t.median),
                "p10_p90_ms": f"{t.p10:.0f}-{t.p90:.0f}",
                "first_pass_ms": round(t.first),
                **stamp(load_at_start, "", source),
            }
            for t in timings
        ],
        folder,
    )


def record_site_build(manifests, size, files, seconds, cpu_seconds, load_at_start, drawn=0) -> None:
    """``make site``: the site's size and build time (a row for a build that drew frames, one for a
    build that took them all from the cache), and each explorer's frames."""
    base = stamp(load_at_start, "", "make site")
    what = (
        f"make site, {drawn} explorers drawn" if drawn else "make site, every frame from the cache"
    )
    record(
        "site",
        [
            {
                "what": what,
                "kind": "drawn" if drawn else "cached",
                "size_mib": round(size / 2**20, 1),
                "files": files,
                "build_s": round(seconds),
                "cpu_s": round(cpu_seconds),
                **base,
            }
        ],
    )
    rows = [
        {
            "explorer": m["name"],
            "frames": len(m["frames"]),
            "full_grid": _full_grid(m["controls"]),
            "kib": round(m["bytes"] / 1024),
            "render_cpu_s": m["render_cpu_seconds"],
            **base,
        }
        for m in {m["key"]: m for m in manifests}.values()
    ]
    record("site_explorers", rows)


def _full_grid(controls) -> int:
    size = 1
    for c in controls:
        size *= c["full"]
    return size


def record_site_response(times: dict[str, list[float]], load_at_start: float) -> None:
    """``make test-site``: input-to-picture time of each explorer in the page (median, max), and of all."""
    base = stamp(load_at_start, "headless Chromium", "make test-site")

    def row(name: str, ms: list[float]) -> dict:
        ms = sorted(ms)
        middle = (ms[(len(ms) - 1) // 2] + ms[len(ms) // 2]) / 2
        return {"explorer": name, "moves": len(ms), "median_ms": round(middle, 1),
                "max_ms": round(ms[-1], 1), **base}  # fmt: skip

    every = [t for ms in times.values() for t in ms]
    record("site_response", [row(n, ms) for n, ms in times.items()] + [row("all explorers", every)])


def record_compat(junit: str, folder: Path | None = None) -> None:
    """``make test-compat``: the counts of its pytest run (from its JUnit file) and the versions."""
    import importlib.metadata as md
    import xml.etree.ElementTree as ET

    suites = ET.parse(junit).getroot()
    suites = [suites] if suites.tag == "testsuite" else list(suites)
    count = {
        k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")
    }
    failed = count["failures"] + count["errors"]
    row = {
        "torch": md.version("torch"),
        "python": platform.python_version(),
        "numpy": md.version("numpy"),
        "matplotlib": md.version("matplotlib"),
        "passed": count["tests"] - failed - count["skipped"],
        "failed": failed,
        "skipped": count["skipped"],
        **stamp(load_now(), "", "make test-compat"),
    }
    row["torch_release"] = row["torch"].split("+")[0]
    row["python_minor"] = ".".join(row["python"].split(".")[:2])
    record("compat", [row], folder)
    print(f"compat: recorded {row['passed']} passed, {failed} failed in docs/results/compat.json")


SUMMARY = re.compile(r"(\d[\d,]*) (passed|of \d+ notebooks)")


def ci_steps(script: Path = ROOT / ".ci" / "run") -> list[str]:
    """The ``make`` steps of ``.ci/run``, in order, their comments left off."""
    lines = script.read_text(encoding="utf-8").splitlines()
    return [line.split("#")[0].strip() for line in lines if line.startswith("make ")]


def time_ci(script: Path = ROOT / ".ci" / "run") -> int:
    """``make ci-times``: run each ``make`` step of ``.ci/run`` in turn, timed; record each."""
    steps = ci_steps(script)
    rows, status, began = [], 0, time.perf_counter()
    for step in steps:
        start, load_at_start = time.perf_counter(), load_now()
        done = subprocess.run(step, shell=True, cwd=ROOT, capture_output=True, text=True)
        sys.stdout.write(done.stdout[-3000:])
        found = SUMMARY.findall(done.stdout)
        result = "failed" if done.returncode else (" ".join(found[-1]) if found else "passed")
        minutes, seconds = divmod(round(time.perf_counter() - start), 60)
        rows.append({"step": step, "result": result, "time": f"{minutes} min {seconds:02d} s",
                     **stamp(load_at_start, "", "make ci-times")})  # fmt: skip
        status = status or done.returncode
    minutes, seconds = divmod(round(time.perf_counter() - began), 60)
    total = {"step": "all of .ci/run", "result": "failed" if status else "passed"}
    total.update(time=f"{minutes} min {seconds:02d} s", **stamp(0, "", "make ci-times"))
    total["load"] = ", ".join(r["load"] for r in rows)
    rows.append(total)
    record("ci", rows)
    return status


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["set"]:
        known = sorted(p.stem for p in FILES.glob("*.json"))
        if len(args) < 3 or args[1] not in known or any("=" not in a for a in args[2:]):
            print(f"usage: python -m tools.site.results set NAME field=value ...; NAME is one of "
                  f"{', '.join(known)}; got {' '.join(args[1:]) or 'nothing'}", file=sys.stderr)  # fmt: skip
            return 2
        name, pairs = args[1], dict(a.split("=", 1) for a in args[2:])
        record(name, [{**stamp(load_now()), **pairs}])
        args = []
    elif args[:1] == ["compat"]:
        record_compat(args[args.index("--junit") + 1])
        return 0
    elif args[:1] == ["ci"]:
        return time_ci()
    text = PAGE.read_text(encoding="utf-8")
    new = render(text)
    if "--check" in args:
        if new != text:
            print("docs/results.md differs from docs/results/*.json: run `make results`")
            return 1
        return 0
    PAGE.write_text(new, encoding="utf-8")
    print(f"wrote the tables of {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
