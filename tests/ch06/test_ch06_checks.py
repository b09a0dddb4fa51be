"""Chapter 06's self-checks accept right answers and name each wrong one."""

import pytest
import torch

import course_utils as cu
from course_utils.checks import CheckFailure
from tests.ch06 import buggy as b
from tests.ch06 import correct
from tests.check_helpers import assert_names_bug, assert_passes, unusual_right_answers


# --------------------------------------------------------------------------- dataset
def test_right_dataset_passes(capsys):
    assert_passes(cu.checks.check_sliding_window_dataset, b.DatasetRight, capsys=capsys)


@pytest.mark.parametrize(
    ("buggy", "expect"),
    [
        (b.DatasetNoShift, {"bug": "targets_not_shifted"}),
        (b.DatasetSwapped, {"bug": "targets_swapped"}),
        (b.DatasetShiftedBack, {"bug": "targets_shifted_back"}),
        (b.DatasetExtraWindow, {"bug": "window_extra"}),
        (b.DatasetMissingWindow, {"bug": "window_missing"}),
        (b.DatasetFloorCount, {"bug": "window_floor_count"}),
        (b.DatasetStrideIgnored, {"bug": "window_stride_ignored"}),
        (b.DatasetStepByContext, {"bug": "window_step_by_context"}),
        (b.DatasetStrideIgnoredInGetitem, {"bug": "window_stride_ignored_getitem"}),
        (
            b.DatasetLengthIsTokens,
            {"bug": "window_count_wrong", "diagnosis": "expected 16 windows, your dataset has 20"},
        ),
        (b.DatasetLists, {"bug": "dataset_item_not_tensor", "diagnosis": "not a tensor"}),
        (b.DatasetStub, {"diagnosis": "NotImplementedError: the exercise stub"}),
    ],
)
def test_each_dataset_bug_is_named(buggy, expect):
    assert_names_bug(cu.checks.check_sliding_window_dataset, buggy, **expect)


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
    ("buggy", "expect"),
    [
        (b.EmbeddingPosSizedByVocab, {"bug": "pos_sized_by_vocab"}),
        (b.EmbeddingPosNotSliced, {"bug": "pos_not_sliced"}),
        (b.EmbeddingPosAllRows, {"bug": "pos_not_sliced"}),
        (b.EmbeddingNoPositions, {"bug": "positions_missing"}),
        (b.EmbeddingMultiplied, {"bug": "embeddings_multiplied"}),
        (b.EmbeddingConcatenated, {"bug": "embeddings_concatenated"}),
        (b.EmbeddingLastPositions, {"bug": "last_positions"}),
        (b.EmbeddingPositionsFromOne, {"bug": "positions_shifted"}),
        (b.EmbeddingNoLengthCheck, {"bug": "length_error_not_value_error"}),
        (b.EmbeddingClampsLongInput, {"bug": "no_length_check"}),
        (b.EmbeddingPositionsOnCPU, {"bug": "cpu_tensor_in_forward"}),
        (b.EmbeddingAssertsLength, {"bug": "length_error_not_value_error"}),
        (
            b.EmbeddingPositionsData,
            {"bug": "gradient_blocked", "diagnosis": "pos.weight gets no gradient"},
        ),
    ],
)
def test_each_embedding_bug_is_named(buggy, expect):
    assert_names_bug(cu.checks.check_input_embedding, buggy, **expect)


def test_vocab_sized_positions_report_the_shapes():
    with pytest.raises(CheckFailure, match=r"\(50, 4\), \(50, 4\)"):
        cu.checks.check_input_embedding(b.EmbeddingPosSizedByVocab)


# --------------------------------------------------------------------------- nn.MultiheadAttention
@pytest.mark.parametrize("copy", [b.copy_right, b.copy_right_by_assignment])
@pytest.mark.parametrize("mask", [b.mask_right, b.mask_right_float])
def test_right_copy_and_mask_pass(copy, mask, capsys):
    assert_passes(cu.checks.check_copy_into_torch_mha, copy, mask, capsys=capsys)


