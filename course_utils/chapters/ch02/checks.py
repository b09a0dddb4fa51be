"""Self-checks for chapter 02 (trainable queries, keys and values).

The checks build the student's class themselves (seeded, without touching the notebook's
random state), read its three projections, and compare the output with scaled dot-product
attention computed from those same weights by the engine's pipeline. When the output is
wrong, the mistake whose variant reproduces it is named.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from dataclasses import replace

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from course_utils.chapters import SelfAttention_v1, SelfAttention_v2
from course_utils.checks import _engine as E

# Shortcuts graded answers may call (tools/grading/honesty.py): none: attention by hand
ALLOWED_SHORTCUTS: tuple[str, ...] = ()

_NAMES = ("W_query", "W_key", "W_value")
_PLAIN = E.Recipe(mask="none")  # chapter 02 has no causal mask yet
_VARIANTS = [  # the engine's variants, on chapter 02's unmasked attention
    (bug, replace(r, mask="none") if r.mask == "future" else r)
    for bug, r in E.variants("scale", "axis", "projections")
]


def _attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, r: E.Recipe = _PLAIN, x=None
) -> torch.Tensor:
    return E.attention(q, k, v, r, x=x)


class DotT(TorchFunctionMode):
    """Records the rank of every tensor whose ``.T`` is read (``ranks``): on more than two axes
    ``.T`` reverses all of them (PyTorch warns once per process; a later release raises). The
    property's getter reaches a torch function mode like any torch call, so nothing is patched."""

    def __init__(self) -> None:
        super().__init__()
        self.ranks: list[int] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__self__", None) is torch.Tensor.T and args:
            self.ranks.append(args[0].dim())
            with warnings.catch_warnings():  # the check names this mistake itself
                warnings.filterwarnings("ignore", message="The use of `x.T`")
                return func(*args, **(kwargs or {}))
        return func(*args, **(kwargs or {}))


# --------------------------------------------------------------------------- reading the projections
# What a SelfAttention_v1 matrix must be: (is wrong, mistake id), tried in order on the attribute ``w``.
_MATRIX_RULES = (
    (
        lambda w, want: isinstance(w, torch.Tensor) and not isinstance(w, nn.Parameter),
        "projection_plain_tensor",
    ),
    (lambda w, want: not isinstance(w, nn.Parameter), "projection_not_parameter"),
    (lambda w, want: tuple(w.shape) != want, "projection_wrong_shape"),
)


def _projections(
    c: E.Check, module: nn.Module, owner: str, d_in: int, d_out: int, qkv_bias: bool | None
) -> list:
    """W_query, W_key, W_value: Parameter matrices (``qkv_bias`` None) or nn.Linear layers, validated."""
    if qkv_bias is not None:
        return [E.find_linear(c, module, name, owner, d_in, d_out, qkv_bias) for name in _NAMES]
    found = []
    for name in _NAMES:
        w = E.find_attribute(c, module, name, owner, f"nn.Parameter of shape {(d_in, d_out)}")
        bug = next((bug for wrong, bug in _MATRIX_RULES if wrong(w, (d_in, d_out))), None)
        if bug:
            raise c.bug(
                bug,
                name=name,
                d_in=d_in,
                d_out=d_out,
                kind=type(w).__name__,
                want=(d_in, d_out),
                shape=tuple(getattr(w, "shape", ())),
            )
        found.append(w)
    return found


# --------------------------------------------------------------------------- building and running
def _build(
    c: E.Check, cls: type, args: tuple, seed: int, kwargs: dict | None = None
) -> tuple[nn.Module, str]:
    """``cls(*args, **kwargs)`` under ``seed``, and how it was called (the layer's name in messages)."""
    __tracebackhide__ = True
    kwargs = kwargs or {}
    what = f"{cls.__name__}({', '.join([*map(repr, args), *(f'{k}={v!r}' for k, v in kwargs.items())])})"
    return E.construct(c, cls, *args, what=what, seed=seed, **kwargs), what


def _run(c: E.Check, module: nn.Module, x: torch.Tensor, what: str):
    __tracebackhide__ = True
    before = x.clone()
    with torch.no_grad():
        got = c.call(module, x, what=what)
    if not torch.equal(x, before):
        raise c.bug("input_modified", f"After {what}:", what="input x")
    return c.expect_tensor_output(got, what)


