"""Explorer of chapter 01: one query's scores, weights and context vector."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from matplotlib.patches import Patch

from course_utils import chapters as ch
from course_utils import plotting as P
from course_utils._explorer_parts import _title, _tokens
from course_utils.data import EXAMPLE_TOKENS
from course_utils.plotting import Bars, explorer, handles

__all__ = [
    "QueryView",
    "query_data",
    "draw_query",
    "query_explorer",
]


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


def query_data(
    inputs: torch.Tensor, query: int, labels: Sequence[str] = EXAMPLE_TOKENS
) -> QueryView:
    """Scores, softmax weights and context vector of token ``query`` attending to all of ``inputs``."""
    all_scores = ch.attention_scores(
        inputs[:, None], inputs
    )  # (n, n): chapter 01's scores, every query at once
    all_weights = ch.attention_weights(inputs)  # (n, n)
    contexts = ch.context_vectors(inputs)  # (n, d)
    values = torch.cat([inputs.flatten(), contexts.flatten(), torch.zeros(1)])
    return QueryView(
        query,
        tuple(labels),
        inputs,
        all_scores[query],
        all_weights[query],
        contexts[query],
        (min(0.0, float(all_scores.min())), float(all_scores.max())),
        (float(values.min()), float(values.max())),
    )


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
        h["sum"] = ax_w.text(
            0.99,
            0.97,
            "",
            transform=ax_w.transAxes,
            ha="right",
            va="top",
            fontsize=9,
            animated=True,
        )
        positions = torch.arange(d, dtype=torch.float32)
        h["input"] = Bars(
            ax_c,
            view.inputs[q],
            x=positions - 0.19,
            width=0.38,
            colour=P.QUERY_COLOUR,
            animated=True,
        )
        h["context"] = Bars(
            ax_c, view.context, x=positions + 0.19, width=0.38, colour=P.KEY_COLOUR, animated=True
        )
        low, high = view.value_range
        ax_c.set_ylim(low - 0.1 * (high - low), high + 0.35 * (high - low))
        ax_c.legend(
            handles=[
                Patch(color=P.QUERY_COLOUR, label="input x(query)"),
                Patch(color=P.KEY_COLOUR, label="context z(query)"),
            ],
            fontsize=8,
            loc="upper left",
            frameon=False,
        )
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
        return {
            "query": widgets.Dropdown(
                options=[(f"{i}: {name}", i) for i, name in enumerate(names)],
                value=start,
                description="query token",
            )
        }

    explorer(
        lambda query: query_data(x, query, names),
        draw_query,
        {"query": start},
        controls,
        figsize=(10.4, 3.4),
    )
