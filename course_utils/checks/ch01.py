"""Self-checks for chapter 01 (toy attention without trainable weights)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ._core import (
    Bug,
    call,
    describe_difference,
    ensure_callable,
    fail,
    fail_with_bug,
    match_bug,
    passed,
    randn,
    same,
)

# (tokens, embedding size) pairs; (7, 7) is square so a transposed answer has the right shape.
_SHAPES = ((6, 3), (4, 5), (1, 2), (7, 7))


def _cases() -> list[torch.Tensor]:
    return [randn(n, d, seed=100 + i) for i, (n, d) in enumerate(_SHAPES)]


# --------------------------------------------------------------------------- scores
_SCORE_BUGS = {
    "no_sum": Bug(
        "no_sum",
        "You returned the element-wise products query * x_i without adding them up: "
        "a dot product is the *sum* of those products, one number per token.",
        "sum over the embedding dimension, or use `inputs @ query`.",
    ),
    "sum_over_tokens": Bug(
        "sum_over_tokens",
        "You summed the products over the tokens (dim 0) instead of over the embedding "
        "dimension, so you get one number per embedding dimension, not one per token.",
        "sum over the last dimension: `(inputs * query).sum(dim=-1)`.",
    ),
    "cosine": Bug(
        "cosine",
        "Your scores are cosine similarities (dot products of unit-length vectors). "
        "Attention scores here are plain dot products: do not normalise the vectors.",
        "drop the division by the vector lengths.",
    ),
    "self_scores": Bug(
        "self_scores",
        "You computed the scores of every token with every other token (an n x n matrix); "
        "this function scores one query against all tokens.",
        "use the single `query` vector: `inputs @ query`.",
    ),
}


def check_attention_scores(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
    """Check ``fn(query, inputs)``: the dot product of ``query`` with every row of ``inputs``."""
    __tracebackhide__ = True
    name = "check_attention_scores"
    ensure_callable(name, fn, "a function fn(query, inputs)")
    for inputs in _cases():
        for q_index in (0, inputs.shape[0] - 1):
            query = inputs[q_index]
            expected = inputs @ query
            got = call(name, fn, query, inputs.clone(), what=f"fn(query, inputs of shape {tuple(inputs.shape)})")
            if same(got, expected):
                continue
            bug = match_bug(got, [
                (_SCORE_BUGS["no_sum"], lambda: inputs * query),
                (_SCORE_BUGS["sum_over_tokens"], lambda: (inputs * query).sum(dim=0)),
                (_SCORE_BUGS["self_scores"], lambda: inputs @ inputs.T),
                (_SCORE_BUGS["cosine"], lambda: (inputs / inputs.norm(dim=-1, keepdim=True)) @ (query / query.norm())),
            ])
            where = f"With inputs of shape {tuple(inputs.shape)} and query = inputs[{q_index}]:"
            if bug:
                raise fail_with_bug(name, bug, where)
            raise fail(name, f"{where} {describe_difference(expected, got)}.",
                       "score i is torch.dot(query, inputs[i]).")
    passed(name, f"dot-product scores are right on {len(_SHAPES) * 2} cases")


# --------------------------------------------------------------------------- softmax
_SOFTMAX_BUGS = {
    "divide_by_sum": Bug(
        "divide_by_sum",
        "You divided the scores by their sum. That normalises, but it is not the softmax: "
        "it breaks on negative scores (weights below 0 or above 1) and does not use exp.",
        "exponentiate first: exp(x) / exp(x).sum(...).",
    ),
    "no_normalise": Bug(
        "no_normalise",
        "You returned exp(x) without dividing by the sum, so the weights do not add up to 1.",
        "divide by `x.exp().sum(dim=-1, keepdim=True)`.",
    ),
    "overflow": Bug(
        "overflow",
        "Your softmax returns NaN or inf for large scores (e.g. 1000): exp(1000) overflows "
        "float32. This is the naive softmax's weakness.",
        "subtract the row's maximum before exp: softmax(x) == softmax(x - x.max()).",
    ),
    "wrong_dim": Bug(
        "wrong_dim",
        "On a 2-d input your weights add up to 1 down each *column* (dim 0) instead of along "
        "each row (the last dimension): you normalised over the wrong axis.",
        "normalise over dim=-1 and use keepdim=True so the division broadcasts per row.",
    ),
    "no_keepdim": Bug(
        "no_keepdim",
        "On a 2-d input the division by the row sums broadcast the wrong way: without "
        "keepdim=True a (n,) sum is divided across columns, not rows.",
        "use `.sum(dim=-1, keepdim=True)`.",
    ),
}


def check_softmax(fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Check a numerically stable softmax over the last dimension, for 1-d and 2-d input."""
    __tracebackhide__ = True
    name = "check_softmax"
    ensure_callable(name, fn, "a function fn(x)")
    cases = [randn(6, seed=1), randn(4, 4, seed=2) * 3, randn(3, 5, seed=3),
             torch.tensor([1000.0, 999.0, 998.0]), torch.tensor([[-1000.0, -1001.0], [5.0, 7.0]])]
    for x in cases:
        expected = torch.softmax(x, dim=-1)
        got = call(name, fn, x.clone(), what=f"fn(x of shape {tuple(x.shape)})")
        if same(got, expected):
            continue
        if isinstance(got, torch.Tensor) and not torch.isfinite(got).all() and x.abs().max() > 100:
            raise fail_with_bug(name, _SOFTMAX_BUGS["overflow"], f"With x = {x.tolist()}:")
        bug = match_bug(got, [
            (_SOFTMAX_BUGS["divide_by_sum"], lambda: x / x.sum(dim=-1, keepdim=True)),
            (_SOFTMAX_BUGS["no_normalise"], lambda: x.exp()),
            (_SOFTMAX_BUGS["no_normalise"], lambda: (x - x.max(dim=-1, keepdim=True).values).exp()),
            (_SOFTMAX_BUGS["wrong_dim"], lambda: torch.softmax(x, dim=0)),
            (_SOFTMAX_BUGS["no_keepdim"], lambda: x.exp() / x.exp().sum(dim=-1)),
            (_SOFTMAX_BUGS["no_keepdim"], lambda: (x - x.max()).exp() / (x - x.max()).exp().sum(dim=-1)),
        ])
        where = f"With x of shape {tuple(x.shape)}:"
        if bug:
            raise fail_with_bug(name, bug, where)
        raise fail(name, f"{where} {describe_difference(expected, got)}.")
    passed(name, f"stable softmax is right on {len(cases)} inputs, large scores included")