def _check_outputs(c: E.Check, cls: type, cases, seed: int, inputs: Callable, linear: bool) -> None:
    """Build ``cls`` per (d_in, d_out, n) case (with nn.Linear layers: qkv_bias on every other one),
    compare its output with attention from its own projections, then probe the last one."""
    __tracebackhide__ = True
    for i, (d_in, d_out, n) in enumerate(cases):
        qkv_bias = i % 2 == 1 if linear else None
        module, owner = _build(
            c, cls, (d_in, d_out), seed + i, {"qkv_bias": True} if qkv_bias else {}
        )
        weights = _projections(c, module, owner, d_in, d_out, qkv_bias)
        project = lambda x, ws=weights: [w(x) if linear else x @ w for w in ws]
        x = inputs(i, n, d_in)
        bias = "" if qkv_bias is None else f", qkv_bias={qkv_bias}"
        where = f"With d_in={d_in}, d_out={d_out}{bias} and x of shape {tuple(x.shape)}:"
        with DotT() if linear else contextlib.nullcontext() as dot_t:
            try:
                got = _run(c, module, x, f"forward on x of shape {tuple(x.shape)}")
            except AssertionError:
                if dot_t and any(r > 2 for r in dot_t.ranks):
                    raise c.bug("dot_t_on_batch", where) from None
                raise
        if dot_t and any(r > 2 for r in dot_t.ranks):
            raise c.bug("dot_t_on_batch", where)
        with torch.no_grad():
            q, k, v = project(x)
        expected = _attend(q, k, v)
        c.compare(
            got,
            expected,
            where,
            [(b, lambda r=r: _attend(q, k, v, r, x)) for b, r in _VARIANTS],
            hint="the weights are the softmax over the last axis of the scores divided by sqrt(d_k); "
            "on a batch, swap only the last two axes of the keys (never .T).",
        )
    E.probe_backward(c, module, x, where, lambda: _attend(*project(x)))
    E.probe_device(c, module, x, where)


def _check_initialisation(c: E.Check, cls: type, seed: int, reference: type, linear: bool) -> None:
    """With torch.manual_seed(seed), the class must create the chapter's initial weights."""
    __tracebackhide__ = True
    module, _ = _build(c, cls, (3, 2), seed=seed)
    with E.preserved_rng():
        torch.manual_seed(seed)
        chapter = reference(3, 2)
    got, expected = (
        [getattr(m, n).weight if linear else getattr(m, n) for n in _NAMES]
        for m in (module, chapter)
    )
    if all(E.same(g.detach(), e) for g, e in zip(got, expected, strict=True)):
        return
    if {tuple(g.flatten().tolist()) for g in got} == {
        tuple(e.flatten().tolist()) for e in expected
    }:
        raise c.bug("init_order", seed=seed)
    raise c.bug("init_differs", seed=seed)


# (d_in, d_out, n_tokens): the first case has d_in, d_out and n all different and d_out
# not 4, so every known mistake gives a different number there.
_CASES_2D = ((3, 5, 4), (3, 2, 6), (6, 3, 7), (4, 4, 4), (2, 6, 1))
# (d_in, d_out, batch, n_tokens): batch, tokens and widths all differ in the first.
_BATCH_CASES = ((3, 5, 2, 4), (4, 2, 3, 6), (6, 3, 1, 5), (2, 2, 4, 1))
# (d_in, d_out): square first, so a copy without transpose does not crash but is caught.
_TRANSFER_CASES = ((4, 4), (3, 2), (2, 5))

_KEEP_THE_REST = "copy the three weights into the existing Parameters (same dtype), nothing else."


# --------------------------------------------------------------------------- the checks
def check_self_attention_v1(cls: type) -> None:
    """Check a ``SelfAttention_v1(d_in, d_out)`` class: Parameter matrices, (n, d_in) inputs."""
    __tracebackhide__ = True
    c = E.Check("check_self_attention_v1")
    c.ensure_class(cls, "your class SelfAttention_v1 itself")
    _check_outputs(
        c, cls, _CASES_2D, 200, lambda i, n, d_in: E.randn(n, d_in, seed=300 + i), linear=False
    )
    _check_initialisation(c, cls, 123, SelfAttention_v1, linear=False)
    c.passed(f"right context vectors for {len(_CASES_2D)} sizes, book initialisation")


def check_self_attention_v2(cls: type) -> None:
    """Check a ``SelfAttention_v2(d_in, d_out, qkv_bias=False)`` class with nn.Linear layers."""
    __tracebackhide__ = True
    c = E.Check("check_self_attention_v2")
    c.ensure_class(cls, "your class itself (e.g. SelfAttention_v2)")
    _check_outputs(
        c, cls, _CASES_2D, 400, lambda i, n, d_in: E.randn(n, d_in, seed=500 + i), linear=True
    )
    _check_initialisation(c, cls, 789, SelfAttention_v2, linear=True)
    c.passed(f"right context vectors for {len(_CASES_2D)} sizes, with and without bias")


