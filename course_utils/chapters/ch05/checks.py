"""Self-checks for chapter 05: ``MultiHeadAttentionWrapper``, ``MultiHeadAttention`` and the
shape exercises. The engine builds the class, reads its weights by the book's names, recomputes
the layer with the one attention pipeline and runs the behaviour probes."""

from __future__ import annotations

import inspect
import re

import torch
from torch import nn

from course_utils.checks import _engine as E

# Shortcuts graded answers may call (tools/grading/honesty.py): none: heads by hand
ALLOWED_SHORTCUTS: tuple[str, ...] = ()

# --------------------------------------------------------------------------- the wrapper
WRAPPER_CASES = (
    E.Case(2, 6, 3, 2, 6, num_heads=2, seed=1251),  # n == context_length
    E.Case(1, 4, 5, 3, 7, num_heads=3, qkv_bias=True, seed=1252),  # batch 1, n < context_length
    E.Case(3, 5, 4, 4, 8, num_heads=2, seed=1253),  # batch 3
)
WRAPPER_DROPOUT_CASE = E.Case(2, 5, 4, 3, 6, num_heads=2, seed=1254)
WRAPPER_VARIANTS = [
    *E.variants("axis", "scale", "mask", "projections"),
    ("heads_wrong_order", E.Recipe(concat="reversed")),
    ("concat_wrong_axis", E.Recipe(concat="dim0")),
    ("concat_wrong_axis", E.Recipe(concat="dim1")),
    ("stacked_heads", E.Recipe(concat="stack")),
]


def _wrapper_reference(
    heads: list[dict[str, nn.Linear]],
    x: torch.Tensor,
    r: E.Recipe = E.RIGHT,
    drop=E.NO_DROP,
    trace: E.Trace | None = None,
) -> torch.Tensor:
    """Every head on its own, outputs concatenated: (b, n, num_heads * d_out)."""
    outs = [E.head_attention(layers, x, r, drop, trace, unit) for unit, layers in enumerate(heads)]
    if r.concat == "stack":
        return torch.stack(outs)
    if r.concat == "reversed":
        outs = outs[::-1]
    return torch.cat(outs, dim={"last": -1, "reversed": -1, "dim0": 0, "dim1": 1}[r.concat])


def _wrapper_heads(
    c: E.Check, module: nn.Module, owner: str, case: E.Case
) -> list[dict[str, nn.Linear]]:
    heads = getattr(module, "heads", None)
    if heads is None:
        raise c.bug("wrapper_heads_missing", n=case.num_heads, owner=owner)
    if isinstance(heads, (list, tuple)):
        raise c.bug("heads_python_list", f"In {owner}:")
    if not isinstance(heads, (nn.ModuleList, nn.Sequential)):
        raise c.bug("wrapper_heads_not_module_list", owner=owner, kind=type(heads).__name__)
    if len(heads) != case.num_heads:
        raise c.bug("wrapper_head_count", owner=owner, got=len(heads), n=case.num_heads)
    if len({id(head) for head in heads}) < len(heads):
        raise c.bug("heads_shared", f"In {owner}:")
    layers = []
    for i, head in enumerate(heads):
        query = getattr(head, "W_query", None)
        if (
            isinstance(query, nn.Linear)
            and query.out_features == case.d_out // case.num_heads != case.d_out
        ):
            raise c.bug(
                "wrapper_d_out_split",
                f"In {owner}, heads[{i}].W_query has {query.out_features} outputs:",
            )
        layers.append(E.causal_layers(c, head, f"{owner}.heads[{i}]", case))
    if any(E.same(a["W_query"].weight, b["W_query"].weight) for a, b in zip(layers, layers[1:])):
        raise c.bug("heads_identical", f"In {owner}:")
    return layers


def check_multihead_wrapper(cls: type) -> None:
    """Check a ``MultiHeadAttentionWrapper(d_in, d_out, context_length, dropout, num_heads,
    qkv_bias=False)`` class: an nn.ModuleList ``heads`` of causal heads, each d_out wide,
    outputs concatenated on the last axis."""
    __tracebackhide__ = True
    c = E.Check("check_multihead_wrapper")
    c.ensure_class(cls, "a class such as MultiHeadAttentionWrapper")
    reference = E.chapters().MultiHeadAttentionWrapper
    layer = E.Layer(_wrapper_heads, _wrapper_reference, WRAPPER_VARIANTS, reference)
    E.check_layer(c, cls, layer, WRAPPER_CASES, WRAPPER_DROPOUT_CASE)
    c.passed(
        f"matches {len(WRAPPER_CASES)} multi-head configurations (2 and 3 heads, batch 1 to 3, "
        "with and without bias); heads registered, dropout right",
    )


# --------------------------------------------------------------------------- the split version
MHA_CASES = (
    E.Case(2, 6, 3, 6, 6, num_heads=2, seed=1261),  # n == context_length
    E.Case(1, 4, 5, 6, 7, num_heads=3, qkv_bias=True, seed=1262),  # batch 1, n < context_length
    E.Case(3, 5, 4, 8, 8, num_heads=2, seed=1263),  # batch 3
)
MHA_DROPOUT_CASE = E.Case(2, 5, 4, 6, 6, num_heads=2, seed=1264)
MHA_VARIANTS = E.variants(
    "split", "axis", "heads_axis", "scale", "head_scale", "mask", "projections"
)


