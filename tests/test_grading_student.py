"""tools/grading/student.py's autograd bridge, directly: the judge's copy of a student's output joins
the judge's graph through the leaves ``graph_leaves`` finds, so a leaf it misses gets no gradient
and the student is told that their layer cuts the graph.

Under torch 2.3 (the lowest the README supports) the old version, which remembered only the ids of
the nodes it had visited, found 1 leaf of the chains below instead of 7 and 1 of the attention's 4:
autograd gave a node a new Python object once its last one was freed, and a freed one's id came
back for another node."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.judged_plugin import _remote, _session
from tools.grading.honesty import guarded_checks
from tools.grading.student import graph_leaves


def _same_set(found: list, expected: list) -> bool:
    return len(found) == len(expected) and all(any(f is e for f in found) for e in expected)


def test_every_leaf_of_a_long_chain_is_found_once():
    x = torch.randn(3, 2, requires_grad=True)
    weights = [torch.randn(2, 2, requires_grad=True) for _ in range(6)]
    h = x
    for w in weights:
        h = (h @ w).tanh()  # (3, 2)
    assert _same_set(graph_leaves(h), [x, *weights])


def test_a_leaf_reached_twice_is_listed_once():
    x = torch.randn(4, requires_grad=True)
    w = torch.randn(4, requires_grad=True)
    y = (x * w) + (x * w).sin() + w.exp()  # x and w each reached by several paths
    found = graph_leaves(y)
    assert _same_set(found, [x, w])


def test_one_token_attention_keeps_its_query_and_key_weights():
    """One token's attention weight is 1 whatever its score, so W_query's gradient is zero; it must
    still be a leaf of the output (a zero gradient, not none)."""
    x = torch.randn(1, 2, requires_grad=True)
    w_query, w_key, w_value = (torch.nn.Parameter(torch.rand(2, 6)) for _ in range(3))
    out = F.scaled_dot_product_attention(x @ w_query, x @ w_key, x @ w_value)  # (1, 6)
    assert _same_set(graph_leaves(out), [x, w_query, w_key, w_value])


def test_a_tensor_without_a_graph_has_no_leaves():
    assert graph_leaves(torch.randn(3)) == []
    assert graph_leaves(torch.randn(3, requires_grad=True).detach() * 2) == []


def test_a_custom_functions_saved_input_is_no_leaf():
    """A custom autograd.Function's node is its ctx: a tensor a student keeps as ctx.variable (the
    name autograd's leaf nodes use) is no leaf, and a leaf it keeps is listed once."""
    from tests.ch02.correct import _MatMul

    x = torch.randn(3, 2, requires_grad=True)
    w = torch.randn(2, 4, requires_grad=True)
    assert _same_set(graph_leaves(_MatMul.apply(x, w)), [x, w])
    h = x.exp()  # (3, 2), not a leaf
    assert _same_set(graph_leaves(_MatMul.apply(h, w)), [x, w])


def _judged(check: str, answer):
    """``check`` run as the grader's judge runs it, on ``answer`` living in a student process."""
    session = _session()
    try:
        return getattr(guarded_checks(session), check)(_remote(session, answer))
    finally:
        session.end_check()


def test_the_judge_gives_a_custom_functions_input_its_gradient_once():
    """Through the grader: the right answer above passes (its x got twice its gradient before)."""
    from tests.ch02.correct import V1OwnMatMul

    _judged("check_self_attention_v1", V1OwnMatMul)


def test_each_new_class_is_described_to_the_judge():
    """A class is described once per session; a class made after another was freed must not pass
    for it (its id may be the freed one's), or the judge would build it from the wrong description."""
    import gc

    from tools.grading.student import StudentCodec

    codec = StudentCodec(None)
    for i in range(6):
        kind = type(f"Answer{i}", (), {"__len__": lambda self: 0} if i % 2 else {})
        info = codec.encode_foreign(kind())[3]  # ("h", handle, class id, description)
        assert info is not None and info[0][0][1] == f"Answer{i}", f"class {i} was not described"
        codec.handles.clear()  # the judge let go of the object: nothing of it is left here
        codec.handle_of.clear()
        del kind
        gc.collect()


def test_the_judge_names_an_in_place_dropout_as_the_student_process_does():
    """nn.Dropout(inplace=True) after the softmax: its output is its input. The judge got the
    output as the input's object, with the input's values from before the call, so the check
    inferred the wrong mask and named a dropout-mask bug instead of the in-place one."""
    from course_utils.checks import CheckFailure
    from tests.ch04.buggy_probes import InplaceDropoutAfterSoftmax

    with pytest.raises(CheckFailure) as info:
        _judged("check_causal_attention", InplaceDropoutAfterSoftmax)
    assert info.value.bug == "inplace_breaks_autograd", str(info.value)
