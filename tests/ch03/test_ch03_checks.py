"""Chapter 03's self-checks accept right answers and name each wrong one."""

import pytest
import torch

import course_utils as cu
from course_utils.checks import CheckFailure
from tests.ch03 import buggy as b
from tests.ch03 import correct
from tests.check_helpers import assert_names_bug, assert_passes, unusual_right_answers


@pytest.mark.parametrize(
    ("check", "right"),
    [
        (cu.checks.check_causal_mask, b.mask_right),
        (cu.checks.check_causal_mask, b.mask_right_by_comparison),
        (cu.checks.check_mask_after_softmax, b.after_right),
        (cu.checks.check_mask_before_softmax, b.before_right),
        (cu.checks.check_mask_before_softmax, b.before_additive),
        (cu.checks.check_mask_before_softmax, b.before_large_negative),
    ],
)
def test_right_answers_pass_with_one_line(check, right, capsys):
    assert_passes(check, right, capsys=capsys)


@pytest.mark.parametrize(
    ("check", "buggy", "expect"),
    [
        (cu.checks.check_causal_mask, b.mask_with_diagonal, {"bug": "mask_diagonal"}),
        (cu.checks.check_causal_mask, b.mask_tril, {"bug": "mask_past"}),
        (cu.checks.check_causal_mask, b.mask_keep, {"bug": "keep_mask"}),
        (cu.checks.check_causal_mask, b.mask_float, {"bug": "mask_float"}),
        (cu.checks.check_causal_mask, b.mask_additive, {"bug": "mask_additive"}),
        (cu.checks.check_causal_mask, b.mask_fixed_size, {"bug": "mask_fixed_size"}),
        (
            cu.checks.check_causal_mask,
            b.mask_flat,
            {"bug": "mask_shape_wrong", "diagnosis": "expected shape (5, 5), got (25,)"},
        ),
        (
            cu.checks.check_causal_mask,
            b.mask_stub,
            {"diagnosis": "NotImplementedError: the exercise stub"},
        ),
        (cu.checks.check_mask_after_softmax, b.after_no_renormalise, {"bug": "no_renormalise"}),
        (
            cu.checks.check_mask_after_softmax,
            b.after_renormalise_no_keepdim,
            {"bug": "renormalise_no_keepdim"},
        ),
        (
            cu.checks.check_mask_before_softmax,
            b.before_scale_multiplied,
            {"bug": "scale_multiplied"},
        ),
        (
            cu.checks.check_mask_after_softmax,
            b.after_renormalise_dim1,
            {"bug": "renormalise_wrong_dim"},
        ),
        (cu.checks.check_mask_after_softmax, b.after_diagonal_masked, {"bug": "mask_diagonal"}),
        (cu.checks.check_mask_after_softmax, b.after_transposed, {"bug": "mask_past"}),
        (cu.checks.check_mask_after_softmax, b.after_no_scaling, {"bug": "no_scaling"}),
        (cu.checks.check_mask_after_softmax, b.after_scores_zeroed, {"bug": "mask_zero_fill"}),
        (cu.checks.check_mask_after_softmax, b.after_softmax_dim1, {"bug": "softmax_over_queries"}),
        (
            cu.checks.check_mask_after_softmax,
            b.before_stub,
            {"diagnosis": "NotImplementedError: the exercise stub"},
        ),
        (cu.checks.check_mask_before_softmax, b.before_zero_fill, {"bug": "mask_zero_fill"}),
        (cu.checks.check_mask_before_softmax, b.before_diagonal_masked, {"bug": "mask_diagonal"}),
        (cu.checks.check_mask_before_softmax, b.before_transposed, {"bug": "mask_past"}),
        (cu.checks.check_mask_before_softmax, b.before_scale_by_d_k, {"bug": "scale_d_k"}),
        (
            cu.checks.check_mask_before_softmax,
            b.before_softmax_dim1,
            {"bug": "softmax_over_queries"},
        ),
        (
            cu.checks.check_mask_before_softmax,
            b.before_fill_after_softmax,
            {"bug": "minus_inf_in_weights"},
        ),
        (
            cu.checks.check_mask_before_softmax,
            b.before_zero_after_softmax,
            {"bug": "mask_after_softmax"},
        ),
        (
            cu.checks.check_mask_before_softmax,
            b.after_no_renormalise,
            {"bug": "mask_after_softmax"},
        ),
    ],
)
def test_each_bug_is_named(check, buggy, expect):
    assert_names_bug(check, buggy, **expect)


def test_way_1_and_way_2_answers_agree_with_each_other():
    scores = torch.randn(3, 5, 5, generator=torch.Generator().manual_seed(0)) * 4
    assert torch.allclose(b.after_right(scores, 7), b.before_right(scores, 7), atol=1e-6)


def test_checks_reject_non_functions():
    with pytest.raises(CheckFailure, match="expects a function"):
        cu.checks.check_causal_mask(torch.ones(3, 3))
    with pytest.raises(CheckFailure, match="expects a function"):
        cu.checks.check_mask_before_softmax("softmax")


# --------------------------------------------------------------------------- right but unusual answers
@pytest.mark.parametrize(("check", "args"), unusual_right_answers(correct))
def test_unusual_right_answers_pass(check, args, capsys):
    assert_passes(getattr(cu.checks, check), *args, capsys=capsys)
