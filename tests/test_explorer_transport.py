"""Explorer frames travel as text, never as binary widget buffers (Colab's widget manager is weak
on those), and long training shows progress when live. Split from tests/test_colab.py."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _binary_buffers(widget) -> list:
    """The binary buffers ipywidgets would send for ``widget`` and every widget inside it."""
    from ipywidgets.widgets.widget import _remove_buffers

    found, todo = [], [widget]
    while todo:
        w = todo.pop()
        _, _, buffers = _remove_buffers(w.get_state())
        found += [(type(w).__name__, len(b)) for b in buffers]
        todo += list(getattr(w, "children", ()))
    return found


@pytest.mark.parametrize(
    "name", __import__("tools.bench.explorers").bench.explorers.explorer_names()
)
def test_no_explorer_sends_a_binary_buffer(name, monkeypatch):
    """Colab's widget manager is weak on binary comm buffers (what ipywidgets.Image sends): every
    frame of every explorer travels as text (an HTML widget holding a data: PNG), at start and
    after each control move, and nothing a widget sends carries a buffer."""
    ipywidgets = pytest.importorskip("ipywidgets")
    from course_utils import plotting
    from tools.bench import explorers as bench

    sent = []
    original = ipywidgets.Widget._send
    monkeypatch.setattr(
        ipywidgets.Widget,
        "_send",
        lambda self, msg, buffers=None: (sent.append(buffers or []), original(self, msg, buffers)),
    )
    explorer = bench.start(name)
    assert _binary_buffers(explorer.widget) == []
    for control, attribute, value in bench.moves(explorer)[:4]:
        before = explorer.image.value
        setattr(explorer.controls[control], attribute, value)
        assert explorer.image.value != before and explorer.image.value == plotting.frame_html(
            explorer.png
        )
        assert _binary_buffers(explorer.widget) == []
    assert sent and [b for b in sent if b] == []  # state updates were sent, none with a buffer


def test_the_buffer_rule_fails_on_an_image_widget():
    """The rule can fail: an ipywidgets.Image (the old transport) carries its PNG as a buffer."""
    ipywidgets = pytest.importorskip("ipywidgets")
    image = ipywidgets.Image(value=b"\x89PNG\r\n\x1a\n" + b"x" * 10, format="png")
    assert _binary_buffers(ipywidgets.VBox([ipywidgets.HTML("a"), image])) == [("Image", 18)]


def test_long_training_shows_a_progress_bar_when_live(monkeypatch):
    """Chapter 08's 300-step training loop shows a tqdm bar in a live notebook (Colab, JupyterLab);
    under static mode (nbval, make solutions) the loop is plain, so stored outputs hold no bar.
    (tqdm.notebook ignores TQDM_DISABLE, checked with tqdm 4.70: hence the course's switch.)"""
    import tqdm

    from course_utils import plotting

    monkeypatch.delenv(plotting.STATIC_ENV_VAR, raising=False)
    bar = plotting.progress(range(3), "training steps")
    assert isinstance(bar, tqdm.std.tqdm) and list(bar) == [0, 1, 2]
    monkeypatch.setenv(plotting.STATIC_ENV_VAR, "1")
    steps = range(3)
    assert plotting.progress(steps, "training steps") is steps
    source = (ROOT / "solutions" / "08_attention_that_learns.ipynb").read_text(encoding="utf-8")
    assert "for step in cu.plotting.progress(range(1, TEXT_STEPS + 1)" in source
