"""The engine's core: failures, comparison, calling student code, watching torch calls, and
the one functional attention pipeline.

A check either prints one ``✓`` line or raises :class:`CheckFailure` naming a mistake of
:mod:`.mistakes`. Mistakes are recognised *by behaviour*: when the student's output differs
from the reference, the one functional attention pipeline (:func:`attention`) is re-run with
one switch of a :class:`Recipe` changed at a time, and the recipe that reproduces the
student's numbers names the bug. Class checks also run behaviour probes (:func:`probe_layer`):
another device, a second longer call, a training step, and the caller's inputs untouched.
"""

from __future__ import annotations

import contextlib
import inspect
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from ..mistakes import MISTAKES, Bug

ATOL, RTOL = 1e-5, 1e-4


class CheckFailure(AssertionError):
    """A self-check found a problem. ``bug`` is the mistake's id when it is a known one."""

    def __init__(self, check: str, diagnosis: str, hint: str | None = None, bug: str | None = None) -> None:
        self.check, self.diagnosis, self.hint, self.bug = check, diagnosis, hint, bug
        text = f"{check} found a problem.\n\n{diagnosis}"
        if hint:
            text += f"\n\nHint: {hint}"
        super().__init__(text)


def passed(check: str, what: str) -> None:
    """Print the one success line every check ends with."""
    print(f"✓ {check}: {what}")


def fail(check: str, diagnosis: str, hint: str | None = None) -> CheckFailure:
    """A failure without a catalogued mistake (``raise fail(...)``)."""
    return CheckFailure(check, diagnosis, hint)


def fail_with(check: str, bug: str | Bug, context: str = "", **detail: object) -> CheckFailure:
    """A failure naming the catalogued mistake ``bug``; ``detail`` fills its placeholders."""
    bug = MISTAKES[bug] if isinstance(bug, str) else bug
    diagnosis = bug.diagnosis.format(**detail) if detail else bug.diagnosis
    return CheckFailure(check, f"{context}\n{diagnosis}" if context else diagnosis, bug.hint, bug.name)


fail_with_bug = fail_with  # the name chapter 08/09 checks import


def same(a: object, b: object, *, atol: float = ATOL, rtol: float = RTOL) -> bool:
    """True when two tensors have the same shape and values (NaNs in the same places match)."""
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.shape != b.shape:
        return False
    if a.device != b.device or a.is_complex() or b.is_complex():
        return False
    return bool(torch.allclose(a.detach().double(), b.detach().double(), atol=atol, rtol=rtol, equal_nan=True))


def describe_difference(expected: torch.Tensor, got: torch.Tensor) -> str:
    """Where two tensors differ most, in words."""
    if expected.shape != got.shape:
        return f"expected shape {tuple(expected.shape)}, got shape {tuple(got.shape)}"
    if got.device.type == "meta" or got.is_complex():
        return f"your result is a {got.dtype} tensor on the {got.device.type} device, which cannot be compared"
    got = got.detach().to(expected.device)
    if torch.isnan(got).any() and not torch.isnan(expected).any():
        index = tuple(int(i) for i in torch.nonzero(torch.isnan(got))[0])
        return f"your result contains NaN (first at index {index}), the reference has none"
    diff = torch.nan_to_num((expected.double() - got.double()).abs(), nan=float("inf"))
    index = tuple(int(i) for i in torch.unravel_index(torch.argmax(diff), diff.shape))
    return (f"largest difference at index {index}: expected {expected[index].item():.6f}, "
            f"got {got[index].item():.6f}")


def match_bug(got: object, candidates: Sequence[tuple[str, Callable[[], torch.Tensor]]]) -> str | None:
    """The id of the first mistake whose output equals ``got``, or None."""
    if not isinstance(got, torch.Tensor):
        return None
    for bug, make in candidates:
        try:
            if same(make(), got):
                return bug
        except Exception:  # noqa: BLE001 - a variant that cannot run on this input does not match
            continue
    return None


def mismatch(check: str, got: torch.Tensor, expected: torch.Tensor, where: str,
             candidates: Sequence[tuple[str, Callable[[], torch.Tensor]]], hint: str | None = None) -> CheckFailure:
    """The failure for a wrong output: the matching mistake, else where the numbers differ."""
    bug = match_bug(got, candidates)
    if bug:
        return fail_with(check, bug, where)
    return fail(check, f"{where} {describe_difference(expected, got)}.", hint)