def _mha_weights(c: E.Check, module: nn.Module, owner: str, case: E.Case) -> E.MHAWeights:
    qkv = E.qkv_layers(c, module, owner, case)
    out_proj = E.find_linear(c, module, "out_proj", owner, case.d_out, case.d_out, None)
    if out_proj.bias is None:
        raise c.bug("out_proj_bias_follows_qkv_bias", f"In {owner}:")
    head_dim = getattr(module, "head_dim", None)
    if head_dim == case.d_in // case.num_heads != case.d_out // case.num_heads:
        raise c.bug("head_dim_from_d_in", f"In {owner}, head_dim = {head_dim}:")
    E.check_mask_buffer(c, module, owner, case.context_length)
    return E.MHAWeights(qkv, out_proj, case.num_heads)


_HEAD_DIM_FROM_D_IN = re.compile(r"d_in\s*//\s*(self\.)?num_heads")


def check_multihead_attention(cls: type) -> None:
    """Check a ``MultiHeadAttention(d_in, d_out, context_length, dropout, num_heads,
    qkv_bias=False)`` class: one W_query/W_key/W_value each, split into heads with view and
    transpose, causal mask, dropout on the weights, heads merged, then out_proj."""
    __tracebackhide__ = True
    c = E.Check("check_multihead_attention")
    c.ensure_class(cls, "a class such as MultiHeadAttention")
    try:
        layer = E.Layer(
            _mha_weights, E.mha_reference, MHA_VARIANTS, E.chapters().MultiHeadAttention
        )
        E.check_layer(c, cls, layer, MHA_CASES, MHA_DROPOUT_CASE)
    except AssertionError as failure:
        try:
            source = inspect.getsource(cls.__init__)
        except (OSError, TypeError):
            source = ""
        if getattr(failure, "bug", None) is None and _HEAD_DIM_FROM_D_IN.search(source):
            raise c.bug("head_dim_from_d_in", str(failure).split("\n\n")[1]) from None
        raise
    what = f"{cls.__name__}(d_in=4, d_out=5, context_length=6, dropout=0.0, num_heads=2)"
    with E.isolated():  # any clear refusal of a d_out that num_heads does not divide is right
        E.expect_value_error(
            c,
            lambda: cls(4, 5, 6, 0.0, 2),
            f"{what} was built without an error.",
            what,
            refusal=Exception,
            bug="no_divisibility_check",
        )
    c.passed(
        f"matches split-head attention on {len(MHA_CASES)} configurations (2 and 3 heads, "
        "batch 1 to 3, with and without bias); mask, dropout, out_proj and the d_out check right",
    )


# --------------------------------------------------------------------------- the shape exercises
def check_wrapper_batch_output(out: object) -> None:
    """Check the wrapper's output on a (20, 100, 512) batch with d_out=768 and 3 heads."""
    E.check_output_shape(
        E.Check("check_wrapper_batch_output"),
        out,
        (20, 100, 2304),
        "each of the 3 heads returns d_out=768 features per token, side by side.",
        {
            (20, 100, 768): "in the wrapper d_out is the width of each head; the heads are "
            "concatenated, so the output has num_heads * d_out features.",
            (20, 100, 256): "do not split d_out between the heads in the wrapper: each head is a "
            "full CausalAttention(512, 768, ...).",
        },
        "MultiHeadAttentionWrapper(512, 768, context_length=100, dropout=0.0, num_heads=3)(x).",
    )


def check_split_batch_output(out: object) -> None:
    """Check MultiHeadAttention's output on a (40, 80, 768) batch with d_out=1536 and 3 heads."""
    E.check_output_shape(
        E.Check("check_split_batch_output"),
        out,
        (40, 80, 1536),
        "in the split class d_out is the total width: the 3 heads share it (512 each) and are "
        "merged back to d_out features.",
        {
            (
                40,
                80,
                4608,
            ): "in MultiHeadAttention d_out is the width of all heads together, not of each head.",
            (40, 80, 768): "the output has d_out features, not d_in: build it with d_out=1536.",
        },
        "MultiHeadAttention(768, 1536, context_length=80, dropout=0.0, num_heads=3)(x).",
    )


def check_shape_prediction(predicted: object, module: object, x: object) -> None:
    """Check a predicted output shape: ``predicted`` (a tuple of ints) against ``module(x).shape``."""
    __tracebackhide__ = True
    c = E.Check("check_shape_prediction")
    if not callable(module) or not isinstance(x, torch.Tensor):
        raise c.bug(
            "shape_prediction_bad_arguments", module=type(module).__name__, x=type(x).__name__
        )
    if isinstance(predicted, torch.Size):
        predicted = tuple(predicted)
    if not isinstance(predicted, (tuple, list)) or not all(
        isinstance(d, int) and not isinstance(d, bool) for d in predicted
    ):
        raise c.bug("shape_prediction_not_tuple", shown=E.shown(predicted))
    with E.isolated():
        out = c.call(module, x, what=f"the layer on x of shape {tuple(x.shape)}")
    got = tuple(out.shape) if isinstance(out, torch.Tensor) else None
    if got is None:
        raise c.bug("shape_prediction_no_tensor", kind=type(out).__name__)
    if tuple(predicted) != got:
        why = ""
        if len(predicted) != len(got):
            why = f"Your prediction has {len(predicted)} axes, the output has {len(got)}."
        elif tuple(predicted[:-1]) == got[:-1]:
            why = (
                f"The batch and token axes are right; the last axis is the layer's output width, "
                f"{got[-1]}, not {predicted[-1]}."
            )
        raise c.bug("shape_prediction_wrong", predicted=tuple(predicted), got=got, why=why)
    c.passed(f"the output has shape {got}, as you predicted")


__all__ = [
    "check_multihead_attention",
    "check_multihead_wrapper",
    "check_shape_prediction",
    "check_split_batch_output",
    "check_wrapper_batch_output",
]
