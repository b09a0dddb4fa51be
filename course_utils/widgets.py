"""Interactive explorers: move a control, watch attention change.

Each explorer is one line in a notebook::

    cu.widgets.query_explorer()      # ch01: one query's scores, weights and context vector
    cu.widgets.scaling_explorer()    # ch02: why scores are divided by sqrt(d_k)
    cu.widgets.mask_explorer()       # ch03: masking before or after softmax
    cu.widgets.dropout_explorer()    # ch04: dropout on the attention weights
    cu.widgets.head_explorer()       # ch05/06: every head's map for a text you type
    cu.widgets.memory_explorer()     # ch07: memory of the (b, h, n, n) score matrix

Each one is a ``*_data`` function (plain data for the control values; unit-tested without a
figure), a ``draw_*(fig, view)`` function (builds the figure on its first call, then only
updates the artists that change) and its controls, put together by
:func:`course_utils.plotting.explorer`, which also gives the static view under nbval
(``COURSE_STATIC_WIDGETS=1``). The attention itself comes from the chapters' own code.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from matplotlib.patches import Patch

from . import plotting as P
from .data import EXAMPLE_TOKENS, example_causal_weights, example_inputs, example_scores
from .plotting import Bars, Heat, explorer, handles, slider_style
from .repro import portable_dropout_mask
from .tokenizer import gpt2_tokenizer
from .validation import CourseInputError, expect_int, expect_probability, expect_tensor

try:  # the chapters' own code, exported from the solution notebooks
    from .chapters import CausalAttention, causal_mask, head_weights
except ImportError:  # until course_utils/chapters exists
    from .models import CausalAttention, causal_mask

    def head_weights(head, x):  # a copy of chapter 05's exported head_weights, removed with models.py
        n = x.shape[0]
        with torch.no_grad():
            q, k = head.W_query(x), head.W_key(x)  # (n, d_out) each
        scores = (q @ k.T).masked_fill(head.mask[:n, :n], -torch.inf)  # (n, n)
        return torch.softmax(scores / k.shape[-1] ** 0.5, dim=-1)  # (n, n)


def _title(ax, text: str, **kwargs) -> None:
    """Set a title that changes with the controls (redrawn alone, like the data)."""
    if ax.title.get_animated():
        ax.title.set_text(text)  # set_title would also touch the non-animated side titles
    else:
        ax.set_title(text, **kwargs)
        ax.title.set_animated(True)


def _tokens(inputs: torch.Tensor | None, labels: Sequence[str] | None, what: str, example=example_inputs):
    """The explorer's 2-d ``inputs`` on the CPU and one label per row (the example's by default)."""
    if inputs is None:
        inputs, default = example(), EXAMPLE_TOKENS
    else:
        expect_tensor(inputs, what, ndim=2, floating=True)
        if min(inputs.shape) < 1:
            raise CourseInputError(f"{what} must have at least one row and one column, "
                                   f"but got shape {tuple(inputs.shape)}.")
        default = [str(i) for i in range(inputs.shape[0])]
    inputs = inputs.detach().to("cpu", torch.float32)
    return inputs, P.check_labels(labels, inputs.shape[0], "labels", f"row of {what}", default)


class RowSums:
    """Horizontal bars of each row's sum next to a map, blue when 1 and vermillion when not."""

    def __init__(self, ax, labels: Sequence[str], top: float = 1.4) -> None:
        n = len(labels)
        self.ax, self.bars = ax, ax.barh(range(n), [0.0] * n, height=0.6, animated=True)
        self.texts = [ax.text(0, i, "", va="center", fontsize=8, animated=True) for i in range(n)]
        ax.axvline(1.0, color="#333333", linestyle="--", linewidth=0.8)
        ax.set_yticks(range(n), labels)
        ax.set_ylim(n - 0.5, -0.5)  # same row order as the maps
        ax.set_xlim(0, top)
        ax.set_xlabel("row sum")
        ax.spines[["top", "right"]].set_visible(False)

    def update(self, sums: torch.Tensor) -> None:
        ones = torch.isclose(sums, torch.ones_like(sums), atol=5e-3).tolist()
        for bar, text, value, ok in zip(self.bars, self.texts, sums.tolist(), ones):
            bar.set_width(value)
            bar.set_color(P.KEY_COLOUR if ok else P.QUERY_COLOUR)
            text.set_text(f"{value:.2f}")
            text.set_x(min(value, self.ax.get_xlim()[1] - 0.35) + 0.03)
        _title(self.ax, "row sums: all 1" if all(ones) else "not all 1!", fontsize=10)


