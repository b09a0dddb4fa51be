"""Self-checks for chapter 03 (causal masking, two ways).

Conventions checked here, as the chapter teaches them:

* a causal mask is a bool ``(n, n)`` tensor that is True *above* the diagonal, i.e. where a
  query would look at a later token (``torch.triu(..., diagonal=1)``);
* both masking functions take raw scores of shape ``(n, n)`` or ``(b, n, n)`` and the key
  width ``d_k``, and return attention weights scaled by ``1 / sqrt(d_k)``, normalised over
  the last axis, with exact zeros above the diagonal.
"""

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


def _future(n: int) -> torch.Tensor:
    """(n, n) bool, True above the diagonal: the reference causal mask."""
    return torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)


# --------------------------------------------------------------------------- the mask
_MASK_BUGS = {
    "diagonal": Bug(
        "diagonal",
        "Your mask also covers the diagonal, so every token is hidden from itself (and the first "
        "token, which has no past, would see nothing at all: its weights become NaN).",
        "keep the diagonal visible: torch.triu(..., diagonal=1).",
    ),
    "past": Bug(
        "past",
        "Your mask hides the *past* (below the diagonal) instead of the future: it is the "
        "transpose of the causal mask, the tril/triu mix-up.",
        "the future of query i is the keys j > i, above the diagonal: torch.triu(..., diagonal=1).",
    ),
    "keep_mask": Bug(
        "keep_mask",
        "Your mask is True where a token may look (the lower triangle, diagonal included), "
        "i.e. a *keep* mask. Here True must mark what gets masked (the future), because "
        "scores.masked_fill(mask, -inf) overwrites the positions where the mask is True.",
        "invert it (~mask), or build it directly with torch.triu(..., diagonal=1).",
    ),
    "float": Bug(
        "float",
        "Your mask has the right pattern but dtype {dtype}. masked_fill needs a bool mask "
        "(True = fill), and a float 0/1 mask is easy to misuse.",
        "add dtype=torch.bool to torch.ones, or call .bool() on the result.",
    ),
    "fixed_size": Bug(
        "fixed_size",
        "Your mask does not depend on n: asked for n={n}, it has shape {shape}.",
        "build it from n: torch.ones(n, n, ...).",
    ),
}

_MASK_SIZES = (5, 1, 2, 6, 9)


def check_causal_mask(fn: Callable[[int], torch.Tensor]) -> None:
    """Check ``fn(n)``: a bool (n, n) tensor, True above the diagonal (the future)."""
    __tracebackhide__ = True
    name = "check_causal_mask"
    ensure_callable(name, fn, "a function fn(n)")
    for n in _MASK_SIZES:
        expected = _future(n)
        got = call(name, fn, n, what=f"fn({n})")
        where = f"For n={n}:"
        if not isinstance(got, torch.Tensor):
            raise fail(name, f"{where} fn(n) returned {type(got).__name__}, not a tensor.")
        if tuple(got.shape) != (n, n):
            bug = _MASK_BUGS["fixed_size"]
            if got.dim() == 2 and got.shape[0] == got.shape[1]:
                raise fail(name, bug.diagnosis.format(n=n, shape=tuple(got.shape)), bug.hint)
            raise fail(name, f"{where} expected shape {(n, n)}, got {tuple(got.shape)}.",
                       "a mask has one row per query and one column per key.")
        if got.dtype != torch.bool:
            if same(got.float(), expected.float()):
                bug = _MASK_BUGS["float"]
                raise fail(name, bug.diagnosis.format(dtype=got.dtype), bug.hint)
            pattern = got != 0
        else:
            pattern = got
        if torch.equal(pattern, expected) and got.dtype == torch.bool:
            continue
        ones = torch.ones(n, n, dtype=torch.bool)
        bug = None
        for candidate, mask in [
            (_MASK_BUGS["diagonal"], torch.triu(ones)),
            (_MASK_BUGS["keep_mask"], torch.tril(ones)),
            (_MASK_BUGS["past"], torch.tril(ones, diagonal=-1)),
        ]:
            if torch.equal(pattern, mask):
                bug = candidate
                break
        if bug:
            raise fail_with_bug(name, bug, where)
        wrong = torch.nonzero(pattern != expected)[0].tolist()
        raise fail(name, f"{where} entry {tuple(wrong)} should be {bool(expected[tuple(wrong)])}.",
                   "True exactly where the key comes after the query (column > row).")
    passed(name, f"bool masks, True above the diagonal, for n in {list(_MASK_SIZES)}")


