"""Drawing for the course: one palette, the attention-map helpers, and the explorer helper.

* :func:`heatmap` draws one 2-d map (rows are queries, columns are keys);
* :func:`heads_grid` draws every head of a multi-head layer side by side, on one colour scale;
* :func:`explorer` turns a ``compute`` function and a ``draw`` function into live controls
  (see its docstring; ``cu.widgets`` builds every explorer of the course on it).

The drawing functions return the matplotlib ``Figure`` and close it from pyplot's list, so
a cell that ends with the call shows the picture once and prints no object repr.
"""

from __future__ import annotations

import base64
import html
import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import torch
from matplotlib.figure import Figure

from ._artists import *  # noqa: F403 - the palette and the artists, reached as cu.plotting.X
from ._artists import (
    check_labels,
    draw_map,
    expect_map,
    finite_range,
    new_figure,
)
from ._render import render_png  # the live explorers' fast PNG frames
from .repro import light_run
from .validation import CourseInputError, expect_int, expect_tensor


# ----------------------------------------------------------------------------- public plots
def heatmap(
    weights: torch.Tensor,
    row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None,
    *,
    title: str | None = None,
    ax=None,
    vmin: float | None = None,
    vmax: float | None = None,
    annotate: bool | None = None,
    **style,
) -> Figure:
    """Draw a 2-d attention map: rows are queries, columns are keys.

    Args:
        weights: a 2-d tensor (n_queries, n_keys). Masked entries may be ``-inf`` or NaN;
            they are drawn blank (``-inf`` cells say so when values are written).
        row_labels, col_labels: token labels; ``col_labels`` defaults to ``row_labels``.
        title: the axes title.
        ax: draw into this axes (for grids); a new figure is made when omitted.
        vmin, vmax: a shared colour scale (e.g. ``vmin=0, vmax=1`` to compare maps);
            defaults to the data's finite range.
        annotate: write values in the cells; by default when the map is at most 8 x 8.
            The text is black or white, whichever contrasts more with its cell.
        style: how the map looks, each optional: ``cmap`` (default: colour-blind-safe
            ``cividis``), ``xlabel`` and ``ylabel`` (the axis titles), ``colorbar`` (default
            True) and ``decimals`` (digits after the point in the written values, default 2).

    Returns:
        The figure holding the map.

    Example::

        cu.plotting.heatmap(attn_weights, cu.EXAMPLE_TOKENS, title="attention weights");
    """
    data = expect_map(weights, "weights")
    n_rows, n_cols = data.shape
    rows = check_labels(row_labels, n_rows, "row_labels", "row")
    cols = check_labels(
        col_labels if col_labels is not None else (row_labels if n_rows == n_cols else None),
        n_cols,
        "col_labels",
        "column",
    )
    lo, hi = finite_range(data)
    lo, hi = float(vmin) if vmin is not None else lo, float(vmax) if vmax is not None else hi
    if lo > hi:
        raise CourseInputError(f"vmin must not exceed vmax, but got vmin={lo} and vmax={hi}.")
    if ax is None:
        fig = new_figure((max(3.2, 0.6 * n_cols + 1.8), max(2.8, 0.5 * n_rows + 1.4)))
        ax = fig.add_subplot()
    annotate = n_rows <= 8 and n_cols <= 8 if annotate is None else annotate
    draw_map(ax, data, rows, cols, vmin=lo, vmax=hi, annotate=annotate, title=title, **style)
    return ax.figure


