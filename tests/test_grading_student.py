"""tools/grading/student.py's autograd bridge, directly: the judge's copy of a student's output joins
the judge's graph through the leaves ``graph_leaves`` finds, so a leaf it misses gets no gradient
and the student is told that their layer cuts the graph.

Under torch 2.3 (the lowest the README supports) the old version, which remembered only the ids of
the nodes it had visited, found 1 leaf of the chains below instead of 7 and 1 of the attention's 4:
autograd gave a node a new Python object once its last one was freed, and a freed one's id came
back for another node."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tools.grading.student import graph_leaves


def _same_set(found: list, expected: list) -> bool:
    return len(found) == len(expected) and all(any(f is e for f in found) for e in expected)


def test_every_leaf_of_a_long_chain_is_found_once():
    x = torch.randn(3, 2, requires_grad=True)
    weights = [torch.randn(2, 2, requires_grad=True) for _ in range(6)]
    h = x
    for w in weights:
        h = (h @ w).tanh()  # (3, 2)
    assert _same_set(graph_leaves(h), [x, *weights])


def test_a_leaf_reached_twice_is_listed_once():
    x = torch.randn(4, requires_grad=True)
    w = torch.randn(4, requires_grad=True)
    y = (x * w) + (x * w).sin() + w.exp()  # x and w each reached by several paths
    found = graph_leaves(y)
    assert _same_set(found, [x, w])


def test_one_token_attention_keeps_its_query_and_key_weights():
    """One token's attention weight is 1 whatever its score, so W_query's gradient is zero; it must
    still be a leaf of the output (a zero gradient, not none)."""
    x = torch.randn(1, 2, requires_grad=True)
    w_query, w_key, w_value = (torch.nn.Parameter(torch.rand(2, 6)) for _ in range(3))
    out = F.scaled_dot_product_attention(x @ w_query, x @ w_key, x @ w_value)  # (1, 6)
    assert _same_set(graph_leaves(out), [x, w_query, w_key, w_value])


def test_a_tensor_without_a_graph_has_no_leaves():
    assert graph_leaves(torch.randn(3)) == []
    assert graph_leaves(torch.randn(3, requires_grad=True).detach() * 2) == []
