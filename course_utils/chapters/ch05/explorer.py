"""Explorer of chapters 05-06: every head's map for a text you type."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from course_utils._explorer_parts import (
    _divisors,
    _title,
    _visible,
    slider_style,
)
from course_utils.chapters import CausalAttention, head_weights
from course_utils.plotting import draw_map, explorer, handles
from course_utils.tokenizer import gpt2_tokenizer
from course_utils.validation import CourseInputError, expect_int

__all__ = [
    "HEAD_D_MODEL",
    "HEAD_CONTEXT",
    "HEAD_TEXT",
    "HeadView",
    "head_data",
    "draw_head",
    "head_explorer",
]


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


@functools.lru_cache(maxsize=8)
def _head_layer(num_heads: int, seed: int):
    """Seeded token and position embeddings and one CausalAttention per head (global RNG untouched)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        tokens = torch.nn.Embedding(gpt2_tokenizer().n_vocab, HEAD_D_MODEL)
        positions = torch.nn.Embedding(HEAD_CONTEXT, HEAD_D_MODEL)
        heads = [
            CausalAttention(HEAD_D_MODEL, HEAD_D_MODEL // num_heads, HEAD_CONTEXT, 0.0)
            for _ in range(num_heads)
        ]
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
    pieces = tuple(_visible(tokenizer.decode([i])) for i in ids)
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
        h["heat"] = draw_map(
            ax,
            view.weights[view.head],
            view.pieces,
            view.pieces,
            vmin=0.0,
            vmax=1.0,
            annotate=len(view.pieces) <= 8,
            animated=True,
        )
        fig.suptitle(
            f"untrained layer (seed {view.seed}): every head starts with its own random pattern",
            fontsize=9,
            color="#444444",
        )
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
        raise CourseInputError(
            f"num_heads must divide the model width d_model={HEAD_D_MODEL} (one of "
            f"{_divisors(HEAD_D_MODEL)}), but got {num_heads}."
        )
    expect_int(seed, "seed", minimum=0)

    def controls(widgets):
        return {
            "text": widgets.Text(
                value=text,
                description="text (press Enter)",
                continuous_update=False,
                style={"description_width": "initial"},
                layout={"width": "620px"},
            ),
            "head": widgets.IntSlider(
                value=0, min=0, max=num_heads - 1, description="head", **slider_style()
            ),
        }

    explorer(
        lambda text, head: head_data(text, head, num_heads, seed),
        draw_head,
        {"text": text, "head": 0},
        controls,
        figsize=(7.0, 5.6),
    )
