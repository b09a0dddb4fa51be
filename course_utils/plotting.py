"""Plots for attention: one heatmap helper for every attention map in the course.

Every function returns the matplotlib ``Figure`` and closes it from pyplot's list, so a
cell that ends with the call shows the picture once (through the figure's rich display)
and never prints an object repr that would disturb nbval.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from .validation import CourseInputError, expect_tensor

CMAP = "cividis"
"""Colour-blind-safe, perceptually uniform sequential colormap used for every map."""


def _labels(labels: Sequence[str] | None, n: int, what: str) -> list[str]:
    if labels is None:
        return [str(i) for i in range(n)]
    labels = [str(label) for label in labels]
    if len(labels) != n:
        raise CourseInputError(f"{what} must have {n} entries (one per {what.split('_')[0]}), "
                               f"but got {len(labels)}: {labels}.")
    return labels


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
) -> Figure:
    """Draw a 2-d attention map: rows are queries, columns are keys.

    Args:
        weights: a 2-d tensor (n_queries, n_keys). Masked entries may be ``-inf`` or NaN;
            they are drawn blank.
        row_labels, col_labels: token labels; ``col_labels`` defaults to ``row_labels``.
        title: the axes title.
        ax: draw into this axes (for grids); a new figure is made when omitted.
        vmin, vmax: a shared colour scale; defaults to the data's finite range.
        annotate: write values in the cells; by default when the map is at most 8 x 8.
        cmap: the colormap (default: colour-blind-safe ``cividis``).

    Returns:
        The figure holding the map.
    """
    expect_tensor(weights, "weights", ndim=2)
    data = weights.detach().to("cpu", torch.float32)
    n_rows, n_cols = data.shape
    rows = _labels(row_labels, n_rows, "row_labels")
    cols = _labels(col_labels if col_labels is not None else (row_labels if n_rows == n_cols else None),
                   n_cols, "col_labels")
    finite = data[torch.isfinite(data)]
    lo = vmin if vmin is not None else (float(finite.min()) if finite.numel() else 0.0)
    hi = vmax if vmax is not None else (float(finite.max()) if finite.numel() else 1.0)
    if ax is None:
        size = (max(3.2, 0.6 * n_cols + 1.8), max(2.8, 0.5 * n_rows + 1.4))
        fig, ax = plt.subplots(figsize=size, layout="constrained")
        plt.close(fig)
    else:
        fig = ax.figure
    shown = data.masked_fill(~torch.isfinite(data), float("nan")).numpy()
    image = ax.imshow(shown, cmap=cmap, vmin=lo, vmax=hi, aspect="auto")
    ax.set_xticks(range(n_cols), cols, rotation=45 if max(map(len, cols)) > 3 else 0, ha="right"
                  if max(map(len, cols)) > 3 else "center")
    ax.set_yticks(range(n_rows), rows)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if annotate is None:
        annotate = n_rows <= 8 and n_cols <= 8
    if annotate:
        middle = (lo + hi) / 2
        for i in range(n_rows):
            for j in range(n_cols):
                value = float(data[i, j])
                text = "-inf" if value == float("-inf") else ("" if value != value else f"{value:.2f}")
                colour = "black" if value >= middle else "white"
                ax.text(j, i, text, ha="center", va="center", fontsize=8, color=colour)
    fig.colorbar(image, ax=ax, shrink=0.8)
    return fig
