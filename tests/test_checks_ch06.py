"""Chapter 06's self-checks accept right answers and name each wrong one."""

import pytest
import torch

import course_utils as cu
from course_utils.checks import CheckFailure
from tests.buggy import ch06 as b
from tests.check_helpers import assert_names_bug, assert_passes


# --------------------------------------------------------------------------- dataset
def test_right_dataset_passes(capsys):
    assert_passes(cu.checks.check_sliding_window_dataset, b.DatasetRight, capsys=capsys)


@pytest.mark.parametrize(
    ("buggy", "diagnosis"),
    [
        (b.DatasetNoShift, "targets are not shifted"),
        (b.DatasetSwapped, "shift goes the wrong way"),
        (b.DatasetShiftedBack, "shifted the wrong way"),
        (b.DatasetExtraWindow, "one window too many"),
        (b.DatasetMissingWindow, "one window too few"),
        (b.DatasetFloorCount, "rounds down"),
        (b.DatasetStrideIgnored, "ignores the stride"),
        (b.DatasetStepByContext, "stepped by context_length instead of by stride"),
        (b.DatasetStrideIgnoredInGetitem, "__getitem__ does not"),
        (b.DatasetLists, "not a tensor"),
        (b.DatasetStub, "NotImplementedError: the exercise stub"),
    ],
)
def test_each_dataset_bug_is_named(buggy, diagnosis):
    assert_names_bug(cu.checks.check_sliding_window_dataset, buggy, diagnosis=diagnosis)


def test_dataset_counts_are_reported_with_numbers():
    with pytest.raises(CheckFailure, match=r"expected 16 windows, your dataset has 17"):
        cu.checks.check_sliding_window_dataset(b.DatasetExtraWindow)


def test_dataset_check_wants_the_class():
    with pytest.raises(CheckFailure, match="expects a Dataset class"):
        cu.checks.check_sliding_window_dataset(b.DatasetRight([1, 2, 3, 4, 5], 2, 1))


# --------------------------------------------------------------------------- embeddings
def test_right_embedding_passes(capsys):
    assert_passes(cu.checks.check_input_embedding, b.EmbeddingRight, capsys=capsys)


@pytest.mark.parametrize(
    ("buggy", "diagnosis"),
    [
        (b.EmbeddingPosSizedByVocab, "positional table has vocab_size rows"),
        (b.EmbeddingPosNotSliced, "not cut to the input length"),
        (b.EmbeddingPosAllRows, "not cut to the input length"),
        (b.EmbeddingNoPositions, "positional embeddings are never added"),
        (b.EmbeddingMultiplied, "multiplied"),
        (b.EmbeddingConcatenated, "concatenated"),
        (b.EmbeddingLastPositions, "*last* n rows"),
        (b.EmbeddingNoLengthCheck, "only with PyTorch's own error"),
        (b.EmbeddingClampsLongInput, "went through without an error"),
    ],
)
def test_each_embedding_bug_is_named(buggy, diagnosis):
    assert_names_bug(cu.checks.check_input_embedding, buggy, diagnosis=diagnosis)


def test_vocab_sized_positions_report_the_shapes():
    with pytest.raises(CheckFailure, match=r"\(50, 4\), \(50, 4\)"):
        cu.checks.check_input_embedding(b.EmbeddingPosSizedByVocab)


# --------------------------------------------------------------------------- nn.MultiheadAttention
@pytest.mark.parametrize("copy", [b.copy_right, b.copy_right_by_assignment])
@pytest.mark.parametrize("mask", [b.mask_right, b.mask_right_float, cu.models.causal_mask])
def test_right_copy_and_mask_pass(copy, mask, capsys):
    assert_passes(cu.checks.check_copy_into_torch_mha, copy, mask, capsys=capsys)


@pytest.mark.parametrize(
    ("copy", "mask", "diagnosis"),
    [
        (b.copy_kqv_order, b.mask_right, "holds (key, query, value)"),
        (b.copy_vkq_order, b.mask_right, "holds (value, key, query)"),
        (b.copy_transposed, b.mask_right, "copied transposed matrices"),
        (b.copy_no_out_proj, b.mask_right, "output projection was not copied"),
        (b.copy_out_proj_transposed, b.mask_right, "output projection's weight transposed"),
        (b.copy_no_out_bias, b.mask_right, "out_proj.bias was not copied"),
        (b.copy_no_in_bias, b.mask_right, "in_proj_bias was left as it was"),
        (b.copy_without_no_grad, b.mask_right, "torch.no_grad()"),
        (b.copy_wrong_direction, b.mask_right, "copied from nn.MultiheadAttention into ours"),
        (b.copy_stub, b.mask_right, "NotImplementedError: the exercise stub"),
        (b.copy_right, b.mask_inverted, "opposite convention"),
        (b.copy_right, b.mask_diagonal_masked, "also hides the diagonal"),
        (b.copy_right, b.mask_float_ones, "*adds* a float mask"),
        (b.copy_right, b.mask_list, "must be a torch.Tensor"),
    ],
)
def test_each_copy_or_mask_bug_is_named(copy, mask, diagnosis):
    assert_names_bug(cu.checks.check_copy_into_torch_mha, copy, mask, diagnosis=diagnosis)


def test_copy_check_rejects_non_functions():
    with pytest.raises(CheckFailure, match="expects your mask function"):
        cu.checks.check_copy_into_torch_mha(b.copy_right, torch.zeros(3, 3))


@pytest.mark.parametrize(
    ("check", "args"),
    [
        (cu.checks.check_sliding_window_dataset, (b.DatasetRight,)),
        (cu.checks.check_input_embedding, (b.EmbeddingRight,)),
        (cu.checks.check_copy_into_torch_mha, (b.copy_right, b.mask_right)),
    ],
)
def test_checks_leave_the_global_random_state_alone(check, args):
    torch.manual_seed(5)
    expected_next = torch.rand(4)
    torch.manual_seed(5)
    check(*args)
    assert torch.equal(torch.rand(4), expected_next)