# ----------------------------------------------------------------------------- 1. one query
@dataclass(frozen=True)
class QueryView:
    """What :func:`query_explorer` shows for one query token."""

    query: int
    labels: tuple[str, ...]
    inputs: torch.Tensor  # (n, d)
    scores: torch.Tensor  # (n,) dot products of the query with every token
    weights: torch.Tensor  # (n,) softmax of the scores
    context: torch.Tensor  # (d,) the weighted sum of the inputs
    score_range: tuple[float, float]  # over every query, so the axes stay put
    value_range: tuple[float, float]


def query_data(inputs: torch.Tensor, query: int, labels: Sequence[str] = EXAMPLE_TOKENS) -> QueryView:
    """Scores, softmax weights and context vector of token ``query`` attending to all of ``inputs``."""
    all_scores = inputs @ inputs.T  # (n, n): chapter 01's scores, every query at once
    all_weights = torch.softmax(all_scores, dim=-1)  # (n, n)
    contexts = all_weights @ inputs  # (n, d)
    values = torch.cat([inputs.flatten(), contexts.flatten(), torch.zeros(1)])
    return QueryView(query, tuple(labels), inputs, all_scores[query], all_weights[query], contexts[query],
                     (min(0.0, float(all_scores.min())), float(all_scores.max())),
                     (float(values.min()), float(values.max())))


def draw_query(fig, view: QueryView) -> None:
    """Three panels: the query's scores, its softmax weights, and its context vector."""
    h, q, n, d = handles(fig), view.query, len(view.labels), view.inputs.shape[1]
    colours = [P.QUERY_COLOUR if j == q else P.MUTED_COLOUR for j in range(n)]
    if not h:
        ax_s, ax_w, ax_c = fig.subplots(1, 3, width_ratios=[1, 1, 0.8])
        low, high = view.score_range
        h["scores"] = Bars(ax_s, view.scores, colour=colours, top=high - low, animated=True)
        ax_s.set_ylim(low * 1.1, high * 1.15)
        h["weights"] = Bars(ax_w, view.weights, animated=True)
        ax_w.set_ylim(0, 1.15)
        h["sum"] = ax_w.text(0.99, 0.97, "", transform=ax_w.transAxes, ha="right", va="top", fontsize=9,
                             animated=True)
        positions = torch.arange(d, dtype=torch.float32)
        h["input"] = Bars(ax_c, view.inputs[q], x=positions - 0.19, width=0.38, colour=P.QUERY_COLOUR,
                          animated=True)
        h["context"] = Bars(ax_c, view.context, x=positions + 0.19, width=0.38, colour=P.KEY_COLOUR,
                            animated=True)
        low, high = view.value_range
        ax_c.set_ylim(low - 0.1 * (high - low), high + 0.35 * (high - low))
        ax_c.legend(handles=[Patch(color=P.QUERY_COLOUR, label="input x(query)"),
                             Patch(color=P.KEY_COLOUR, label="context z(query)")],
                    fontsize=8, loc="upper left", frameon=False)
        for ax in (ax_s, ax_w):
            P.tick_labels(ax, view.labels)
        ax_c.set_xticks(range(d), [f"dim {i}" for i in range(d)])
        P.plain_axes(ax_s, ylabel="score")
        P.plain_axes(ax_w, ylabel="weight", title="2. weights: softmax(scores)")
        P.plain_axes(ax_c, title="3. context: Σ weight(j) · x(j)")
        h["axes"] = (ax_s, ax_c)
    ax_s, ax_c = h["axes"]
    h["scores"].colour = colours
    h["scores"].update(view.scores)
    h["weights"].update(view.weights)
    h["sum"].set_text(f"sum = {float(view.weights.sum()):.2f}")
    h["input"].update(view.inputs[q])
    h["context"].update(view.context)
    _title(ax_s, f"1. scores: x({view.labels[q]}) · x(j), query {q}")