# --------------------------------------------------------------------------- randomness, calling
def randn(*shape: int, seed: int) -> torch.Tensor:
    """Normal draws from a seeded CPU generator (never disturbs the global seed)."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@contextlib.contextmanager
def preserved_rng() -> Iterator[None]:
    """Run a block without changing the global torch RNG state seen by the notebook."""
    state = torch.random.get_rng_state()
    try:
        yield
    finally:
        torch.random.set_rng_state(state)


@contextlib.contextmanager
def isolated() -> Iterator[None]:
    """No gradients, one CPU thread (tiny tensors), the notebook's RNG and threads kept."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with preserved_rng(), torch.no_grad():
            yield
    finally:
        torch.set_num_threads(threads)


def shown(obj: object, limit: int = 80) -> str:
    """``repr(obj)`` cut to ``limit`` characters; an object whose repr fails is named by its type."""
    try:
        text = repr(obj)
    except Exception:  # noqa: BLE001 - a student's broken __repr__ must not crash the check
        return f"<{type(obj).__name__} object>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def ensure_callable(check: str, obj: object, what: str) -> None:
    if not callable(obj) or inspect.isclass(obj) and not issubclass(obj, nn.Module) and what.startswith("a function"):
        raise fail(check, f"{check} expects {what}, but was given {type(obj).__name__} {shown(obj)}.")


def ensure_class(check: str, obj: object, what: str) -> type:
    if not inspect.isclass(obj):
        hint = None
        if isinstance(obj, nn.Module):
            hint = f"pass the class itself, e.g. {check}({type(obj).__name__}), not an instance."
        raise fail(check, f"{check} expects {what}, but was given {type(obj).__name__} {shown(obj)}.", hint)
    return obj


def stub_failure(check: str, what: str) -> CheckFailure:
    return fail(check, f"{what} raised NotImplementedError: the exercise stub is still in place.",
                "replace `raise NotImplementedError()` with your code, run that cell, then this one.")


def call(check: str, fn: Callable, *args, what: str, hint: str | None = None, **kwargs):
    """Call student code; a crash becomes a diagnosis naming the call (the stub gets its own)."""
    __tracebackhide__ = True
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise stub_failure(check, what) from None
    except CheckFailure:
        raise
    except Exception as exc:  # noqa: BLE001 - any crash is reported in plain words
        raise fail(check, f"{what} raised {type(exc).__name__}: {exc}", hint) from exc


def expect_tensor_output(check: str, got: object, what: str, shape: tuple[int, ...] | None = None) -> torch.Tensor:
    """``got`` if it is a tensor (of ``shape``); else the not_a_tensor / wrong_shape mistake."""
    if not isinstance(got, torch.Tensor):
        kind = "None" if got is None else f"a {type(got).__module__.split('.')[0]}.{type(got).__name__}"
        raise fail_with(check, "not_a_tensor", what=what, kind=kind.replace("builtins.", ""))
    if got.device.type == "meta":
        raise fail(check, f"{what} returned a tensor on the meta device: it has a shape but no values.",
                   "build every tensor from the inputs (or with device=x.device), not on device='meta'.")
    if shape is not None and tuple(got.shape) != tuple(shape):
        raise fail_with(check, "wrong_shape", what=what, got=tuple(got.shape), expected=tuple(shape))
    return got


def call_pure(check: str, fn: Callable, inputs: Sequence[torch.Tensor], *rest, what: str, **kwargs):
    """Call ``fn(*inputs, *rest)`` and require the caller's tensors unchanged afterwards."""
    __tracebackhide__ = True
    before = [t.detach().clone() for t in inputs]
    got = call(check, fn, *inputs, *rest, what=what, **kwargs)
    for name, (t, b) in zip(("input", "second input", "third input"), zip(inputs, before)):
        if not torch.equal(t.detach(), b) and not (torch.isnan(t).any() and torch.equal(t.isnan(), b.isnan())):
            raise fail_with(check, "input_modified", f"After {what}:", what=f"{name} tensor")
    return got


# --------------------------------------------------------------------------- watching torch calls
class DeviceMix(RuntimeError):
    pass


