"""Chapter 01's self-checks accept right answers and name each wrong one."""

import pytest
import torch

import course_utils as cu
from course_utils.checks import CheckFailure
from tests.buggy import ch01 as b
from tests.check_helpers import assert_names_bug, assert_passes


@pytest.mark.parametrize(
    ("check", "right"),
    [
        (cu.checks.check_attention_scores, b.scores_right),
        (cu.checks.check_softmax, b.softmax_right),
        (cu.checks.check_softmax, lambda x: torch.softmax(x, dim=-1)),
        (cu.checks.check_attention_weights, b.weights_right),
        (cu.checks.check_context_vectors, b.context_right),
    ],
)
def test_right_answers_pass_with_one_line(check, right, capsys):
    assert_passes(check, right, capsys=capsys)


@pytest.mark.parametrize(
    ("check", "buggy", "diagnosis"),
    [
        (cu.checks.check_attention_scores, b.scores_no_sum, "without adding them up"),
        (cu.checks.check_attention_scores, b.scores_sum_over_tokens, "summed the products over the tokens"),
        (cu.checks.check_attention_scores, b.scores_cosine, "cosine similarities"),
        (cu.checks.check_attention_scores, b.scores_all_pairs, "every token with every other token"),
        (cu.checks.check_attention_scores, b.scores_stub, "NotImplementedError: the exercise stub"),
        (cu.checks.check_softmax, b.softmax_naive, "overflows"),
        (cu.checks.check_softmax, b.softmax_divide_by_sum, "divided the scores by their sum"),
        (cu.checks.check_softmax, b.softmax_no_normalise, "without dividing by the sum"),
        (cu.checks.check_softmax, b.softmax_dim0, "wrong axis"),
        (cu.checks.check_softmax, b.softmax_no_keepdim, "keepdim=True"),
        (cu.checks.check_attention_weights, b.weights_raw, "raw scores"),
        (cu.checks.check_attention_weights, b.weights_columns, "down each column"),
        (cu.checks.check_attention_weights, b.weights_divide_by_sum, "dividing by its sum"),
        (cu.checks.check_context_vectors, b.context_transposed, "column i of the weights instead of row i"),
        (cu.checks.check_context_vectors, b.context_raw_scores, "raw scores"),
        (cu.checks.check_context_vectors, b.context_columns, "normalised down the columns"),
        (cu.checks.check_context_vectors, b.context_returns_weights, "expected shape"),
    ],
)
def test_each_bug_is_named(check, buggy, diagnosis):
    assert_names_bug(check, buggy, diagnosis=diagnosis)


def test_checks_reject_non_functions():
    with pytest.raises(CheckFailure, match="expects a function"):
        cu.checks.check_softmax(torch.zeros(3))


def test_checks_leave_the_global_rng_alone():
    torch.manual_seed(0)
    expected = torch.rand(2)
    torch.manual_seed(0)
    cu.checks.check_context_vectors(b.context_right)
    assert torch.equal(torch.rand(2), expected)