# --------------------------------------------------------------------------- masking two ways
def _softmax_scaled(scores: torch.Tensor, d_k: float, dim: int = -1) -> torch.Tensor:
    return torch.softmax(scores / d_k**0.5, dim=dim)


def _way_before(scores: torch.Tensor, d_k: float, mask: torch.Tensor, fill: float = float("-inf"),
                dim: int = -1, scale: float | None = None) -> torch.Tensor:
    masked = scores.masked_fill(mask, fill)
    return torch.softmax(masked / (d_k**0.5 if scale is None else scale), dim=dim)


def _way_after(scores: torch.Tensor, d_k: float, keep: torch.Tensor, renormalise: bool = True,
               dim: int = -1, scale: float | None = None) -> torch.Tensor:
    weights = torch.softmax(scores / (d_k**0.5 if scale is None else scale), dim=dim) * keep
    return weights / weights.sum(dim=-1, keepdim=True) if renormalise else weights


_WAY_BUGS = {
    "no_renormalise": Bug(
        "no_renormalise",
        "You zeroed the future weights after the softmax but did not renormalise: the rows no "
        "longer sum to 1 (row i keeps only the share of weight it gave to tokens 0..i).",
        "divide each row by its sum: weights / weights.sum(dim=-1, keepdim=True).",
    ),
    "zero_fill": Bug(
        "zero_fill",
        "You set the future *scores* to 0 before the softmax. A score of 0 is not 'ignore me': "
        "exp(0) = 1, so the future tokens still get weight.",
        "fill with float('-inf'): exp(-inf) = 0 exactly.",
    ),
    "diagonal": Bug(
        "diagonal",
        "Your mask also hides the diagonal, so no token sees itself, and the first token sees "
        "nothing at all: its row is 0/0 = NaN.",
        "mask only above the diagonal: torch.triu(..., diagonal=1).",
    ),
    "transposed": Bug(
        "transposed",
        "Your mask is transposed: it hides the past (below the diagonal) and lets every token "
        "see the future. That is the tril/triu mix-up.",
        "mask the positions where the key comes after the query: torch.triu(..., diagonal=1).",
    ),
    "no_scaling": Bug(
        "no_scaling",
        "Your weights are not scaled: the scores went into the softmax without the division by "
        "sqrt(d_k).",
        "softmax(scores / d_k ** 0.5, dim=-1).",
    ),
    "scale_by_d_k": Bug(
        "scale_by_d_k",
        "You divided the scores by d_k instead of by sqrt(d_k).",
        "use d_k ** 0.5.",
    ),
    "softmax_over_queries": Bug(
        "softmax_over_queries",
        "Your softmax runs over the queries axis (down the columns) instead of over the keys "
        "(the last axis). On a batch of shape (b, n, n), dim=1 is the queries axis.",
        "torch.softmax(..., dim=-1).",
    ),
    "after_softmax_with_minus_inf": Bug(
        "after_softmax_with_minus_inf",
        "You wrote -inf into the *weights* after the softmax. -inf belongs in the scores, "
        "before the softmax, which then turns it into an exact 0.",
        "masked_fill the scores first, then softmax.",
    ),
    "masked_after": Bug(
        "masked_after",
        "You applied the mask after the softmax (zeroing weights) and did not renormalise, so the "
        "rows no longer sum to 1. This exercise masks the *scores* before the softmax.",
        "scores.masked_fill(mask, float('-inf')), then the scaled softmax.",
    ),
}


