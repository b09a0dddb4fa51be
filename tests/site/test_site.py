"""The course website (`make test-site`): the built site in headless Chromium, and a broken site
that the same check must fault. Runs only with ``COURSE_SITE_TESTS=1`` (set by ``make test-site``,
after ``make site``); the explorer-grid and page-building logic is tested without a browser too."""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
from pathlib import Path

import nbformat
import pytest

from tests.site import site_check as S
from tools.site import build as B
from tools.site import explorers as X

ROOT = Path(__file__).resolve().parents[2]
SITE = B.HTML
site_only = pytest.mark.skipif(
    os.environ.get("COURSE_SITE_TESTS") != "1",
    reason="needs Chromium and a built site: `make test-site`",
)
GOAL_MS = 50


# ----------------------------------------------------------------------------- without a browser
def test_explorer_cells_are_found_by_their_call():
    assert X.explorer_call("cu.widgets.query_explorer()") == ("query_explorer", False)
    assert X.explorer_call("cu.widgets.training_explorer(snapshots)") == ("training_explorer", True)
    assert X.explorer_call("x = 1\ncu.widgets.mask_explorer()") == ("mask_explorer", True)
    assert X.explorer_call("cu.widgets.format_bytes(3)") is None
    assert X.explorer_call("cu.widgets.query_explorer(") is None
    names = {f.name for f in X.find()}
    assert {"query_explorer", "training_explorer", "kv_wall_explorer"} <= names


class _Slider:
    def __init__(self, value, low, high, step, fmt="d", description="s"):
        self.value, self.min, self.max, self.step = value, low, high, step
        self.readout_format, self.description = fmt, description


class _Explorer:
    controls = {
        "seed": _Slider(3, 0, 50, 1, description="seed"),
        "p": _Slider(0.1, 0.0, 0.9, 0.05, ".2f", "p"),
    }


def test_caps_keep_the_start_and_say_the_coarser_steps(monkeypatch):
    monkeypatch.setitem(X.CAPS, "fake", {"seed": (0, 10, 20)})
    controls, values = X.describe(_Explorer(), "fake")
    assert values[0] == [0, 3, 10, 20] and controls[0].start == 1 and controls[0].full == 51
    assert controls[1].labels[:3] == ["0.00", "0.05", "0.10"] and controls[1].start == 2
    note = X.coarse_note([c.__dict__ for c in controls])
    assert note == "seed: 4 of its 51 steps (0, 3, 10, 20)"
    monkeypatch.setitem(X.CAPS, "fake", {"seed": (0, 99)})
    with pytest.raises(ValueError, match="99"):
        X.describe(_Explorer(), "fake")


def test_every_explorer_grid_is_within_the_cap():
    """The caps are named for grids that are too large; a grid over MAX_FRAMES fails the build."""
    for name, caps in X.CAPS.items():
        assert caps, name
    assert X.MAX_FRAMES <= 1200


def test_a_chapter_page_links_colab_and_the_exercise_and_shows_figures_as_files():
    path = ROOT / "solutions" / "01_toy_attention.ipynb"
    manifest = {"key": "k", "name": "query_explorer", "width": 10, "height": 5, "coarse": "",
                "strides": [1], "frames": ["a.webp", "b.webp"],
                "controls": [{"name": "q", "kind": "dropdown", "label": "query token",
                              "labels": ["0: Your", "1: journey"], "start": 1, "full": 2}]}  # fmt: skip
    cell = next(f.cell for f in X.find() if f.notebook.endswith(path.name))
    nb = B.stage_chapter(path, {cell: manifest})
    title = nb.cells[0].source
    assert (
        "colab.research.google.com/github/" in title
        and "/notebooks/01_toy_attention.ipynb" in title
    )
    assert 'href="../exercises/01_toy_attention.ipynb" download' in title
    assert "colab-badge.svg" not in title  # an external image: it would not load offline
    assert not any("data:image/png" in c.source for c in nb.cells if c.cell_type == "markdown")
    assert any("(../figures/attention_scores.png" in c.source for c in nb.cells)
    html = nb.cells[cell].outputs[0]["data"]["text/html"]
    assert (
        'data-explorer="query_explorer"' in html and 'src="../_static/explorers/k/b.webp"' in html
    )
    assert '<option value="1" selected>1: journey</option>' in html
    stored = nbformat.read(path, as_version=4)
    assert stored.cells[cell].outputs != nb.cells[cell].outputs  # the file itself is untouched


