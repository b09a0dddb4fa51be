"""Self-checks for chapter 02 (trainable queries, keys and values).

The checks build the student's class themselves (seeded, without touching the notebook's
random state), read its three projections, and compare the output with scaled dot-product
attention computed from those same weights. When the output is wrong, they compute what
each known mistake would give with those weights and name the one that matches.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator

import torch
from torch import nn

from ._core import (
    Bug,
    call,
    describe_difference,
    ensure_callable,
    ensure_class,
    fail,
    fail_with_bug,
    match_bug,
    passed,
    preserved_rng,
    randn,
    same,
)

_NAMES = ("W_query", "W_key", "W_value")


# --------------------------------------------------------------------------- references
class _ReferenceV1(nn.Module):
    """SelfAttention_v1 as the chapter builds it: three (d_in, d_out) Parameters."""

    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _attend(x @ self.W_query, x @ self.W_key, x @ self.W_value)


class _ReferenceV2(nn.Module):
    """SelfAttention_v2 as the chapter builds it: three nn.Linear layers."""

    def __init__(self, d_in: int, d_out: int, qkv_bias: bool = False) -> None:
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _attend(self.W_query(x), self.W_key(x), self.W_value(x))


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Scaled dot-product attention over the last two axes (any leading batch axes)."""
    scores = q @ k.transpose(-2, -1)  # (..., n, n)
    return torch.softmax(scores / k.shape[-1] ** 0.5, dim=-1) @ v  # (..., n, d_out)


# --------------------------------------------------------------------------- known bugs
_FORWARD_BUGS = {
    "no_scaling": Bug(
        "no_scaling",
        "Your output is attention *without* the division by sqrt(d_k): the scores go into the "
        "softmax unscaled. With wide keys the softmax then saturates (near one-hot weights).",
        "divide the scores by keys.shape[-1] ** 0.5 before the softmax.",
    ),
    "precedence": Bug(
        "precedence",
        "Your scores are not divided by sqrt(d_k): `d_k ** 1/2` does not take a square root. "
        "In Python ** binds tighter than /, so `d_k ** 1/2` is `(d_k ** 1) / 2` = d_k / 2, and "
        "`scores / d_k ** 1/2` is `scores / d_k / 2`. (For d_k = 4, d_k / 2 happens to equal "
        "sqrt(d_k), which is why a single test can miss this.)",
        "write `d_k ** 0.5` (or `math.sqrt(d_k)`), or put the exponent in brackets: `d_k ** (1/2)`.",
    ),
    "scale_by_d_k": Bug(
        "scale_by_d_k",
        "You divided the scores by d_k itself instead of by its square root sqrt(d_k).",
        "use `keys.shape[-1] ** 0.5`.",
    ),
    "scale_by_d_in": Bug(
        "scale_by_d_in",
        "You scaled by sqrt(d_in), the width of the *input*, instead of sqrt(d_k), the width of "
        "the keys (d_out). The two only agree when d_in == d_out.",
        "use `keys.shape[-1] ** 0.5`, not `x.shape[-1] ** 0.5`.",
    ),
    "scale_after_softmax": Bug(
        "scale_after_softmax",
        "You divided by sqrt(d_k) *after* the softmax, so the weights no longer sum to 1. The "
        "scaling belongs to the scores, before the softmax.",
        "torch.softmax(scores / d_k ** 0.5, dim=-1).",
    ),
    "softmax_over_queries": Bug(
        "softmax_over_queries",
        "Your softmax normalises over the *queries* (down each column of the score matrix) "
        "instead of over the keys: each query's weights must sum to 1 along the last axis.",
        "use torch.softmax(..., dim=-1).",
    ),
    "softmax_over_batch": Bug(
        "softmax_over_batch",
        "Your softmax normalises over the batch axis (dim=0), mixing different sequences: each "
        "query's weights must sum to 1 along the last axis.",
        "use torch.softmax(..., dim=-1).",
    ),
    "keys_from_queries": Bug(
        "keys_from_queries",
        "Your keys are made with the *query* weights (a copy-paste slip: W_query where W_key "
        "belongs), so every score is query_i . query_j and the score matrix is symmetric.",
        "keys come from self.W_key.",
    ),
    "values_from_keys": Bug(
        "values_from_keys",
        "Your values are made with the *key* weights: the context vectors mix the keys instead "
        "of the values.",
        "values come from self.W_value.",
    ),
    "scores_transposed": Bug(
        "scores_transposed",
        "Your score matrix is transposed (keys @ queries.T): row i holds how much every query "
        "looks at token i, not what query i looks at.",
        "scores = queries @ keys.T (for batches: queries @ keys.transpose(1, 2)).",
    ),
    "mixes_inputs": Bug(
        "mixes_inputs",
        "You mixed the raw inputs x with the attention weights instead of the values: the "
        "context vectors must be weights @ values.",
        "return attention_weights @ values.",
    ),
    "returns_weights": Bug(
        "returns_weights",
        "You returned the attention weights (n x n) instead of the context vectors "
        "(weights @ values, n x d_out).",
        "finish with `return attn_weights @ values`.",
    ),
}