def _score_cases() -> list[tuple[torch.Tensor, float]]:
    """(scores, d_k) pairs: 2-d and batched, several sizes and scalings."""
    return [
        (randn(5, 5, seed=1) * 4, 3),
        (randn(4, 4, seed=2) * 10, 100),
        (randn(2, 6, 6, seed=3) * 3, 2),
        (randn(1, 1, seed=4), 7),
        (randn(3, 3, 3, seed=5) * 5, 16),
    ]


def _check_masking(name: str, fn: Callable, candidates: Callable, expected_of: Callable) -> None:
    __tracebackhide__ = True
    ensure_callable(name, fn, "a function fn(scores, d_k)")
    cases = _score_cases()
    for scores, d_k in cases:
        n = scores.shape[-1]
        expected = expected_of(scores, d_k)
        got = call(name, fn, scores.clone(), d_k,
                   what=f"fn(scores of shape {tuple(scores.shape)}, d_k={d_k})")
        if not isinstance(got, torch.Tensor):
            raise fail(name, f"fn(scores, d_k) returned {type(got).__name__}, not a tensor.")
        if same(got, expected):
            continue
        where = f"With scores of shape {tuple(scores.shape)} and d_k={d_k}:"
        if got.shape == expected.shape and torch.isinf(got).any():
            raise fail_with_bug(name, _WAY_BUGS["after_softmax_with_minus_inf"], where)
        bug = match_bug(got, candidates(scores, d_k, n))
        if bug:
            raise fail_with_bug(name, bug, where)
        raise fail(name, f"{where} {describe_difference(expected, got)}.")
    passed(name, f"right causal weights for {len(cases)} score tensors (2-d and batched)")


def _common_candidates(scores, d_k, n):
    future = _future(n)
    ones = torch.ones(n, n, dtype=torch.bool)
    return [
        (_WAY_BUGS["diagonal"], lambda: _way_before(scores, d_k, torch.triu(ones))),
        (_WAY_BUGS["transposed"], lambda: _way_before(scores, d_k, future.T)),
        (_WAY_BUGS["no_scaling"], lambda: _way_before(scores, d_k, future, scale=1.0)),
        (_WAY_BUGS["scale_by_d_k"], lambda: _way_before(scores, d_k, future, scale=d_k)),
        (_WAY_BUGS["softmax_over_queries"], lambda: _way_before(scores, d_k, future, dim=-2)),
        (_WAY_BUGS["softmax_over_queries"], lambda: _way_after(scores, d_k, ~future, dim=-2)),
        (_WAY_BUGS["zero_fill"], lambda: _way_before(scores, d_k, future, fill=0.0)),
    ]


def check_mask_after_softmax(fn: Callable[[torch.Tensor, float], torch.Tensor]) -> None:
    """Check way 1: ``fn(scores, d_k)`` = scaled softmax, zero the future, renormalise rows."""
    __tracebackhide__ = True
    name = "check_mask_after_softmax"

    def candidates(scores, d_k, n):
        future = _future(n)
        return [
            (_WAY_BUGS["no_renormalise"], lambda: _way_after(scores, d_k, ~future, renormalise=False)),
            *_common_candidates(scores, d_k, n),
        ]

    _check_masking(name, fn, candidates, lambda s, d_k: _way_after(s, d_k, ~_future(s.shape[-1])))


def check_mask_before_softmax(fn: Callable[[torch.Tensor, float], torch.Tensor]) -> None:
    """Check way 2: ``fn(scores, d_k)`` = scores above the diagonal set to -inf, scaled softmax."""
    __tracebackhide__ = True
    name = "check_mask_before_softmax"

    def candidates(scores, d_k, n):
        future = _future(n)
        return [
            (_WAY_BUGS["masked_after"], lambda: _way_after(scores, d_k, ~future, renormalise=False)),
            *_common_candidates(scores, d_k, n),
        ]

    _check_masking(name, fn, candidates, lambda s, d_k: _way_before(s, d_k, _future(s.shape[-1])))
