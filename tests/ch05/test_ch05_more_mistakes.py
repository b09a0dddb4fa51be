"""Chapter 05's checks name the mistakes of tests/ch05/buggy_more.py by their catalogue ids, each
called as a student calls it (cu.checks.check_...)."""

import pytest

import course_utils as cu
from tests.ch05 import buggy as b
from tests.ch05 import buggy_more as m
from tests.check_helpers import assert_names_bug


@pytest.mark.parametrize(
    ("check", "cls", "bug"),
    [
        (cu.checks.check_multihead_wrapper, b.NoHeadsAttribute, "wrapper_heads_missing"),
        (cu.checks.check_multihead_wrapper, m.HeadsInGenerator, "wrapper_heads_not_module_list"),
        (cu.checks.check_multihead_wrapper, m.TwoHeadsAlways, "wrapper_head_count"),
        (cu.checks.check_multihead_attention, m.DropoutSkipsFirstHead, "dropout_some_heads"),
    ],
    ids=lambda v: v if isinstance(v, str) else getattr(v, "__name__", "check"),
)
def test_each_class_bug_is_named_by_id(check, cls, bug):
    assert_names_bug(check, cls, bug=bug)


@pytest.mark.parametrize(
    ("arguments", "bug"),
    [
        (m.prediction_one_head_width, "shape_prediction_wrong"),
        (m.prediction_arguments_swapped, "shape_prediction_bad_arguments"),
        (m.prediction_with_true_division, "shape_prediction_not_tuple"),
        (m.prediction_of_a_tuple_output, "shape_prediction_no_tensor"),
    ],
    ids=lambda v: v if isinstance(v, str) else v.__name__,
)
def test_each_shape_prediction_mistake_is_named_by_id(arguments, bug):
    assert_names_bug(cu.checks.check_shape_prediction, *arguments(), bug=bug)


def test_a_wrong_prediction_says_which_axis():
    failure = assert_names_bug(
        cu.checks.check_shape_prediction,
        *m.prediction_one_head_width(),
        bug="shape_prediction_wrong",
    )
    assert "the last axis is the layer's output width, 12, not 4" in str(failure)


def test_the_peeled_loop_is_right_without_dropout():
    """The fixture's only mistake is its dropout: in eval mode it computes the right layer."""
    import torch

    torch.manual_seed(0)
    right = b.Split(6, 6, 5, 0.3, 3).eval()
    peeled = m.DropoutSkipsFirstHead(6, 6, 5, 0.3, 3).eval()
    peeled.load_state_dict(right.state_dict())
    x = torch.randn(2, 5, 6)
    with torch.no_grad():
        assert torch.allclose(peeled(x), right(x), atol=1e-6)
