"""Plots for attention: one heatmap helper for every attention map in the course.

* :func:`heatmap` draws one 2-d map (rows are queries, columns are keys);
* :func:`weights_bar` draws one query's weights as bars;
* :func:`heads_grid` draws every head of a multi-head layer side by side, on one colour scale.

Every function returns the matplotlib ``Figure`` and closes it from pyplot's list, so a
cell that ends with the call shows the picture once (through the figure's rich display)
and never prints an object repr that would disturb nbval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib import colormaps
from matplotlib.colors import Normalize, to_rgba
from matplotlib.figure import Figure

from .validation import CourseInputError, expect_int, expect_tensor

CMAP = "cividis"
"""Colour-blind-safe, perceptually uniform sequential colormap used for every map."""

MASKED_TEXT = "-inf"
"""What a masked (``-inf``) cell shows when values are written in the cells."""


def check_labels(labels: Sequence[str] | None, n: int, what: str = "labels", per: str = "token",
                 default: Sequence[str] | None = None) -> list[str]:
    """Return ``n`` string labels, ``default`` (or 0..n-1) when ``labels`` is None; else a clear error."""
    if labels is None:
        return [str(i) for i in range(n)] if default is None else list(default)
    if isinstance(labels, str):
        raise CourseInputError(f"{what} must be a list of {n} strings (one per {per}), but got the "
                               f"single string {labels!r}. Tip: pass a list, e.g. text.split().")
    labels = [str(label) for label in labels]
    if len(labels) != n:
        raise CourseInputError(f"{what} must have {n} entries (one per {per}), "
                               f"but got {len(labels)}: {labels}.")
    return labels


def _readable_text_colour(background) -> str:
    """Black or white, whichever reads better on ``background`` (WCAG relative luminance)."""
    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b, _ = to_rgba(background)
    luminance = 0.2126 * linear(r) + 0.7152 * linear(g) + 0.0722 * linear(b)
    # Contrast with black is (L + 0.05) / 0.05, with white 1.05 / (L + 0.05): equal at L ~ 0.179.
    return "black" if luminance > 0.179 else "white"


def _format_value(value: float) -> str:
    if math.isnan(value):
        return ""
    if value == float("-inf"):
        return MASKED_TEXT
    if value == float("inf"):
        return "inf"
    return f"{value:.2f}"


def _new_figure(figsize: tuple[float, float]):
    fig = plt.figure(figsize=figsize, layout="constrained")
    plt.close(fig)  # shown once through the returned figure, never again by pyplot
    return fig


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
    cmap: str = CMAP,
    xlabel: str = "key (attended to)",
    ylabel: str = "query (attending)",
    colorbar: bool = True,
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
        cmap: the colormap (default: colour-blind-safe ``cividis``).
        xlabel, ylabel: the axis titles.
        colorbar: draw a colour bar next to the map.

    Returns:
        The figure holding the map.

    Example::

        cu.plotting.heatmap(attn_weights, cu.EXAMPLE_TOKENS, title="attention weights");
    """
    expect_tensor(weights, "weights", ndim=2)
    if weights.is_complex():
        raise CourseInputError(f"weights must hold real numbers, but got dtype {weights.dtype}.")
    data = weights.detach().to("cpu", torch.float32)
    n_rows, n_cols = data.shape
    if n_rows == 0 or n_cols == 0:
        raise CourseInputError(f"weights must have at least one row and one column, "
                               f"but got shape {tuple(data.shape)}.")
    rows = check_labels(row_labels, n_rows, "row_labels", "row")
    cols = check_labels(col_labels if col_labels is not None else (row_labels if n_rows == n_cols else None),
                       n_cols, "col_labels", "column")
    finite = data[torch.isfinite(data)]
    lo = float(vmin) if vmin is not None else (float(finite.min()) if finite.numel() else 0.0)
    hi = float(vmax) if vmax is not None else (float(finite.max()) if finite.numel() else 1.0)
    if lo > hi:
        raise CourseInputError(f"vmin must not exceed vmax, but got vmin={lo} and vmax={hi}.")
    if ax is None:
        size = (max(3.2, 0.6 * n_cols + 1.8), max(2.8, 0.5 * n_rows + 1.4))
        fig = _new_figure(size)
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    colours = colormaps[cmap]
    shown = data.masked_fill(~torch.isfinite(data), float("nan")).numpy()
    image = ax.imshow(shown, cmap=colours, vmin=lo, vmax=hi, aspect="auto", interpolation="nearest")
    long_labels = max(map(len, cols)) > 3
    ax.set_xticks(range(n_cols), cols, rotation=45 if long_labels else 0,
                  ha="right" if long_labels else "center", rotation_mode="anchor")
    ax.set_yticks(range(n_rows), rows)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if annotate is None:
        annotate = n_rows <= 8 and n_cols <= 8
    if annotate:
        norm = Normalize(vmin=lo, vmax=hi)
        background = ax.get_facecolor()
        fontsize = 8 if max(n_rows, n_cols) <= 6 else 7
        for i in range(n_rows):
            for j in range(n_cols):
                value = float(data[i, j])
                text = _format_value(value)
                if not text:
                    continue
                cell = colours(norm(value)) if math.isfinite(value) else background
                ax.text(j, i, text, ha="center", va="center", fontsize=fontsize,
                        color=_readable_text_colour(cell))
    if colorbar:
        fig.colorbar(image, ax=ax, shrink=0.8)
    return fig


