"""Self-checks for chapter 05: ``MultiHeadAttentionWrapper`` and ``MultiHeadAttention``.

Both reuse chapter 04's machinery: the student's class is built under a fixed seed, its
weights are read from the book's attribute names, the layer is recomputed functionally from
them, and known mistakes are recognised by recomputing with one step changed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ._core import ensure_class, fail, fail_with_bug, passed, preserved_rng
from .ch04 import (
    BUGS,
    NO_DROP,
    RIGHT,
    Case,
    Drop,
    Recipe,
    Trace,
    apply_linear,
    attention_weights,
    causal_layers,
    causal_reference,
    check_mask_buffer,
    check_output_shape,
    check_too_long,
    compare_cases,
    dropout_phase,
    find_linear,
    isolated,
    known_variants,
    projections,
    qkv_layers,
    stub_failure,
)

# --------------------------------------------------------------------------- the wrapper
WRAPPER_CASES = (
    Case(2, 6, 3, 2, 6, num_heads=2, seed=1251),                 # n == context_length
    Case(1, 4, 5, 3, 7, num_heads=3, qkv_bias=True, seed=1252),  # batch 1, n < context_length
    Case(3, 5, 4, 4, 8, num_heads=2, seed=1253),                 # batch 3
)
WRAPPER_DROPOUT_CASE = Case(2, 5, 4, 3, 6, num_heads=2, seed=1254)
WRAPPER_VARIANTS = known_variants() + [
    ("concat_wrong_axis", Recipe(concat="dim0")),
    ("concat_wrong_axis", Recipe(concat="dim1")),
    ("stacked_heads", Recipe(concat="stack")),
]


def _wrapper_heads(check: str, module: nn.Module, owner: str, case: Case) -> list[dict[str, nn.Linear]]:
    heads = getattr(module, "heads", None)
    if heads is None:
        raise fail(check, f"{check} looks for the attribute 'heads' (an nn.ModuleList of "
                   f"{case.num_heads} causal attention heads), but {owner} has no attribute 'heads'.",
                   "self.heads = nn.ModuleList([CausalAttention(...) for _ in range(num_heads)]).")
    if isinstance(heads, (list, tuple)):
        raise fail_with_bug(check, BUGS["heads_python_list"], f"In {owner}:")
    if not isinstance(heads, (nn.ModuleList, nn.Sequential)):
        raise fail(check, f"{owner}.heads is a {type(heads).__name__}; {check} expects an "
                   "nn.ModuleList of heads.", "self.heads = nn.ModuleList([...]).")
    if len(heads) != case.num_heads:
        raise fail(check, f"{owner} has {len(heads)} heads; expected num_heads={case.num_heads}.")
    if len({id(head) for head in heads}) < len(heads):
        raise fail_with_bug(check, BUGS["heads_shared"], f"In {owner}:")
    layers = []
    for i, head in enumerate(heads):
        query = getattr(head, "W_query", None)
        if (isinstance(query, nn.Linear) and query.out_features != case.d_out
                and query.out_features == case.d_out // case.num_heads):
            raise fail_with_bug(check, BUGS["wrapper_d_out_split"],
                                f"In {owner}, heads[{i}].W_query has {query.out_features} outputs:")
        layers.append(causal_layers(check, head, f"{owner}.heads[{i}]", case))
    return layers


def wrapper_reference(heads: list[dict[str, nn.Linear]], x: torch.Tensor, r: Recipe = RIGHT,
                      drop: Drop = NO_DROP, trace: Trace | None = None) -> torch.Tensor:
    """Every head on its own, outputs concatenated: (b, n, num_heads * d_out)."""
    outs = [causal_reference(layers, x, r, drop, trace, unit) for unit, layers in enumerate(heads)]
    if r.concat == "stack":
        return torch.stack(outs)
    return torch.cat(outs, dim={"last": -1, "dim0": 0, "dim1": 1}[r.concat])


def check_multihead_wrapper(cls: type) -> None:
    """Check a ``MultiHeadAttentionWrapper(d_in, d_out, context_length, dropout, num_heads,
    qkv_bias=False)`` class: an nn.ModuleList ``heads`` of causal heads, each d_out wide,
    outputs concatenated on the last axis."""
    __tracebackhide__ = True
    name = "check_multihead_wrapper"
    ensure_class(name, cls, "a class such as MultiHeadAttentionWrapper")
    read = lambda module, owner, case: _wrapper_heads(name, module, owner, case)
    with isolated():
        module = compare_cases(name, cls, WRAPPER_CASES, read, wrapper_reference, WRAPPER_VARIANTS)
        check_too_long(name, module, WRAPPER_CASES[-1], cls)
        dropout_phase(name, cls, WRAPPER_DROPOUT_CASE, read, wrapper_reference)
    passed(name, f"matches {len(WRAPPER_CASES)} multi-head configurations (2 and 3 heads, batch 1 to 3, "
           "with and without bias); heads registered, dropout right")


# --------------------------------------------------------------------------- the split version
MHA_CASES = (
    Case(2, 6, 3, 6, 6, num_heads=2, seed=1261),                 # n == context_length
    Case(1, 4, 5, 6, 7, num_heads=3, qkv_bias=True, seed=1262),  # batch 1, n < context_length
    Case(3, 5, 4, 8, 8, num_heads=2, seed=1263),                 # batch 3
)
MHA_DROPOUT_CASE = Case(2, 5, 4, 6, 6, num_heads=2, seed=1264)
MHA_VARIANTS = [
    ("view_without_transpose", Recipe(split="view", merge="view")),
    ("view_without_transpose", Recipe(split="view")),
    ("merge_without_transpose", Recipe(merge="view")),
    ("out_proj_unused", Recipe(out_proj=False)),
    *known_variants(multihead=True),
]


@dataclass
class MHAWeights:
    """What the split-head reference needs from the student's layer."""

    qkv: dict[str, nn.Linear]
    out_proj: nn.Linear
    num_heads: int


