"""Self-checks for chapter 01 (toy attention without trainable weights)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch

from course_utils.checks import _engine as E

# Shortcuts graded answers may call (tools/grading/honesty.py): none: the exercise is attention
ALLOWED_SHORTCUTS: tuple[str, ...] = ()

# (tokens, embedding size) pairs; (7, 7) is square so a transposed answer has the right shape.
_SHAPES = ((6, 3), (4, 5), (1, 2), (7, 7))
_TOY = E.Recipe(mask="none", scale="none")  # chapter 01: plain dot products, no mask, no scaling
_TOY_WEIGHTS = replace(_TOY, returns="weights")


def _cases() -> list[torch.Tensor]:
    return [E.randn(n, d, seed=100 + i) for i, (n, d) in enumerate(_SHAPES)]


def _expect(
    c: E.Check,
    fn: Callable,
    inputs: list[torch.Tensor],
    what: str,
    expected: torch.Tensor,
    where: str,
    candidates: Callable[[torch.Tensor], list],
    hint: str | None = None,
) -> None:
    """``fn(*inputs)`` must return ``expected``; else the matching ``candidates(answer)`` is named."""
    __tracebackhide__ = True
    got = c.expect_tensor_output(c.call_pure(fn, inputs, what=what), what)
    c.compare(got, expected, where, candidates(got), hint=hint)


def _check_on_inputs(
    c: E.Check, fn: Callable, expected: Callable, candidates: Callable, done: str
) -> None:
    """``fn(inputs)`` on every case; ``expected`` and ``candidates`` are given the inputs."""
    __tracebackhide__ = True
    c.ensure_callable(fn, "a function fn(inputs)")
    for inputs in _cases():
        shape = tuple(inputs.shape)
        _expect(
            c,
            fn,
            [inputs],
            f"fn(inputs of shape {shape})",
            expected(inputs),
            f"With inputs of shape {shape}:",
            lambda got, x=inputs: candidates(x),
        )
    c.passed(f"{done} are right on {len(_SHAPES)} input shapes")


def _score_mistakes(inputs: torch.Tensor, query: torch.Tensor) -> list:
    return [
        ("scores_no_sum", lambda: inputs * query),
        ("scores_sum_over_tokens", lambda: (inputs * query).sum(dim=0)),
        ("scores_all_pairs", lambda: inputs @ inputs.T),
        (
            "scores_cosine",
            lambda: (inputs / inputs.norm(dim=-1, keepdim=True)) @ (query / query.norm()),
        ),
    ]


def check_attention_scores(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
    """Check ``fn(query, inputs)``: the dot product of ``query`` with every row of ``inputs``."""
    __tracebackhide__ = True
    c = E.Check("check_attention_scores")
    c.ensure_callable(fn, "a function fn(query, inputs)")
    for inputs in _cases():
        for q_index in (0, inputs.shape[0] - 1):
            query, shape = inputs[q_index].clone(), tuple(inputs.shape)
            _expect(
                c,
                fn,
                [query, inputs],
                f"fn(query, inputs of shape {shape})",
                inputs @ query,
                f"With inputs of shape {shape} and query = inputs[{q_index}]:",
                lambda got, x=inputs, q=query: _score_mistakes(x, q),
                "score i is torch.dot(query, inputs[i]).",
            )
    c.passed(f"dot-product scores are right on {len(_SHAPES) * 2} cases")


def _softmax_mistakes(x: torch.Tensor, got: torch.Tensor) -> list:
    top = x.max(dim=-1, keepdim=True).values
    candidates = [
        (
            "softmax_global_max",
            lambda: (x - x.max()).exp() / (x - x.max()).exp().sum(dim=-1, keepdim=True),
        ),
        ("divide_by_sum", lambda: x / x.sum(dim=-1, keepdim=True)),
        ("softmax_no_normalise", lambda: x.exp()),
        ("softmax_no_normalise", lambda: (x - top).exp()),
        ("softmax_over_columns", lambda: torch.softmax(x, dim=0)),
        ("softmax_no_keepdim", lambda: x.exp() / x.exp().sum(dim=-1)),
        ("softmax_no_keepdim", lambda: (x - x.max()).exp() / (x - x.max()).exp().sum(dim=-1)),
    ]
    if (
        not torch.isfinite(got).all()
        and x.abs().max() > 100
        and not E.same(got, candidates[0][1]())
    ):
        return [("softmax_overflow", lambda: got)]
    return candidates


def check_softmax(fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Check a numerically stable softmax over the last dimension, for 1-d and 2-d input."""
    __tracebackhide__ = True
    c = E.Check("check_softmax")
    c.ensure_callable(fn, "a function fn(x)")
    cases = [
        E.randn(6, seed=1),
        E.randn(4, 4, seed=2) * 3,
        E.randn(3, 5, seed=3),
        torch.tensor([1000.0, 999.0, 998.0]),
        torch.tensor([[-1000.0, -1001.0], [5.0, 7.0]]),
    ]
    for x in cases:
        where = f"With x = {x.tolist()}:" if x.numel() < 8 else f"With x of shape {tuple(x.shape)}:"
        expected, watch = torch.softmax(x, dim=-1), E.Watch()
        try:
            with watch:
                _expect(
                    c,
                    fn,
                    [x],
                    f"fn(x of shape {tuple(x.shape)})",
                    expected,
                    where,
                    lambda got, x=x: _softmax_mistakes(x, got),
                )
        except E.CheckFailure as failure:  # right on a 1-d vector, a crash on a 2-d input
            if x.dim() == 2 and failure.bug is None and failure.__cause__ is not None:
                raise c.bug("softmax_1d_only", str(failure).split("\n\n")[1]) from None
            raise
        if any(call[0] in ("softmax", "_softmax", "log_softmax") for call in watch.calls):
            raise c.bug("softmax_library_call", where)
    c.passed(f"stable softmax is right on {len(cases)} inputs, large scores included")


def check_attention_weights(fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Check ``fn(inputs)``: the (n, n) softmax-normalised dot-product weights."""
    __tracebackhide__ = True
    _check_on_inputs(
        E.Check("check_attention_weights"),
        fn,
        lambda x: E.attention(x, x, x, _TOY_WEIGHTS),
        lambda x: [
            ("raw_scores_as_weights", lambda: x @ x.T),
            ("softmax_over_columns", lambda: torch.softmax(x @ x.T, dim=0)),
            ("divide_by_sum", lambda: x @ x.T / (x @ x.T).sum(dim=-1, keepdim=True)),
        ],
        "attention weights",
    )


def check_context_vectors(fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Check ``fn(inputs)``: every token's context vector, softmax(inputs @ inputs.T) @ inputs."""
    __tracebackhide__ = True
    _check_on_inputs(
        E.Check("check_context_vectors"),
        fn,
        lambda x: E.attention(x, x, x, _TOY),
        lambda x: [
            ("context_transposed_weights", lambda: E.attention(x, x, x, _TOY_WEIGHTS).T @ x),
            ("context_from_raw_scores", lambda: (x @ x.T) @ x),
        ],
        "context vectors",
    )


__all__ = [
    "check_attention_scores",
    "check_attention_weights",
    "check_context_vectors",
    "check_softmax",
]
