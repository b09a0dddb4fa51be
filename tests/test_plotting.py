"""cu.plotting: heatmap and heads_grid draw the right data and reject bad input clearly."""

from __future__ import annotations

import pytest
import torch
from matplotlib.figure import Figure
from matplotlib.text import Text

import course_utils as cu
from course_utils.plotting import heads_grid, heatmap

TOKENS = list(cu.EXAMPLE_TOKENS)


def _weights() -> torch.Tensor:
    x = cu.example_inputs()
    return torch.softmax(x @ x.T, dim=-1)  # (6, 6)


def _cell_texts(ax) -> dict[tuple[float, float], object]:
    return {tuple(t.get_position()): t for t in ax.texts}


# ----------------------------------------------------------------------------- heatmap
def test_heatmap_draws_the_data_with_labels_and_prints_nothing(capsys):
    weights = _weights()
    fig = heatmap(weights, TOKENS, title="weights")
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    assert torch.allclose(torch.as_tensor(ax.images[0].get_array()), weights)
    assert [t.get_text() for t in ax.get_xticklabels()] == TOKENS
    assert [t.get_text() for t in ax.get_yticklabels()] == TOKENS
    assert ax.get_title() == "weights"
    assert len(fig.axes) == 2  # the map and its colour bar
    assert capsys.readouterr().out == ""


def test_heatmap_annotation_colour_contrasts_with_its_cell():
    data = torch.tensor([[0.0, 1.0]])  # darkest and brightest cividis colours
    texts = _cell_texts(heatmap(data, ["q"], ["dark", "bright"]).axes[0])
    assert texts[(0, 0)].get_color() == "white"
    assert texts[(1, 0)].get_color() == "black"


def test_heatmap_masked_cells_are_blank_and_say_minus_inf():
    scores = torch.tensor([[1.0, float("-inf")], [0.5, 2.0]])
    ax = heatmap(scores, ["a", "b"]).axes[0]
    shown = ax.images[0].get_array()
    assert bool(shown.mask[0, 1]) and not bool(shown.mask[1, 0])
    assert _cell_texts(ax)[(1, 0)].get_text() == "-inf"


def test_heatmap_shared_scale_and_no_colorbar():
    fig = heatmap(_weights(), TOKENS, vmin=0, vmax=1, colorbar=False, annotate=False)
    ax = fig.axes[0]
    assert ax.images[0].get_clim() == (0, 1)
    assert len(fig.axes) == 1 and not ax.texts


def test_heatmap_into_given_axes_uses_its_figure():
    fig = Figure()
    ax = fig.add_subplot()
    assert heatmap(_weights(), TOKENS, ax=ax) is fig


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: heatmap([[0.5, 0.5]]), "weights must be a torch.Tensor, but got a list"),
        (
            lambda: heatmap(torch.ones(2, 2, 2)),
            "weights must be a 2-d tensor, but got a 3-d tensor",
        ),
        (lambda: heatmap(torch.ones(6, 6), TOKENS[:5]), "row_labels must have 6 entries"),
        (lambda: heatmap(torch.ones(2, 3), ["a", "b"], ["x"]), "col_labels must have 3 entries"),
        (lambda: heatmap(torch.ones(3, 3), "abc"), "single string 'abc'"),
        (lambda: heatmap(torch.ones(3, 3), 3), "row_labels must be a list of 3 strings .* got 3"),
        (lambda: heatmap(torch.ones(2, 2), vmin=1, vmax=0), "vmin must not exceed vmax"),
        (lambda: heatmap(torch.ones(0, 3)), "at least one row"),
    ],
)
def test_heatmap_rejects_bad_input_clearly(call, message):
    with pytest.raises(cu.CourseInputError, match=message):
        call()


# ----------------------------------------------------------------------------- heads_grid
def test_heads_grid_draws_every_head_on_one_shared_scale():
    weights = torch.stack([_weights(), _weights().T, torch.full((6, 6), 1 / 6)])  # (3, 6, 6)
    fig = heads_grid(weights, TOKENS, ncols=2)
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert (
        len(visible) == 4
    )  # three heads and one shared colour bar (the fourth grid cell is hidden)
    heads = [ax for ax in visible if ax.images]
    assert [ax.get_title() for ax in heads] == ["head 0", "head 1", "head 2"]
    assert len({ax.images[0].get_clim() for ax in heads}) == 1
    for h, ax in enumerate(heads):
        assert torch.allclose(torch.as_tensor(ax.images[0].get_array()), weights[h])


