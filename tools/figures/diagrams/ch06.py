"""The diagrams of chapter 06 (``make figures``): its catalogue (names, alt texts) and drawing code."""

from __future__ import annotations

from matplotlib.figure import Figure

from course_utils.chapters.ch03.explorer import example_causal_weights
from course_utils.data import EXAMPLE_SENTENCE
from course_utils.plotting import EXTRA_COLOUR
from course_utils.plotting import INPUT_COLOUR as X_COLOUR
from course_utils.plotting import KEY_COLOUR as K_COLOUR
from course_utils.plotting import QUERY_COLOUR as Q_COLOUR
from course_utils.plotting import VALUE_COLOUR as V_COLOUR
from course_utils.repro import portable_rand
from tools.figures.diagrams._draw import (
    _arrow,
    _box,
    _canvas,
    _cells,
    _mini_map,
    _readable,
)


def draw_text_to_logits() -> Figure:
    """Text to token ids, to embeddings plus positions, through attention, to logits."""
    from course_utils.tokenizer import gpt2_tokenizer

    tokenizer = gpt2_tokenizer()
    ids = tokenizer.encode(EXAMPLE_SENTENCE)
    pieces = [tokenizer.decode([i]).replace(" ", "␣") for i in ids]
    n = len(ids)
    fig, ax = _canvas(12.2, 8.7)
    label_x, data_x, shape_x = 0.3, 4.55, 11.9
    rows = [8.05, 6.65, 4.9, 3.05, 1.35]
    stages = [
        ("text", "a string"),
        ("GPT-2 tokenizer", "token ids (n,)"),
        ("token embedding\n+ position embedding", "X  (n, d)"),
        ("multi-head causal\nattention", "Z  (n, d)"),
        ("output layer\nLinear(d, 50,257)", "logits  (n, 50,257)"),
    ]
    colours = [X_COLOUR, X_COLOUR, K_COLOUR, EXTRA_COLOUR, Q_COLOUR]
    for (stage, shape), y, colour in zip(stages, rows, colours):
        _box(ax, label_x, y - 0.45, 2.75, 0.9, stage, colour=colour, fill=0.12, fontsize=9.5)
        ax.text(shape_x, y, shape, ha="right", va="center", fontsize=9.5, color="#444444")
    code = ["tok.encode(text)", "tok_emb(ids) + pos_emb(arange(n))", "mha(x)", "out_head(z)"]
    for y0, y1, text in zip(rows[:-1], rows[1:], code):
        _arrow(ax, (label_x + 1.375, y0 - 0.5), (label_x + 1.375, y1 + 0.5))
        ax.text(
            label_x + 1.55,
            (y0 + y1) / 2,
            text,
            ha="left",
            va="center",
            fontsize=8.5,
            family="DejaVu Sans Mono",
            color="#444444",
        )
    # text
    ax.text(data_x, rows[0], f"“{EXAMPLE_SENTENCE}”", ha="left", va="center", fontsize=11)
    # ids
    width = 0.95
    for j, (piece, token_id) in enumerate(zip(pieces, ids)):
        x0 = data_x + j * (width + 0.08)
        _box(ax, x0, rows[1] - 0.05, width, 0.42, piece, colour=X_COLOUR, fill=0.08, fontsize=8.5)
        ax.text(
            x0 + width / 2,
            rows[1] - 0.3,
            f"{token_id}",
            ha="center",
            va="center",
            fontsize=9,
            family="DejaVu Sans Mono",
        )
    # embeddings: token rows + position rows = X
    cell = 0.22
    d = 5
    for x0, what, colour in (
        (data_x, "rows picked by id", K_COLOUR),
        (data_x + d * cell + 0.6, "rows 0..n-1", V_COLOUR),
    ):
        ax.text(x0, rows[2] + 0.85, what, ha="left", va="center", fontsize=8.5, color="#444444")
        _cells(ax, x0, rows[2] + 0.66, None, rows=n, cols=d, cell=cell, colour=colour, fill=0.3)
    ax.text(data_x + d * cell + 0.3, rows[2] - 0.0, "+", fontsize=14, ha="center", va="center")
    ax.text(data_x + 2 * d * cell + 0.9, rows[2], "=", fontsize=14, ha="center", va="center")
    _cells(
        ax,
        data_x + 2 * d * cell + 1.2,
        rows[2] + 0.66,
        None,
        rows=n,
        cols=d,
        cell=cell,
        colour=K_COLOUR,
        col_colours=None,
        fill=0.55,
    )
    ax.text(
        data_x + 3 * d * cell + 1.4,
        rows[2],
        "one vector per token:\nwhat it is + where it is",
        ha="left",
        va="center",
        fontsize=9,
        color="#444444",
    )
    # attention
    _mini_map(ax, example_causal_weights(), data_x, rows[3] + 0.66, 1.32, EXTRA_COLOUR)
    ax.text(
        data_x + 1.6,
        rows[3],
        "each token mixes in the tokens before it\n"
        "(in GPT: many such blocks, with feed-forward layers)",
        ha="left",
        va="center",
        fontsize=9,
        color="#444444",
    )
    # logits
    generator_values = portable_rand((n, 24), seed=7)
    fill = [[0.1 + 0.6 * float(v) for v in row] for row in generator_values]
    _cells(ax, data_x, rows[4] + 0.66, None, rows=n, cols=24, cell=cell, colour=Q_COLOUR, fill=fill)
    ax.text(data_x + 24 * cell + 0.12, rows[4], "…", fontsize=14, ha="left", va="center")
    ax.text(
        data_x + 0.0,
        rows[4] - 0.95,
        "one score for every vocabulary entry, at every position: "
        "the last row scores the next token",
        ha="left",
        va="center",
        fontsize=9,
        color="#444444",
    )
    return _readable(fig)


FIGURES = {
    "text_to_logits": (
        "The pipeline from text to logits: the sentence is split by the GPT-2 tokenizer into six token "
        "ids, each id picks a row of the token embedding to which a position embedding is added, "
        "multi-head causal attention mixes the tokens, and an output layer gives one score per "
        "vocabulary entry at every position.",
        draw_text_to_logits,
    ),
}
"""This chapter's figures: name -> (alt text, drawing function); see tools/figures/catalogue.py."""
