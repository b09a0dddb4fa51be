"""Chapter 01's self-checks accept right answers and name each wrong one."""

import pytest
import torch

import course_utils as cu
from course_utils.checks import CheckFailure
from tests.ch01 import buggy as b
from tests.ch01 import correct
from tests.check_helpers import assert_names_bug, assert_passes, unusual_right_answers


@pytest.mark.parametrize(
    ("check", "right"),
    [
        (cu.checks.check_attention_scores, b.scores_right),
        (cu.checks.check_softmax, b.softmax_right),
        (cu.checks.check_attention_weights, b.weights_right),
        (cu.checks.check_context_vectors, b.context_right),
    ],
)
def test_right_answers_pass_with_one_line(check, right, capsys):
    assert_passes(check, right, capsys=capsys)


@pytest.mark.parametrize(
    ("check", "buggy", "expect"),
    [
        (cu.checks.check_attention_scores, b.scores_no_sum, {"bug": "scores_no_sum"}),
        (
            cu.checks.check_attention_scores,
            b.scores_sum_over_tokens,
            {"bug": "scores_sum_over_tokens"},
        ),
        (cu.checks.check_attention_scores, b.scores_cosine, {"bug": "scores_cosine"}),
        (cu.checks.check_attention_scores, b.scores_all_pairs, {"bug": "scores_all_pairs"}),
        (
            cu.checks.check_attention_scores,
            b.scores_stub,
            {"diagnosis": "NotImplementedError: the exercise stub"},
        ),
        (cu.checks.check_softmax, b.softmax_naive, {"bug": "softmax_overflow"}),
        (cu.checks.check_softmax, b.softmax_divide_by_sum, {"bug": "divide_by_sum"}),
        (cu.checks.check_softmax, b.softmax_no_normalise, {"bug": "softmax_no_normalise"}),
        (cu.checks.check_softmax, b.softmax_dim0, {"bug": "softmax_over_columns"}),
        (cu.checks.check_softmax, b.softmax_library, {"bug": "softmax_library_call"}),
        (cu.checks.check_softmax, b.softmax_functional, {"bug": "softmax_library_call"}),
        (cu.checks.check_softmax, b.softmax_1d_only, {"bug": "softmax_1d_only"}),
        (cu.checks.check_softmax, b.softmax_no_keepdim, {"bug": "softmax_no_keepdim"}),
        (cu.checks.check_softmax, b.softmax_global_max, {"bug": "softmax_global_max"}),
        (cu.checks.check_attention_scores, b.scores_list, {"bug": "not_a_tensor"}),
        (cu.checks.check_attention_weights, b.weights_numpy, {"bug": "not_a_tensor"}),
        (cu.checks.check_softmax, b.softmax_global_amax, {"bug": "softmax_global_max"}),
        (cu.checks.check_attention_weights, b.weights_raw, {"bug": "raw_scores_as_weights"}),
        (cu.checks.check_attention_weights, b.weights_columns, {"bug": "softmax_over_columns"}),
        (cu.checks.check_attention_weights, b.weights_divide_by_sum, {"bug": "divide_by_sum"}),
        (
            cu.checks.check_context_vectors,
            b.context_transposed,
            {"bug": "context_transposed_weights"},
        ),
        (cu.checks.check_context_vectors, b.context_raw_scores, {"bug": "context_from_raw_scores"}),
        (cu.checks.check_context_vectors, b.context_columns, {"bug": "context_transposed_weights"}),
        (
            cu.checks.check_context_vectors,
            b.context_returns_weights,
            {"diagnosis": "expected shape"},
        ),
    ],
)
def test_each_bug_is_named(check, buggy, expect):
    assert_names_bug(check, buggy, **expect)


def test_checks_reject_non_functions():
    with pytest.raises(CheckFailure, match="expects a function"):
        cu.checks.check_softmax(torch.zeros(3))


def test_checks_leave_the_global_rng_alone():
    torch.manual_seed(0)
    expected = torch.rand(2)
    torch.manual_seed(0)
    cu.checks.check_context_vectors(b.context_right)
    assert torch.equal(torch.rand(2), expected)


# --------------------------------------------------------------------------- right but unusual answers
@pytest.mark.parametrize(("check", "args"), unusual_right_answers(correct))
def test_unusual_right_answers_pass(check, args, capsys):
    assert_passes(getattr(cu.checks, check), *args, capsys=capsys)
