"""Self-checks for chapter 04: the ``CausalAttention`` class and the big-batch shape exercise.

The engine builds the student's class under a fixed seed, reads W_query, W_key and W_value,
recomputes one causal head from those weights (:func:`head_attention`), names a mistake by the
variant that reproduces the output, and runs the behaviour probes.
"""

from __future__ import annotations

from course_utils.checks import _engine as E

# Shortcuts graded answers may call (tools/grading/honesty.py): none: attention by hand
ALLOWED_SHORTCUTS: tuple[str, ...] = ()

CAUSAL_CASES = (
    E.Case(2, 6, 3, 2, 6, seed=1231),  # the book's shape: n == context_length
    E.Case(1, 4, 5, 3, 7, qkv_bias=True, seed=1232),  # batch 1, n < context_length, biases
    E.Case(3, 5, 4, 4, 8, seed=1233),  # batch 3, n < context_length
)
CAUSAL_DROPOUT_CASE = E.Case(2, 5, 4, 3, 6, seed=1234)
CAUSAL_VARIANTS = E.variants("axis", "scale", "mask", "projections")


def check_causal_attention(cls: type) -> None:
    """Check a ``CausalAttention(d_in, d_out, context_length, dropout, qkv_bias=False)`` class.

    Builds it on several shapes (batch 1 and 3, n below and equal to context_length, with
    and without biases), compares with attention recomputed from its own W_query, W_key and
    W_value, checks the mask buffer, dropout in train and eval mode, the length limit, and
    probes another device, a longer second call and a training step.
    """
    __tracebackhide__ = True
    c = E.Check("check_causal_attention")
    c.ensure_class(cls, "a class such as CausalAttention")
    layer = E.Layer(
        E.causal_layers, E.head_attention, CAUSAL_VARIANTS, E.chapters().CausalAttention
    )
    E.check_layer(c, cls, layer, CAUSAL_CASES, CAUSAL_DROPOUT_CASE)
    c.passed(
        f"matches causal attention on {len(CAUSAL_CASES)} shapes (batch 1 to 3, "
        "n <= context_length, with and without bias); mask buffer, dropout and length limit right",
    )


def check_causal_batch_output(out: object) -> None:
    """Check the output of CausalAttention(512, 768, ...) on a (20, 100, 512) batch."""
    E.check_output_shape(
        E.Check("check_causal_batch_output"),
        out,
        (20, 100, 768),
        "one row per token of each sequence, each d_out = 768 wide.",
        {(20, 100, 512): "d_out sets the width of the output: build the layer with d_out=768."},
        "CausalAttention(512, 768, context_length=100, dropout=0.0)(x).",
    )


__all__ = ["check_causal_attention", "check_causal_batch_output"]
