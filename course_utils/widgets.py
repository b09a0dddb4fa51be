"""Interactive explorers: move a control, watch attention change.

Each explorer is one line in a notebook::

    cu.widgets.query_explorer()      # ch01: one query's scores, weights and context vector
    cu.widgets.scaling_explorer()    # ch02: why scores are divided by sqrt(d_k)
    cu.widgets.mask_explorer()       # ch03: masking before or after softmax
    cu.widgets.dropout_explorer()    # ch04: dropout on the attention weights
    cu.widgets.head_explorer()       # ch05/06: every head's map for a text you type
    cu.widgets.memory_explorer()     # ch07: memory of the (b, h, n, n) score matrix

Every explorer is split in two:

* a pure function ``*_data(...)`` computes what is shown for given control values (no
  widgets, no drawing; unit-tested), and ``draw_*(view)`` turns that into a Figure;
* the explorer wires controls (ipywidgets 8, no custom JavaScript: works in JupyterLab
  and Colab) to one ``Output`` that redraws the figure when a control moves.

Without ipywidgets, or when ``COURSE_STATIC_WIDGETS=1`` (set by nbval, ``make solutions``
and nbconvert runs), an explorer shows one static figure for its default control values
and prints the single line :data:`STATIC_NOTE`, so stored notebook outputs are
deterministic. Explorers display themselves and return ``None``, so a trailing ``;``
changes nothing.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from matplotlib.figure import Figure
from torch import nn

from . import plotting
from .data import EXAMPLE_TOKENS, example_causal_weights, example_inputs, example_scores
from .models import MultiHeadAttention, causal_mask
from .repro import portable_dropout_mask
from .tokenizer import gpt2_tokenizer
from .validation import CourseInputError, expect_int, expect_probability, expect_tensor

STATIC_ENV_VAR = "COURSE_STATIC_WIDGETS"
"""Set to ``1`` to make every explorer draw a static figure instead of live controls."""

STATIC_NOTE = "(static view: run in JupyterLab or Colab to move the controls)"
"""The one line an explorer prints under its static figure."""

QUERY_COLOUR = "#D55E00"  # Okabe-Ito vermillion: the query, in every explorer and figure
ACCENT_COLOUR = "#0072B2"  # Okabe-Ito blue
THIRD_COLOUR = "#009E73"  # Okabe-Ito bluish green


# ----------------------------------------------------------------------------- mode and wiring
def static_mode() -> bool:
    """True when explorers should draw a static figure: no ipywidgets, or the env var is set."""
    if os.environ.get(STATIC_ENV_VAR, "").strip().lower() in ("1", "true", "yes", "on"):
        return True
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return True
    return False


def _display(obj) -> None:
    """Show ``obj`` in the notebook (tests replace this to capture what is shown)."""
    try:
        from IPython.display import display
    except ImportError:  # pragma: no cover - IPython comes with Jupyter
        return
    display(obj)


class Explorer:
    """Live controls wired to one output that redraws a figure whenever a control moves.

    Attributes:
        controls: the control widgets by the name of the drawing function's argument.
        output: the ``ipywidgets.Output`` holding the current figure.
        widget: ``VBox(controls + [output])``: what the notebook shows.
        figure: the figure drawn last (``None`` if the last values were rejected).
        error: the message shown instead of a figure when the last values were rejected.
    """

    def __init__(self, controls: dict, render: Callable[..., Figure]) -> None:
        import ipywidgets as widgets

        self.controls = controls
        self.figure: Figure | None = None
        self.error: str | None = None
        self._render = render
        self.output = widgets.interactive_output(self._redraw, controls)
        self.widget = widgets.VBox([*controls.values(), self.output])

    def _redraw(self, **values) -> None:
        try:
            figure = self._render(**values)
        except CourseInputError as error:  # e.g. the text box was emptied
            self.figure, self.error = None, str(error)
            print(self.error)
            return
        self.figure, self.error = figure, None
        _display(figure)

    def _ipython_display_(self) -> None:
        _display(self.widget)


def _launch(render: Callable[..., Figure], defaults: dict, make_controls: Callable) -> None:
    """Static figure + note, or live controls; see the module docstring."""
    if static_mode():
        _display(render(**defaults))
        print(STATIC_NOTE)
        return None
    import ipywidgets as widgets

    _display(Explorer(make_controls(widgets), render))
    return None


def _slider_style() -> dict:
    return {"style": {"description_width": "initial"}, "layout": {"width": "460px"},
            "continuous_update": False}


# ----------------------------------------------------------------------------- argument checks
def _check_labels(labels: Sequence[str] | None, n: int, what: str, default: Sequence[str]) -> list[str]:
    return plotting.check_labels(labels, n, "labels", what, default)


def _check_inputs(inputs: torch.Tensor | None, labels: Sequence[str] | None):
    if inputs is None:
        inputs = example_inputs()
        default = EXAMPLE_TOKENS
    else:
        expect_tensor(inputs, "inputs", ndim=2, floating=True)
        if inputs.shape[0] < 1 or inputs.shape[1] < 1:
            raise CourseInputError(f"inputs must hold at least one token of at least one dimension, "
                                   f"but got shape {tuple(inputs.shape)}.")
        default = [str(i) for i in range(inputs.shape[0])]
    inputs = inputs.detach().to("cpu", torch.float32)
    return inputs, _check_labels(labels, inputs.shape[0], "token (row of inputs)", default)


def _check_square(scores: torch.Tensor, name: str) -> torch.Tensor:
    expect_tensor(scores, name, ndim=2, floating=True)
    n_rows, n_cols = scores.shape
    if n_rows != n_cols or n_rows < 1:
        raise CourseInputError(f"{name} must be a square (n, n) matrix, one row and one column per "
                               f"token, but got shape {tuple(scores.shape)}.")
    return scores.detach().to("cpu", torch.float32)


def _check_choice(value, name: str, choices: Sequence) -> None:
    if value not in choices:
        raise CourseInputError(f"{name} must be one of {list(choices)}, but got {value!r}.")


# ----------------------------------------------------------------------------- 1. one query
@dataclass(frozen=True)
class QueryView:
    """What :func:`query_explorer` shows for one query token."""

    query: int
    scores: torch.Tensor  # (n,) dot products of the query with every token
    weights: torch.Tensor  # (n,) softmax of the scores
    context: torch.Tensor  # (d,) the weighted sum of the inputs


def query_data(inputs: torch.Tensor, query: int) -> QueryView:
    """Scores, softmax weights and context vector of token ``query`` attending to all of ``inputs``."""
    expect_tensor(inputs, "inputs", ndim=2, floating=True)
    n = inputs.shape[0]
    expect_int(query, "query", minimum=0)
    if query >= n:
        raise CourseInputError(f"query must be a token index from 0 to {n - 1}, but got {query}.")
    x = inputs.detach().to("cpu", torch.float32)
    scores = x @ x[query]  # (n,)
    weights = torch.softmax(scores, dim=0)  # (n,)
    context = weights @ x  # (d,)
    return QueryView(query, scores, weights, context)


def draw_query(view: QueryView, inputs: torch.Tensor, labels: Sequence[str]) -> Figure:
    """Three panels: the query's scores, its softmax weights, and its context vector."""
    q, name = view.query, labels[view.query]
    fig = plotting._new_figure((12.0, 3.5))
    ax_scores, ax_weights, ax_context = fig.subplots(1, 3, width_ratios=[1, 1, 0.8])
    n = view.scores.shape[0]
    colours = ["#BBBBBB"] * n
    colours[q] = QUERY_COLOUR
    bars = ax_scores.bar(range(n), view.scores.numpy(), color=colours, edgecolor="#333333", linewidth=0.6)
    for bar, value in zip(bars, view.scores.tolist()):
        ax_scores.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), f"{value:.2f}",
                       ha="center", va="bottom" if value >= 0 else "top", fontsize=8)
    ax_scores.axhline(0, color="#333333", linewidth=0.8)
    ax_scores.set_xticks(range(n), labels, rotation=45, ha="right", rotation_mode="anchor")
    ax_scores.set_ylabel("score")
    ax_scores.set_title(f"1. scores: x({name}) · x(j)")
    ax_scores.spines[["top", "right"]].set_visible(False)
    low, high = ax_scores.get_ylim()
    ax_scores.set_ylim(low, high + 0.08 * (high - low))

    plotting.weights_bar(view.weights, labels, ax=ax_weights, title="2. weights: softmax(scores)")

    x = inputs.detach().to("cpu", torch.float32)
    d = x.shape[1]
    width = 0.38
    positions = torch.arange(d, dtype=torch.float32)
    ax_context.bar((positions - width / 2).numpy(), x[q].numpy(), width, color=QUERY_COLOUR,
                   label=f"input x({name})")
    bars = ax_context.bar((positions + width / 2).numpy(), view.context.numpy(), width, color=ACCENT_COLOUR,
                          label=f"context z({name})")
    for bar, value in zip(bars, view.context.tolist()):
        ax_context.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), f"{value:.2f}",
                        ha="center", va="bottom" if value >= 0 else "top", fontsize=8)
    ax_context.axhline(0, color="#333333", linewidth=0.8)
    ax_context.set_xticks(range(d), [f"dim {i}" for i in range(d)])
    ax_context.set_title("3. context: Σ weight(j) · x(j)")
    ax_context.legend(fontsize=8, loc="upper left", frameon=False)
    ax_context.spines[["top", "right"]].set_visible(False)
    low, high = ax_context.get_ylim()
    ax_context.set_ylim(low, high + 0.3 * (high - low))
    fig.suptitle(f"query: {name!r} (token {q})", fontsize=11)
    return fig