def _mha_weights(check: str, module: nn.Module, owner: str, case: Case) -> MHAWeights:
    qkv = qkv_layers(check, module, owner, case, case.d_out)
    out_proj = find_linear(check, module, "out_proj", owner, case.d_out, case.d_out, None)
    check_mask_buffer(check, module, owner, case.context_length)
    return MHAWeights(qkv, out_proj, case.num_heads)


def mha_reference(weights: MHAWeights, x: torch.Tensor, r: Recipe = RIGHT, drop: Drop = NO_DROP,
                  trace: Trace | None = None) -> torch.Tensor:
    """Multi-head causal attention from one Q/K/V projection each: (b, n, d_out)."""
    b, n, d_in = x.shape
    heads = weights.num_heads
    q, k, v = projections(weights.qkv, x, r, trace)               # each (b, n, d_out)
    d_out = q.shape[-1]
    head_dim = d_out // heads

    def split(t: torch.Tensor) -> torch.Tensor:                    # (b, n, d_out) -> (b, h, n, hd)
        if r.split == "view":
            return t.reshape(b, heads, n, head_dim)
        return t.reshape(b, n, heads, head_dim).transpose(1, 2)

    q, k, v = split(q), split(k), split(v)
    attn = attention_weights(q, k, r, d_out=d_out, d_in=d_in, trace=trace)  # (b, h, n, n)
    context = drop(attn, 0) @ v                                    # (b, h, n, hd)
    if r.merge == "view":
        merged = context.reshape(b, n, d_out)
    else:
        merged = context.transpose(1, 2).reshape(b, n, d_out)      # (b, n, d_out)
    if trace is not None:
        trace.context += [context, merged]
    return apply_linear(weights.out_proj, merged) if r.out_proj else merged


def _check_divisibility(check: str, cls: type) -> None:
    __tracebackhide__ = True
    what = f"{cls.__name__}(d_in=4, d_out=5, context_length=6, dropout=0.0, num_heads=2)"
    with preserved_rng():
        try:
            cls(4, 5, 6, 0.0, 2)
        except NotImplementedError:
            raise stub_failure(check, what) from None
        except Exception:  # noqa: BLE001 - any clear refusal is right
            return
    raise fail_with_bug(check, BUGS["no_divisibility_check"], f"{what} was built without an error.")


def check_multihead_attention(cls: type) -> None:
    """Check a ``MultiHeadAttention(d_in, d_out, context_length, dropout, num_heads,
    qkv_bias=False)`` class: one W_query/W_key/W_value each, split into heads with view and
    transpose, causal mask, dropout on the weights, heads merged, then out_proj."""
    __tracebackhide__ = True
    name = "check_multihead_attention"
    ensure_class(name, cls, "a class such as MultiHeadAttention")
    read = lambda module, owner, case: _mha_weights(name, module, owner, case)
    with isolated():
        module = compare_cases(name, cls, MHA_CASES, read, mha_reference, MHA_VARIANTS)
        check_too_long(name, module, MHA_CASES[-1], cls)
        dropout_phase(name, cls, MHA_DROPOUT_CASE, read, mha_reference)
        _check_divisibility(name, cls)
    passed(name, f"matches split-head attention on {len(MHA_CASES)} configurations (2 and 3 heads, "
           "batch 1 to 3, with and without bias); mask, dropout, out_proj and the d_out check right")


# --------------------------------------------------------------------------- the shape exercises
def check_wrapper_batch_output(out: object) -> None:
    """Check the wrapper's output on a (20, 100, 512) batch with d_out=768 and 3 heads."""
    check_output_shape(
        "check_wrapper_batch_output", out, (20, 100, 2304),
        "each of the 3 heads returns d_out=768 features per token, side by side.",
        {(20, 100, 768): "in the wrapper d_out is the width of each head; the heads are "
                         "concatenated, so the output has num_heads * d_out features.",
         (20, 100, 256): "do not split d_out between the heads in the wrapper: each head is a "
                         "full CausalAttention(512, 768, ...)."},
        "MultiHeadAttentionWrapper(512, 768, context_length=100, dropout=0.0, num_heads=3)(x).")


def check_split_batch_output(out: object) -> None:
    """Check MultiHeadAttention's output on a (40, 80, 768) batch with d_out=1536 and 3 heads."""
    check_output_shape(
        "check_split_batch_output", out, (40, 80, 1536),
        "in the split class d_out is the total width: the 3 heads share it (512 each) and are "
        "merged back to d_out features.",
        {(40, 80, 4608): "in MultiHeadAttention d_out is the width of all heads together, not of "
                         "each head.",
         (40, 80, 768): "the output has d_out features, not d_in: build it with d_out=1536."},
        "MultiHeadAttention(768, 1536, context_length=80, dropout=0.0, num_heads=3)(x).")


__all__ = ["check_multihead_attention", "check_multihead_wrapper", "check_split_batch_output",
           "check_wrapper_batch_output"]