# --------------------------------------------------------------------------- weights and contexts
_WEIGHT_BUGS = {
    "raw_scores": Bug(
        "raw_scores",
        "You returned the raw scores inputs @ inputs.T; attention weights are those scores "
        "after a softmax over each row.",
        "apply torch.softmax(scores, dim=-1).",
    ),
    "columns": Bug(
        "columns",
        "Your weights add up to 1 down each column (softmax over dim=0), not along each row. "
        "Row i must hold the weights that query i gives to every token.",
        "use torch.softmax(scores, dim=-1).",
    ),
    "divide_by_sum": Bug(
        "divide_by_sum",
        "You normalised each row by dividing by its sum; the course uses the softmax, which "
        "keeps every weight positive even for negative scores.",
        "use torch.softmax(scores, dim=-1).",
    ),
}


def check_attention_weights(fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Check ``fn(inputs)``: the (n, n) softmax-normalised dot-product weights."""
    __tracebackhide__ = True
    name = "check_attention_weights"
    ensure_callable(name, fn, "a function fn(inputs)")
    for inputs in _cases():
        scores = inputs @ inputs.T
        expected = torch.softmax(scores, dim=-1)
        got = call(name, fn, inputs.clone(), what=f"fn(inputs of shape {tuple(inputs.shape)})")
        if same(got, expected):
            continue
        bug = match_bug(got, [
            (_WEIGHT_BUGS["raw_scores"], lambda: scores),
            (_WEIGHT_BUGS["columns"], lambda: torch.softmax(scores, dim=0)),
            (_WEIGHT_BUGS["divide_by_sum"], lambda: scores / scores.sum(dim=-1, keepdim=True)),
        ])
        where = f"With inputs of shape {tuple(inputs.shape)}:"
        if bug:
            raise fail_with_bug(name, bug, where)
        raise fail(name, f"{where} {describe_difference(expected, got)}.")
    passed(name, f"attention weights are right on {len(_SHAPES)} input shapes")


_CONTEXT_BUGS = {
    "transposed_weights": Bug(
        "transposed_weights",
        "Your context vector i mixes the tokens with column i of the weights instead of row i: "
        "either the weights were normalised down the columns (softmax over dim=0) or you "
        "multiplied by weights.T. (With dot-product scores the score matrix is symmetric, so "
        "both mistakes give the same numbers.)",
        "use torch.softmax(scores, dim=-1), then weights @ inputs.",
    ),
    "raw_scores": Bug(
        "raw_scores",
        "You mixed the inputs with the raw scores instead of the softmax weights, so the "
        "context vectors are not weighted averages.",
        "normalise the scores with torch.softmax(scores, dim=-1) first.",
    ),
}


def check_context_vectors(fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Check ``fn(inputs)``: every token's context vector, softmax(inputs @ inputs.T) @ inputs."""
    __tracebackhide__ = True
    name = "check_context_vectors"
    ensure_callable(name, fn, "a function fn(inputs)")
    for inputs in _cases():
        scores = inputs @ inputs.T
        weights = torch.softmax(scores, dim=-1)
        expected = weights @ inputs
        got = call(name, fn, inputs.clone(), what=f"fn(inputs of shape {tuple(inputs.shape)})")
        if same(got, expected):
            continue
        bug = match_bug(got, [
            (_CONTEXT_BUGS["transposed_weights"], lambda: weights.T @ inputs),
            (_CONTEXT_BUGS["raw_scores"], lambda: scores @ inputs),
        ])
        where = f"With inputs of shape {tuple(inputs.shape)}:"
        if bug:
            raise fail_with_bug(name, bug, where)
        raise fail(name, f"{where} {describe_difference(expected, got)}.")
    passed(name, f"context vectors are right on {len(_SHAPES)} input shapes")