def _forward_candidates(x: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    """(Bug, what it would produce) for every known forward mistake, given the projections."""
    d_k, d_in = k.shape[-1], x.shape[-1]
    scores = q @ k.transpose(-2, -1)  # (..., n, n)

    def weights(s: torch.Tensor, scale: float, dim: int = -1) -> torch.Tensor:
        return torch.softmax(s / scale, dim=dim)

    candidates = [
        (_FORWARD_BUGS["no_scaling"], lambda: weights(scores, 1.0) @ v),
        (_FORWARD_BUGS["precedence"], lambda: weights(scores, d_k / 2) @ v),
        (_FORWARD_BUGS["precedence"], lambda: weights(scores, d_k * 2) @ v),
        (_FORWARD_BUGS["scale_by_d_k"], lambda: weights(scores, d_k) @ v),
        (_FORWARD_BUGS["scale_by_d_in"], lambda: weights(scores, d_in**0.5) @ v),
        (_FORWARD_BUGS["scale_after_softmax"], lambda: weights(scores, 1.0) / d_k**0.5 @ v),
        (_FORWARD_BUGS["softmax_over_queries"], lambda: weights(scores, d_k**0.5, dim=-2) @ v),
        (_FORWARD_BUGS["keys_from_queries"], lambda: _attend(q, q, v)),
        (_FORWARD_BUGS["values_from_keys"], lambda: _attend(q, k, k)),
        (_FORWARD_BUGS["scores_transposed"], lambda: _attend(k, q, v)),
        (_FORWARD_BUGS["mixes_inputs"], lambda: _attend(q, k, x)),
        (_FORWARD_BUGS["returns_weights"], lambda: weights(scores, d_k**0.5)),
    ]
    if x.dim() == 3:
        candidates.append(
            (_FORWARD_BUGS["softmax_over_batch"], lambda: weights(scores, d_k**0.5, dim=0) @ v)
        )
    return candidates


# --------------------------------------------------------------------------- helpers
def _missing_attribute(check: str, module: nn.Module, name: str, what: str):
    found = sorted(n for n, _ in module.named_parameters(recurse=True)) or ["none"]
    return fail(
        check,
        f"Your module has no attribute {name!r}. The chapter's classes keep their projections in "
        f"self.W_query, self.W_key and self.W_value ({what}); the check reads them from there. "
        f"Parameters found: {', '.join(found)}.",
        "use exactly those three attribute names.",
    )


def _parameter_matrices(check: str, module: nn.Module, d_in: int, d_out: int):
    """The three (d_in, d_out) nn.Parameter matrices of a SelfAttention_v1-style module."""
    matrices = []
    for name in _NAMES:
        if not hasattr(module, name):
            raise _missing_attribute(check, module, name, "nn.Parameter matrices")
        w = getattr(module, name)
        if isinstance(w, torch.Tensor) and not isinstance(w, nn.Parameter):
            raise fail(
                check,
                f"self.{name} is a plain tensor, not an nn.Parameter, so it is not registered: "
                f"module.parameters() does not list it and an optimizer would never train it.",
                f"wrap it: self.{name} = nn.Parameter(torch.rand(d_in, d_out)).",
            )
        if not isinstance(w, nn.Parameter):
            raise fail(
                check,
                f"self.{name} should be an nn.Parameter of shape (d_in, d_out), but it is a "
                f"{type(w).__name__}.",
                "SelfAttention_v1 stores raw weight matrices; nn.Linear comes with SelfAttention_v2.",
            )
        if tuple(w.shape) != (d_in, d_out):
            hint = None
            if tuple(w.shape) == (d_out, d_in):
                hint = "create it as torch.rand(d_in, d_out), so that x @ W maps d_in to d_out."
            raise fail(
                check,
                f"With d_in={d_in}, d_out={d_out}, self.{name} must have shape {(d_in, d_out)}, "
                f"but it has shape {tuple(w.shape)}.",
                hint,
            )
        matrices.append(w.detach())
    return matrices


def _linear_layers(check: str, module: nn.Module, d_in: int, d_out: int, qkv_bias: bool):
    """The three nn.Linear projections of a SelfAttention_v2-style module, validated."""
    layers = []
    for name in _NAMES:
        if not hasattr(module, name):
            raise _missing_attribute(check, module, name, "nn.Linear layers")
        layer = getattr(module, name)
        if not isinstance(layer, nn.Linear):
            raise fail(
                check,
                f"self.{name} should be an nn.Linear layer, but it is a {type(layer).__name__}.",
                f"self.{name} = nn.Linear(d_in, d_out, bias=qkv_bias).",
            )
        if (layer.in_features, layer.out_features) != (d_in, d_out):
            raise fail(
                check,
                f"With d_in={d_in}, d_out={d_out}, self.{name} must map {d_in} features to "
                f"{d_out}, but it is nn.Linear({layer.in_features}, {layer.out_features}).",
                "the arguments are nn.Linear(in_features, out_features) = nn.Linear(d_in, d_out).",
            )
        has_bias = layer.bias is not None
        if has_bias != qkv_bias:
            if has_bias:
                diagnosis = (
                    f"With qkv_bias=False, self.{name} still has a bias. nn.Linear adds one by "
                    f"default (bias=True), so the argument has to be passed on."
                )
            else:
                diagnosis = f"With qkv_bias=True, self.{name} has no bias: the argument is ignored."
            raise fail(check, diagnosis, "nn.Linear(d_in, d_out, bias=qkv_bias).")
        layers.append(layer)
    return layers


@contextlib.contextmanager
def _recording_dot_t() -> Iterator[list[int]]:
    """Record the rank of every tensor whose ``.T`` is taken (quietly, without the warning).

    On a tensor with more than two axes ``.T`` reverses *all* of them; PyTorch only warns
    once per process, so the check watches the property itself.
    """
    ranks: list[int] = []

    def reversed_axes(self: torch.Tensor) -> torch.Tensor:
        ranks.append(self.dim())
        return self.permute(*range(self.dim() - 1, -1, -1))

    own = torch.Tensor.__dict__.get("T")  # None today: `T` lives on the C base class
    torch.Tensor.T = property(reversed_axes)  # type: ignore[assignment]
    try:
        yield ranks
    finally:
        if own is None:
            del torch.Tensor.T
        else:
            torch.Tensor.T = own  # type: ignore[assignment]


_DOT_T_BUG = Bug(
    "dot_t_on_batch",
    "Your forward uses `.T` on a 3-d tensor. On a batch of shape (b, n, d_out), `.T` reverses "
    "*all* axes to (d_out, n, b) instead of swapping the last two, so the scores are wrong or "
    "the matrix product fails. (PyTorch deprecates `.T` on tensors that are not 2-d.)",
    "use keys.transpose(1, 2) (or keys.transpose(-2, -1), or keys.mT): it swaps only the "
    "token and feature axes of every sequence in the batch.",
)

_DOT_T_SOURCE = re.compile(r"\.T\b")


def _uses_dot_t_in_source(cls: type) -> bool:
    import inspect

    try:
        source = inspect.getsource(cls.forward)
    except (OSError, TypeError, AttributeError):
        return False
    return bool(_DOT_T_SOURCE.search(source))


def _compare_forward(check: str, got, expected, x, q, k, v, where: str) -> None:
    __tracebackhide__ = True
    if not isinstance(got, torch.Tensor):
        raise fail(check, f"{where} forward returned {type(got).__name__}, not a tensor.")
    if same(got, expected):
        return
    bug = match_bug(got, _forward_candidates(x, q, k, v))
    if bug:
        raise fail_with_bug(check, bug, where)
    raise fail(check, f"{where} {describe_difference(expected, got)}.",
               "softmax(queries @ keys.T / sqrt(d_k), dim=-1) @ values.")


def _build(check: str, cls: type, args: tuple, seed: int, kwargs: dict | None = None):
    __tracebackhide__ = True
    kwargs = kwargs or {}
    shown = ", ".join([*map(repr, args), *(f"{k}={v!r}" for k, v in kwargs.items())])
    with preserved_rng():
        torch.manual_seed(seed)
        module = call(check, cls, *args, what=f"{cls.__name__}({shown})", **kwargs)
    if not isinstance(module, nn.Module):
        raise fail(check, f"{cls.__name__}({shown}) is not an nn.Module.",
                   "subclass nn.Module and call super().__init__() first.")
    return module


def _run(check: str, module: nn.Module, x: torch.Tensor, what: str):
    __tracebackhide__ = True
    with torch.no_grad():
        return call(check, module, x.clone(), what=what)


# (d_in, d_out, n_tokens): the first case has d_in, d_out and n all different and d_out
# not 4, so every known mistake gives a different number there.
_CASES_2D = ((3, 5, 4), (3, 2, 6), (6, 3, 7), (4, 4, 4), (2, 6, 1))


# --------------------------------------------------------------------------- SelfAttention_v1
def check_self_attention_v1(cls: type) -> None:
    """Check a ``SelfAttention_v1(d_in, d_out)`` class: Parameter matrices, (n, d_in) inputs."""
    __tracebackhide__ = True
    name = "check_self_attention_v1"
    ensure_class(name, cls, "your class SelfAttention_v1 itself")
    for i, (d_in, d_out, n) in enumerate(_CASES_2D):
        module = _build(name, cls, (d_in, d_out), seed=200 + i)
        wq, wk, wv = _parameter_matrices(name, module, d_in, d_out)
        x = randn(n, d_in, seed=300 + i)
        got = _run(name, module, x, f"forward on x of shape {tuple(x.shape)}")
        q, k, v = x @ wq, x @ wk, x @ wv
        where = f"With d_in={d_in}, d_out={d_out} and x of shape {tuple(x.shape)}:"
        _compare_forward(name, got, _attend(q, k, v), x, q, k, v, where)
    _check_v1_initialisation(name, cls)
    passed(name, f"right context vectors for {len(_CASES_2D)} sizes, book initialisation")


def _check_v1_initialisation(check: str, cls: type) -> None:
    __tracebackhide__ = True
    module = _build(check, cls, (3, 2), seed=123)
    got = [getattr(module, n).detach() for n in _NAMES]
    with preserved_rng():
        torch.manual_seed(123)
        expected = [torch.rand(3, 2) for _ in _NAMES]
    if all(same(g, e) for g, e in zip(got, expected, strict=True)):
        return
    if {tuple(g.flatten().tolist()) for g in got} == {tuple(e.flatten().tolist()) for e in expected}:
        raise fail(
            check,
            "Your class computes the right thing, but creates its matrices in a different order, "
            "so with torch.manual_seed(123) each projection gets another's numbers and the "
            "printed values will not match the book's.",
            "create W_query first, then W_key, then W_value.",
        )
    with preserved_rng():
        torch.manual_seed(123)
        normal = [torch.randn(3, 2) for _ in _NAMES]
    detail = " (they are normal draws: torch.randn)" if all(same(g, e) for g, e in zip(got, normal, strict=True)) else ""
    raise fail(
        check,
        f"Your class computes the right thing, but its weights are not initialised like the "
        f"chapter's{detail}, so the printed values will not match the book's.",
        "use nn.Parameter(torch.rand(d_in, d_out)) for query, key and value, in that order.",
    )


# --------------------------------------------------------------------------- SelfAttention_v2
def check_self_attention_v2(cls: type) -> None:
    """Check a ``SelfAttention_v2(d_in, d_out, qkv_bias=False)`` class with nn.Linear layers."""
    __tracebackhide__ = True
    name = "check_self_attention_v2"
    ensure_class(name, cls, "your class itself (e.g. SelfAttention_v2)")
    for i, (d_in, d_out, n) in enumerate(_CASES_2D):
        qkv_bias = i % 2 == 1
        kwargs = {"qkv_bias": True} if qkv_bias else {}
        module = _build(name, cls, (d_in, d_out), seed=400 + i, kwargs=kwargs)
        layers = _linear_layers(name, module, d_in, d_out, qkv_bias)
        x = randn(n, d_in, seed=500 + i)
        got = _run(name, module, x, f"forward on x of shape {tuple(x.shape)}")
        with torch.no_grad():
            q, k, v = (layer(x) for layer in layers)
        where = f"With d_in={d_in}, d_out={d_out}, qkv_bias={qkv_bias} and x of shape {tuple(x.shape)}:"
        _compare_forward(name, got, _attend(q, k, v), x, q, k, v, where)
    _check_v2_initialisation(name, cls)
    passed(name, f"right context vectors for {len(_CASES_2D)} sizes, with and without bias")


def _check_v2_initialisation(check: str, cls: type) -> None:
    __tracebackhide__ = True
    module = _build(check, cls, (3, 2), seed=789)
    with preserved_rng():
        torch.manual_seed(789)
        reference = _ReferenceV2(3, 2)
    got = [getattr(module, n).weight.detach() for n in _NAMES]
    expected = [getattr(reference, n).weight.detach() for n in _NAMES]
    if all(same(g, e) for g, e in zip(got, expected, strict=True)):
        return
    raise fail(
        check,
        "Your class computes the right thing, but with torch.manual_seed(789) its layers get "
        "different initial weights than the chapter's, so the printed values will not match the "
        "book's. Usually the three nn.Linear layers are created in another order, or something "
        "else draws random numbers first.",
        "create W_query, then W_key, then W_value, and nothing random before them.",
    )


# --------------------------------------------------------------------------- weight transfer
_TRANSFER_BUGS = {
    "no_transpose": Bug(
        "no_transpose",
        "You copied the nn.Linear weights without transposing them. nn.Linear stores its weight "
        "as (d_out, d_in) and computes x @ weight.T, while SelfAttention_v1 computes x @ W with W "
        "of shape (d_in, d_out): the matrix to copy is weight.T. (With d_in == d_out the copy "
        "even succeeds silently, with the wrong numbers.)",
        "v1.W_query.copy_(v2.W_query.weight.T), likewise for key and value, inside torch.no_grad().",
    ),
    "swapped": Bug(
        "swapped",
        "You copied the right matrices into the wrong places: {detail}. Each of v1's matrices "
        "must receive the weights of the layer with the same role.",
        "query <- W_query, key <- W_key, value <- W_value.",
    ),
    "missing": Bug(
        "missing",
        "{detail} still holds its own initial weights: it was never copied.",
        "copy all three: W_query, W_key and W_value.",
    ),
    "reversed": Bug(
        "reversed",
        "You copied in the wrong direction: v2's weights changed (they now hold v1's), and v1 "
        "kept its own. The function must copy v2's weights *into* v1.",
        "fn(v1, v2) writes into v1: v1.W_query.copy_(v2.W_query.weight.T), etc.",
    ),
    "changed_v2": Bug(
        "changed_v2",
        "Your function changed v2's weights. It must only read from v2 and write into v1.",
        "read v2.W_query.weight, do not assign to it.",
    ),
    "shared": Bug(
        "shared",
        "{detail} now shares memory with v2's weight (it is a view of it, e.g. "
        "nn.Parameter(v2.W_query.weight.T)): training either model would silently change the "
        "other too.",
        "copy the numbers: v1.W_query.copy_(...) under torch.no_grad(), or use .clone().",
    ),
    "no_grad": Bug(
        "no_grad",
        "Your function copies into a parameter in place while autograd is recording, which "
        "PyTorch forbids for parameters (leaf tensors that require grad).",
        "wrap the copies in `with torch.no_grad():`.",
    ),
    "frozen": Bug(
        "frozen",
        "{detail} no longer requires gradients after the copy, so v1 could not be trained.",
        "copy with .copy_() under torch.no_grad(); keep the Parameters as they are.",
    ),
}

# (d_in, d_out): square first, so a copy without transpose does not crash but is caught.
_TRANSFER_CASES = ((4, 4), (3, 2), (2, 5))


def check_weight_transfer(fn: Callable[[nn.Module, nn.Module], object]) -> None:
    """Check ``fn(v1, v2)``: copies SelfAttention_v2's weights into SelfAttention_v1."""
    __tracebackhide__ = True
    name = "check_weight_transfer"
    ensure_callable(name, fn, "a function fn(v1, v2)")
    for i, (d_in, d_out) in enumerate(_TRANSFER_CASES):
        with preserved_rng():
            torch.manual_seed(600 + i)
            v1, v2 = _ReferenceV1(d_in, d_out), _ReferenceV2(d_in, d_out)
        v1_before = {n: getattr(v1, n).detach().clone() for n in _NAMES}
        v2_before = {n: getattr(v2, n).weight.detach().clone() for n in _NAMES}
        where = f"With d_in={d_in}, d_out={d_out} (v1 matrices {(d_in, d_out)}, v2 weights {(d_out, d_in)}):"
        try:
            call(name, fn, v1, v2, what="fn(v1, v2)")
        except AssertionError as exc:
            if "leaf Variable" in str(exc) or "requires grad" in str(exc):
                raise fail_with_bug(name, _TRANSFER_BUGS["no_grad"], where) from None
            raise
        _check_transfer(name, v1, v2, v1_before, v2_before, where)
        x = randn(3, d_in, seed=700 + i)
        with torch.no_grad():
            if not same(v1(x), v2(x)):
                raise fail(name, f"{where} after the copy v1 and v2 still give different outputs.")
    passed(name, f"v1 reproduces v2 exactly for {len(_TRANSFER_CASES)} sizes")


def _check_transfer(check, v1, v2, v1_before, v2_before, where) -> None:
    __tracebackhide__ = True
    v2_now = {n: getattr(v2, n).weight.detach() for n in _NAMES}
    if any(not same(v2_now[n], v2_before[n]) for n in _NAMES):
        reversed_copy = all(same(v2_now[n], v1_before[n].T) or same(v2_now[n], v1_before[n])
                            for n in _NAMES if v2_now[n].shape == v1_before[n].T.shape)
        key = "reversed" if reversed_copy else "changed_v2"
        raise fail_with_bug(check, _TRANSFER_BUGS[key], where)
    swaps = []
    for n in _NAMES:
        got = getattr(v1, n)
        if not isinstance(got, nn.Parameter):
            raise fail(check, f"{where} v1.{n} is no longer an nn.Parameter ({type(got).__name__}).",
                       "copy the numbers into the existing Parameter with .copy_().")
        if tuple(got.shape) == (v2_before[n].shape[0], v2_before[n].shape[1]) and got.shape[0] != got.shape[1]:
            raise fail_with_bug(check, _TRANSFER_BUGS["no_transpose"],
                                f"{where} v1.{n} now has shape {tuple(got.shape)}.")
        if tuple(got.shape) != tuple(v1_before[n].shape):
            raise fail(check, f"{where} v1.{n} has shape {tuple(got.shape)}, expected "
                       f"{tuple(v1_before[n].shape)}.")
        value = got.detach()
        if same(value, v2_before[n].T):
            if got.untyped_storage().data_ptr() == getattr(v2, n).weight.untyped_storage().data_ptr():
                bug = _TRANSFER_BUGS["shared"]
                raise fail(check, f"{where}\n" + bug.diagnosis.format(detail=f"v1.{n}"), bug.hint)
            if not got.requires_grad:
                bug = _TRANSFER_BUGS["frozen"]
                raise fail(check, f"{where}\n" + bug.diagnosis.format(detail=f"v1.{n}"), bug.hint)
            continue
        if same(value, v2_before[n]):
            raise fail_with_bug(check, _TRANSFER_BUGS["no_transpose"], where)
        source = next((m for m in _NAMES if m != n and same(value, v2_before[m].T)), None)
        if source is not None:
            swaps.append(f"v1.{n} received v2.{source}")
            continue
        if same(value, v1_before[n]):
            bug = _TRANSFER_BUGS["missing"]
            raise fail(check, f"{where}\n" + bug.diagnosis.format(detail=f"v1.{n}"), bug.hint)
        raise fail(check, f"{where} v1.{n} holds none of v2's weights: "
                   f"{describe_difference(v2_before[n].T, value)}.",
                   "v1.W_query should equal v2.W_query.weight.T after the copy.")
    if swaps:
        bug = _TRANSFER_BUGS["swapped"]
        raise fail(check, f"{where}\n" + bug.diagnosis.format(detail="; ".join(swaps)), bug.hint)


# --------------------------------------------------------------------------- batched
# (d_in, d_out, batch, n_tokens, qkv_bias): batch, tokens and widths all differ in the first.
_BATCH_CASES = ((3, 5, 2, 4, False), (4, 2, 3, 6, True), (6, 3, 1, 5, False), (2, 2, 4, 1, True))


def check_batched_self_attention(cls: type) -> None:
    """Check a class ``cls(d_in, d_out, qkv_bias=False)`` mapping (b, n, d_in) to (b, n, d_out)."""
    __tracebackhide__ = True
    name = "check_batched_self_attention"
    ensure_class(name, cls, "your class itself")
    for i, (d_in, d_out, b, n, qkv_bias) in enumerate(_BATCH_CASES):
        module = _build(name, cls, (d_in, d_out), seed=800 + i, kwargs={"qkv_bias": qkv_bias})
        layers = _linear_layers(name, module, d_in, d_out, qkv_bias)
        x = randn(b, n, d_in, seed=900 + i)
        where = f"With d_in={d_in}, d_out={d_out} and a batch x of shape {tuple(x.shape)}:"
        with _recording_dot_t() as ranks:
            try:
                got = _run(name, module, x, f"forward on a batch of shape {tuple(x.shape)}")
            except AssertionError:
                if any(r > 2 for r in ranks) or _uses_dot_t_in_source(cls):
                    raise fail_with_bug(name, _DOT_T_BUG, where) from None
                raise
        if any(r > 2 for r in ranks):
            raise fail_with_bug(name, _DOT_T_BUG, where)
        with torch.no_grad():
            q, k, v = (layer(x) for layer in layers)
        _compare_forward(name, got, _attend(q, k, v), x, q, k, v, where)
    passed(name, f"right context vectors for {len(_BATCH_CASES)} batch shapes, sequences kept apart")
