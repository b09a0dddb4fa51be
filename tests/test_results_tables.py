"""The results page's tables are generated from the result files, and a new measurement replaces
its row (tools/site/results.py)."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from tools.site import results as R

FILES = sorted(p.stem for p in R.FILES.glob("*.json"))


def test_the_page_shows_exactly_the_files():
    text = R.PAGE.read_text(encoding="utf-8")
    assert text == R.render(text), (
        "docs/results.md differs from docs/results/*.json: run `make results`"
    )
    shown = [m["name"] for m in R.BLOCK.finditer(text)]
    assert sorted(shown) == FILES, "each result file is shown once, and each table has its file"


@pytest.mark.parametrize("name", FILES)
def test_every_row_says_when_where_and_under_what_load(name):
    data = R.load(name)
    assert data["key"] and data["columns"] and data["title"]
    for row in data["rows"]:
        for field, _ in R.ALWAYS + [R.SOURCE]:
            assert row.get(field), f"{name}: a row without {field}: {row}"
        assert all(k in row for k in data["key"]), f"{name}: a row without its key {data['key']}"
    keys = [tuple(row.get(k) for k in data["key"]) for row in data["rows"]]
    assert len(keys) == len(set(keys)), f"{name}: two rows measure the same thing"


@pytest.fixture
def copy(tmp_path):
    """The result files and the page in a scratch folder."""
    shutil.copytree(R.FILES, tmp_path / "results")
    page = tmp_path / "results.md"
    page.write_text(R.PAGE.read_text(encoding="utf-8"), encoding="utf-8")
    return tmp_path / "results", page


def test_a_changed_file_makes_the_page_stale(copy):
    folder, page = copy
    data = R.load("compat", folder)
    data["rows"][0]["passed"] = 1
    R.save("compat", data, folder)
    text = page.read_text(encoding="utf-8")
    assert R.render(text, folder) != text
    assert "| 1 |" in R.render(text, folder)


def test_a_new_measurement_replaces_its_row_and_keeps_the_others(copy):
    folder, _ = copy
    before = R.load("compat", folder)["rows"]
    row = {**before[0], "passed": 7, "date": "2030-01-01", "source": "a test"}
    R.record("compat", [row], folder)
    after = R.load("compat", folder)["rows"]
    assert len(after) == len(before) and after[0]["passed"] == 7 and after[1:] == before[1:]
    R.record("compat", [{**row, "torch_release": "9.9.9", "torch": "9.9.9"}], folder)
    assert len(R.load("compat", folder)["rows"]) == len(before) + 1


def test_a_row_without_its_date_commit_machine_or_load_is_refused(copy):
    folder, _ = copy
    row = dict(R.load("compat", folder)["rows"][0])
    del row["load"]
    with pytest.raises(ValueError, match="load"):
        R.record("compat", [row], folder)


def test_rows_measured_alike_say_so_once_and_others_per_row():
    rows = [
        {"x": i, "date": "d", "commit": "c", "machine": "m", "load": "1", "source": "s"}
        for i in (1, 2)
    ]
    data = {"title": "t", "key": ["x"], "columns": [["x", "x"]], "rows": rows}
    assert R.table(data).splitlines()[
        0
    ] == "| x |" and "*Every row: d, commit c, m, load 1; s.*" in R.table(data)
    rows[1]["load"] = "9"
    assert R.table(data).splitlines()[0] == "| x | date | commit | machine | load | source |"


def test_compat_reads_its_counts_from_the_junit_file(copy, tmp_path):
    folder, _ = copy
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<testsuites><testsuite tests="10" failures="1" errors="1" skipped="3"/></testsuites>'
    )
    R.record_compat(str(junit), folder)
    import platform
    from importlib import metadata

    # this run's row is the one of this torch: a real make test-compat row (2.3.1) is there too.
    # The row names the installed distribution (PyPI's CUDA 2.3.1 is "2.3.1", where
    # torch.__version__ says "2.3.1+cu121")
    rows = R.load("compat", folder)["rows"]
    torch_version = metadata.version("torch")
    row = next(r for r in rows if r["source"] == "make test-compat" and r["torch"] == torch_version)
    assert (row["passed"], row["failed"], row["skipped"]) == (5, 2, 3)
    assert row["python_minor"] == ".".join(platform.python_version_tuple()[:2])


def test_the_bench_rows_are_the_longest_length_of_each_mode(copy):
    from tools.bench.sweep import BenchRow

    folder, _ = copy
    rows = [
        BenchRow(
            "sdpa_causal",
            "(5) SDPA",
            mode,
            n,
            "ok",
            median_ms=n / 10,
            q1_ms=1,
            q3_ms=2,
            rel_sdpa=1.0,
            rank="1",
            threads=1,
        )  # fmt: skip
        for mode in ("forward", "forward+backward")
        for n in (128, 1024)
    ]
    R.record_bench(rows, "cpu", 1.0, folder)
    new = [r for r in R.load("bench", folder)["rows"] if r["source"] == "make bench"]
    assert sorted((r["mode"], r["n"]) for r in new) == [
        ("forward", 1024),
        ("forward+backward", 1024),
    ]
    assert new[0]["ms"] == "102 [1-2]"


def test_the_files_are_plain_json_with_one_row_per_line_group():
    for name in FILES:
        text = (R.FILES / f"{name}.json").read_text(encoding="utf-8")
        assert json.loads(text) and text.endswith("\n") and not re.search(r"NaN|Infinity", text)
