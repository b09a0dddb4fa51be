"""Chapter 07's self-check accepts the right blockwise attention and names each wrong one."""

import pytest

import course_utils as cu
from course_utils.checks import CheckFailure
from tests.buggy import ch07 as b
from tests.check_helpers import assert_names_bug, assert_passes


def test_right_answer_passes(capsys):
    assert_passes(cu.checks.check_blockwise_attention, b.right, capsys=capsys)


@pytest.mark.parametrize(
    ("buggy", "diagnosis"),
    [
        (b.no_mask, "the causal mask is missing"),
        (b.diagonal_masked, "also hides the diagonal"),
        (b.block_local_positions, "positions *within* the block"),
        (b.no_scale, "not scaled"),
        (b.scale_by_d, "divided the scores by d instead of by sqrt(d)"),
        (b.no_rescale, "not rescaled"),
        (b.no_normalise, "without dividing by the running sum"),
        (b.full_matrix, "builds an (16, 16) tensor"),
        (b.output_width_of_q, "expected shape (16, 5)"),
        (b.returns_list, "not a tensor"),
        (b.stub, "NotImplementedError: the exercise stub"),
    ],
)
def test_each_bug_is_named(buggy, diagnosis):
    assert_names_bug(cu.checks.check_blockwise_attention, buggy, diagnosis=diagnosis)


def test_check_wants_a_function():
    with pytest.raises(CheckFailure, match="expects a function"):
        cu.checks.check_blockwise_attention(42)