def query_explorer(inputs: torch.Tensor | None = None, labels: Sequence[str] | None = None) -> None:
    """Pick a query token; see its scores, softmax weights and the context vector it makes.

    Args:
        inputs: (n, d) token embeddings (default: the six-token example, ``cu.example_inputs()``).
        labels: one label per token (default: the example's words, or 0..n-1).

    Notebook: ``cu.widgets.query_explorer()``
    """
    x, names = _check_inputs(inputs, labels)
    default = 1 if x.shape[0] > 1 else 0

    def render(query: int) -> Figure:
        return draw_query(query_data(x, query), x, names)

    def controls(widgets):
        return {"query": widgets.Dropdown(options=[(f"{i}: {name}", i) for i, name in enumerate(names)],
                                          value=default, description="query token")}

    return _launch(render, {"query": default}, controls)


# ----------------------------------------------------------------------------- 2. scaling
SCALING_MAX_D_K = 512
SCALING_KEYS = 6


@dataclass(frozen=True)
class ScalingView:
    """What :func:`scaling_explorer` shows for one width ``d_k``."""

    d_k: int
    scores: torch.Tensor  # (n_keys,) raw dot products q · k_j
    weights_plain: torch.Tensor  # (n_keys,) softmax(scores)
    weights_scaled: torch.Tensor  # (n_keys,) softmax(scores / sqrt(d_k))
    sweep_d_k: torch.Tensor  # (D,) every width 1..SCALING_MAX_D_K
    sweep_plain: torch.Tensor  # (D,) average largest weight without scaling
    sweep_scaled: torch.Tensor  # (D,) average largest weight with scaling