# ----------------------------------------------------------------------------- in the browser
@site_only
def test_the_site_every_page_link_image_formula_and_explorer_control():
    assert (SITE / "index.html").exists(), "build the site first: make site"
    load = os.getloadavg()[0]
    report = S.check_site(SITE)
    found = X.find()
    print(
        f"\n{report.pages} pages, {report.links} links (external hosts: {sorted(report.external)}), "
        f"{report.images} images, {report.formulas} formulas"
    )
    for name, ms in report.times.items():
        print(
            f"  {name:20s} {len(ms):4d} moves: median {statistics.median(ms):5.1f} ms, "
            f"max {max(ms):6.1f} ms (goal {GOAL_MS} ms)"
        )
    assert report.problems == [], "\n".join(report.problems[:40])
    assert report.pages >= len(list((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))) + 4
    assert report.formulas > 50
    assert set(report.times) == {f.name for f in found}, "every explorer is on its page and moves"
    from tools.site import results

    results.record_site_response(report.times, load)


@site_only
def test_the_chapters_are_in_order_and_each_exercise_downloads_as_it_is():
    index = (SITE / "index.html").read_text(encoding="utf-8")
    shown = re.findall(r'href="chapters/(\d\d)_[\w]+\.html"', index)
    chapters = sorted(p.name[:2] for p in (ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
    assert list(dict.fromkeys(shown)) == chapters
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        assert (SITE / "exercises" / path.name).read_bytes() == path.read_bytes()
        page = (SITE / "chapters" / f"{path.stem}.html").read_text(encoding="utf-8")
        assert "Open the exercise in Colab" in page and f"../exercises/{path.name}" in page


@site_only
def test_the_check_faults_a_broken_site(tmp_path):
    """A missing page and image, raw math, a picture shrunk under the readable width, a frame that
    never comes and a request off the machine: each is reported."""
    from PIL import Image

    site = tmp_path / "site"
    frames = site / "_static" / "explorers" / "k"
    frames.mkdir(parents=True)
    (site / "chapters").mkdir()
    for name, colour in (("a.png", "white"), ("b.png", "black")):
        Image.new("RGB", (900, 60), colour).save(frames / name)
    shutil.copy(ROOT / "tools" / "site" / "static" / "course-explorer.js", site / "_static")
    manifest = {"key": "k", "name": "fake_explorer", "width": 900, "height": 60, "coarse": "",
                "strides": [1], "frames": ["a.png", "b.png", "gone.png"],
                "controls": [{"name": "x", "kind": "slider", "label": "x", "labels": ["0", "1", "2"],
                              "start": 0, "full": 3}]}  # fmt: skip
    page = f"""<html><body><article>
<p>See <a href="missing.html">a page</a> and <a href="https://example.org/x">outside</a>.</p>
<p>Raw: <span class="math">\\(x^2\\)</span> and $y_1$ here.</p>
<img src="nothing.png"><img src="../_static/explorers/k/a.png" style="width:300px">
<img src="https://example.org/remote.png">
{B.explorer_html(manifest)}
</article><script src="../_static/course-explorer.js"></script></body></html>"""
    (site / "chapters" / "page.html").write_text(page, encoding="utf-8")
    report = S.check_site(site, search_word=None)
    said = "\n".join(report.problems)
    for expected in ("broken link", "image does not load", "unrendered math (raw)",
                     "unrendered math (dollars)", "shown 300 px wide", "no new picture",
                     "left the machine"):  # fmt: skip
        assert expected in said, f"{expected!r} not reported in:\n{said}"
    assert len(report.times["fake_explorer"]) >= 1  # the frame that exists was timed
    assert json.dumps(report.times)


def test_the_website_guide_names_every_cap():
    """docs/site.md's table of coarser steps says what tools/site/explorers.CAPS keeps."""
    text = (ROOT / "docs" / "site.md").read_text(encoding="utf-8")
    for name, caps in X.CAPS.items():
        assert f"| {name.removesuffix('_explorer').replace('_', ' ')}" in text.replace(
            "KV", "kv"
        ), name
        for values in caps.values():
            said = (
                f"{values[0]}-{values[-1]}"
                if list(values) == list(range(values[0], values[-1] + 1))
                else ", ".join(map(str, values))
            )
            assert said in text, f"{name}: {said} is not said in docs/site.md"
