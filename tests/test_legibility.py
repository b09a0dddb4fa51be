"""Every figure and explorer frame is readable where it is shown: no text under 9 px on screen.

A picture is shown at most as wide as JupyterLab gives it (``DISPLAY_WIDTH`` for a markdown
figure, ``FRAME_WIDTH`` for an explorer's frame, both measured in a 1280-pixel-wide window with the
file browser open; ``make test-browser`` re-measures them on every figure and frame), and shrunk
to that width when wider. A text's height on screen is its font size in pixels at the picture's dpi
times that shrink factor, for every text the figure really draws (recorded while saving).
"""

from __future__ import annotations

import matplotlib
import pytest
from matplotlib.figure import Figure

from tools import figures as F

FRAME_WIDTH = F.FRAME_WIDTH


@pytest.mark.parametrize("name", list(F.FIGURES))
def test_figure_text_is_at_least_9_px_on_screen(name):
    fig = F.render(name)
    small = F.small_text(fig, F.DPI, F.DISPLAY_WIDTH)
    width = fig.get_size_inches()[0]
    assert not small, (
        f"figures/{name}.png ({width:.1f} in at {F.DPI} dpi, shown {F.DISPLAY_WIDTH} px wide) has "
        f"{len(small)} texts under {F.MIN_TEXT_PX} px on screen, e.g. {small[:3]}: use larger "
        f"fonts or a narrower figure (stack the panels): a font of f pt stays readable up to "
        f"{F.DISPLAY_WIDTH / 72 / F.MIN_TEXT_PX:.2f} f inches of width."
    )


def test_the_measure_sees_every_drawn_text_and_the_shrink():
    fig = Figure(figsize=(10, 2))
    ax = fig.add_subplot()
    ax.set_xlim(0, 1)
    ax.set_xticks([0, 1], ["left", "right"], fontsize=9)
    ax.set_yticks([])
    ax.text(0.5, 0.5, "small", fontsize=6)
    ax.text(0.5, 0.2, "", fontsize=2)  # empty: not drawn
    ax.text(0.5, 0.1, "hidden", fontsize=2, visible=False)
    measured = F.text_px(fig, 150, 821)
    assert [t for _, t in measured] == ["small", "left", "right"]
    assert measured[0][0] == pytest.approx(6 * 150 / 72 * 821 / 1500)  # 6 pt, shrunk 1500 -> 821 px
    assert F.small_text(fig, 150, 821) == ["6.8 px: 'small'"]  # 9 pt shrunk: 10.3 px
    # Narrower than the display: shown at its natural size, so the dpi counts.
    assert F.text_px(Figure(figsize=(4, 2)), 100, 821) == []
    narrow = Figure(figsize=(4, 2))
    narrow.text(0.5, 0.5, "nine", fontsize=6.48)
    assert F.text_px(narrow, 100, 821)[0][0] == pytest.approx(9.0)


# ----------------------------------------------------------------------------- explorer frames
def _explorer_names():
    from tools import bench_explorers

    return bench_explorers.explorer_names()


@pytest.mark.parametrize("name", _explorer_names())
def test_explorer_frame_text_is_at_least_9_px_on_screen(name):
    from tools import bench_explorers

    matplotlib.use("agg")
    explorer = bench_explorers.start(name)
    fig = explorer.figure
    small = F.small_text(fig, fig.dpi, FRAME_WIDTH)
    width = fig.get_size_inches()[0] * fig.dpi
    assert not small, (
        f"{name}'s frame ({width:.0f} px, shown at most {FRAME_WIDTH} px wide) has {len(small)} "
        f"texts under {F.MIN_TEXT_PX} px on screen, e.g. {small[:3]}"
    )
