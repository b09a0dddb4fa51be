"""Self-checks for chapter 03 (causal masking, two ways).

Conventions checked here, as the chapter teaches them:

* a causal mask is a bool ``(n, n)`` tensor that is True *above* the diagonal, i.e. where a
  query would look at a later token (``torch.triu(..., diagonal=1)``);
* both masking functions take raw scores of shape ``(n, n)`` or ``(b, n, n)`` and the key
  width ``d_k``, and return attention weights scaled by ``1 / sqrt(d_k)``, normalised over
  the last axis, with exact zeros above the diagonal. They must not change the scores they
  are given, and must build their mask on the scores' device.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, replace

import torch

from course_utils.checks import _engine as E

# Shortcuts graded answers may call (tools/grading/honesty.py): none: masking by hand
ALLOWED_SHORTCUTS: tuple[str, ...] = ()

_MASK_SIZES = (5, 1, 2, 6, 9)


def check_causal_mask(fn: Callable[[int], torch.Tensor]) -> None:
    """Check ``fn(n)``: a bool (n, n) tensor, True above the diagonal (the future)."""
    __tracebackhide__ = True
    c = E.Check("check_causal_mask")
    c.ensure_callable(fn, "a function fn(n)")
    for n in _MASK_SIZES:
        expected = E.mask_of("future", n)
        where = f"For n={n}:"
        got = c.expect_tensor_output(c.call(fn, n, what=f"fn({n})"), f"fn({n})")
        if tuple(got.shape) != (n, n):
            if got.dim() == 2 and got.shape[0] == got.shape[1]:
                raise c.bug("mask_fixed_size", n=n, shape=tuple(got.shape))
            raise c.bug("mask_shape_wrong", where=where, expected=(n, n), shape=tuple(got.shape))
        if (
            got.dtype != torch.bool
            and not got.is_complex()
            and E.same(got.float(), expected.float())
        ):
            raise c.bug("mask_float", dtype=got.dtype)
        pattern = got if got.dtype == torch.bool else got != 0
        if torch.equal(pattern, expected):
            if got.dtype == torch.bool:
                continue
            raise c.bug("mask_additive", dtype=got.dtype)  # 0 / -inf, -1e9, NaN, ...
        for bug, kind in (
            ("mask_diagonal", "diagonal"),
            ("keep_mask", "keep"),
            ("mask_past", "past"),
        ):
            if torch.equal(pattern, E.mask_of(kind, n)):
                raise c.bug(bug, where)
        wrong = torch.nonzero(pattern != expected)[0].tolist()
        raise c.fail(
            f"{where} entry {tuple(wrong)} should be {bool(expected[tuple(wrong)])}.",
            "True exactly where the key comes after the query (column > row).",
        )
    c.passed(f"bool masks, True above the diagonal, for n in {list(_MASK_SIZES)}")


# --------------------------------------------------------------------------- masking two ways
_WAY_AFTER = E.Recipe(
    mask_after="zero", renormalise=-1
)  # way 1: softmax, zero the future, renormalise


def _on(base: E.Recipe, change: E.Recipe) -> E.Recipe:
    """``base`` with the fields that ``change`` sets differently from the right recipe."""
    return replace(
        base,
        **{
            f.name: getattr(change, f.name)
            for f in fields(E.Recipe)
            if getattr(change, f.name) != getattr(E.RIGHT, f.name)
        },
    )


def _score_cases() -> list[tuple[torch.Tensor, float]]:
    """(scores, d_k) pairs: 2-d and batched, several sizes and scalings."""
    return [
        (E.randn(5, 5, seed=1) * 4, 3),
        (E.randn(4, 4, seed=2) * 10, 100),
        (E.randn(2, 6, 6, seed=3) * 3, 2),
        (E.randn(1, 1, seed=4), 7),
        (E.randn(3, 3, 3, seed=5) * 5, 16),
    ]


def _check_masking(
    c: E.Check, fn: Callable, base: E.Recipe, own: list[tuple[str, E.Recipe]]
) -> None:
    __tracebackhide__ = True
    c.ensure_callable(fn, "a function fn(scores, d_k)")
    cases = _score_cases()
    pairs = own + [
        (bug, _on(b, r))
        for bug, r in E.variants("mask", "axis", "scale")
        for b in (base, E.RIGHT)
        if bug not in ("mask_after_softmax", "softmax_over_batch", "mask_missing")
    ]
    for scores, d_k in cases:
        expected = E.weights_from_scores(scores, base, d_k=d_k)
        what = f"fn(scores of shape {tuple(scores.shape)}, d_k={d_k})"
        got = c.expect_tensor_output(c.call_pure(fn, [scores], d_k, what=what), what)
        if E.same(got, expected):
            continue
        where = f"With scores of shape {tuple(scores.shape)} and d_k={d_k}:"
        if got.shape == expected.shape and torch.isinf(got).any():
            raise c.bug("minus_inf_in_weights", where)
        c.compare(
            got,
            expected,
            where,
            [(b, lambda r=r: E.weights_from_scores(scores, r, d_k=d_k)) for b, r in pairs],
        )
    E.probe_device(
        c, None, cases[2][0], "With scores on another device:", fn=lambda s: fn(s, cases[2][1])
    )
    c.passed(f"right causal weights for {len(cases)} score tensors (2-d and batched)")


def check_mask_after_softmax(fn: Callable[[torch.Tensor, float], torch.Tensor]) -> None:
    """Check way 1: ``fn(scores, d_k)`` = scaled softmax, zero the future, renormalise rows."""
    __tracebackhide__ = True
    _check_masking(
        E.Check("check_mask_after_softmax"),
        fn,
        _WAY_AFTER,
        [
            ("no_renormalise", replace(_WAY_AFTER, renormalise=None)),
            ("renormalise_wrong_dim", replace(_WAY_AFTER, renormalise=-2)),
            ("renormalise_no_keepdim", replace(_WAY_AFTER, renormalise_keepdim=False)),
        ],
    )


def check_mask_before_softmax(fn: Callable[[torch.Tensor, float], torch.Tensor]) -> None:
    """Check way 2: ``fn(scores, d_k)`` = scores above the diagonal set to -inf, scaled softmax."""
    __tracebackhide__ = True
    _check_masking(
        E.Check("check_mask_before_softmax"),
        fn,
        E.RIGHT,
        [("mask_after_softmax", E.Recipe(mask_after="zero"))],
    )


__all__ = ["check_causal_mask", "check_mask_after_softmax", "check_mask_before_softmax"]