class Placement(TorchFunctionMode):
    """A second device without a second device (a GPU, or the meta device, whose first use costs
    seconds of imports). The tensors given (a module's parameters and buffers, the inputs) count
    as *placed*, and so does everything computed from them or made with an explicit device (e.g.
    ``torch.arange(n, device=x.device)``, ``torch.ones_like(x)``, ``t.to(x.device)``). A tensor of
    one or more dimensions made without a device (``torch.arange(n)``, ``torch.ones(n, n)``) that
    meets a placed one raises :class:`DeviceMix`: on a GPU that operation fails with 'Expected all
    tensors to be on the same device'. Indexing with such a tensor is allowed, as on a GPU."""

    _MOVES = ("to", "type_as", "cuda")

    def __init__(self, placed) -> None:
        super().__init__()
        self.placed: dict[int, torch.Tensor] = {}  # the tensors are kept, so ids and storages stay unique
        self.storages: set[int] = set()
        self._mark(list(placed))

    @staticmethod
    def _storage(t: torch.Tensor) -> int:
        """Address of ``t``'s storage; 0 when it has none (empty, or a tensor without storage)."""
        try:
            return t.untyped_storage().data_ptr()
        except (RuntimeError, NotImplementedError):
            return 0

    def _mark(self, result) -> None:
        for item in tree_flatten(result)[0]:
            if isinstance(item, torch.Tensor):
                self.placed[id(item)] = item
                self.storages.add(self._storage(item))
        self.storages.discard(0)

    def _is_placed(self, t: torch.Tensor) -> bool:
        # a view shares its base's storage: older torch (2.3) slices without calling the mode
        return id(t) in self.placed or self._storage(t) in self.storages

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        flat = tree_flatten((args, kwargs))[0]
        tensors = [t for t in flat if isinstance(t, torch.Tensor)]
        here = any(self._is_placed(t) for t in tensors)
        moved = name in self._MOVES and any(isinstance(a, torch.device)
                                            or (isinstance(a, torch.Tensor) and self._is_placed(a)) for a in flat[1:])
        if here and not moved and name not in ("__getitem__", "cpu"):
            stray = [t for t in tensors if not self._is_placed(t) and t.dim() > 0]
            if stray:
                raise DeviceMix(f"a tensor of shape {tuple(stray[0].shape)} made on the CPU met your input's "
                                f"device in {name}")
        result = func(*args, **kwargs)
        device = kwargs.get("device")
        if moved or (here and name != "cpu") or (device is not None and device != "cpu"):
            self._mark(result)
        return result


class Watch(TorchFunctionMode):
    """Records dropout, SDPA and softmax calls and the shapes of all results."""

    def __init__(self) -> None:
        super().__init__()
        self.calls, self.shapes = [], []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        before = args[0].detach().clone() if name == "dropout" and args and isinstance(args[0], torch.Tensor) else None
        result = func(*args, **kwargs)
        if name in ("dropout", "scaled_dot_product_attention", "softmax", "_softmax"):
            self.calls.append((name, before, args, kwargs, result))
        for item in result if isinstance(result, (tuple, list)) else (result,):
            if isinstance(item, torch.Tensor):
                self.shapes.append(tuple(item.shape))
        return result

    def dropouts(self) -> list[tuple[torch.Tensor, float, torch.Tensor]]:
        """(input, p, output) of every active dropout call (train mode, p > 0)."""
        found = []
        for name, before, args, kwargs, result in self.calls:
            if name == "dropout":
                p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
                training = kwargs.get("training", kwargs.get("train", args[2] if len(args) > 2 else True))
                if training and p > 0:
                    found.append((before, float(p), result.detach()))
        return found

    def sdpa_dropout(self) -> float:
        return max([float(kw.get("dropout_p", a[4] if len(a) > 4 else 0.0))
                    for n, _, a, kw, _ in self.calls if n == "scaled_dot_product_attention"] or [0.0])


# --------------------------------------------------------------------------- the pipeline
@dataclass(frozen=True)
class Recipe:
    """How to compute attention; the defaults are right, every other value is a known mistake."""

    softmax_dim: int = -1
    scale: str = "sqrt_d_k"        # none | d_k | half_d_k | double_d_k | sqrt_d_out | sqrt_d_in | after_softmax
    mask: str = "future"           # none | diagonal | leak | past | keep | sdpa_inverted
    mask_fill: str = "-inf"        # zero
    mask_after: str | None = None  # zero | -inf: masked after the softmax
    renormalise: int | None = None  # dim the masked-after weights are renormalised over
    keys_from: str = "key"         # query
    values_from: str = "value"     # query | key | input
    scores_transposed: bool = False
    returns: str = "context"       # weights
    split: str = "transpose"       # view (multi-head)
    merge: str = "transpose"       # view | interleave (multi-head)
    out_proj: bool = True          # multi-head
    concat: str = "last"           # dim0 | dim1 | stack | reversed (wrapper)


RIGHT = Recipe()
NO_DROP = lambda weights, unit: weights  # noqa: E731


