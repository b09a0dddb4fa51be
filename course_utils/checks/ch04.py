"""Self-checks for chapter 04: the ``CausalAttention`` class.

This module also holds the machinery that chapter 05's checks reuse. A check builds the
student's class under a fixed seed, reads its weights from the book's attribute names
(``W_query``, ``W_key``, ``W_value``, then ``out_proj`` or ``heads``), and recomputes the
layer *functionally* from those same weights. When the student's output differs, the same
functional pipeline is re-run with one step changed at a time (a :class:`Recipe`), and the
variant that reproduces the student's numbers names the bug. Dropout is checked by recording
every ``F.dropout`` call (:func:`record_dropout`) and looking at *which* tensor it received.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ._core import (
    Bug,
    CheckFailure,
    describe_difference,
    ensure_class,
    fail,
    fail_with_bug,
    match_bug,
    passed,
    preserved_rng,
    randn,
    record_dropout,
    same,
)

# --------------------------------------------------------------------------- the known bugs
BUGS: dict[str, Bug] = {b.name: b for b in (
    # softmax axis
    Bug("softmax_queries",
        "Your softmax normalises over the queries (dim=1 of the (batch, n, n) scores, or dim=2 "
        "of (batch, heads, n, n)): each *column* adds up to 1 instead of each row. Nothing "
        "crashes, because the shape is the same either way.",
        "normalise over the keys, the last axis: torch.softmax(scores, dim=-1)."),
    Bug("softmax_heads",
        "Your softmax normalises over the heads (dim=1 of the (batch, heads, n, n) scores): "
        "the heads compete for weight instead of each query's row adding up to 1.",
        "normalise over the keys, the last axis: torch.softmax(scores, dim=-1)."),
    Bug("softmax_batch",
        "Your softmax normalises over the batch (dim=0): different sequences compete for "
        "weight, and each query's row no longer adds up to 1.",
        "normalise over the keys, the last axis: torch.softmax(scores, dim=-1)."),
    # scaling
    Bug("no_scaling",
        "You did not scale the scores before the softmax. Dot products of d_k-wide vectors "
        "grow with d_k, which pushes the softmax towards one-hot rows (and tiny gradients).",
        "divide the scores by sqrt(d_k) = keys.shape[-1] ** 0.5 before the softmax."),
    Bug("scale_d_k",
        "You divided the scores by d_k instead of by its square root sqrt(d_k).",
        "divide by keys.shape[-1] ** 0.5."),
    Bug("scale_d_out",
        "You divided the scores by sqrt(d_out), the width of all heads together. Each head's "
        "scores are dot products of head_dim numbers, so the scale is sqrt(head_dim).",
        "divide by self.head_dim ** 0.5 (or keys.shape[-1] ** 0.5 after the split)."),
    Bug("scale_d_in",
        "You scaled the scores by sqrt(d_in), the width of the inputs. The scores are dot "
        "products of keys and queries, which are d_k wide (d_out, or head_dim per head).",
        "divide by keys.shape[-1] ** 0.5."),
    Bug("scale_after_softmax",
        "You divided the attention weights by sqrt(d_k) *after* the softmax, so the rows no "
        "longer add up to 1. The scaling belongs to the scores, before the softmax.",
        "torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1)."),
    # the causal mask
    Bug("mask_after_softmax",
        "You applied the mask after the softmax without renormalising: the future entries are "
        "gone, but each row no longer adds up to 1 (or holds -inf).",
        "fill the masked *scores* with -inf before the softmax; the softmax then gives them "
        "exactly 0 and still normalises each row."),
    Bug("mask_missing",
        "There is no causal mask: every token also attends to the tokens after it (the "
        "future), which a language model must not see.",
        "scores.masked_fill(self.mask[:n, :n], -torch.inf) before the softmax, with "
        "mask = torch.triu(torch.ones(context_length, context_length), diagonal=1).bool()."),
    Bug("mask_diagonal",
        "Your mask also hides the diagonal (torch.triu(..., diagonal=0)): no token may see "
        "itself, and the first token sees nothing at all, so its row is all -inf and the "
        "softmax returns NaN.",
        "use torch.triu(..., diagonal=1): only the entries strictly above the diagonal are "
        "the future."),
    Bug("mask_leak",
        "Your mask starts one diagonal too high (torch.triu(..., diagonal=2)): every token "
        "also sees the next token, so the future leaks in.",
        "use torch.triu(..., diagonal=1)."),
    Bug("mask_past",
        "Your mask hides the past instead of the future (torch.tril instead of torch.triu): "
        "each token sees itself and every later token.",
        "use torch.triu(torch.ones(n, n), diagonal=1): True above the diagonal."),
    Bug("mask_zero_fill",
        "You filled the masked scores with 0 instead of -inf. The softmax of 0 is not 0 "
        "(exp(0) = 1), so future tokens still get weight.",
        "masked_fill(mask, -torch.inf)."),
    Bug("mask_not_sliced",
        "Your layer works on exactly context_length tokens but crashes on fewer: the "
        "(context_length, context_length) mask must be cut to the actual number of tokens "
        "before it is applied to the (n, n) scores.",
        "n = x.shape[1]; then use self.mask[:n, :n]."),
    Bug("mask_not_buffer",
        "Your mask is a plain tensor attribute (self.mask = ...), not a registered buffer: "
        "model.to(device) leaves it behind (a crash on a GPU) and state_dict() does not "
        "contain it.",
        "self.register_buffer('mask', torch.triu(torch.ones(context_length, context_length), "
        "diagonal=1))."),
    Bug("mask_parameter",
        "Your mask is an nn.Parameter: parameters() hands it to the optimizer as if it were "
        "a weight to train. A fixed tensor that should move with the model is a buffer.",
        "self.register_buffer('mask', ...) instead of nn.Parameter(...)."),
    # projections
    Bug("keys_from_query",
        "Your keys come from the query projection (W_query) instead of W_key, so the scores "
        "compare queries with queries and W_key is never used.",
        "keys = self.W_key(x)."),
    Bug("values_from_query",
        "Your values come from the query projection (W_query) instead of W_value, so the "
        "context vectors mix queries and W_value is never used.",
        "values = self.W_value(x)."),
    Bug("keys_values_from_query",
        "Your keys and your values both come from the query projection (W_query): W_key and "
        "W_value are never used.",
        "keys = self.W_key(x) and values = self.W_value(x), each split into heads."),
    Bug("scores_transposed",
        "Your scores are transposed (keys @ queries.T): row i holds how much every query "
        "attends to key i, instead of what query i gives to every key.",
        "scores = queries @ keys.transpose(1, 2) (queries first)."),
    Bug("qkv_bias_ignored",
        "The qkv_bias argument is not passed on to the query/key/value layers: nn.Linear has "
        "a bias by default, so it must be told qkv_bias.",
        "nn.Linear(d_in, d_out, bias=qkv_bias) for W_query, W_key and W_value."),
    # dropout
    Bug("dropout_ignored",
        "Dropout is never applied in train mode: the attention weights reach the values "
        "unchanged.",
        "create self.dropout = nn.Dropout(dropout) in __init__ and use "
        "weights = self.dropout(weights) before multiplying with the values."),
    Bug("dropout_unused",
        "You call dropout on the attention weights but then use the weights from before the "
        "call: its result is thrown away, so dropout is never applied in train mode.",
        "assign the result: weights = self.dropout(weights)."),
    Bug("dropout_in_eval",
        "Dropout is still active in eval mode: after model.eval() the output must be the "
        "plain, deterministic attention output.",
        "use nn.Dropout (it follows train() and eval()), or pass training=self.training "
        "to F.dropout."),
    Bug("dropout_wrong_p",
        "Dropout uses a different probability than the `dropout` argument of the constructor.",
        "self.dropout = nn.Dropout(dropout), with the argument, not a fixed number."),
    Bug("dropout_on_context",
        "Dropout is applied to the context vectors (after multiplying with the values) or to "
        "the layer's output. The course, like GPT-2, applies it to the attention weights.",
        "weights = self.dropout(weights) right after the softmax, then weights @ values."),
    Bug("dropout_before_softmax",
        "Dropout is applied to the scores, before the softmax. The dropped scores become 0, "
        "and exp(0) = 1 still gives those tokens weight.",
        "apply dropout to the weights, after the softmax."),
    Bug("dropout_on_projections",
        "Dropout is applied to the inputs or to the queries, keys or values, not to the "
        "attention weights.",
        "weights = self.dropout(weights) right after the softmax."),
    Bug("no_length_check",
        "Your layer accepted more tokens than its context_length without complaint.",
        "raise a ValueError when x.shape[1] > context_length, saying both numbers."),
    # multi-head: split and merge
    Bug("view_without_transpose",
        "You split the heads by viewing (b, n, d_out) straight to (b, num_heads, n, head_dim). "
        "view keeps the memory order, so a 'head' then holds slices of several tokens mixed "
        "together instead of one slice of every token.",
        "view to (b, n, num_heads, head_dim), then .transpose(1, 2)."),
    Bug("merge_without_transpose",
        "You merged the heads by viewing (b, num_heads, n, head_dim) straight back to "
        "(b, n, d_out) without transposing first: rows of different tokens get glued together.",
        "context.transpose(1, 2).contiguous().view(b, n, d_out)."),
    Bug("missing_contiguous",
        "view() cannot reshape the tensor that transpose() returns: transpose only swaps "
        "strides, so the data is no longer laid out contiguously in memory.",
        "call .contiguous() before .view(b, n, d_out), or use .reshape(b, n, d_out)."),
    Bug("out_proj_unused",
        "Your class has out_proj but does not apply it: the merged heads are returned as they "
        "are.",
        "return self.out_proj(context) after merging the heads."),
    Bug("no_divisibility_check",
        "Your MultiHeadAttention accepts a d_out that num_heads does not divide (d_out=5, "
        "num_heads=2); head_dim = d_out // num_heads then silently drops columns, or the "
        "split crashes later with an unclear message.",
        "in __init__: if d_out % num_heads != 0: raise ValueError(...) naming both numbers."),
    # multi-head: the wrapper
    Bug("heads_python_list",
        "Your heads live in a plain Python list. nn.Module does not look inside lists, so "
        "their weights are missing from parameters() (the optimizer would never train them), "
        "from state_dict(), and .to(device) does not move them.",
        "self.heads = nn.ModuleList([...])."),
    Bug("heads_shared",
        "Your heads are one and the same module repeated ([head] * num_heads): every head has "
        "the same weights, so the concatenated outputs are copies of each other.",
        "build a new CausalAttention per head: nn.ModuleList([CausalAttention(...) for _ in "
        "range(num_heads)])."),
    Bug("concat_wrong_axis",
        "You concatenated the head outputs along the wrong axis: the batch or token axis grew "
        "instead of the feature axis.",
        "torch.cat([head(x) for head in self.heads], dim=-1)."),
    Bug("stacked_heads",
        "You stacked the head outputs into a new axis (torch.stack) instead of concatenating "
        "them along the features.",
        "torch.cat([head(x) for head in self.heads], dim=-1)."),
    Bug("wrapper_d_out_split",
        "In MultiHeadAttentionWrapper, d_out is the width of *each* head (the book's "
        "convention): the output is num_heads * d_out wide. You gave each head "
        "d_out // num_heads outputs.",
        "CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for every head."),
)}


# --------------------------------------------------------------------------- cases
@dataclass(frozen=True)
class Case:
    """One configuration a layer is built with, and the batch it is run on."""

    batch: int
    n: int
    d_in: int
    d_out: int
    context_length: int
    num_heads: int | None = None  # None: a single-head layer (chapter 04's constructor)
    qkv_bias: bool = False
    seed: int = 0

    def args(self, dropout: float = 0.0) -> tuple:
        base = (self.d_in, self.d_out, self.context_length, dropout)
        return base if self.num_heads is None else (*base, self.num_heads)

    def describe(self, cls: type, dropout: float = 0.0) -> str:
        heads = "" if self.num_heads is None else f", num_heads={self.num_heads}"
        return (f"{cls.__name__}(d_in={self.d_in}, d_out={self.d_out}, context_length="
                f"{self.context_length}, dropout={dropout}{heads}, qkv_bias={self.qkv_bias})")

    def inputs(self, n: int | None = None) -> torch.Tensor:
        return randn(self.batch, self.n if n is None else n, self.d_in, seed=self.seed + 7)


# --------------------------------------------------------------------------- the pipeline
@dataclass(frozen=True)
class Recipe:
    """How to compute attention; the defaults are right, each other value is a known bug."""

    softmax_dim: int = -1
    scale: str = "sqrt_d_k"       # none | d_k | sqrt_d_out | sqrt_d_in | after_softmax
    mask: str = "future"          # none | diagonal | leak | past
    mask_fill: str = "-inf"       # zero
    mask_after: str | None = None  # zero | -inf: masked after the softmax, not renormalised
    keys_from_query: bool = False
    values_from_query: bool = False
    scores_transposed: bool = False
    split: str = "transpose"      # view (multi-head only)
    merge: str = "transpose"      # view (multi-head only)
    out_proj: bool = True         # multi-head only
    concat: str = "last"          # dim0 | dim1 | stack (wrapper only)


RIGHT = Recipe()
Drop = Callable[[torch.Tensor, int], torch.Tensor]
NO_DROP: Drop = lambda weights, unit: weights


@dataclass
class Trace:
    """Intermediate tensors of a reference run, used to locate the student's dropout."""

    weights: list[torch.Tensor]
    scores: list[torch.Tensor]
    context: list[torch.Tensor]
    projections: list[torch.Tensor]