def heads_grid(
    weights: torch.Tensor,
    labels: Sequence[str] | None = None,
    *,
    titles: Sequence[str] | None = None,
    shared_scale: bool = True,
    ncols: int | None = None,
    annotate: bool | None = None,
) -> Figure:
    """Draw every head's attention map in a grid, one :func:`heatmap` per head.

    Args:
        weights: a 3-d tensor (num_heads, n, n), e.g. ``attn_weights[0]`` of a
            (batch, heads, n, n) tensor.
        labels: one label per token (default: 0, 1, 2, ...).
        titles: one title per head (default: ``head 0``, ``head 1``, ...).
        shared_scale: one colour scale (and one colour bar) for all heads, so colours
            compare across heads; otherwise every map gets its own scale and bar.
        ncols: maps per row (default: up to 4).
        annotate: write values in the cells; by default when n is at most 6.

    Example::

        cu.plotting.heads_grid(weights[0], tokens);
    """
    expect_tensor(weights, "weights", ndim=3)
    data = weights.detach().to("cpu", torch.float32)
    num_heads, n_rows, n_cols = data.shape
    if num_heads == 0:
        raise CourseInputError("weights must hold at least one head, but its first dimension is 0.")
    if titles is None:
        titles = [f"head {h}" for h in range(num_heads)]
    elif isinstance(titles, str) or len(titles) != num_heads:
        given = repr(titles) if isinstance(titles, str) else f"{len(titles)} titles"
        raise CourseInputError(
            f"titles must have {num_heads} entries (one per head), but got {given}."
        )
    ncols = min(expect_int(ncols, "ncols", minimum=1) if ncols is not None else 4, num_heads)
    nrows = math.ceil(num_heads / ncols)
    annotate = n_rows <= 6 and n_cols <= 6 if annotate is None else annotate
    lo, hi = finite_range(data)
    cell = max(2.4, 0.42 * n_cols + 1.3)
    fig = new_figure((cell * ncols + (0.9 if shared_scale else 0.6 * ncols), cell * nrows * 0.95))
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for h in range(num_heads):
        heatmap(
            data[h],
            labels,
            title=str(titles[h]),
            ax=axes[h // ncols][h % ncols],
            annotate=annotate,
            vmin=lo if shared_scale else None,
            vmax=hi if shared_scale else None,
            xlabel="key" if h // ncols == nrows - 1 else "",
            ylabel="query" if h % ncols == 0 else "",
            colorbar=not shared_scale,
        )
    for ax in axes.flat[num_heads:]:
        ax.set_visible(False)
    if shared_scale:
        fig.colorbar(axes[0][0].images[0], ax=list(axes.flat[:num_heads]), shrink=0.8)
    return fig


# ----------------------------------------------------------------------------- explorers
STATIC_ENV_VAR = "COURSE_STATIC_WIDGETS"
"""Set to ``1`` to make every explorer draw a static figure instead of live controls."""

STATIC_NOTE = "(static view: run in JupyterLab or Colab to move the controls)"
"""The one line an explorer prints under its static figure."""

GRADING_NOTE = "(explorer not drawn while nbgrader grades: open the notebook to move its controls)"
"""The one line an explorer prints instead of anything else while nbgrader grades (light_run)."""

LIVE_DPI = 100
"""Resolution of the live pictures: sharp at the size JupyterLab and Colab show them."""


def static_mode() -> bool:
    """True when explorers should draw a static figure: no ipywidgets, or the env var is set."""
    if os.environ.get(STATIC_ENV_VAR, "").strip().lower() in ("1", "true", "yes", "on"):
        return True
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return True
    return False


def progress(iterable, desc: str):
    """tqdm's bar over ``iterable`` when live; the plain iterable under static_mode (stored outputs)."""
    from tqdm.auto import tqdm

    return iterable if static_mode() else tqdm(iterable, desc=desc)


def _display(obj) -> None:
    """Show ``obj`` in the notebook (tests and the benchmark replace this to capture it)."""
    from IPython.display import display

    display(obj)


def frame_html(png: bytes) -> str:
    """``png`` inline in an ``<img>``: text, where an ``ipywidgets.Image`` sends a binary buffer."""
    data = base64.b64encode(png).decode("ascii")
    return f'<img class="course-frame" style="max-width:100%" src="data:image/png;base64,{data}">'


def handles(fig: Figure) -> dict:
    """The dict a ``draw`` function keeps its artists in between calls (empty on a new figure)."""
    return fig.__dict__.setdefault("_course_handles", {})


class Explorer:
    """Live controls (``controls``, by ``compute``'s argument names) over one ``figure`` redrawn as
    the PNG ``image``; ``message`` (and ``error``) explain rejected values; ``widget`` is shown."""

    def __init__(
        self,
        compute: Callable[..., Any],
        draw: Callable[[Figure, Any], None],
        controls: dict,
        figsize: tuple[float, float],
        view: Any = None,
    ) -> None:
        import ipywidgets as widgets

        self.compute, self.draw, self.controls = compute, draw, controls
        self.figure = new_figure(figsize)
        self.figure.set_dpi(LIVE_DPI)
        self.view, self.error, self.png = None, None, b""
        self.image = widgets.HTML()  # the PNG as text: Colab is weak on binary widget buffers
        self.message = widgets.HTML()
        self.widget = widgets.VBox([*controls.values(), self.message, self.image])
        for control in controls.values():
            control.observe(self.update, names="value")
        self.update(view=view)

    def update(self, change=None, view: Any = None) -> None:
        """Compute for the controls' values, update the figure, send the new PNG."""
        # One PyTorch thread: the tensors are tiny, and waking a pool can cost more (measured: 16 ms stalls).
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            if view is None:
                try:
                    view = self.compute(**{name: c.value for name, c in self.controls.items()})
                except CourseInputError as error:  # e.g. the text box was emptied
                    self.error = str(error)
                    self.message.value = f"<b>{html.escape(self.error)}</b>"
                    return
            self.error, self.message.value, self.view = None, "", view
            self.draw(self.figure, view)
            self.png = render_png(self.figure)
        finally:
            torch.set_num_threads(threads)
        self.image.value = frame_html(self.png)

    def _ipython_display_(self) -> None:
        _display(self.widget)


def explorer(
    compute: Callable[..., Any],
    draw: Callable[[Figure, Any], None],
    values: dict,
    controls: Callable[[Any], dict],
    *,
    figsize: tuple[float, float],
) -> None:
    """Show live controls that redraw a figure, or one static figure under nbval.

    Args:
        compute: ``compute(**values) -> view``: plain data for the control values (no figure;
            unit-test it). Raise ``CourseInputError`` for values it cannot use.
        draw: ``draw(fig, view)``: on an empty figure make the axes and artists (keep them in
            ``handles(fig)``); on later calls only update them (``set_data``, ``set_height``,
            ``set_text``). Artists created with ``animated=True`` are redrawn alone, fast.
        values: the starting value of every control, by ``compute``'s argument names.
        controls: ``controls(ipywidgets) -> {name: widget}`` with those starting values.
        figsize: the figure size in inches.

    Without ipywidgets or with ``COURSE_STATIC_WIDGETS=1`` (nbval, ``make solutions``), it
    shows one static figure for ``values`` and prints :data:`STATIC_NOTE`. Bad starting
    values raise before anything is shown. While nbgrader grades (``light_run()``), nobody sees
    it: it computes and draws nothing and prints :data:`GRADING_NOTE`. Returns ``None``.

    Example (a complete explorer)::

        def compute(temperature):
            return torch.softmax(torch.tensor([2.0, 1.0, 0.5]) / temperature, dim=0)  # (3,)

        def draw(fig, weights):
            h = handles(fig)
            if not h:  # first call: build
                ax = fig.add_subplot()
                h["bars"] = Bars(ax, weights, animated=True)
                ax.set_ylim(0, 1.15)
            h["bars"].update(weights)

        def controls(widgets):
            return {"temperature": widgets.FloatSlider(value=1.0, min=0.1, max=5.0)}

        explorer(compute, draw, {"temperature": 1.0}, controls, figsize=(4, 3))
    """
    if light_run():
        print(GRADING_NOTE)
        return
    view = compute(**values)  # bad starting values fail here, before anything is shown
    if static_mode():
        fig = new_figure(figsize)
        draw(fig, view)
        _display(fig)
        print(STATIC_NOTE)
    else:
        import ipywidgets as widgets

        _display(Explorer(compute, draw, controls(widgets), figsize, view))
