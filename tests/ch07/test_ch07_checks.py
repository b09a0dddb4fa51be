"""Chapter 07's self-check accepts the right blockwise attention and names each wrong one."""

import pytest

import course_utils as cu
from course_utils.checks import CheckFailure
from tests.ch07 import buggy as b
from tests.ch07 import correct
from tests.check_helpers import assert_names_bug, assert_passes, unusual_right_answers


def test_right_answer_passes(capsys):
    assert_passes(cu.checks.check_blockwise_attention, b.right, capsys=capsys)


@pytest.mark.parametrize(
    ("buggy", "expect"),
    [
        (b.no_mask, {"bug": "mask_missing"}),
        (b.diagonal_masked, {"bug": "mask_diagonal"}),
        (b.block_local_positions, {"bug": "block_local_positions"}),
        (b.no_scale, {"bug": "no_scaling"}),
        (b.scale_by_d, {"bug": "scale_d_k"}),
        (b.no_rescale, {"bug": "online_no_rescale"}),
        (b.max_from_zero, {"bug": "online_max_from_zero"}),
        (b.no_normalise, {"bug": "online_no_final_division"}),
        (b.full_matrix, {"bug": "blockwise_full_scores", "diagnosis": "builds an (16, 16) tensor"}),
        (b.one_sdpa_call, {"bug": "blockwise_uses_sdpa"}),
        (b.full_row_softmax, {"bug": "blockwise_full_row_softmax"}),
        (b.running_sums_on_cpu, {"bug": "cpu_tensor_in_forward"}),
        (b.output_width_of_q, {"diagnosis": "expected shape (16, 5)"}),
        (b.returns_list, {"bug": "not_a_tensor"}),
        (b.returns_numpy, {"bug": "not_a_tensor"}),
        (b.sdpa_with_explicit_mask, {"bug": "blockwise_uses_sdpa"}),
        (b.stub, {"diagnosis": "NotImplementedError: the exercise stub"}),
    ],
)
def test_each_bug_is_named(buggy, expect):
    assert_names_bug(cu.checks.check_blockwise_attention, buggy, **expect)


def test_check_wants_a_function():
    with pytest.raises(CheckFailure, match="expects a function"):
        cu.checks.check_blockwise_attention(42)


# --------------------------------------------------------------------------- right but unusual answers
@pytest.mark.parametrize(("check", "args"), unusual_right_answers(correct))
def test_unusual_right_answers_pass(check, args, capsys):
    assert_passes(getattr(cu.checks, check), *args, capsys=capsys)
