"""Chapter 05's once-seeded chain: the cell that reproduces `[-0.1700, 0.2093]` runs as stored, and
each of its asserts fails on a planted wrong chain (a layer left out, a reseed, a wrong sixth layer).
The cell is taken from the solution itself, so the test follows the text it guards."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import course_utils as cu
from tools.build import nbtools

NOTEBOOK = Path(__file__).resolve().parents[2] / "solutions" / "05_multihead.ipynb"
FIVE = [
    "    cu.chapters.SelfAttention_v1(3, 2)  # three nn.Parameter(torch.rand(3, 2))\n",
    "    cu.chapters.SelfAttention_v2(3, 2)\n",
    "    cu.chapters.CausalAttention(3, 2, 6, 0.0)\n",
    "    cu.chapters.MultiHeadAttentionWrapper(3, 2, 6, 0.0, num_heads=2)\n",
    "    cu.chapters.MultiHeadAttentionWrapper(3, 1, 6, 0.0, num_heads=2)\n",
]


def _cell(start: str) -> str:
    found = [c.source for c in nbtools.read(NOTEBOOK).cells if c.source.startswith(start)]
    assert len(found) == 1, f"one cell of chapter 05 starts with {start!r}"
    return found[0]


SHARED = _cell("class SharedProjection(cu.chapters.MultiHeadAttention):")
CHAIN = _cell("class KeysFromQuery(SharedProjection):")


def _run(chain: str) -> dict:
    inputs = cu.example_inputs()
    namespace = {"torch": torch, "nn": nn, "cu": cu, "device": "cpu"}
    namespace["batch"] = torch.stack((inputs, inputs))  # (2, 6, 3): the chapter's batch
    exec(compile(SHARED, "chapter 05, SharedProjection", "exec"), namespace)  # noqa: S102
    exec(compile(chain, "chapter 05, the seeded-once chain", "exec"), namespace)  # noqa: S102
    return namespace


def _failing_assert(chain: str) -> str:
    """The line of the chain whose assert fails."""
    with pytest.raises(AssertionError) as info:
        _run(chain)
    return chain.splitlines()[info.traceback[-1].lineno]


def _planted(old: str, new: str) -> str:
    assert CHAIN.count(old) == 1, old
    return CHAIN.replace(old, new)


def test_the_stored_cell_reproduces_the_row():
    rows = _run(CHAIN)["rows"]
    assert [round(v, 4) for v in rows["keys and values from W_query"].tolist()] == [-0.17, 0.2093]
    assert [round(v, 4) for v in rows["the correct split layer"].tolist()] == [-0.2174, 0.122]


@pytest.mark.parametrize(
    "old, new",
    [
        (FIVE[0], ""),  # SelfAttention_v1 left out: the row moves
        (FIVE[4], ""),  # the width-1 wrapper left out
        (FIVE[4], FIVE[3]),  # a second wrapper of 2 heads of 2 instead of 2 heads of 1
        (
            "    layer = split_layer(",
            "    torch.manual_seed(123)\n    layer = split_layer(",
        ),  # reseeded
        ("first_row_seeded_once(SharedProjection)", "first_row_seeded_once(KeysFromQuery)"),
    ],
    ids=["no-v1", "no-width-1", "width-2-twice", "reseeded", "keys-alone"],
)
def test_a_wrong_chain_fails_the_first_assert(old, new):
    assert 'rows["keys and values from W_query"], printed' in _failing_assert(_planted(old, new))


def test_a_correct_layer_that_printed_the_row_fails_the_second_assert():
    wrong = _planted(
        "first_row_seeded_once(cu.chapters.MultiHeadAttention)",
        "first_row_seeded_once(SharedProjection)",
    )
    assert 'not torch.allclose(rows["the correct split layer"]' in _failing_assert(wrong)


def test_values_from_w_query_in_the_keys_alone_layer_fail_the_third_assert():
    wrong = _planted("self.W_value(x).view(split_shape)", "self.W_query(x).view(split_shape)")
    assert 'rows["keys alone from W_query"], rows[' in _failing_assert(wrong)


def test_the_order_of_the_five_layers_does_not_matter_only_what_they_draw():
    """The text says so: every order of the five leaves the generator in the same state."""
    body = "".join(FIVE)
    assert CHAIN.count(body) == 1
    stored = _run(CHAIN)["rows"]["keys and values from W_query"]
    orders = [FIVE[::-1], *(FIVE[i:] + FIVE[:i] for i in range(1, 5)), FIVE[1::2] + FIVE[::2]]
    for order in orders:  # every layer first once, reversed, interleaved; each runs the asserts
        row = _run(CHAIN.replace(body, "".join(order)))["rows"]["keys and values from W_query"]
        assert torch.equal(row, stored), order