@functools.lru_cache(maxsize=4)
def _scaling_sweep(max_d_k: int, n_keys: int, draws: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(draws, 1, max_d_k, generator=generator)  # (draws, 1, D)
    k = torch.randn(draws, n_keys, max_d_k, generator=generator)  # (draws, keys, D)
    scores = torch.cumsum(q * k, dim=-1)  # (draws, keys, D): column d-1 is the score at d_k = d
    dims = torch.arange(1, max_d_k + 1, dtype=torch.float32)
    plain = torch.softmax(scores, dim=1).amax(dim=1).mean(dim=0)  # (D,)
    scaled = torch.softmax(scores / dims.sqrt(), dim=1).amax(dim=1).mean(dim=0)  # (D,)
    return plain, scaled


def scaling_data(d_k: int, seed: int = 0) -> ScalingView:
    """One query against six keys, every component drawn from N(0, 1), at width ``d_k``.

    Raw scores q · k spread out like sqrt(d_k), so softmax(q · k) turns nearly one-hot as
    d_k grows; softmax(q · k / sqrt(d_k)) keeps the same spread at every width. The same
    draw is reused for every ``d_k`` (its first ``d_k`` components), so sliding ``d_k``
    changes only the width.
    """
    expect_int(d_k, "d_k", minimum=1)
    if d_k > SCALING_MAX_D_K:
        raise CourseInputError(f"d_k must be at most {SCALING_MAX_D_K}, but got {d_k}.")
    expect_int(seed, "seed", minimum=0)
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(SCALING_MAX_D_K, generator=generator)[:d_k]  # (d_k,)
    k = torch.randn(SCALING_KEYS, SCALING_MAX_D_K, generator=generator)[:, :d_k]  # (6, d_k)
    scores = k @ q  # (6,)
    plain, scaled = _scaling_sweep(SCALING_MAX_D_K, SCALING_KEYS)
    return ScalingView(
        d_k=d_k,
        scores=scores,
        weights_plain=torch.softmax(scores, dim=0),
        weights_scaled=torch.softmax(scores / math.sqrt(d_k), dim=0),
        sweep_d_k=torch.arange(1, SCALING_MAX_D_K + 1),
        sweep_plain=plain,
        sweep_scaled=scaled,
    )


def draw_scaling(view: ScalingView) -> Figure:
    """Weights without and with the sqrt(d_k) division, and the average largest weight vs d_k."""
    fig = plotting._new_figure((12.0, 3.5))
    ax_plain, ax_scaled, ax_sweep = fig.subplots(1, 3)
    keys = [f"k{j + 1}" for j in range(view.scores.shape[0])]
    spread = float(view.scores.std())
    plotting.weights_bar(view.weights_plain, keys, ax=ax_plain,
                         title=f"softmax(q·k): score std {spread:.1f}")
    plotting.weights_bar(view.weights_scaled, keys, ax=ax_scaled,
                         title=f"softmax(q·k / √{view.d_k}): score std {spread / math.sqrt(view.d_k):.1f}")
    dims = view.sweep_d_k.numpy()
    ax_sweep.plot(dims, view.sweep_plain.numpy(), color=QUERY_COLOUR, label="q·k")
    ax_sweep.plot(dims, view.sweep_scaled.numpy(), color=ACCENT_COLOUR, label="q·k / √d_k")
    ax_sweep.axvline(view.d_k, color="#555555", linestyle=":", linewidth=1)
    ax_sweep.axhline(1 / view.scores.shape[0], color="#999999", linestyle="--", linewidth=0.8)
    ax_sweep.text(1.1, 1 / view.scores.shape[0] + 0.02, "uniform", fontsize=8, color="#666666")
    ax_sweep.set_xscale("log", base=2)
    ax_sweep.set_ylim(0, 1.05)
    ax_sweep.set_xlabel("d_k (width of q and k)")
    ax_sweep.set_ylabel("largest weight (average)")
    ax_sweep.set_title("how peaked? (average of 256 draws)")
    ax_sweep.legend(fontsize=8, loc="center right", frameon=False)
    ax_sweep.spines[["top", "right"]].set_visible(False)
    fig.suptitle(f"d_k = {view.d_k}: one query against six random keys", fontsize=11)
    return fig


def scaling_explorer(d_k: int = 16, seed: int = 0) -> None:
    """Slide d_k and watch softmax sharpen without the sqrt(d_k) division, and stay calm with it.

    Args:
        d_k: the starting width of queries and keys (1 to 512).
        seed: the starting random draw.

    Notebook: ``cu.widgets.scaling_explorer()``
    """
    scaling_data(d_k, seed)  # validates the arguments

    def render(d_k: int, seed: int) -> Figure:
        return draw_scaling(scaling_data(d_k, seed))

    def controls(widgets):
        return {
            "d_k": widgets.IntSlider(value=d_k, min=1, max=SCALING_MAX_D_K, description="d_k",
                                     **_slider_style()),
            "seed": widgets.IntSlider(value=seed, min=0, max=max(50, seed), description="random draw (seed)",
                                      **_slider_style()),
        }

    return _launch(render, {"d_k": d_k, "seed": seed}, controls)


# ----------------------------------------------------------------------------- 3. masking
MASK_MODES = (
    "no mask",
    "mask with -inf, then softmax",
    "softmax, then zero the future",
    "softmax, zero the future, renormalise",
)
"""The ways to apply a causal mask that :func:`mask_explorer` compares."""


@dataclass(frozen=True)
class MaskView:
    """What :func:`mask_explorer` shows for one way of masking."""

    mode: str
    softmax_input: torch.Tensor  # (n, n) what softmax sees (scores, perhaps with -inf)
    weights: torch.Tensor  # (n, n) the final attention weights
    row_sums: torch.Tensor  # (n,)


def mask_data(scores: torch.Tensor, mode: str) -> MaskView:
    """Apply a causal mask to square ``scores`` in one of :data:`MASK_MODES`."""
    scores = _check_square(scores, "scores")
    _check_choice(mode, "mode", MASK_MODES)
    future = causal_mask(scores.shape[0])  # (n, n) True above the diagonal
    softmax_input = scores.masked_fill(future, float("-inf")) if mode == MASK_MODES[1] else scores
    weights = torch.softmax(softmax_input, dim=-1)  # (n, n)
    if mode in MASK_MODES[2:]:
        weights = weights.masked_fill(future, 0.0)
    if mode == MASK_MODES[3]:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return MaskView(mode, softmax_input, weights, weights.sum(dim=-1))


def _row_sums_panel(ax, sums: torch.Tensor, labels: Sequence[str]) -> None:
    n = sums.shape[0]
    ones = torch.isclose(sums, torch.ones_like(sums), atol=5e-3)
    colours = [ACCENT_COLOUR if ok else QUERY_COLOUR for ok in ones.tolist()]
    ax.barh(range(n), sums.numpy(), color=colours, height=0.6)
    for i, value in enumerate(sums.tolist()):
        ax.text(value + 0.03, i, f"{value:.2f}", va="center", fontsize=8)
    ax.axvline(1.0, color="#333333", linestyle="--", linewidth=0.8)
    ax.set_yticks(range(n), labels)
    ax.set_ylim(n - 0.5, -0.5)  # same row order as the heatmaps
    ax.set_xlim(0, max(1.4, float(sums.max()) + 0.4))
    ax.set_title("row sums" if bool(ones.all()) else "row sums (not all 1!)")
    ax.set_xlabel("sum of the row's weights")
    ax.spines[["top", "right"]].set_visible(False)


def draw_mask(view: MaskView, labels: Sequence[str]) -> Figure:
    """What softmax sees, the resulting weights, and each row's sum."""
    n = view.weights.shape[0]
    cell = 0.55 * n + 1.6
    fig = plotting._new_figure((2 * cell + 3.2, max(3.4, 0.45 * n + 1.8)))
    ax_in, ax_weights, ax_sums = fig.subplots(1, 3, width_ratios=[cell, cell, 2.4])
    plotting.heatmap(view.softmax_input, labels, ax=ax_in, title="softmax input")
    plotting.heatmap(view.weights, labels, ax=ax_weights, title="attention weights", vmin=0.0, vmax=1.0,
                     ylabel="")
    _row_sums_panel(ax_sums, view.row_sums, labels)
    fig.suptitle(view.mode, fontsize=11)
    return fig


def mask_explorer(scores: torch.Tensor | None = None, labels: Sequence[str] | None = None) -> None:
    """Compare masking before softmax (-inf) with zeroing after it, with and without renormalising.

    Args:
        scores: square (n, n) attention scores (default: the six-token example's ``x @ x.T``).
        labels: one label per token (default: the example's words, or 0..n-1).

    Notebook: ``cu.widgets.mask_explorer()``
    """
    if scores is None:
        scores, default = example_scores(), EXAMPLE_TOKENS
    else:
        scores = _check_square(scores, "scores")
        default = [str(i) for i in range(scores.shape[0])]
    names = _check_labels(labels, scores.shape[0], "token (row of scores)", default)

    def render(mode: str) -> Figure:
        return draw_mask(mask_data(scores, mode), names)

    def controls(widgets):
        return {"mode": widgets.Dropdown(options=list(MASK_MODES), value=MASK_MODES[1], description="masking",
                                         layout={"width": "460px"})}

    return _launch(render, {"mode": MASK_MODES[1]}, controls)


# ----------------------------------------------------------------------------- 4. dropout
@dataclass(frozen=True)
class DropoutView:
    """What :func:`dropout_explorer` shows for one drop probability and seed."""

    p: float
    seed: int
    weights: torch.Tensor  # (n, m)
    mask: torch.Tensor  # (n, m) 0 (dropped) or 1/(1-p) (kept and rescaled)
    dropped: torch.Tensor  # (n, m) weights * mask
    row_sums: torch.Tensor  # (n,)


def dropout_data(weights: torch.Tensor, p: float, seed: int) -> DropoutView:
    """Dropout as ``nn.Dropout(p)`` applies it in training, with a mask identical on every machine."""
    expect_tensor(weights, "weights", ndim=2, floating=True)
    p = expect_probability(p, "p")
    expect_int(seed, "seed", minimum=0)
    w = weights.detach().to("cpu", torch.float32)
    mask = portable_dropout_mask(tuple(w.shape), p, seed)  # (n, m)
    dropped = w * mask
    return DropoutView(p, seed, w, mask, dropped, dropped.sum(dim=-1))


def draw_dropout(view: DropoutView, labels: Sequence[str]) -> Figure:
    """The weights, the keep mask, the dropped-and-rescaled weights, and each row's sum."""
    n, m = view.weights.shape
    cell = 0.5 * m + 1.5
    fig = plotting._new_figure((3 * cell + 3.0, max(3.4, 0.45 * n + 1.8)))
    axes = fig.subplots(1, 4, width_ratios=[cell, cell, cell, 2.6])
    scale = 1.0 / (1.0 - view.p)
    top = max(1.0, float(view.dropped.max()))
    plotting.heatmap(view.weights, labels, ax=axes[0], title="weights", vmin=0.0, vmax=top, colorbar=False)
    plotting.heatmap(view.mask, labels, ax=axes[1], title=f"keep mask: 0 or 1/(1-p) = {scale:.2f}",
                     vmin=0.0, vmax=max(scale, 1.0), ylabel="", colorbar=False)
    plotting.heatmap(view.dropped, labels, ax=axes[2], title="weights × mask", vmin=0.0, vmax=top,
                     ylabel="")
    _row_sums_panel(axes[3], view.row_sums, labels)
    kept = int((view.mask > 0).sum())
    fig.suptitle(f"dropout p = {view.p:.2f}, seed {view.seed}: kept {kept} of {view.mask.numel()} weights, "
                 f"each scaled by {scale:.2f}", fontsize=11)
    return fig


def dropout_explorer(weights: torch.Tensor | None = None, labels: Sequence[str] | None = None,
                     p: float = 0.5, seed: int = 123) -> None:
    """Slide the drop probability p and the seed; see the dropped, rescaled weights and row sums.

    The mask comes from ``cu.portable_dropout_mask``, so it is the same on every machine.

    Args:
        weights: (n, m) attention weights (default: the six-token example's causal weights).
        labels: one label per row (default: the example's words, or 0..n-1).
        p: the starting drop probability, in [0, 1).
        seed: the starting seed.

    Notebook: ``cu.widgets.dropout_explorer()``
    """
    if weights is None:
        w, default = example_causal_weights(), EXAMPLE_TOKENS
    else:
        expect_tensor(weights, "weights", ndim=2, floating=True)
        w = weights.detach().to("cpu", torch.float32)
        default = [str(i) for i in range(w.shape[0])]
    names = _check_labels(labels, w.shape[0], "row of weights", default)
    dropout_data(w, p, seed)  # validates p and seed

    def render(p: float, seed: int) -> Figure:
        return draw_dropout(dropout_data(w, p, seed), names)

    def controls(widgets):
        return {
            "p": widgets.FloatSlider(value=p, min=0.0, max=0.9, step=0.05, readout_format=".2f",
                                     description="drop probability p", **_slider_style()),
            "seed": widgets.IntSlider(value=seed, min=0, max=max(200, seed), description="seed",
                                      **_slider_style()),
        }

    return _launch(render, {"p": p, "seed": seed}, controls)


# ----------------------------------------------------------------------------- 5. heads
HEAD_D_MODEL = 16
HEAD_CONTEXT = 32
HEAD_TEXT = "Your journey starts with one step"


@dataclass(frozen=True)
class HeadView:
    """What :func:`head_explorer` shows for one text and head."""

    text: str
    ids: tuple[int, ...]  # GPT-2 token ids (at most HEAD_CONTEXT)
    pieces: tuple[str, ...]  # each id decoded, spaces shown as "␣"
    head: int
    num_heads: int
    seed: int
    weights: torch.Tensor  # (num_heads, n, n)
    truncated: bool


def _visible_piece(piece: str) -> str:
    return piece.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥") or "∅"


def _check_heads(num_heads: int, d_model: int) -> None:
    expect_int(num_heads, "num_heads", minimum=1)
    if d_model % num_heads != 0:
        divisors = [h for h in range(1, d_model + 1) if d_model % h == 0]
        raise CourseInputError(f"num_heads must divide the model width d_model={d_model} (one of {divisors}), "
                               f"but got {num_heads}.")


@functools.lru_cache(maxsize=8)
def _head_model(num_heads: int, seed: int, d_model: int, context: int):
    """Seeded token + position embeddings and a MultiHeadAttention, without touching the global RNG."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        tokens = nn.Embedding(gpt2_tokenizer().n_vocab, d_model)
        positions = nn.Embedding(context, d_model)
        attention = MultiHeadAttention(d_model, d_model, context, dropout=0.0, num_heads=num_heads)
    return tokens.eval(), positions.eval(), attention.eval()


def head_weights(attention: MultiHeadAttention, x: torch.Tensor) -> torch.Tensor:
    """The (b, heads, n, n) attention weights a ``cu.models.MultiHeadAttention`` computes for ``x``."""
    expect_tensor(x, "x", ndim=3, floating=True)
    b, n, _ = x.shape
    h, hd = attention.num_heads, attention.head_dim
    q = attention.W_query(x).view(b, n, h, hd).transpose(1, 2)  # (b, h, n, hd)
    k = attention.W_key(x).view(b, n, h, hd).transpose(1, 2)  # (b, h, n, hd)
    scores = (q @ k.transpose(2, 3)).masked_fill(attention.mask[:n, :n], float("-inf"))  # (b, h, n, n)
    return torch.softmax(scores / hd**0.5, dim=-1)


def head_data(text: str, head: int = 0, num_heads: int = 4, seed: int = 123) -> HeadView:
    """Tokenise ``text`` with GPT-2's tokenizer and run it through a seeded, untrained attention layer.

    Token embeddings (a seeded ``nn.Embedding`` over GPT-2's vocabulary) plus position
    embeddings, width 16, go through ``cu.models.MultiHeadAttention``; the result holds
    every head's (n, n) weights. Only the first 32 tokens are used.
    """
    if not isinstance(text, str):
        raise CourseInputError(f"text must be a string, but got {type(text).__name__} ({text!r}).")
    if not text:
        raise CourseInputError("text is empty: type a few words to see how the heads attend.")
    _check_heads(num_heads, HEAD_D_MODEL)
    expect_int(head, "head", minimum=0)
    if head >= num_heads:
        raise CourseInputError(f"head must be a head index from 0 to {num_heads - 1}, but got {head}.")
    expect_int(seed, "seed", minimum=0)
    tokenizer = gpt2_tokenizer()
    ids = tokenizer.encode(text, disallowed_special=())
    truncated = len(ids) > HEAD_CONTEXT
    ids = ids[:HEAD_CONTEXT]
    pieces = tuple(_visible_piece(tokenizer.decode([i])) for i in ids)
    tokens, positions, attention = _head_model(num_heads, seed, HEAD_D_MODEL, HEAD_CONTEXT)
    with torch.no_grad():
        id_tensor = torch.tensor([ids])  # (1, n)
        x = tokens(id_tensor) + positions(torch.arange(len(ids)))  # (1, n, d)
        weights = head_weights(attention, x)[0]  # (h, n, n)
    return HeadView(text, tuple(ids), pieces, head, num_heads, seed, weights, truncated)


def draw_head(view: HeadView) -> Figure:
    """One head's attention map, with the decoded GPT-2 tokens as labels."""
    n = len(view.ids)
    more = f" (first {HEAD_CONTEXT} tokens)" if view.truncated else ""
    step = 0.5 if n <= 10 else 0.3
    fig = plotting._new_figure((max(4.6, step * n + 2.6), max(3.6, 0.85 * step * n + 2.1)))
    plotting.heatmap(view.weights[view.head], list(view.pieces), vmin=0.0, vmax=1.0, ax=fig.add_subplot(),
                     title=f"head {view.head} of {view.num_heads}: {n} tokens{more}")
    fig.suptitle(f"untrained layer (seed {view.seed}): every head starts with its own random pattern",
                 fontsize=9, color="#444444")
    return fig


def head_explorer(text: str = HEAD_TEXT, num_heads: int = 4, seed: int = 123) -> None:
    """Type a text, pick a head: see that head's causal attention map over GPT-2 tokens.

    Args:
        text: the starting text (GPT-2 tokens, at most 32 are shown).
        num_heads: heads of the layer; must divide the width 16 (1, 2, 4, 8 or 16).
        seed: seed of the untrained embeddings and attention layer.

    Notebook: ``cu.widgets.head_explorer()``
    """
    head_data(text, 0, num_heads, seed)  # validates the arguments

    def render(text: str, head: int) -> Figure:
        return draw_head(head_data(text, head, num_heads, seed))

    def controls(widgets):
        return {
            "text": widgets.Text(value=text, description="text (press Enter)", continuous_update=False,
                                 style={"description_width": "initial"}, layout={"width": "620px"}),
            "head": widgets.IntSlider(value=0, min=0, max=num_heads - 1, description="head",
                                      **_slider_style()),
        }

    return _launch(render, {"text": text, "head": 0}, controls)


# ----------------------------------------------------------------------------- 6. memory
MEMORY_LENGTHS = tuple(2**k for k in range(6, 18))
"""Sequence lengths offered by :func:`memory_explorer`: 64 to 131,072."""

DTYPE_BYTES = {"float32": 4, "bfloat16": 2}


@dataclass(frozen=True)
class MemoryView:
    """What :func:`memory_explorer` shows for one setting."""

    n: int
    heads: int
    batch: int
    d_model: int
    bytes_per_value: int
    lengths: torch.Tensor  # (N,) sequence lengths of the curves
    score_bytes: torch.Tensor  # (N,) bytes of the (b, h, n, n) score matrix (float64)
    activation_bytes: torch.Tensor  # (N,) bytes of the (b, n, d) activations (float64)
    score_now: int
    activation_now: int


def format_bytes(count: float) -> str:
    """``1536`` -> ``'1.5 KiB'``: a byte count in binary units."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(value) < 1024 or unit == "PiB":
            return f"{value:.0f} {unit}" if unit == "B" or value >= 100 else f"{value:.3g} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def memory_data(n: int, heads: int = 12, batch: int = 1, d_model: int = 768,
                bytes_per_value: int = 4) -> MemoryView:
    """Bytes of the (batch, heads, n, n) score matrix and of the (batch, n, d_model) activations.

    The score matrix grows with n squared, the activations with n: the scores are
    ``heads * n / d_model`` times larger. Defaults are GPT-2 small (12 heads, width 768) in float32.
    """
    expect_int(n, "n", minimum=1)
    expect_int(heads, "heads", minimum=1)
    expect_int(batch, "batch", minimum=1)
    expect_int(d_model, "d_model", minimum=1)
    expect_int(bytes_per_value, "bytes_per_value", minimum=1)
    top = max(n, MEMORY_LENGTHS[-1])
    lengths = torch.logspace(math.log2(16), math.log2(top), 200, base=2, dtype=torch.float64)
    return MemoryView(
        n, heads, batch, d_model, bytes_per_value, lengths,
        score_bytes=batch * heads * lengths**2 * bytes_per_value,
        activation_bytes=batch * lengths * d_model * bytes_per_value,
        score_now=batch * heads * n * n * bytes_per_value,
        activation_now=batch * n * d_model * bytes_per_value,
    )


def draw_memory(view: MemoryView, title: str | None = None) -> Figure:
    """Both byte counts against n on log-log axes, with the current n marked."""
    fig = plotting._new_figure((8.0, 4.6))
    ax = fig.add_subplot()
    lengths = view.lengths.numpy()
    ax.plot(lengths, view.score_bytes.numpy(), color=QUERY_COLOUR, linewidth=2,
            label="scores / weights (b, h, n, n): grows like n²")
    ax.plot(lengths, view.activation_bytes.numpy(), color=ACCENT_COLOUR, linewidth=2,
            label="activations (b, n, d): grows like n")
    for gib, name in ((16, "16 GiB"), (80, "80 GiB")):
        ax.axhline(gib * 2**30, color="#888888", linestyle=":", linewidth=1)
        ax.text(lengths[0], gib * 2**30 * 1.25, f"{name} GPU", fontsize=8, color="#555555")
    ax.plot([view.n], [view.score_now], "o", color=QUERY_COLOUR)
    ax.plot([view.n], [view.activation_now], "o", color=ACCENT_COLOUR)
    ax.annotate(format_bytes(view.score_now), (view.n, view.score_now), xytext=(8, 6),
                textcoords="offset points", fontsize=9, color=QUERY_COLOUR, ha="right", va="bottom")
    ax.annotate(format_bytes(view.activation_now), (view.n, view.activation_now), xytext=(8, -6),
                textcoords="offset points", fontsize=9, color=ACCENT_COLOUR, ha="left", va="top")
    ax.axvline(view.n, color="#555555", linestyle=":", linewidth=1)
    equal = view.d_model / view.heads  # b*h*n*n == b*n*d  <=>  n == d / h
    if lengths[0] <= equal <= lengths[-1]:
        at = view.batch * equal * view.d_model * view.bytes_per_value
        ax.annotate(f"equal at n = d / h = {equal:,.4g}", (equal, at), xytext=(14, -22),
                    textcoords="offset points", fontsize=8.5, color="#444444",
                    arrowprops={"arrowstyle": "-", "color": "#888888", "linewidth": 0.8})
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    lengths_ticks = [4**k for k in range(2, 10) if 4**k <= lengths[-1]]
    ax.set_xticks(lengths_ticks, [f"{t:,}" for t in lengths_ticks])
    ticks = [2**k for k in range(10, 61, 5)]
    ax.set_yticks(ticks, [format_bytes(t) for t in ticks])
    low = min(float(view.activation_bytes.min()), float(view.score_bytes.min()))
    high = max(float(view.score_bytes.max()), 100 * 2**30)
    ax.set_ylim(low / 2, high * 4)
    ax.set_xlabel("sequence length n (tokens)")
    ax.set_ylabel("memory for one layer")
    ax.grid(True, which="major", color="#E5E5E5", linewidth=0.6)
    ax.legend(fontsize=9, loc="upper left", frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    dtype = next((name for name, size in DTYPE_BYTES.items() if size == view.bytes_per_value),
                 f"{view.bytes_per_value}-byte values")
    ratio = view.score_now / view.activation_now
    times = f"{ratio:,.0f}" if ratio >= 10 else f"{ratio:.2g}"
    if title is None:
        title = (f"b = {view.batch}, h = {view.heads}, d = {view.d_model}, {dtype}: at n = {view.n:,} "
                 f"the scores take {times}× the activations' memory")
    ax.set_title(title, fontsize=10)
    return fig


def memory_explorer(n: int = 1024, heads: int = 12, batch: int = 1, d_model: int = 768) -> None:
    """Slide the sequence length, heads and batch; compare the n² score matrix with the activations.

    Args:
        n: the starting sequence length (one of 64, 128, ..., 131072).
        heads, batch: the starting heads and batch size.
        d_model: the model width (default 768, GPT-2 small).

    Notebook: ``cu.widgets.memory_explorer()``
    """
    memory_data(n, heads, batch, d_model)  # validates the arguments
    _check_choice(n, "n", MEMORY_LENGTHS)

    def render(n: int, heads: int, batch: int, dtype: int) -> Figure:
        return draw_memory(memory_data(n, heads, batch, d_model, dtype))

    def controls(widgets):
        return {
            "n": widgets.SelectionSlider(options=[(f"{k:,}", k) for k in MEMORY_LENGTHS], value=n,
                                         description="sequence length n", **_slider_style()),
            "heads": widgets.IntSlider(value=heads, min=1, max=max(32, heads), description="heads h",
                                       **_slider_style()),
            "batch": widgets.IntSlider(value=batch, min=1, max=max(64, batch), description="batch b",
                                       **_slider_style()),
            "dtype": widgets.Dropdown(options=list(DTYPE_BYTES.items()), value=4, description="dtype"),
        }

    return _launch(render, {"n": n, "heads": heads, "batch": batch, "dtype": 4}, controls)