def test_heads_grid_own_scales_and_titles():
    weights = torch.stack([_weights(), 2 * _weights()])
    fig = heads_grid(weights, TOKENS, titles=["a", "b"], shared_scale=False)
    heads = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in heads] == ["a", "b"]
    assert heads[0].images[0].get_clim() != heads[1].images[0].get_clim()
    assert len(fig.axes) == 4  # two maps, two colour bars


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: heads_grid(torch.ones(6, 6)),
            "weights must be a 3-d tensor, but got a 2-d tensor",
        ),
        (
            lambda: heads_grid(torch.ones(2, 3, 3), titles=["only one"]),
            "titles must have 2 entries",
        ),
        (lambda: heads_grid(torch.ones(2, 3, 3), ["a", "b"]), "row_labels must have 3 entries"),
        (lambda: heads_grid(torch.ones(2, 3, 3), ncols=0), "ncols must be at least 1"),
    ],
)
def test_heads_grid_rejects_bad_input_clearly(call, message):
    with pytest.raises(cu.CourseInputError, match=message):
        call()


# ----------------------------------------------------------------------------- live frames (course_utils/_render.py)
def _texts_figure(animated: bool):
    fig = cu.plotting.new_figure((3.0, 2.0))
    fig.set_dpi(100)
    ax = fig.add_subplot()
    ax.set_xlim(-0.5, 2.5)
    ax.set_ylim(-0.5, 1.5)
    for i, value in enumerate(["0.25", "-inf", "1.00"]):
        ax.text(i, 0, value, ha="center", va="center", fontsize=8, animated=animated, color="black")
        ax.text(
            i,
            1,
            f"head {i}",
            ha="left",
            va="bottom",
            fontsize=9,
            animated=animated,
            color="#D55E00",
        )
    ax.set_title("title", animated=animated)
    ax.annotate(
        "arrow",
        (0.2, 0.2),
        xytext=(10, 10),
        textcoords="offset points",
        animated=animated,
        arrowprops={"arrowstyle": "-"},
    )
    return fig


def _pixels(png: bytes):
    import io

    import numpy as np
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)


@pytest.mark.parametrize(
    "missing", [None, "LINESPACING", "CHECK_XY", "SET_GC_CLIP"], ids=lambda m: m or "all_there"
)
def test_live_frame_texts_match_matplotlibs_own_drawing(missing, monkeypatch):
    """Texts pasted from the sprite cache look like matplotlib's drawing of them (fresh and cached),
    also when a private name of matplotlib that the fast path uses has disappeared."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from course_utils import _matplotlib_private, _render

    if missing == "LINESPACING":  # read only when there is no public getter
        monkeypatch.setattr(Text, "get_linespacing", None, raising=False)
    if missing is not None:  # a matplotlib without this private name
        monkeypatch.setattr(_matplotlib_private, missing, "_no_such_name")
    reference = FigureCanvasAgg(_texts_figure(animated=False))
    reference.draw()
    expected = np.asarray(reference.buffer_rgba())[..., :3].astype(int)
    _render._sprites.clear()
    fig = _texts_figure(animated=True)
    first, again = _pixels(_render.render_png(fig)), _pixels(_render.render_png(fig))
    # every string rasterised once, then reused (the annotation's drawn by matplotlib without _check_xy)
    assert len(_render._sprites) == (7 if missing == "CHECK_XY" else 8)
    for frame in (first, again):
        assert frame.shape == expected.shape
        assert np.abs(frame - expected).max() <= 3  # compositing rounds differently, nothing more


def test_line_spacing_without_the_public_getter_or_the_private_name():
    from types import SimpleNamespace

    from course_utils._matplotlib_private import linespacing

    assert linespacing(SimpleNamespace(_linespacing=1.5)) == 1.5  # matplotlib 3.10 (Colab)
    assert linespacing(SimpleNamespace()) == 1.2  # matplotlib's default


def test_live_frame_png_is_exact_and_the_sprite_cache_is_bounded(monkeypatch):
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from course_utils import _render

    canvas = FigureCanvasAgg(_texts_figure(animated=False))
    canvas.draw()
    assert np.array_equal(
        _pixels(_render.encode_png(canvas.buffer_rgba())), np.asarray(canvas.buffer_rgba())[..., :3]
    )
    monkeypatch.setattr(_render, "MAX_SPRITES", 3)
    _render._sprites.clear()
    _render.render_png(_texts_figure(animated=True))
    assert len(_render._sprites) <= 3


def test_heat_masked_cells_are_opaque_so_a_redraw_covers_the_old_frame():
    from course_utils.plotting import Heat

    fig = cu.plotting.new_figure((2.0, 2.0))
    heat = Heat(
        fig.add_subplot(),
        torch.tensor([[1.0, float("-inf")], [0.5, 0.2]]),
        vmin=0,
        vmax=1,
        annotate=True,
    )
    assert heat.image.get_cmap().get_bad()[3] == 1.0
    assert [t.get_text() for t in heat.texts] == ["1.00", "-inf", "0.50", "0.20"]
    assert heat.texts[0].get_color() == "black" and heat.texts[3].get_color() == "white"