def _new_trace() -> Trace:
    return Trace([], [], [], [])


def _mask(kind: str, n: int) -> torch.Tensor | None:
    ones = torch.ones(n, n, dtype=torch.bool)
    return {
        "future": torch.triu(ones, diagonal=1),
        "diagonal": torch.triu(ones, diagonal=0),
        "leak": torch.triu(ones, diagonal=2),
        "past": torch.tril(ones, diagonal=-1),
        "none": None,
    }[kind]


def attention_weights(q: torch.Tensor, k: torch.Tensor, r: Recipe, *, d_out: int, d_in: int,
                      trace: Trace | None) -> torch.Tensor:
    """Attention weights (..., n, n) from queries and keys (..., n, d_k)."""
    n, d_k = q.shape[-2], q.shape[-1]
    scores = q @ k.transpose(-2, -1)                               # (..., n, n)
    if r.scores_transposed:
        scores = scores.transpose(-2, -1)
    raw = scores
    mask = _mask(r.mask, n)
    if mask is not None and r.mask_after is None:
        scores = scores.masked_fill(mask, 0.0 if r.mask_fill == "zero" else -math.inf)
    divisor = {"sqrt_d_k": math.sqrt(d_k), "none": 1.0, "d_k": float(d_k), "after_softmax": 1.0,
               "sqrt_d_out": math.sqrt(d_out), "sqrt_d_in": math.sqrt(d_in)}[r.scale]
    scaled = scores / divisor
    weights = torch.softmax(scaled, dim=r.softmax_dim)
    if r.scale == "after_softmax":
        weights = weights / math.sqrt(d_k)
    if mask is not None and r.mask_after is not None:
        weights = weights.masked_fill(mask, 0.0 if r.mask_after == "zero" else -math.inf)
    if trace is not None:
        trace.scores += [raw, scores, scaled]
        trace.weights.append(weights)
    return weights