def query_explorer(inputs: torch.Tensor | None = None, labels: Sequence[str] | None = None) -> None:
    """Pick a query token; see its scores, softmax weights and the context vector it makes.

    Args:
        inputs: (n, d) token embeddings (default: the six-token example, ``cu.example_inputs()``).
        labels: one label per token (default: the example's words, or 0..n-1).

    Notebook: ``cu.widgets.query_explorer()``
    """
    x, names = _tokens(inputs, labels, "inputs")
    start = 1 if x.shape[0] > 1 else 0

    def controls(widgets):
        return {"query": widgets.Dropdown(options=[(f"{i}: {name}", i) for i, name in enumerate(names)],
                                          value=start, description="query token")}

    explorer(lambda query: query_data(x, query, names), draw_query, {"query": start}, controls,
             figsize=(11.0, 3.4))


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
    dims = torch.arange(1, max_d_k + 1, dtype=torch.float32)  # (D,)
    plain = torch.softmax(scores, dim=1).amax(dim=1).mean(dim=0)  # (D,)
    scaled = torch.softmax(scores / dims.sqrt(), dim=1).amax(dim=1).mean(dim=0)  # (D,)
    return plain, scaled


@functools.lru_cache(maxsize=8)
def _scaling_draw(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(SCALING_MAX_D_K, generator=generator)  # (D,)
    k = torch.randn(SCALING_KEYS, SCALING_MAX_D_K, generator=generator)  # (6, D)
    return q, k


def scaling_data(d_k: int, seed: int = 0) -> ScalingView:
    """One query against six keys, every component drawn from N(0, 1), at width ``d_k``.

    Raw scores q · k spread out like sqrt(d_k), so softmax(q · k) turns nearly one-hot as
    d_k grows; softmax(q · k / sqrt(d_k)) keeps the same spread at every width. The same
    draw is reused for every ``d_k`` (its first ``d_k`` components), so sliding ``d_k``
    changes only the width.
    """
    q, k = _scaling_draw(seed)
    scores = k[:, :d_k] @ q[:d_k]  # (6,)
    plain, scaled = _scaling_sweep(SCALING_MAX_D_K, SCALING_KEYS)
    return ScalingView(d_k, scores, torch.softmax(scores, dim=0), torch.softmax(scores / math.sqrt(d_k), dim=0),
                       torch.arange(1, SCALING_MAX_D_K + 1), plain, scaled)


def draw_scaling(fig, view: ScalingView) -> None:
    """Weights without and with the sqrt(d_k) division, and the average largest weight vs d_k."""
    h = handles(fig)
    if not h:
        axes = fig.subplots(1, 3)
        keys = [f"k{j + 1}" for j in range(view.scores.shape[0])]
        for name, ax, weights in zip(("plain", "scaled"), axes, (view.weights_plain, view.weights_scaled)):
            h[name] = Bars(ax, weights, animated=True)
            ax.set_ylim(0, 1.15)
            P.tick_labels(ax, keys)
            P.plain_axes(ax, "key", "weight")
        sweep = axes[2]
        dims = view.sweep_d_k.numpy()
        sweep.plot(dims, view.sweep_plain.numpy(), color=P.QUERY_COLOUR, label="q·k")
        sweep.plot(dims, view.sweep_scaled.numpy(), color=P.KEY_COLOUR, label="q·k / √d_k")
        h["at"] = sweep.axvline(view.d_k, color="#555555", linestyle=":", linewidth=1, animated=True)
        uniform = 1 / view.scores.shape[0]
        sweep.axhline(uniform, color="#999999", linestyle="--", linewidth=0.8)
        sweep.text(1.1, uniform + 0.02, "uniform", fontsize=8, color="#666666")
        sweep.set_xscale("log", base=2)
        sweep.set_ylim(0, 1.05)
        sweep.legend(fontsize=8, loc="center right", frameon=False)
        P.plain_axes(sweep, "d_k (width of q and k)", "largest weight (average)",
                     "how peaked? (average of 256 draws)")
        h["axes"] = axes
    spread = float(view.scores.std())
    h["plain"].update(view.weights_plain)
    h["scaled"].update(view.weights_scaled)
    h["at"].set_xdata([view.d_k, view.d_k])
    _title(h["axes"][0], f"d_k = {view.d_k}: softmax(q·k), score std {spread:.1f}")
    _title(h["axes"][1], f"softmax(q·k / √{view.d_k}): score std {spread / math.sqrt(view.d_k):.1f}")


def scaling_explorer(d_k: int = 16, seed: int = 0) -> None:
    """Slide d_k and watch softmax sharpen without the sqrt(d_k) division, and stay calm with it.

    Args:
        d_k: the starting width of queries and keys (1 to 512).
        seed: the starting random draw.

    Notebook: ``cu.widgets.scaling_explorer()``
    """
    expect_int(d_k, "d_k", minimum=1)
    if d_k > SCALING_MAX_D_K:
        raise CourseInputError(f"d_k must be at most {SCALING_MAX_D_K}, but got {d_k}.")
    expect_int(seed, "seed", minimum=0)

    def controls(widgets):
        return {"d_k": widgets.IntSlider(value=d_k, min=1, max=SCALING_MAX_D_K, description="d_k",
                                         **slider_style()),
                "seed": widgets.IntSlider(value=seed, min=0, max=max(50, seed),
                                          description="random draw (seed)", **slider_style())}

    explorer(scaling_data, draw_scaling, {"d_k": d_k, "seed": seed}, controls, figsize=(11.0, 3.4))


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
    labels: tuple[str, ...]
    softmax_input: torch.Tensor  # (n, n) what softmax sees (scores, perhaps with -inf)
    weights: torch.Tensor  # (n, n) the final attention weights
    row_sums: torch.Tensor  # (n,)


def mask_data(scores: torch.Tensor, mode: str, labels: Sequence[str] = EXAMPLE_TOKENS) -> MaskView:
    """Apply a causal mask to square ``scores`` in one of :data:`MASK_MODES`."""
    future = causal_mask(scores.shape[0])  # (n, n) True above the diagonal
    softmax_input = scores.masked_fill(future, float("-inf")) if mode == MASK_MODES[1] else scores  # (n, n)
    weights = torch.softmax(softmax_input, dim=-1)  # (n, n)
    if mode in MASK_MODES[2:]:
        weights = weights.masked_fill(future, 0.0)  # (n, n)
    if mode == MASK_MODES[3]:
        weights = weights / weights.sum(dim=-1, keepdim=True)  # (n, n)
    return MaskView(mode, tuple(labels), softmax_input, weights, weights.sum(dim=-1))


def draw_mask(fig, view: MaskView) -> None:
    """What softmax sees, the resulting weights, and each row's sum."""
    h, n = handles(fig), len(view.labels)
    if not h:
        ax_in, ax_w, ax_sums = fig.subplots(1, 3, width_ratios=[1, 1, 0.45])
        finite = view.softmax_input[torch.isfinite(view.softmax_input)]
        h["in"] = Heat(ax_in, view.softmax_input, vmin=float(finite.min()), vmax=float(finite.max()),
                       annotate=n <= 8, animated=True)
        h["weights"] = Heat(ax_w, view.weights, vmin=0.0, vmax=1.0, annotate=n <= 8, animated=True)
        for ax, ylabel in ((ax_in, "query (attending)"), (ax_w, "")):
            P.tick_labels(ax, view.labels)
            P.tick_labels(ax, view.labels, "y")
            ax.set_xlabel("key (attended to)")
            ax.set_ylabel(ylabel)
        ax_in.set_title("softmax input")
        fig.colorbar(h["weights"].image, ax=ax_w, shrink=0.8)
        h["sums"], h["ax"] = RowSums(ax_sums, view.labels), ax_w
    h["in"].update(view.softmax_input)
    h["weights"].update(view.weights)
    h["sums"].update(view.row_sums)
    _title(h["ax"], f"weights: {view.mode}", fontsize=10)


def mask_explorer(scores: torch.Tensor | None = None, labels: Sequence[str] | None = None) -> None:
    """Compare masking before softmax (-inf) with zeroing after it, with and without renormalising.

    Args:
        scores: square (n, n) attention scores (default: the six-token example's ``x @ x.T``).
        labels: one label per token (default: the example's words, or 0..n-1).

    Notebook: ``cu.widgets.mask_explorer()``
    """
    scores, names = _tokens(scores, labels, "scores", example_scores)
    if scores.shape[0] != scores.shape[1]:
        raise CourseInputError(f"scores must be a square (n, n) matrix, one row and one column per "
                               f"token, but got shape {tuple(scores.shape)}.")

    def controls(widgets):
        return {"mode": widgets.Dropdown(options=list(MASK_MODES), value=MASK_MODES[1], description="masking",
                                         layout={"width": "460px"})}

    explorer(lambda mode: mask_data(scores, mode, names), draw_mask, {"mode": MASK_MODES[1]}, controls,
             figsize=(10.5, 4.0))


# ----------------------------------------------------------------------------- 4. dropout
@dataclass(frozen=True)
class DropoutView:
    """What :func:`dropout_explorer` shows for one drop probability and seed."""

    p: float
    seed: int
    labels: tuple[str, ...]
    weights: torch.Tensor  # (n, m)
    mask: torch.Tensor  # (n, m) 0 (dropped) or 1/(1-p) (kept and rescaled)
    dropped: torch.Tensor  # (n, m) weights * mask
    row_sums: torch.Tensor  # (n,)


def dropout_data(weights: torch.Tensor, p: float, seed: int, labels: Sequence[str] = EXAMPLE_TOKENS) -> DropoutView:
    """Dropout as ``nn.Dropout(p)`` applies it in training, with a mask identical on every machine."""
    mask = portable_dropout_mask(tuple(weights.shape), p, seed)  # (n, m)
    dropped = weights * mask  # (n, m)
    return DropoutView(p, seed, tuple(labels), weights, mask, dropped, dropped.sum(dim=-1))


def draw_dropout(fig, view: DropoutView) -> None:
    """The weights, the keep mask, the dropped-and-rescaled weights, and each row's sum."""
    h, n = handles(fig), len(view.labels)
    if not h:
        axes = fig.subplots(1, 4, width_ratios=[1, 1, 1, 0.5])
        small = max(view.weights.shape) <= 8
        h["weights"] = Heat(axes[0], view.weights, vmin=0.0, vmax=1.0, annotate=small)
        h["mask"] = Heat(axes[1], view.mask, vmin=0.0, vmax=2.0, annotate=small, cmap="Greys", animated=True)
        h["dropped"] = Heat(axes[2], view.dropped, vmin=0.0, vmax=1.0, annotate=small, animated=True)
        axes[0].set_title("weights")
        for i, ax in enumerate(axes[:3]):
            P.tick_labels(ax, view.labels if view.weights.shape[1] == n else [str(j) for j in
                                                                                range(view.weights.shape[1])])
            P.tick_labels(ax, view.labels if i == 0 else [""] * n, "y")
        axes[0].set_ylabel("query (attending)")
        axes[1].set_xlabel("key (attended to)")
        fig.colorbar(h["weights"].image, ax=axes[2], shrink=0.8)
        h["sums"], h["axes"] = RowSums(axes[3], [""] * n, top=3.0), axes
    scale = 1.0 / (1.0 - view.p)
    h["mask"].image.set_clim(0.0, max(scale, 1.0) * 1.6)
    h["mask"].norm.vmax = max(scale, 1.0) * 1.6
    h["mask"].update(view.mask)
    h["dropped"].update(view.dropped)
    h["sums"].update(view.row_sums)
    kept = int((view.mask > 0).sum())
    _title(h["axes"][1], f"p = {view.p:.2f}, seed {view.seed}: keep mask,\n0 or 1/(1-p) = {scale:.2f}", fontsize=10)
    _title(h["axes"][2], f"weights × mask: kept {kept} of {view.mask.numel()}", fontsize=10)


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
    w, names = _tokens(weights, labels, "weights", example_causal_weights)
    p = expect_probability(p, "p")
    expect_int(seed, "seed", minimum=0)

    def controls(widgets):
        return {"p": widgets.FloatSlider(value=p, min=0.0, max=0.9, step=0.05, readout_format=".2f",
                                         description="drop probability p", **slider_style()),
                "seed": widgets.IntSlider(value=seed, min=0, max=max(200, seed), description="seed",
                                          **slider_style())}

    explorer(lambda p, seed: dropout_data(w, p, seed, names), draw_dropout, {"p": p, "seed": seed}, controls,
             figsize=(12.0, 3.9))


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


@functools.lru_cache(maxsize=8)
def _head_layer(num_heads: int, seed: int):
    """Seeded token and position embeddings and one CausalAttention per head (global RNG untouched)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        tokens = torch.nn.Embedding(gpt2_tokenizer().n_vocab, HEAD_D_MODEL)
        positions = torch.nn.Embedding(HEAD_CONTEXT, HEAD_D_MODEL)
        heads = [CausalAttention(HEAD_D_MODEL, HEAD_D_MODEL // num_heads, HEAD_CONTEXT, 0.0)
                 for _ in range(num_heads)]
    return tokens, positions, heads


@functools.lru_cache(maxsize=32)
def _head_weights(text: str, num_heads: int, seed: int):
    tokenizer = gpt2_tokenizer()
    all_ids = tokenizer.encode(text, disallowed_special=())
    ids = all_ids[:HEAD_CONTEXT]
    tokens, positions, heads = _head_layer(num_heads, seed)
    with torch.no_grad():
        x = tokens(torch.tensor(ids)) + positions(torch.arange(len(ids)))  # (n, d)
        weights = torch.stack([head_weights(head, x) for head in heads])  # (h, n, n)
    pieces = tuple(_visible_piece(tokenizer.decode([i])) for i in ids)
    return tuple(ids), pieces, weights, len(all_ids) > HEAD_CONTEXT


def head_data(text: str, head: int = 0, num_heads: int = 4, seed: int = 123) -> HeadView:
    """Tokenise ``text`` with GPT-2's tokenizer and run it through seeded, untrained attention heads.

    Token embeddings (a seeded ``nn.Embedding`` over GPT-2's vocabulary) plus position
    embeddings, width 16, go through ``num_heads`` heads of chapter 04's ``CausalAttention``
    (width 16 / num_heads each, as in chapter 05's wrapper); the result holds every head's
    (n, n) weights, computed by chapter 05's ``head_weights``. Only the first 32 tokens are used.
    """
    if not isinstance(text, str):
        raise CourseInputError(f"text must be a string, but got {type(text).__name__} ({text!r}).")
    if not text:
        raise CourseInputError("text is empty: type a few words to see how the heads attend.")
    ids, pieces, weights, truncated = _head_weights(text, num_heads, seed)
    return HeadView(text, ids, pieces, head, num_heads, seed, weights, truncated)


def draw_head(fig, view: HeadView) -> None:
    """One head's attention map, with the decoded GPT-2 tokens as labels."""
    h = handles(fig)
    if h.get("pieces") != view.pieces:  # a new text: new labels, so the axes are built again
        fig.clear()
        h.clear()
        ax = fig.add_subplot()
        n = len(view.pieces)
        h["heat"] = Heat(ax, view.weights[view.head], vmin=0.0, vmax=1.0, annotate=n <= 8, animated=True)
        P.tick_labels(ax, view.pieces)
        P.tick_labels(ax, view.pieces, "y")
        ax.set_xlabel("key (attended to)")
        ax.set_ylabel("query (attending)")
        fig.colorbar(h["heat"].image, ax=ax, shrink=0.8)
        fig.suptitle(f"untrained layer (seed {view.seed}): every head starts with its own random pattern",
                     fontsize=9, color="#444444")
        h["pieces"], h["ax"] = view.pieces, ax
    h["heat"].update(view.weights[view.head])
    more = f" (first {HEAD_CONTEXT} tokens)" if view.truncated else ""
    _title(h["ax"], f"head {view.head} of {view.num_heads}: {len(view.ids)} tokens{more}")


def head_explorer(text: str = HEAD_TEXT, num_heads: int = 4, seed: int = 123) -> None:
    """Type a text, pick a head: see that head's causal attention map over GPT-2 tokens.

    Args:
        text: the starting text (GPT-2 tokens, at most 32 are shown).
        num_heads: heads of the layer; must divide the width 16 (1, 2, 4, 8 or 16).
        seed: seed of the untrained embeddings and attention heads.

    Notebook: ``cu.widgets.head_explorer()``
    """
    expect_int(num_heads, "num_heads", minimum=1)
    if HEAD_D_MODEL % num_heads:
        divisors = [k for k in range(1, HEAD_D_MODEL + 1) if HEAD_D_MODEL % k == 0]
        raise CourseInputError(f"num_heads must divide the model width d_model={HEAD_D_MODEL} (one of "
                               f"{divisors}), but got {num_heads}.")
    expect_int(seed, "seed", minimum=0)

    def controls(widgets):
        return {"text": widgets.Text(value=text, description="text (press Enter)", continuous_update=False,
                                     style={"description_width": "initial"}, layout={"width": "620px"}),
                "head": widgets.IntSlider(value=0, min=0, max=num_heads - 1, description="head",
                                          **slider_style())}

    explorer(lambda text, head: head_data(text, head, num_heads, seed), draw_head, {"text": text, "head": 0},
             controls, figsize=(7.0, 5.6))


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


_LENGTHS = torch.logspace(4, 17, 200, base=2, dtype=torch.float64)  # (200,) 16 to 131,072 tokens


def memory_data(n: int, heads: int = 12, batch: int = 1, d_model: int = 768,
                bytes_per_value: int = 4) -> MemoryView:
    """Bytes of the (batch, heads, n, n) score matrix and of the (batch, n, d_model) activations.

    The score matrix grows with n squared, the activations with n: the scores are
    ``heads * n / d_model`` times larger. Defaults are GPT-2 small (12 heads, width 768) in float32.
    """
    return MemoryView(
        n, heads, batch, d_model, bytes_per_value, _LENGTHS,
        score_bytes=batch * heads * _LENGTHS**2 * bytes_per_value,
        activation_bytes=batch * _LENGTHS * d_model * bytes_per_value,
        score_now=batch * heads * n * n * bytes_per_value,
        activation_now=batch * n * d_model * bytes_per_value,
    )


def draw_memory(fig, view: MemoryView) -> None:
    """Both byte counts against n on log-log axes, with the current n marked."""
    h = handles(fig)
    lengths = view.lengths.numpy()
    if not h:
        ax = fig.add_subplot()
        h["scores"], = ax.plot(lengths, view.score_bytes.numpy(), color=P.QUERY_COLOUR, linewidth=2,
                               label="scores / weights (b, h, n, n): grows like n²", animated=True)
        h["acts"], = ax.plot(lengths, view.activation_bytes.numpy(), color=P.KEY_COLOUR, linewidth=2,
                             label="activations (b, n, d): grows like n", animated=True)
        for gib in (16, 80):
            ax.axhline(gib * 2**30, color="#888888", linestyle=":", linewidth=1)
            ax.text(lengths[0], gib * 2**30 * 1.25, f"{gib} GiB GPU", fontsize=8, color="#555555")
        h["dot_s"], = ax.plot([], [], "o", color=P.QUERY_COLOUR, animated=True)
        h["dot_a"], = ax.plot([], [], "o", color=P.KEY_COLOUR, animated=True)
        h["text_s"] = ax.annotate("", (0, 0), xytext=(8, 6), textcoords="offset points", fontsize=9,
                                  color=P.QUERY_COLOUR, ha="right", va="bottom", animated=True)
        h["text_a"] = ax.annotate("", (0, 0), xytext=(8, -6), textcoords="offset points", fontsize=9,
                                  color=P.KEY_COLOUR, ha="left", va="top", animated=True)
        h["at"] = ax.axvline(view.n, color="#555555", linestyle=":", linewidth=1, animated=True)
        h["equal"] = ax.annotate("", (0, 0), xytext=(14, -22), textcoords="offset points", fontsize=8.5,
                                 color="#444444", animated=True,
                                 arrowprops={"arrowstyle": "-", "color": "#888888", "linewidth": 0.8})
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ticks = [4**k for k in range(2, 9)]
        ax.set_xticks(ticks, [f"{t:,}" for t in ticks])
        ticks = [2**k for k in range(10, 61, 5)]
        ax.set_yticks(ticks, [format_bytes(t) for t in ticks])
        ax.set_xlim(lengths[0], lengths[-1])
        ax.set_ylim(2**12, 2**52)  # every setting of the controls fits
        ax.set_xlabel("sequence length n (tokens)")
        ax.set_ylabel("memory for one layer")
        ax.grid(True, which="major", color="#E5E5E5", linewidth=0.6)
        ax.legend(fontsize=9, loc="upper left", frameon=False)
        ax.spines[["top", "right"]].set_visible(False)
        h["ax"] = ax
    h["scores"].set_ydata(view.score_bytes.numpy())
    h["acts"].set_ydata(view.activation_bytes.numpy())
    for key, value, colour in (("s", view.score_now, "dot_s"), ("a", view.activation_now, "dot_a")):
        h[colour].set_data([view.n], [value])
        h[f"text_{key}"].xy = (view.n, value)
        h[f"text_{key}"].set_text(format_bytes(value))
    h["at"].set_xdata([view.n, view.n])
    equal = view.d_model / view.heads  # b*h*n*n == b*n*d  <=>  n == d / h
    h["equal"].set_visible(bool(lengths[0] <= equal <= lengths[-1]))
    h["equal"].xy = (equal, view.batch * equal * view.d_model * view.bytes_per_value)
    h["equal"].set_text(f"equal at n = d / h = {equal:,.4g}")
    dtype = next((name for name, size in DTYPE_BYTES.items() if size == view.bytes_per_value),
                 f"{view.bytes_per_value}-byte values")
    ratio = view.score_now / view.activation_now
    times = f"{ratio:,.0f}" if ratio >= 10 else f"{ratio:.2g}"
    _title(h["ax"], f"b = {view.batch}, h = {view.heads}, d = {view.d_model}, {dtype}: at n = {view.n:,} "
                    f"the scores take {times}× the activations' memory", fontsize=10)


def memory_explorer(n: int = 1024, heads: int = 12, batch: int = 1, d_model: int = 768) -> None:
    """Slide the sequence length, heads and batch; compare the n² score matrix with the activations.

    Args:
        n: the starting sequence length (one of 64, 128, ..., 131072).
        heads, batch: the starting heads (up to 32) and batch size (up to 64).
        d_model: the model width (default 768, GPT-2 small).

    Notebook: ``cu.widgets.memory_explorer()``
    """
    if n not in MEMORY_LENGTHS:
        raise CourseInputError(f"n must be one of {list(MEMORY_LENGTHS)}, but got {n!r}.")
    for value, name, top in ((heads, "heads", 32), (batch, "batch", 64), (d_model, "d_model", 2**16)):
        expect_int(value, name, minimum=1)
        if value > top:
            raise CourseInputError(f"{name} must be at most {top}, but got {value}.")

    def controls(widgets):
        return {"n": widgets.SelectionSlider(options=[(f"{k:,}", k) for k in MEMORY_LENGTHS], value=n,
                                             description="sequence length n", **slider_style()),
                "heads": widgets.IntSlider(value=heads, min=1, max=32, description="heads h", **slider_style()),
                "batch": widgets.IntSlider(value=batch, min=1, max=64, description="batch b", **slider_style()),
                "dtype": widgets.Dropdown(options=list(DTYPE_BYTES.items()), value=4, description="dtype")}

    explorer(lambda n, heads, batch, dtype: memory_data(n, heads, batch, d_model, dtype), draw_memory,
             {"n": n, "heads": heads, "batch": batch, "dtype": 4}, controls, figsize=(8.0, 4.6))
