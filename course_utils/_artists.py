"""The course's palette, the helpers every drawing shares and the artists an explorer updates.

:class:`Heat` (an attention map whose numbers can be replaced) and :class:`Bars` (bars with their
values) are what :mod:`course_utils.plotting`'s plots and the live explorers are drawn with;
``cu.plotting`` re-exports every name here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib import colormaps
from matplotlib.colors import Normalize
from matplotlib.figure import Figure

from .validation import CourseInputError, expect_tensor

# ----------------------------------------------------------------------------- the palette
# Okabe-Ito colours, distinguishable with every common colour-vision deficiency.
QUERY_COLOUR = "#D55E00"  # vermillion: the query, in every explorer and figure
KEY_COLOUR = "#0072B2"  # blue: keys (and "the other curve")
VALUE_COLOUR = "#009E73"  # bluish green: values
EXTRA_COLOUR = "#CC79A7"  # reddish purple: a fourth colour
INPUT_COLOUR = "#666666"  # grey: inputs
MUTED_COLOUR = "#BBBBBB"  # light grey: the tokens that are not the query
INK = "#222222"  # text and lines
HEAD_COLOURS = (QUERY_COLOUR, KEY_COLOUR, VALUE_COLOUR, EXTRA_COLOUR)

CMAP = "cividis"
"""Colour-blind-safe, perceptually uniform sequential colormap used for every map."""

MASKED_TEXT = "-inf"
"""What a masked (``-inf``) cell shows when values are written in the cells."""


def check_labels(
    labels: Sequence[str] | None,
    n: int,
    what: str = "labels",
    per: str = "token",
    default: Sequence[str] | None = None,
) -> list[str]:
    """Return ``n`` string labels, ``default`` (or 0..n-1) when ``labels`` is None; else a clear error."""
    if labels is None:
        return [str(i) for i in range(n)] if default is None else list(default)
    if isinstance(labels, str):
        raise CourseInputError(
            f"{what} must be a list of {n} strings (one per {per}), but got the "
            f"single string {labels!r}. Tip: pass a list, e.g. text.split()."
        )
    if not isinstance(labels, Iterable):
        raise CourseInputError(
            f"{what} must be a list of {n} strings (one per {per}), but got {labels!r}."
        )
    labels = [str(label) for label in labels]
    if len(labels) != n:
        raise CourseInputError(
            f"{what} must have {n} entries (one per {per}), but got {len(labels)}: {labels}."
        )
    return labels


def format_value(value: float, decimals: int = 2) -> str:
    if math.isnan(value):
        return ""
    if value == float("-inf"):
        return MASKED_TEXT
    return "inf" if value == float("inf") else f"{value:.{decimals}f}"


def new_figure(figsize: tuple[float, float]) -> Figure:
    """A constrained-layout figure that pyplot forgets at once (shown only through the return value)."""
    fig = plt.figure(figsize=figsize, layout="constrained")
    plt.close(fig)
    return fig


def tick_labels(ax, labels: Sequence[str], axis: str = "x") -> None:
    """Token labels on an axis; long ones (more than 3 characters) slanted on the x axis."""
    n = len(labels)
    if axis == "y":
        ax.set_yticks(range(n), labels)
        return
    slanted = max(map(len, labels), default=0) > 3
    ax.set_xticks(
        range(n),
        labels,
        rotation=45 if slanted else 0,
        ha="right" if slanted else "center",
        rotation_mode="anchor",
    )


def expect_map(value: object, name: str, **expect) -> torch.Tensor:
    """``value`` detached, float32, on the CPU if it is a real 2-d tensor with a row and a column; else a clear error."""
    expect_tensor(value, name, ndim=2, **expect)
    if value.is_complex():
        raise CourseInputError(f"{name} must hold real numbers, but got dtype {value.dtype}.")
    if min(value.shape) < 1:
        raise CourseInputError(
            f"{name} must have at least one row and one column, but got shape {tuple(value.shape)}."
        )
    return value.detach().to("cpu", torch.float32)


def finite_range(data: torch.Tensor) -> tuple[float, float]:
    """The smallest and largest finite value of ``data``; (0, 1) when none is finite."""
    finite = data[torch.isfinite(data)]
    return (float(finite.min()), float(finite.max())) if finite.numel() else (0.0, 1.0)


# ----------------------------------------------------------------------------- updatable artists
class Heat:
    """An attention map on ``ax`` whose numbers can be replaced; ``animated`` parts are redrawn alone."""

    def __init__(
        self,
        ax,
        data: torch.Tensor,
        *,
        vmin: float,
        vmax: float,
        annotate: bool,
        cmap: str = CMAP,
        animated: bool = False,
        decimals: int = 2,
    ) -> None:
        # Masked cells take the axes' own colour, opaque, so a redraw over an old frame covers them.
        self.colours = colormaps[cmap].with_extremes(bad=ax.get_facecolor())
        self.ax, self.norm, self.decimals = ax, Normalize(vmin=vmin, vmax=vmax), decimals
        self.image = ax.imshow(
            np.zeros(tuple(data.shape)),
            cmap=self.colours,
            vmin=vmin,
            vmax=vmax,
            aspect="auto",
            interpolation="nearest",
            animated=animated,
        )  # the data comes in update()
        self.texts = []
        if annotate:
            size = 8 if max(data.shape) <= 6 else 7
            self.texts = [
                ax.text(j, i, "", ha="center", va="center", fontsize=size, animated=animated)
                for i in range(data.shape[0])
                for j in range(data.shape[1])
            ]
        self.update(data)

    def update(self, data: torch.Tensor) -> None:
        shown = data.masked_fill(~torch.isfinite(data), float("nan")).numpy()
        self.image.set_data(shown)
        if not self.texts:
            return
        cells = self.colours(self.norm(shown))[..., :3].reshape(
            -1, 3
        )  # (n * m, 3) masked: background
        linear = np.where(cells <= 0.04045, cells / 12.92, ((cells + 0.055) / 1.055) ** 2.4)
        # WCAG relative luminance L; contrast with black is (L + 0.05) / 0.05, with white
        # 1.05 / (L + 0.05): equal at L ~ 0.179.
        dark = linear @ np.array([0.2126, 0.7152, 0.0722]) <= 0.179
        for text, value, white in zip(self.texts, data.flatten().tolist(), dark.tolist()):
            text.set_text(format_value(value, self.decimals))
            text.set_color("white" if white else "black")


class Bars:
    """Bars with their values above them (non-finite: empty, ``-inf``); ``colour`` None: the colormap."""

    def __init__(
        self,
        ax,
        values: torch.Tensor,
        *,
        x=None,
        width: float = 0.8,
        colour=None,
        top: float = 1.0,
        fontsize: float = 8,
        animated: bool = False,
    ) -> None:
        n = values.shape[0]
        self.ax, self.colour, self.norm = ax, colour, Normalize(vmin=0.0, vmax=top)
        self.bars = ax.bar(
            range(n) if x is None else x,
            [0.0] * n,
            width,
            edgecolor="#333333",
            linewidth=0.6,
            animated=animated,
        )
        self.texts = [
            ax.text(0, 0, "", ha="center", fontsize=fontsize, animated=animated) for _ in range(n)
        ]
        self.pad = 0.03 * top
        self.update(values)

    def update(self, values: torch.Tensor) -> None:
        finite = torch.isfinite(values)
        heights = torch.where(finite, values, torch.zeros_like(values)).tolist()
        if self.colour is None:
            colours = [colormaps[CMAP](self.norm(h)) for h in heights]
        else:
            colours = (
                [self.colour] * len(heights) if isinstance(self.colour, str) else list(self.colour)
            )
        for bar, text, h, ok, c in zip(self.bars, self.texts, heights, finite.tolist(), colours):
            bar.set_height(h)
            bar.set_facecolor(c)
            text.set_text(f"{h:.2f}" if ok else MASKED_TEXT)
            text.set_position(
                (bar.get_x() + bar.get_width() / 2, h + self.pad if h >= 0 else h - self.pad)
            )
            text.set_verticalalignment("bottom" if h >= 0 else "top")


def plain_axes(ax, xlabel: str = "", ylabel: str = "", title: str = "", **grid) -> None:
    """Axis titles, a zero line (or, given ``grid`` options, a light grid) and no top/right frame."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if grid:
        ax.grid(True, color="#E5E5E5", linewidth=0.6, **grid)
    else:
        ax.axhline(0, color="#333333", linewidth=0.8)
    ax.spines[["top", "right"]].set_visible(False)


def draw_map(
    ax,
    data: torch.Tensor,
    rows: Sequence[str],
    cols: Sequence[str],
    *,
    xlabel: str = "key (attended to)",
    ylabel: str = "query (attending)",
    title: str | None = None,
    colorbar: bool = True,
    **heat,
) -> Heat:
    """A labelled :class:`Heat` map on ``ax`` (what :func:`heatmap` draws, without its checks)."""
    heat = Heat(ax, data, **heat)
    tick_labels(ax, cols)
    tick_labels(ax, rows, "y")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(heat.image, ax=ax, shrink=0.8)
    return heat
