"""cu.widgets: the pure data functions, live controls that redraw, the static fallback, clear errors."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

import course_utils as cu
from course_utils import plotting as P
from course_utils import widgets as W
from course_utils.chapters.ch03.explorer import example_causal_weights
from tools.bench import explorers as bench


# ----------------------------------------------------------------------------- helpers
@pytest.fixture
def shown(monkeypatch):
    """Capture what the explorers display instead of sending it to a notebook."""
    captured: list = []
    monkeypatch.setattr(P, "_display", captured.append)
    return captured


@pytest.fixture
def live(monkeypatch, shown):
    """Live mode: returns a function that runs an explorer and hands back its Explorer."""
    pytest.importorskip("ipywidgets")
    monkeypatch.delenv(P.STATIC_ENV_VAR, raising=False)

    def run(explorer, *args, **kwargs):
        assert explorer(*args, **kwargs) is None
        explorers = [obj for obj in shown if isinstance(obj, P.Explorer)]
        assert len(explorers) == 1, f"expected one live explorer to be displayed, got {shown}"
        return explorers[0]

    return run


def fingerprint(fig: Figure) -> list:
    """The data a figure shows (texts, image arrays, bar heights, line points), without rendering it."""
    items: list = [fig.get_suptitle()]
    for ax in fig.axes:
        items.append(ax.get_title())
        items.extend(t.get_text() for t in ax.texts)
        items.extend(t.get_text() for t in ax.get_xticklabels())
        items.extend(img.get_array().tolist() for img in ax.images)
        items.extend(round(p.get_height(), 6) for p in ax.patches if hasattr(p, "get_height"))
        items.extend(np.asarray(line.get_xydata()).round(6).tolist() for line in ax.lines)
    return items


def moved(explorer: P.Explorer, **values) -> tuple[list, list]:
    """Fingerprints before and after setting control values (as a student moving them would)."""
    assert isinstance(explorer.figure, Figure)
    before = fingerprint(explorer.figure)
    for name, value in values.items():
        explorer.controls[name].value = value
    assert explorer.error is None, explorer.error
    assert explorer.png.startswith(b"\x89PNG") and explorer.image.value == P.frame_html(
        explorer.png
    )
    return before, fingerprint(explorer.figure)


# ----------------------------------------------------------------------------- pure functions
def test_query_data_matches_the_book():
    view = W.query_data(cu.example_inputs(), 1)
    assert torch.allclose(
        view.scores, torch.tensor([0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865]), atol=1e-4
    )
    assert torch.allclose(
        view.weights, torch.tensor([0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581]), atol=1e-4
    )
    assert torch.allclose(view.context, torch.tensor([0.4419, 0.6515, 0.5683]), atol=1e-4)


def test_scaling_data_plain_softmax_sharpens_scaled_does_not():
    narrow, wide = W.scaling_data(2, seed=3), W.scaling_data(512, seed=3)
    assert torch.allclose(narrow.weights_plain.sum(), torch.tensor(1.0))
    assert torch.allclose(wide.weights_scaled, torch.softmax(wide.scores / math.sqrt(512), dim=0))
    assert (
        wide.sweep_plain[-1] > 0.9 > 0.6 > wide.sweep_scaled[-1]
    )  # average largest weight at d_k = 512
    assert abs(float(wide.sweep_scaled[-1] - wide.sweep_scaled[15])) < 0.05  # flat with scaling
    again = W.scaling_data(512, seed=3)
    assert torch.equal(again.scores, wide.scores)
    assert not torch.allclose(W.scaling_data(4, seed=3).scores, wide.scores)


def test_mask_data_masking_before_softmax_equals_renormalising_after():
    scores = cu.data.example_scores()
    before = W.mask_data(scores, "mask with -inf, then softmax")
    zeroed = W.mask_data(scores, "softmax, then zero the future")
    renormalised = W.mask_data(scores, "softmax, zero the future, renormalise")
    assert torch.allclose(before.weights, renormalised.weights, atol=1e-6)
    assert torch.allclose(before.row_sums, torch.ones(6))
    assert bool((zeroed.row_sums[:5] < 0.99).all())  # zeroing leaks weight from every row...
    assert math.isclose(
        float(zeroed.row_sums[5]), 1.0, rel_tol=1e-6
    )  # ...but the last (it has no future)
    assert torch.isinf(before.softmax_input).sum() == 15
    assert torch.allclose(W.mask_data(scores, "no mask").weights, torch.softmax(scores, dim=-1))


def test_dropout_data_uses_the_portable_mask_and_rescales():
    weights = example_causal_weights()
    view = W.dropout_data(weights, 0.5, 123)
    assert torch.equal(view.mask, cu.portable_dropout_mask((6, 6), 0.5, 123))
    assert set(view.mask.unique().tolist()) <= {0.0, 2.0}
    assert torch.allclose(view.dropped, weights * view.mask)
    assert torch.allclose(view.row_sums, view.dropped.sum(dim=-1))
    assert torch.equal(W.dropout_data(weights, 0.0, 7).dropped, weights)


def test_head_data_tokenises_and_gives_causal_weights_per_head():
    rng_before = torch.get_rng_state()
    view = W.head_data(W.HEAD_TEXT, head=2, num_heads=4, seed=123)
    assert torch.equal(torch.get_rng_state(), rng_before), "head_data must not touch the global RNG"
    assert view.ids == (7120, 7002, 4940, 351, 530, 2239)
    assert view.pieces == ("Your", "␣journey", "␣starts", "␣with", "␣one", "␣step")
    assert view.weights.shape == (4, 6, 6)
    assert torch.allclose(view.weights.sum(dim=-1), torch.ones(4, 6))
    assert bool((view.weights.triu(diagonal=1) == 0).all())
    assert not torch.allclose(view.weights[0], view.weights[1])
    assert torch.equal(W.head_data(W.HEAD_TEXT, 0, 4, 123).weights, view.weights)
    long = W.head_data("word " * 50, 0)
    assert long.truncated and len(long.ids) == W.HEAD_CONTEXT
    assert W.head_data("<|endoftext|>", 0).ids  # special-token text is tokenised as plain text


def test_memory_data_counts_bytes():
    view = W.memory_data(1024, heads=12, batch=2, d_model=768, bytes_per_value=4)
    assert view.score_now == 2 * 12 * 1024 * 1024 * 4
    assert view.activation_now == 2 * 1024 * 768 * 4
    assert view.score_now / view.activation_now == 12 * 1024 / 768
    assert W.format_bytes(1536) == "1.5 KiB" and W.format_bytes(100 * 2**20) == "100 MiB"
    assert W.format_bytes(12) == "12 B"


def _dark_rows_at(png: bytes, fig: Figure, gib: float) -> float:
    """Of the axes' pixel rows, the share whose pixel at x = ``gib`` GiB is dark (a line's grey)."""
    import io

    import matplotlib.image as mpimg

    # rows from the bottom, as display coordinates
    image = mpimg.imread(io.BytesIO(png))[::-1, :, :3]
    ax = fig.axes[0]
    scale = image.shape[1] / fig.bbox.width
    x = round(ax.transData.transform((gib, 0))[0] * scale)
    bottom, top = (round(v * scale) for v in (ax.bbox.y0, ax.bbox.y1))
    column = image[bottom:top, x - 1 : x + 2].mean(axis=-1).min(axis=1)  # the darkest of 3 pixels
    return float((column < 0.35).mean())


def test_ch11_kv_wall_draws_the_promised_24_and_80_gib_lines(live, shown, monkeypatch):
    """The text above the explorer promises dashed lines at 24 and 80 GiB: they are in the figure,
    in the stored static view and in every live frame after the controls move."""
    monkeypatch.setenv(P.STATIC_ENV_VAR, "1")
    W.kv_wall_explorer()
    static = shown[0]
    dashed = {
        line.get_xdata()[0]
        for line in static.axes[0].lines
        if line.get_linestyle() == "--" and line.get_visible()
    }
    assert dashed == {24, 80}
    assert {t.get_text().strip() for t in static.axes[0].texts} >= {"24 GiB", "80 GiB"}
    monkeypatch.delenv(P.STATIC_ENV_VAR)
    explorer = live(W.kv_wall_explorer)
    for control, value in (("model", "Gemma 3 1B"), ("batch", 64), ("context", 1024)):
        explorer.controls[control].value = value
        for gib in (24, 80):  # dashes: about half of the column is the line's dark grey
            assert _dark_rows_at(explorer.png, explorer.figure, gib) > 0.3, (control, gib)
        assert _dark_rows_at(explorer.png, explorer.figure, 48) < 0.05  # between them: no line


# ----------------------------------------------------------------------------- live explorers
def test_query_explorer_redraws_when_the_query_changes(live):
    explorer = live(W.query_explorer)
    assert explorer.controls["query"].value == 1
    assert explorer.widget.children[-1] is explorer.image
    before, after = moved(explorer, query=4)
    assert before != after
    assert "1. scores: x(one) · x(j), query 4" in after


def test_scaling_explorer_redraws_for_d_k_and_seed(live):
    explorer = live(W.scaling_explorer)
    before, after = moved(explorer, d_k=256)
    assert before != after
    assert moved(explorer, seed=9)[0] != fingerprint(explorer.figure)


def test_mask_explorer_redraws_for_each_mode(live):
    explorer = live(W.mask_explorer)
    before, after = moved(explorer, mode="softmax, then zero the future")
    assert before != after
    assert "not all 1!" in after


def test_dropout_explorer_redraws_for_p_and_seed(live):
    explorer = live(W.dropout_explorer)
    before, after = moved(explorer, p=0.2)
    assert before != after
    assert moved(explorer, seed=5)[0] != fingerprint(explorer.figure)


def test_head_explorer_redraws_for_head_and_text_and_reports_empty_text(live):
    explorer = live(W.head_explorer, num_heads=2)
    assert explorer.controls["head"].max == 1
    before, after = moved(explorer, head=1)
    assert before != after
    before, after = moved(explorer, text="Attention is all you need")
    assert before != after and "␣need" in after
    explorer.controls["text"].value = ""
    assert "text is empty" in explorer.error and "text is empty" in explorer.message.value
    explorer.controls["text"].value = "back again"
    assert (
        explorer.error is None
        and explorer.message.value == ""
        and "␣again" in fingerprint(explorer.figure)
    )


def test_memory_explorer_redraws_for_every_control(live):
    explorer = live(W.memory_explorer)
    for name, value in (("n", 8192), ("heads", 4), ("batch", 16), ("dtype", 2)):
        before, after = moved(explorer, **{name: value})
        assert before != after, f"moving {name} did not change the figure"


def test_live_explorer_layout_is_controls_then_one_output(live):
    ipywidgets = pytest.importorskip("ipywidgets")
    explorer = live(W.memory_explorer)
    *controls, message, image = explorer.widget.children
    assert isinstance(explorer.widget, ipywidgets.VBox)
    assert controls == list(explorer.controls.values())
    assert isinstance(message, ipywidgets.HTML) and isinstance(image, ipywidgets.HTML)
    assert image.value.startswith('<img class="course-frame"')
    assert isinstance(explorer.controls["n"], ipywidgets.SelectionSlider)


# ----------------------------------------------------------------------------- static fallback
@pytest.mark.parametrize("name", bench.explorer_names())
def test_static_mode_shows_one_figure_and_the_note(name, shown, monkeypatch, capsys):
    monkeypatch.setenv(P.STATIC_ENV_VAR, "1")
    assert getattr(W, name)(*bench.EXAMPLE_ARGUMENTS.get(name, tuple)()) is None
    assert len(shown) == 1 and isinstance(shown[0], Figure)
    assert capsys.readouterr().out == P.STATIC_NOTE + "\n"


def test_static_mode_without_ipywidgets(monkeypatch):
    monkeypatch.delenv(P.STATIC_ENV_VAR, raising=False)
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # makes `import ipywidgets` fail
    assert P.static_mode()
    monkeypatch.setenv(P.STATIC_ENV_VAR, "0")
    assert P.static_mode()


def test_static_figure_matches_the_default_controls(shown, monkeypatch, capsys):
    monkeypatch.setenv(P.STATIC_ENV_VAR, "1")
    W.query_explorer()
    capsys.readouterr()
    expected = P.new_figure((11.0, 3.4))
    W.draw_query(expected, W.query_data(cu.example_inputs(), 1))
    assert fingerprint(shown[0]) == fingerprint(expected)


# ----------------------------------------------------------------------------- while nbgrader grades
@pytest.mark.parametrize("static", ["1", None], ids=["static", "live"])
@pytest.mark.parametrize("name", bench.explorer_names())
def test_while_nbgrader_grades_an_explorer_draws_nothing_and_says_so(
    name, static, shown, monkeypatch, capsys
):
    """Under nbgrader's NBGRADER_EXECUTION (cu.light_run) nobody sees an explorer: every one of them
    (later chapters' too, found by name) builds no widget, makes no figure and prints one line."""
    if static is None:
        pytest.importorskip("ipywidgets")
        monkeypatch.delenv(P.STATIC_ENV_VAR, raising=False)
    else:
        monkeypatch.setenv(P.STATIC_ENV_VAR, static)
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")

    def no_figure(*args, **kwargs):
        raise AssertionError("a figure was made while nbgrader grades")

    monkeypatch.setattr(P, "new_figure", no_figure)
    assert getattr(W, name)(*bench.EXAMPLE_ARGUMENTS.get(name, tuple)()) is None
    assert shown == [] and capsys.readouterr().out == P.GRADING_NOTE + "\n"


@pytest.mark.parametrize("value", ["autograde", "validate", "", "other"])
def test_explorer_runtime_computes_nothing_while_nbgrader_grades(value, shown, monkeypatch, capsys):
    """P.explorer itself: under light_run compute, draw and controls are never called; otherwise
    (nbgrader's variable unset or another value) it draws as before."""
    monkeypatch.setenv(P.STATIC_ENV_VAR, "1")
    monkeypatch.setenv("NBGRADER_EXECUTION", value)
    calls: list = []

    def compute(x):
        calls.append("compute")
        return x

    def draw(fig, view):
        calls.append("draw")
        fig.add_subplot().plot([0, view])

    P.explorer(compute, draw, {"x": 1}, lambda w: calls.append("controls"), figsize=(2, 2))
    if cu.light_run():
        assert calls == [] and shown == [] and capsys.readouterr().out == P.GRADING_NOTE + "\n"
    else:
        assert calls == ["compute", "draw"] and isinstance(shown[0], Figure)
        assert capsys.readouterr().out == P.STATIC_NOTE + "\n"


# ----------------------------------------------------------------------------- bad arguments
BAD_CALLS = [
    (lambda: W.query_explorer(torch.ones(6)), "inputs must be a 2-d tensor, but got a 1-d tensor"),
    (lambda: W.query_explorer(torch.ones(4, 3)), None),  # fine: labels default to 0..3
    (lambda: W.query_explorer(labels=["a", "b"]), "labels must have 6 entries"),
    (lambda: W.query_explorer(torch.ones(3, 2, dtype=torch.long)), "floating-point"),
    (lambda: W.scaling_explorer(d_k=0), "d_k must be at least 1, but got 0"),
    (lambda: W.scaling_explorer(d_k=1000), "d_k must be at most 512, but got 1000"),
    (
        lambda: W.mask_explorer(torch.ones(2, 6, 6)),
        "scores must be a 2-d tensor, but got a 3-d tensor",
    ),
    (lambda: W.mask_explorer(torch.ones(3, 4)), r"square \(n, n\) matrix.*shape \(3, 4\)"),
    (lambda: W.mask_explorer(labels=["a"]), "labels must have 6 entries"),
    (
        lambda: W.dropout_explorer(p=1.0),
        r"p must be in \[0, 1\) \(a drop probability\), but got 1.0",
    ),
    (lambda: W.dropout_explorer(p=-0.1), r"p must be in \[0, 1\)"),
    (lambda: W.dropout_explorer(seed=-1), "seed must be at least 0"),
    (lambda: W.dropout_explorer(torch.ones(6)), "weights must be a 2-d tensor"),
    (lambda: W.head_explorer(text=""), "text is empty"),
    (lambda: W.head_explorer(text=42), "text must be a string, but got int"),
    (
        lambda: W.head_explorer(num_heads=3),
        r"num_heads must divide the model width d_model=16 .*got 3",
    ),
    (lambda: W.memory_explorer(n=1000), r"n must be one of \[64, 128"),
    (lambda: W.memory_explorer(heads=0), "heads must be at least 1"),
    (lambda: W.memory_explorer(batch=65), "batch must be at most 64, but got 65"),
    (lambda: W.head_explorer(seed="1"), "seed must be an int, but got a str"),
    (lambda: W.dropout_explorer(labels="abcdef"), "single string"),
]


@pytest.mark.parametrize(("call", "message"), BAD_CALLS)
def test_explorers_reject_bad_arguments_clearly(call, message, shown, monkeypatch, capsys):
    monkeypatch.setenv(P.STATIC_ENV_VAR, "1")
    if message is None:
        call()
        assert isinstance(shown[0], Figure)
        return
    with pytest.raises(cu.CourseInputError, match=message):
        call()
    assert shown == []  # nothing is drawn for bad arguments


# ----------------------------------------------------------------------------- speed, by construction
@pytest.mark.parametrize("name", bench.explorer_names())
def test_every_explorer_redraws_only_what_changes(name, monkeypatch):
    """Moving any control of any explorer (later chapters' too, found by name) updates animated
    artists over the kept background: no full figure draw, and PyTorch's threads are given back."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    pytest.importorskip("ipywidgets")
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # not 1 (make test's count), which a redraw itself sets
    found = bench.start(name)
    changes = bench.moves(found)
    assert changes, f"{name} has no slider or drop-down"
    full_draws = []
    original = FigureCanvasAgg.draw
    monkeypatch.setattr(
        FigureCanvasAgg, "draw", lambda canvas: (full_draws.append(1), original(canvas))
    )
    for control, attribute, value in changes[:3]:
        before = found.png
        setattr(found.controls[control], attribute, value)
        assert found.error is None and found.png != before, (
            f"{control} -> {value!r} drew nothing new"
        )
    assert full_draws == [], "a non-animated artist changed, so the whole figure was drawn again"
    given_back = torch.get_num_threads()
    torch.set_num_threads(threads)
    assert given_back == 2


def test_bench_explorers_times_one_explorer(capsys):
    """tools/bench/explorers.py on the memory explorer: every control moved and back, numbers, one table row."""
    explorer = bench.start("memory_explorer")
    changes = bench.moves(explorer)
    assert {control for control, _, _ in changes} == {"n", "heads", "batch", "dtype"}
    assert changes[-1] == (
        "dtype",
        "index",
        explorer.controls["dtype"].index,
    )  # back where it started
    timing = bench.time_explorer("memory_explorer", runs=1)
    assert timing.changes == len(changes) and 0 < timing.p10 <= timing.median <= timing.p90
    assert timing.best_pass > 0 and timing.first > 0
    assert (
        bench.chapter_of("memory_explorer") == "07"
        and bench.chapter_of("head_explorer") == "05, 06"
    )
    assert bench.main(["--runs", "1", "--names", "memory_explorer"]) == 0
    out = capsys.readouterr().out
    assert "load average" in out and "memory_explorer" in out and "median" in out