def check_batched_self_attention(cls: type) -> None:
    """Check a class ``cls(d_in, d_out, qkv_bias=False)`` mapping (b, n, d_in) to (b, n, d_out)."""
    __tracebackhide__ = True
    c = E.Check("check_batched_self_attention")
    c.ensure_class(cls, "your class itself")
    _check_outputs(
        c,
        cls,
        [(d_in, d_out, n) for d_in, d_out, _, n in _BATCH_CASES],
        800,
        lambda i, n, d_in: E.randn(_BATCH_CASES[i][2], n, d_in, seed=900 + i),
        linear=True,
    )
    c.passed(f"right context vectors for {len(_BATCH_CASES)} batch shapes, sequences kept apart")


def check_weight_transfer(fn: Callable[[nn.Module, nn.Module], object]) -> None:
    """Check ``fn(v1, v2)``: copies SelfAttention_v2's weights into SelfAttention_v1."""
    __tracebackhide__ = True
    c = E.Check("check_weight_transfer")
    c.ensure_callable(fn, "a function fn(v1, v2)")
    for i, (d_in, d_out) in enumerate(_TRANSFER_CASES):
        with E.preserved_rng():
            torch.manual_seed(600 + i)
            v1, v2 = SelfAttention_v1(d_in, d_out), SelfAttention_v2(d_in, d_out)
        v1_before = {n: getattr(v1, n).detach().clone() for n in _NAMES}
        v2_before = {n: getattr(v2, n).weight.detach().clone() for n in _NAMES}
        where = f"With d_in={d_in}, d_out={d_out} (v1 matrices {(d_in, d_out)}, v2 weights {(d_out, d_in)}):"
        try:
            c.call(fn, v1, v2, what="fn(v1, v2)")
        except AssertionError as exc:
            if "leaf Variable" in str(exc) or "requires grad" in str(exc):
                raise c.bug("copy_without_no_grad", where) from None
            raise
        _check_transfer(c, v1, v2, v1_before, v2_before, where)
        x = E.randn(3, d_in, seed=700 + i)
        with torch.no_grad():  # a forward that now fails (e.g. float64 weights) is reported
            outputs = [
                c.call(m, x, what=f"{where} {m_name}(x) after the copy", hint=_KEEP_THE_REST)
                for m_name, m in (("v1", v1), ("v2", v2))
            ]
        if not E.same(*outputs):
            raise c.bug("transfer_outputs_differ", where=where)
    c.passed(f"v1 reproduces v2 exactly for {len(_TRANSFER_CASES)} sizes")


def _check_transfer(c, v1, v2, v1_before, v2_before, where) -> None:
    __tracebackhide__ = True
    v2_now = {n: getattr(v2, n).weight.detach() for n in _NAMES}
    if any(not E.same(v2_now[n], v2_before[n]) for n in _NAMES):
        reversed_copy = all(
            E.same(v2_now[n], v1_before[n].T) or E.same(v2_now[n], v1_before[n])
            for n in _NAMES
            if v2_now[n].shape == v1_before[n].T.shape
        )
        raise c.bug("transfer_reversed" if reversed_copy else "transfer_changed_source", where)
    swaps = []
    for n in _NAMES:
        got = getattr(v1, n)
        if not isinstance(got, nn.Parameter):
            raise c.bug("transfer_replaced_parameter", where=where, name=n, kind=type(got).__name__)
        if got is getattr(v2, n).weight:
            raise c.bug("shared_parameter", where, detail=f"v1.{n}")
        if tuple(got.shape) == tuple(v2_before[n].shape) and got.shape[0] != got.shape[1]:
            raise c.bug(
                "transfer_no_transpose", f"{where} v1.{n} now has shape {tuple(got.shape)}."
            )
        if tuple(got.shape) != tuple(v1_before[n].shape):
            raise c.bug(
                "transfer_wrong_shape",
                where=where,
                name=n,
                shape=tuple(got.shape),
                expected=tuple(v1_before[n].shape),
            )
        value = got.detach()
        if E.same(value, v2_before[n].T):
            if E.storage(got) == E.storage(getattr(v2, n).weight):
                raise c.bug("shared_parameter", where, detail=f"v1.{n}")
            if not got.requires_grad:
                raise c.bug("transfer_frozen", where, detail=f"v1.{n}")
            continue
        if E.same(value, v2_before[n]):
            raise c.bug("transfer_no_transpose", where)
        source = next((m for m in _NAMES if m != n and E.same(value, v2_before[m].T)), None)
        if source is not None:
            swaps.append(f"v1.{n} received v2.{source}")
            continue
        if E.same(value, v1_before[n]):
            raise c.bug("transfer_missing", where, detail=f"v1.{n}")
        raise c.fail(
            f"{where} v1.{n} holds none of v2's weights: "
            f"{E.describe_difference(v2_before[n].T, value)}.",
            "v1.W_query should equal v2.W_query.weight.T after the copy.",
        )
    if swaps:
        raise c.bug("transfer_swapped", where, detail="; ".join(swaps))


__all__ = [
    "check_batched_self_attention",
    "check_self_attention_v1",
    "check_self_attention_v2",
    "check_weight_transfer",
]