@dataclass
class Trace:
    """Intermediate tensors of a pipeline run, to locate the student's dropout."""

    weights: list = field(default_factory=list)
    scores: list = field(default_factory=list)
    context: list = field(default_factory=list)
    projections: list = field(default_factory=list)


def mask_of(kind: str, n: int, device: torch.device | str = "cpu") -> torch.Tensor | None:
    """The (n, n) bool fill mask (True = hidden) for a Recipe's ``mask``."""
    ones = torch.ones(n, n, dtype=torch.bool, device=device)
    return {"future": ones.triu(1), "diagonal": ones.triu(0), "leak": ones.triu(2), "past": ones.tril(-1),
            "keep": ones.tril(0), "sdpa_inverted": ones.tril(0), "none": None}[kind]


def weights_from_scores(scores: torch.Tensor, r: Recipe = RIGHT, *, d_k: float, d_in: float = 0,
                        d_out: float = 0, trace: Trace | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Attention weights (..., n, n) from raw scores: mask (``mask`` overrides the recipe's), scale, softmax."""
    if r.scores_transposed:
        scores = scores.transpose(-2, -1)
    raw, n = scores, scores.shape[-1]
    mask = mask_of(r.mask, n, scores.device) if mask is None else mask
    if mask is not None and r.mask_after is None:
        scores = scores.masked_fill(mask, 0.0 if r.mask_fill == "zero" else -math.inf)
    divisor = {"sqrt_d_k": math.sqrt(d_k), "none": 1.0, "d_k": d_k, "half_d_k": d_k / 2, "double_d_k": d_k * 2,
               "after_softmax": 1.0, "sqrt_d_out": math.sqrt(d_out), "sqrt_d_in": math.sqrt(d_in)}[r.scale]
    scaled = scores / divisor
    weights = torch.softmax(scaled, dim=r.softmax_dim)
    if r.mask == "sdpa_inverted":  # SDPA (torch >= 2.5) gives 0, not NaN, for a row with every key hidden
        weights = weights.nan_to_num(0.0)
    if r.scale == "after_softmax":
        weights = weights / math.sqrt(d_k)
    if mask is not None and r.mask_after is not None:
        weights = weights.masked_fill(mask, 0.0 if r.mask_after == "zero" else -math.inf)
        if r.renormalise is not None:
            weights = weights / weights.sum(dim=r.renormalise, keepdim=True)
    if trace is not None:
        trace.scores += [raw, scores, scaled]
        trace.weights.append(weights)
    return weights


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, r: Recipe = RIGHT, *, x: torch.Tensor | None = None,
              d_out: float = 0, drop=NO_DROP, unit: int = 0, trace: Trace | None = None,
              mask: torch.Tensor | None = None) -> torch.Tensor:
    """Scaled dot-product attention over the last two axes, from queries, keys and values."""
    k = q if r.keys_from == "query" else k
    v = {"query": q, "key": k, "input": x}.get(r.values_from, v)
    d_in = x.shape[-1] if x is not None else k.shape[-1]
    weights = weights_from_scores(q @ k.transpose(-2, -1), r, d_k=k.shape[-1], d_in=d_in,
                                  d_out=d_out or k.shape[-1], trace=trace, mask=mask)  # (..., n, n)
    if r.returns == "weights":
        return weights
    context = drop(weights, unit) @ v                                         # (..., n, d_v)
    if trace is not None:
        trace.context.append(context)
    return context


def project(layers: dict[str, nn.Linear], x: torch.Tensor, trace: Trace | None = None):
    """Queries, keys and values from the student's own nn.Linear layers."""
    q, k, v = (F.linear(x, layers[n].weight, layers[n].bias) for n in ("W_query", "W_key", "W_value"))
    if trace is not None:
        trace.projections += [x, q, k, v]
    return q, k, v


def head_attention(layers: dict[str, nn.Linear], x: torch.Tensor, r: Recipe = RIGHT, drop=NO_DROP,
                   trace: Trace | None = None, unit: int = 0) -> torch.Tensor:
    """One causal attention head (chapter 04's CausalAttention) from the student's weights: (b, n, d_out)."""
    q, k, v = project(layers, x, trace)                                       # each (b, n, d_out)
    return attention(q, k, v, r, x=x, drop=drop, unit=unit, trace=trace)


@dataclass
class MHAWeights:
    """What the split-head reference needs from the student's layer."""

    qkv: dict[str, nn.Linear]
    out_proj: nn.Linear
    num_heads: int


def mha_reference(weights: MHAWeights, x: torch.Tensor, r: Recipe = RIGHT, drop=NO_DROP,
                  trace: Trace | None = None) -> torch.Tensor:
    """Multi-head causal attention from one Q/K/V projection each: (b, n, d_out)."""
    b, n, _ = x.shape
    h = weights.num_heads
    q, k, v = project(weights.qkv, x, trace)                       # each (b, n, d_out)
    d_out = q.shape[-1]

    def split(t: torch.Tensor) -> torch.Tensor:                    # (b, n, d_out) -> (b, h, n, hd)
        if r.split == "view":
            return t.reshape(b, h, n, d_out // h)
        return t.reshape(b, n, h, d_out // h).transpose(1, 2)

    context = attention(split(q), split(k), split(v), r, x=x, d_out=d_out, drop=drop, trace=trace)  # (b, h, n, hd)
    merged = {"view": lambda: context.reshape(b, n, d_out),
              "interleave": lambda: context.permute(0, 2, 3, 1).reshape(b, n, d_out),
              "transpose": lambda: context.transpose(1, 2).reshape(b, n, d_out)}[r.merge]()  # (b, n, d_out)
    if trace is not None:
        trace.context.append(merged)
    return weights.out_proj(merged) if r.out_proj else merged


def variants(*names: str) -> list[tuple[str, Recipe]]:
    """(mistake id, recipe) pairs for the named groups: axis, scale, mask, projections, heads."""
    groups = {
        "axis": [("softmax_over_queries", Recipe(softmax_dim=-2)), ("softmax_over_batch", Recipe(softmax_dim=0))],
        "heads_axis": [("softmax_over_heads", Recipe(softmax_dim=1))],
        "scale": [("no_scaling", Recipe(scale="none")), ("scale_d_k", Recipe(scale="d_k")),
                  ("scale_precedence", Recipe(scale="half_d_k")), ("scale_precedence", Recipe(scale="double_d_k")),
                  ("scale_d_in", Recipe(scale="sqrt_d_in")), ("scale_after_softmax", Recipe(scale="after_softmax"))],
        "head_scale": [("scale_d_out", Recipe(scale="sqrt_d_out"))],
        "mask": [("mask_after_softmax", Recipe(mask_after="zero")), ("mask_after_softmax", Recipe(mask_after="-inf")),
                 ("mask_missing", Recipe(mask="none")), ("mask_diagonal", Recipe(mask="diagonal")),
                 ("mask_leak", Recipe(mask="leak")), ("mask_past", Recipe(mask="past")),
                 ("keep_mask", Recipe(mask="keep")), ("sdpa_mask_inverted", Recipe(mask="sdpa_inverted")),
                 ("mask_zero_fill", Recipe(mask_fill="zero"))],
        "projections": [("keys_values_from_query", Recipe(keys_from="query", values_from="query")),
                        ("keys_from_query", Recipe(keys_from="query")), ("values_from_query", Recipe(values_from="query")),
                        ("values_from_key", Recipe(values_from="key")), ("context_from_inputs", Recipe(values_from="input")),
                        ("scores_transposed", Recipe(scores_transposed=True)), ("returns_weights", Recipe(returns="weights"))],
        "split": [("view_without_transpose", Recipe(split="view", merge="view")), ("view_without_transpose", Recipe(split="view")),
                  ("merge_without_transpose", Recipe(merge="view")), ("heads_interleaved", Recipe(merge="interleave")),
                  ("out_proj_unused", Recipe(out_proj=False))],
        "concat": [("heads_wrong_order", Recipe(concat="reversed")), ("concat_wrong_axis", Recipe(concat="dim0")),
                   ("concat_wrong_axis", Recipe(concat="dim1")), ("stacked_heads", Recipe(concat="stack"))],
    }
    return [pair for name in names for pair in groups[name]]


def with_mask(pairs: list[tuple[str, Recipe]], mask: str) -> list[tuple[str, Recipe]]:
    return [(bug, replace(r, mask=mask) if r.mask == "future" else r) for bug, r in pairs]


__all__ = [
    "ATOL", "NO_DROP", "RIGHT", "RTOL", "CheckFailure", "DeviceMix", "MHAWeights", "Placement", "Recipe", "Trace", "Watch", "attention", "call",
    "call_pure", "describe_difference", "ensure_callable", "ensure_class", "expect_tensor_output", "fail", "fail_with",
    "fail_with_bug", "generator", "head_attention", "isolated", "mha_reference", "mask_of", "match_bug", "mismatch", "passed",
    "preserved_rng", "project", "randn", "same", "shown", "stub_failure", "variants", "weights_from_scores", "with_mask",
]