def apply_linear(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return F.linear(x, layer.weight, layer.bias)


def projections(layers: dict[str, nn.Linear], x: torch.Tensor, r: Recipe,
                trace: Trace | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q = apply_linear(layers["W_query"], x)
    k = q if r.keys_from_query else apply_linear(layers["W_key"], x)
    v = q if r.values_from_query else apply_linear(layers["W_value"], x)
    if trace is not None:
        trace.projections += [x, q, k, v]
    return q, k, v


def causal_reference(layers: dict[str, nn.Linear], x: torch.Tensor, r: Recipe = RIGHT,
                     drop: Drop = NO_DROP, trace: Trace | None = None, unit: int = 0) -> torch.Tensor:
    """One causal attention head, computed from the student's weights: (b, n, d_out)."""
    q, k, v = projections(layers, x, r, trace)                     # each (b, n, d_out)
    weights = attention_weights(q, k, r, d_out=q.shape[-1], d_in=x.shape[-1], trace=trace)  # (b, n, n)
    context = drop(weights, unit) @ v                              # (b, n, d_out)
    if trace is not None:
        trace.context.append(context)
    return context


# --------------------------------------------------------------------------- variants
def known_variants(*, multihead: bool = False) -> list[tuple[str, Recipe]]:
    """(bug name, recipe) pairs, most specific first."""
    axis = [("softmax_queries", Recipe(softmax_dim=-2)), ("softmax_batch", Recipe(softmax_dim=0))]
    if multihead:
        axis.insert(1, ("softmax_heads", Recipe(softmax_dim=1)))
    scale = [("no_scaling", Recipe(scale="none")), ("scale_d_k", Recipe(scale="d_k"))]
    if multihead:
        scale.append(("scale_d_out", Recipe(scale="sqrt_d_out")))
    scale += [("scale_d_in", Recipe(scale="sqrt_d_in")),
              ("scale_after_softmax", Recipe(scale="after_softmax"))]
    return axis + scale + [
        ("mask_after_softmax", Recipe(mask_after="zero")),
        ("mask_after_softmax", Recipe(mask_after="-inf")),
        ("mask_missing", Recipe(mask="none")),
        ("mask_diagonal", Recipe(mask="diagonal")),
        ("mask_leak", Recipe(mask="leak")),
        ("mask_past", Recipe(mask="past")),
        ("mask_zero_fill", Recipe(mask_fill="zero")),
        ("keys_values_from_query", Recipe(keys_from_query=True, values_from_query=True)),
        ("keys_from_query", Recipe(keys_from_query=True)),
        ("values_from_query", Recipe(values_from_query=True)),
        ("scores_transposed", Recipe(scores_transposed=True)),
    ]


def diagnose(check: str, got: object, expected: torch.Tensor,
             variants: Sequence[tuple[str, Recipe]], compute: Callable[[Recipe], torch.Tensor],
             where: str) -> CheckFailure:
    """The failure to raise for a wrong output: a named bug when a variant reproduces it."""
    if not isinstance(got, torch.Tensor):
        return fail(check, f"{where} forward returned {type(got).__name__}, not a tensor.",
                    "return the context vectors (a tensor) from forward.")
    bug = match_bug(got.detach(), [(BUGS[name], lambda r=r: compute(r)) for name, r in variants])
    if bug:
        return fail_with_bug(check, bug, where)
    return fail(check, f"{where} {describe_difference(expected, got.detach())}.")


# --------------------------------------------------------------------------- building and running
def build(check: str, cls: type, case: Case, dropout: float = 0.0) -> nn.Module:
    """Construct the student's class under the case's seed (the global RNG is restored)."""
    __tracebackhide__ = True
    what = case.describe(cls, dropout)
    with preserved_rng():
        torch.manual_seed(case.seed)
        try:
            module = cls(*case.args(dropout), qkv_bias=case.qkv_bias)
        except NotImplementedError:
            raise stub_failure(check, what) from None
        except Exception as exc:  # noqa: BLE001 - reported in plain words
            raise fail(check, f"{what} raised {type(exc).__name__}: {exc}",
                       "the constructor takes (d_in, d_out, context_length, dropout"
                       + ("" if case.num_heads is None else ", num_heads") + ", qkv_bias=False)."
                       ) from exc
    if not isinstance(module, nn.Module):
        raise fail(check, f"{what} is a {type(module).__name__}, not an nn.Module.",
                   "subclass nn.Module and call super().__init__() first.")
    return module


def stub_failure(check: str, what: str) -> CheckFailure:
    return fail(check, f"{what} raised NotImplementedError: the exercise stub is still in place.",
                "replace `raise NotImplementedError()` with your code, run that cell, then this one.")


def run(check: str, module: nn.Module, x: torch.Tensor, where: str,
        full_length: torch.Tensor | None = None) -> torch.Tensor:
    """Call forward; turn a crash into a diagnosis. ``full_length``: an input of exactly
    context_length tokens, tried after a crash to recognise a mask that was not sliced."""
    __tracebackhide__ = True
    try:
        return module(x)
    except NotImplementedError:
        raise stub_failure(check, where.rstrip(":")) from None
    except CheckFailure:
        raise
    except Exception as exc:  # noqa: BLE001 - reported in plain words
        error = f"(The error was {type(exc).__name__}: {exc})"
        if "view size is not compatible" in str(exc):
            raise fail_with_bug(check, BUGS["missing_contiguous"], f"{where} forward crashed. {error}") from None
        if full_length is not None:
            try:
                module(full_length)
            except Exception:  # noqa: BLE001 - it crashes anyway: not a slicing problem
                pass
            else:
                raise fail_with_bug(check, BUGS["mask_not_sliced"], f"{where} forward crashed. {error}") from None
        raise fail(check, f"{where} forward raised {type(exc).__name__}: {exc}") from exc


def find_linear(check: str, module: nn.Module, attr: str, owner: str, d_in: int, d_out: int,
                bias: bool | None) -> nn.Linear:
    """The student's nn.Linear called ``attr``, checked for its sizes and bias."""
    layer = getattr(module, attr, None)
    wanted = f"nn.Linear({d_in}, {d_out}" + ("" if bias is None else f", bias={bias}") + ")"
    if layer is None:
        raise fail(check, f"{check} looks for the attribute {attr!r} ({wanted}), but {owner} has "
                   f"no attribute {attr!r}.", f"use the book's names: self.{attr} = nn.Linear(...).")
    if not isinstance(layer, nn.Linear):
        raise fail(check, f"{owner}.{attr} is a {type(layer).__name__}; {check} expects an "
                   f"nn.Linear ({wanted}).", f"self.{attr} = {wanted}.")
    if (layer.in_features, layer.out_features) != (d_in, d_out):
        raise fail(check, f"{owner}.{attr} maps {layer.in_features} -> {layer.out_features} features; "
                   f"expected {d_in} -> {d_out}.", f"self.{attr} = {wanted}.")
    if bias is not None and (layer.bias is not None) != bias:
        state = "has a bias" if layer.bias is not None else "has no bias"
        raise fail_with_bug(check, BUGS["qkv_bias_ignored"], f"With qkv_bias={bias}, {owner}.{attr} {state}.")
    return layer


def qkv_layers(check: str, module: nn.Module, owner: str, case: Case, d_out: int) -> dict[str, nn.Linear]:
    return {name: find_linear(check, module, name, owner, case.d_in, d_out, case.qkv_bias)
            for name in ("W_query", "W_key", "W_value")}


def check_mask_buffer(check: str, module: nn.Module, owner: str, context_length: int) -> None:
    """Require a (context_length, context_length) mask registered as a buffer."""
    size = context_length * context_length

    def is_mask(t: object) -> bool:
        return (isinstance(t, torch.Tensor) and t.dim() >= 2 and t.numel() == size
                and tuple(t.shape[-2:]) == (context_length, context_length))

    if any(is_mask(b) for b in module.buffers()):
        return
    if any(is_mask(p) and (not p.requires_grad or "mask" in name.lower())
           for name, p in module.named_parameters()):
        raise fail_with_bug(check, BUGS["mask_parameter"], f"In {owner}:")
    for sub in module.modules():
        if any(is_mask(value) for value in vars(sub).values()):
            raise fail_with_bug(check, BUGS["mask_not_buffer"], f"In {owner}:")
    raise fail(check, f"{check} looks for the causal mask as a buffer of shape ({context_length}, "
               f"{context_length}) (context_length x context_length), but {owner} has none.",
               "in __init__: self.register_buffer('mask', torch.triu(torch.ones(context_length, "
               "context_length), diagonal=1)).")


def check_too_long(check: str, module: nn.Module, case: Case, cls: type) -> None:
    """An input longer than context_length must raise, not be processed."""
    __tracebackhide__ = True
    n = case.context_length + 1
    try:
        module(case.inputs(n))
    except NotImplementedError:
        raise stub_failure(check, case.describe(cls)) from None
    except Exception:  # noqa: BLE001 - any clear refusal is right
        return
    raise fail_with_bug(check, BUGS["no_length_check"],
                        f"{case.describe(cls)} processed a batch of {n} tokens.")


# --------------------------------------------------------------------------- dropout
DROPOUT_P = 0.3


def check_dropout(check: str, module: nn.Module, x: torch.Tensor, where: str,
                  reference: Callable[..., torch.Tensor], seed: int) -> None:
    """``module`` was built with dropout=DROPOUT_P; ``reference(drop=..., trace=...)`` recomputes it.

    Eval mode must give the plain output; train mode must route every attention-weight
    tensor, and nothing else, through F.dropout with p=DROPOUT_P, and use what it returns.
    """
    __tracebackhide__ = True
    trace = _new_trace()
    plain = reference(drop=NO_DROP, trace=trace)
    module.eval()
    got = run(check, module, x, f"{where} in eval mode:")
    if not same(got, plain):
        raise fail_with_bug(check, BUGS["dropout_in_eval"], f"{where} after .eval():")
    module.train()
    with preserved_rng(), record_dropout() as calls:
        torch.manual_seed(seed)
        got = run(check, module, x, f"{where} in train mode:")
    active = [c for c in calls if c.training and c.p > 0]
    if not active:
        if same(got, plain):
            raise fail_with_bug(check, BUGS["dropout_ignored"], f"{where} in train mode:")
        raise fail(check, f"{where} in train mode the output changed, but no call to nn.Dropout "
                   "or F.dropout was seen, so the check cannot tell what was dropped.",
                   "use self.dropout = nn.Dropout(dropout) on the attention weights.")
    places = [(trace.weights, None), (trace.scores, "dropout_before_softmax"),
              (trace.context, "dropout_on_context"), ([plain], "dropout_on_context"),
              (trace.projections, "dropout_on_projections")]
    dropped: dict[int, torch.Tensor] = {}
    for call in active:
        place = next((bug for tensors, bug in places if any(same(call.input, t) for t in tensors)), "?")
        if place == "?":
            raise fail(check, f"{where} in train mode, dropout was applied to a tensor of shape "
                       f"{tuple(call.input.shape)} that is not the attention weights.",
                       "weights = self.dropout(weights) right after the softmax.")
        if place is not None:
            raise fail_with_bug(check, BUGS[place], f"{where} in train mode:")
        if abs(call.p - DROPOUT_P) > 1e-9:
            raise fail_with_bug(check, BUGS["dropout_wrong_p"],
                                f"{where}: the layer was built with dropout={DROPOUT_P}, "
                                f"but its dropout used p={call.p:g}.")
        for unit, w in enumerate(trace.weights):
            if same(call.input, w):
                dropped[unit] = call.output
    if len(dropped) < len(trace.weights):
        raise fail(check, f"{where} in train mode, dropout reached the weights of only "
                   f"{len(dropped)} of {len(trace.weights)} heads.",
                   "every head applies dropout to its attention weights.")
    expected = reference(drop=lambda w, unit: dropped[unit])
    if same(got, expected):
        return
    if same(got, plain):
        raise fail_with_bug(check, BUGS["dropout_unused"], f"{where} in train mode:")
    raise fail(check, f"{where} in train mode, with the dropout mask your layer drew: "
               f"{describe_difference(expected, got.detach())}.",
               "multiply the dropped-out weights with the values: self.dropout(weights) @ values.")


# --------------------------------------------------------------------------- the two phases
@contextlib.contextmanager
def isolated() -> Iterator[None]:
    """Run a check without gradients, on one CPU thread (tiny tensors: threads only cost
    time), leaving the notebook's RNG state and thread count as they were."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with preserved_rng(), torch.no_grad():
            yield
    finally:
        torch.set_num_threads(threads)


Read = Callable[[nn.Module, str, Case], object]
Compute = Callable[..., torch.Tensor]  # (weights, x, recipe=RIGHT, drop=NO_DROP, trace=None)


def compare_cases(check: str, cls: type, cases: Sequence[Case], read: Read, compute: Compute,
                  variants: Sequence[tuple[str, Recipe]]) -> nn.Module:
    """Build the class for every case (dropout 0, eval mode) and compare its output with
    ``compute`` run on the weights that ``read`` found; return the last module built."""
    __tracebackhide__ = True
    for case in cases:
        module = build(check, cls, case)
        owner = case.describe(cls)
        weights = read(module, owner, case)
        module.eval()
        x = case.inputs()
        where = f"With {owner} on a batch of shape {tuple(x.shape)}:"
        full = case.inputs(case.context_length) if case.n < case.context_length else None
        got = run(check, module, x, where, full)
        expected = compute(weights, x)
        if not same(got, expected):
            raise diagnose(check, got, expected, variants,
                           lambda r, weights=weights, x=x: compute(weights, x, r), where)
    return module


def dropout_phase(check: str, cls: type, case: Case, read: Read, compute: Compute) -> None:
    """Build the class with dropout=DROPOUT_P and run :func:`check_dropout` on it."""
    __tracebackhide__ = True
    module = build(check, cls, case, DROPOUT_P)
    owner = case.describe(cls, DROPOUT_P)
    weights = read(module, owner, case)
    x = case.inputs()
    check_dropout(check, module, x, f"With {owner}", seed=case.seed,
                  reference=lambda drop, trace=None: compute(weights, x, RIGHT, drop, trace))


# --------------------------------------------------------------------------- check_causal_attention
CAUSAL_CASES = (
    Case(2, 6, 3, 2, 6, seed=1231),                  # the book's shape: n == context_length
    Case(1, 4, 5, 3, 7, qkv_bias=True, seed=1232),   # batch 1, n < context_length, biases
    Case(3, 5, 4, 4, 8, seed=1233),                  # batch 3, n < context_length
)
CAUSAL_DROPOUT_CASE = Case(2, 5, 4, 3, 6, seed=1234)


def causal_layers(check: str, module: nn.Module, owner: str, case: Case) -> dict[str, nn.Linear]:
    layers = qkv_layers(check, module, owner, case, case.d_out)
    check_mask_buffer(check, module, owner, case.context_length)
    return layers


def check_causal_attention(cls: type) -> None:
    """Check a ``CausalAttention(d_in, d_out, context_length, dropout, qkv_bias=False)`` class.

    Builds it on several shapes (batch 1 and 3, n below and equal to context_length, with
    and without biases), compares with attention recomputed from its own W_query, W_key and
    W_value, checks the mask buffer, dropout in train and eval mode, and the length limit.
    """
    __tracebackhide__ = True
    name = "check_causal_attention"
    ensure_class(name, cls, "a class such as CausalAttention")
    read = lambda module, owner, case: causal_layers(name, module, owner, case)
    with isolated():
        module = compare_cases(name, cls, CAUSAL_CASES, read, causal_reference, known_variants())
        check_too_long(name, module, CAUSAL_CASES[-1], cls)
        dropout_phase(name, cls, CAUSAL_DROPOUT_CASE, read, causal_reference)
    passed(name, f"matches causal attention on {len(CAUSAL_CASES)} shapes (batch 1 to 3, "
           "n <= context_length, with and without bias); mask buffer, dropout and length limit right")


# --------------------------------------------------------------------------- the shape exercises
def check_output_shape(name: str, out: object, expected: tuple[int, ...], why: str,
                       hints: dict[tuple[int, ...], str], default_hint: str) -> None:
    """Shared body of the "run a big batch" checks: a finite tensor of the ``expected`` shape.
    ``hints`` maps a wrong shape that a known mistake produces to its explanation."""
    __tracebackhide__ = True
    if not isinstance(out, torch.Tensor):
        raise fail(name, f"{name} expects the output tensor, but was given {type(out).__name__}.")
    shape = tuple(out.shape)
    if shape != expected:
        raise fail(name, f"Your output has shape {shape}, expected {expected}: {why}",
                   hints.get(shape, default_hint))
    if not torch.isfinite(out).all():
        raise fail(name, "The output has the right shape but contains NaN or inf.",
                   "is the causal mask built with diagonal=1?")
    passed(name, f"the output has shape {expected}")


def check_causal_batch_output(out: object) -> None:
    """Check the output of CausalAttention(512, 768, ...) on a (20, 100, 512) batch."""
    check_output_shape(
        "check_causal_batch_output", out, (20, 100, 768),
        "one row per token of each sequence, each d_out = 768 wide.",
        {(20, 100, 512): "d_out sets the width of the output: build the layer with d_out=768."},
        "CausalAttention(512, 768, context_length=100, dropout=0.0)(x).")


__all__ = ["check_causal_attention", "check_causal_batch_output"]