def weights_bar(
    weights_1d: torch.Tensor,
    labels: Sequence[str] | None = None,
    *,
    query_label: str | None = None,
    title: str | None = None,
    ax=None,
) -> Figure:
    """Draw one query's attention weights as bars, one per key, with their values and sum.

    Args:
        weights_1d: a 1-d tensor (n_keys,), e.g. one row of an attention-weight matrix.
            Masked entries (``-inf`` or NaN) are drawn as empty bars marked ``-inf``.
        labels: one label per key (default: 0, 1, 2, ...).
        query_label: the query's token, used in the default title.
        title: the axes title (overrides the default).
        ax: draw into this axes; a new figure is made when omitted.

    Returns:
        The figure holding the bars.

    Example::

        cu.plotting.weights_bar(attn_weights[1], cu.EXAMPLE_TOKENS, query_label="journey");
    """
    expect_tensor(weights_1d, "weights_1d", ndim=1)
    data = weights_1d.detach().to("cpu", torch.float32)
    n = data.shape[0]
    if n == 0:
        raise CourseInputError("weights_1d must hold at least one weight, but got an empty tensor.")
    names = check_labels(labels, n)
    if ax is None:
        fig = _new_figure((max(3.6, 0.7 * n + 1.4), 3.0))
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    finite = torch.isfinite(data)
    heights = torch.where(finite, data, torch.zeros_like(data))
    top = max(1.0, float(heights.max())) if finite.any() else 1.0
    bottom = min(0.0, float(heights.min())) if finite.any() else 0.0
    colours = colormaps[CMAP]
    norm = Normalize(vmin=0.0, vmax=top)
    bars = ax.bar(range(n), heights.numpy(), color=[colours(norm(float(h))) for h in heights],
                  edgecolor="#333333", linewidth=0.6)
    pad = 0.03 * (top - bottom)
    for bar, value, ok in zip(bars, data.tolist(), finite.tolist()):
        text = _format_value(value) if ok else MASKED_TEXT
        y = bar.get_height()
        ax.text(bar.get_x() + bar.get_width() / 2, y + pad if y >= 0 else y - pad, text,
                ha="center", va="bottom" if y >= 0 else "top", fontsize=8)
    ax.set_ylim(bottom - (2 * pad if bottom < 0 else 0), top * 1.15)
    long_labels = max(map(len, names)) > 3
    ax.set_xticks(range(n), names, rotation=45 if long_labels else 0,
                  ha="right" if long_labels else "center", rotation_mode="anchor")
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("weight")
    ax.axhline(0, color="#333333", linewidth=0.8)
    ax.spines[["top", "right"]].set_visible(False)
    total = float(heights.sum())
    ax.text(0.99, 0.97, f"sum = {total:.2f}", transform=ax.transAxes, ha="right", va="top", fontsize=9)
    if title is None:
        title = f"weights of query {query_label!r}" if query_label is not None else "attention weights"
    if title:
        ax.set_title(title)
    return fig


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

    Returns:
        The figure holding the grid.

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
        raise CourseInputError(f"titles must have {num_heads} entries (one per head), but got {given}.")
    if ncols is None:
        ncols = min(num_heads, 4)
    expect_int(ncols, "ncols", minimum=1)
    ncols = min(ncols, num_heads)
    nrows = math.ceil(num_heads / ncols)
    if annotate is None:
        annotate = n_rows <= 6 and n_cols <= 6
    finite = data[torch.isfinite(data)]
    lo = float(finite.min()) if finite.numel() else 0.0
    hi = float(finite.max()) if finite.numel() else 1.0
    cell = max(2.4, 0.42 * n_cols + 1.3)
    fig = _new_figure((cell * ncols + (0.9 if shared_scale else 0.6 * ncols), cell * nrows * 0.95))
    axes = fig.subplots(nrows, ncols, squeeze=False)
    used = []
    for h in range(num_heads):
        ax = axes[h // ncols][h % ncols]
        heatmap(
            data[h], labels, title=str(titles[h]), ax=ax, annotate=annotate,
            vmin=lo if shared_scale else None, vmax=hi if shared_scale else None,
            xlabel="key" if h // ncols == nrows - 1 else "",
            ylabel="query" if h % ncols == 0 else "",
            colorbar=not shared_scale,
        )
        used.append(ax)
    for ax in axes.flat[num_heads:]:
        ax.set_visible(False)
    if shared_scale:
        fig.colorbar(used[0].images[0], ax=used, shrink=0.8)
    return fig