@pytest.mark.parametrize(
    ("copy", "mask", "expect"),
    [
        (b.copy_kqv_order, b.mask_right, {"bug": "in_proj_order"}),
        (b.copy_vkq_order, b.mask_right, {"bug": "in_proj_order"}),
        (b.copy_transposed, b.mask_right, {"bug": "copy_transposed"}),
        (b.copy_no_out_proj, b.mask_right, {"bug": "out_proj_not_copied"}),
        (b.copy_out_proj_transposed, b.mask_right, {"bug": "out_proj_transposed"}),
        (b.copy_no_out_bias, b.mask_right, {"bug": "out_bias_not_copied"}),
        (b.copy_no_in_bias, b.mask_right, {"bug": "in_bias_not_copied"}),
        (b.copy_without_no_grad, b.mask_right, {"bug": "copy_without_no_grad"}),
        (b.copy_wrong_direction, b.mask_right, {"bug": "copy_wrong_direction"}),
        (b.copy_stub, b.mask_right, {"diagnosis": "NotImplementedError: the exercise stub"}),
        (b.copy_right, b.mask_inverted, {"bug": "torch_mask_inverted"}),
        (b.copy_right, b.mask_diagonal_masked, {"bug": "mask_diagonal"}),
        (b.copy_right, b.mask_float_ones, {"bug": "float_mask_ones"}),
        (b.copy_right, b.mask_list, {"bug": "not_a_tensor"}),
        (b.copy_right, b.mask_numpy, {"bug": "not_a_tensor"}),
        (b.copy_out_proj_by_assignment, b.mask_right, {"bug": "shared_parameter"}),
        (b.copy_bias_data_shared, b.mask_right, {"bug": "shared_parameter"}),
    ],
)
def test_each_copy_or_mask_bug_is_named(copy, mask, expect):
    assert_names_bug(cu.checks.check_copy_into_torch_mha, copy, mask, **expect)


def test_copy_check_rejects_non_functions():
    with pytest.raises(CheckFailure, match="expects your mask function"):
        cu.checks.check_copy_into_torch_mha(b.copy_right, torch.zeros(3, 3))


@pytest.mark.parametrize(
    ("check", "args"),
    [
        (cu.checks.check_sliding_window_dataset, (b.DatasetRight,)),
        (cu.checks.check_input_embedding, (b.EmbeddingRight,)),
        (cu.checks.check_copy_into_torch_mha, (b.copy_right, b.mask_right)),
        (cu.checks.check_tiny_gpt, (b.TinyGPTRight,)),
    ],
)
def test_checks_leave_the_global_random_state_alone(check, args):
    torch.manual_seed(5)
    expected_next = torch.rand(4)
    torch.manual_seed(5)
    check(*args)
    assert torch.equal(torch.rand(4), expected_next)


# --------------------------------------------------------------------------- TinyGPT
def test_right_tiny_gpt_passes(capsys):
    assert_passes(cu.checks.check_tiny_gpt, b.TinyGPTRight, capsys=capsys)


def test_the_chapters_own_tiny_gpt_is_refused():
    """The course's export earns nothing here (tests/test_honesty.py covers the ways to hand it in)."""
    assert_names_bug(cu.checks.check_tiny_gpt, cu.chapters.TinyGPT, bug="course_code_handed_in")


@pytest.mark.parametrize(
    ("buggy", "expect"),
    [
        (b.TinyGPTHeadBias, {"bug": "tiny_gpt_head_bias"}),
        (b.TinyGPTSoftmax, {"bug": "logits_softmaxed"}),
        (b.TinyGPTTokenTableOnly, {"bug": "positions_missing"}),
        (b.TinyGPTPositionsUnused, {"bug": "positions_missing"}),
        (b.TinyGPTNotCausal, {"bug": "tiny_gpt_not_causal"}),
        (b.TinyGPTAttentionSkipped, {"bug": "tiny_gpt_attention_skipped"}),
        (b.TinyGPTPositionsOnCPU, {"bug": "cpu_tensor_in_forward"}),
        (b.TinyGPTNoLengthCheck, {"bug": "length_error_not_value_error"}),
        (b.TinyGPTNumHeadsIgnored, {"bug": "tiny_gpt_num_heads_ignored"}),
        (b.TinyGPTDropoutIgnored, {"bug": "tiny_gpt_dropout_ignored"}),
        (b.TinyGPTDropoutAlwaysOn, {"bug": "dropout_in_eval"}),
        (b.TinyGPTReseeds, {"bug": "dropout_same_mask"}),
        (
            b.TinyGPTNoAttn,
            {"bug": "tiny_gpt_submodule_missing", "diagnosis": "no nn.Module called 'attn'"},
        ),
        (b.TinyGPTStub, {"diagnosis": "NotImplementedError: the exercise stub"}),
    ],
)
def test_each_tiny_gpt_bug_is_named(buggy, expect):
    assert_names_bug(cu.checks.check_tiny_gpt, buggy, **expect)


# --------------------------------------------------------------------------- right but unusual answers
@pytest.mark.parametrize(("check", "args"), unusual_right_answers(correct))
def test_unusual_right_answers_pass(check, args, capsys):
    assert_passes(getattr(cu.checks, check), *args, capsys=capsys)
