"""check_multihead_wrapper and check_multihead_attention accept right classes and name each bug."""

from __future__ import annotations

import pytest
import torch

import course_utils as cu
from course_utils.checks import CheckFailure
from course_utils.checks.mistakes import MISTAKES as BUGS
from tests.ch05 import buggy, buggy_probes, correct
from tests.check_helpers import (
    THREADS_LEFT,
    assert_passes,
    cpu_seconds_on_one_thread,
    unusual_right_answers,
)

check_wrapper = cu.checks.check_multihead_wrapper
check_split = cu.checks.check_multihead_attention


def _rejects(check, cls, bug):
    with pytest.raises(CheckFailure) as info:
        check(cls)
    message = str(info.value)
    assert info.value.bug == bug, message
    assert BUGS[bug].hint in message
    return message


# ----------------------------------------------------------------------------- the wrapper
@pytest.mark.parametrize("cls", buggy.WRAPPER_CORRECT, ids=lambda c: c.__name__)
def test_wrapper_accepts_right_classes(cls, capsys):
    check_wrapper(cls)
    assert capsys.readouterr().out.startswith("✓ check_multihead_wrapper:")


WRAPPER_BUGS = [
    (buggy.HeadsInPythonList, "heads_python_list"),
    (buggy.SharedHead, "heads_shared"),
    (buggy.HeadsDeepCopied, "heads_identical"),
    (buggy.HeadsReseeded, "heads_identical"),
    (buggy.ConcatOverTokens, "concat_wrong_axis"),
    (buggy.ConcatOverBatch, "concat_wrong_axis"),
    (buggy.StackedHeads, "stacked_heads"),
    (buggy.DOutSplitBetweenHeads, "wrapper_d_out_split"),
    (buggy_probes.HeadsListedInReverse, "layer_init_order"),
    *buggy.WRAPPERS_OF_BUGGY_HEADS,
    (buggy_probes.HeadsConcatenatedReversed, "heads_wrong_order"),
    (buggy_probes.HeadsConcatenatedSliceReversed, "heads_wrong_order"),
]


@pytest.mark.parametrize(("cls", "bug"), WRAPPER_BUGS, ids=[c.__name__ for c, _ in WRAPPER_BUGS])
def test_wrapper_names_the_bug(cls, bug):
    _rejects(check_wrapper, cls, bug)


def test_wrapper_missing_heads_attribute():
    with pytest.raises(
        CheckFailure, match=r"looks for the attribute 'heads' \(an nn\.ModuleList of 2"
    ):
        check_wrapper(buggy.NoHeadsAttribute)


def test_wrapper_dropout_is_checked_in_every_head():
    message = _rejects(check_wrapper, buggy.WRAPPERS_OF_BUGGY_HEADS[-1][0], "dropout_ignored")
    assert "num_heads=2" in message


# ----------------------------------------------------------------------------- the split version
@pytest.mark.parametrize("cls", buggy.SPLIT_CORRECT, ids=lambda c: c.__name__)
def test_split_accepts_right_classes(cls, capsys):
    check_split(cls)
    assert capsys.readouterr().out.startswith("✓ check_multihead_attention:")


SPLIT_BUGS = [
    (buggy_probes.OutProjOnValues, "out_proj_on_values"),
    (buggy_probes.OutProjCreatedFirst, "layer_init_differs"),
    (buggy_probes.ScaleMultiplied, "scale_multiplied"),
    (buggy_probes.KeysValuesSwapped, "keys_values_swapped"),
    (buggy.SoftmaxOverHeads, "softmax_over_heads"),
    (buggy.SoftmaxOverQueries, "softmax_over_queries"),
    (buggy.NoScaling, "no_scaling"),
    (buggy.ScaleByHeadDim, "scale_d_k"),
    (buggy.ScaleByDOut, "scale_d_out"),
    (buggy.MaskAfterSoftmax, "mask_after_softmax"),
    (buggy.NoMask, "mask_missing"),
    (buggy.MaskWithDiagonal, "mask_diagonal"),
    (buggy.MaskLeaksNextToken, "mask_leak"),
    (buggy.MaskNotSliced, "mask_not_sliced"),
    (buggy.MaskNotBuffer, "mask_not_buffer"),
    (buggy.DropoutIgnored, "dropout_ignored"),
    (buggy.DropoutInEval, "dropout_in_eval"),
    (buggy.DropoutFixedP, "dropout_wrong_p"),
    (buggy.DropoutOnContext, "dropout_on_context"),
    (buggy.DropoutOnOutput, "dropout_on_context"),
    (buggy.DropoutBeforeSoftmax, "dropout_before_softmax"),
    (buggy.ViewWithoutTranspose, "view_without_transpose"),
    (buggy.ViewWithoutTransposeBothWays, "view_without_transpose"),
    (buggy.MergeWithoutTranspose, "merge_without_transpose"),
    (buggy.MissingContiguous, "missing_contiguous"),
    (buggy.KeysAndValuesFromQuery, "keys_values_from_query"),
    (buggy.KeysFromQuery, "keys_from_query"),
    (buggy.OutProjUnused, "out_proj_unused"),
    (buggy.NoDivisibilityCheck, "no_divisibility_check"),
    (buggy.KeyBiasAlwaysOn, "qkv_bias_ignored"),
    # behaviour probes and the named-at-last mistakes of issue 11
    (buggy_probes.OutProjBiasFollowsQkvBias, "out_proj_bias_follows_qkv_bias"),
    (buggy_probes.OutProjNoBias, "out_proj_bias_follows_qkv_bias"),
    (buggy_probes.HeadsMergedInterleaved, "heads_interleaved"),
    (buggy_probes.HeadsMergedInterleavedTwice, "heads_interleaved"),
    (buggy_probes.HeadDimFromDin, "head_dim_from_d_in"),
    (buggy_probes.ValuesFromKeyLayer, "values_from_key"),
    (buggy_probes.MaskOverwrittenSplit, "mask_overwritten"),
    (buggy_probes.InplaceDropoutSplit, "inplace_breaks_autograd"),
    (buggy_probes.SdpaWithTorchMhaMaskSplit, "sdpa_mask_inverted"),
    (buggy_probes.SplitLengthAssert, "length_error_not_value_error"),
    (buggy_probes.SplitNoLengthCheck, "length_error_not_value_error"),
    (buggy_probes.SplitReseedsInForward, "dropout_same_mask"),
    (buggy_probes.SplitKeysValuesKept, "state_between_calls"),
    (buggy_probes.OutProjBiasFrozen, "parameter_frozen"),
    (buggy_probes.MaskMovedToCpuSplit, "cpu_tensor_in_forward"),
]


@pytest.mark.parametrize(("cls", "bug"), SPLIT_BUGS, ids=[c.__name__ for c, _ in SPLIT_BUGS])
def test_split_names_the_bug(cls, bug):
    _rejects(check_split, cls, bug)


def test_missing_contiguous_quotes_torch():
    with pytest.raises(CheckFailure, match=r"view size is not compatible"):
        check_split(buggy.MissingContiguous)


def test_split_missing_out_proj_names_the_attribute():
    with pytest.raises(
        CheckFailure, match=r"looks for the attribute 'out_proj' \(nn\.Linear\(6, 6\)\)"
    ):
        check_split(buggy.NoOutProj)


@pytest.mark.parametrize("check", [check_wrapper, check_split], ids=["wrapper", "split"])
def test_keeps_random_state_threads_and_is_fast(check, capsys):
    cls = buggy.Wrapper if check is check_wrapper else buggy.Split
    torch.manual_seed(42)
    seconds, threads = cpu_seconds_on_one_thread(check, cls)
    assert seconds < 1.0 and threads == THREADS_LEFT  # the caller's thread count put back
    after_check = torch.rand(3)
    torch.manual_seed(42)
    assert torch.equal(after_check, torch.rand(3))


def test_batch_output_checks(capsys):
    cu.checks.check_wrapper_batch_output(torch.zeros(20, 100, 2304))
    cu.checks.check_split_batch_output(torch.zeros(40, 80, 1536))
    assert capsys.readouterr().out.count("✓") == 2
    with pytest.raises(CheckFailure, match="d_out is the width of each head"):
        cu.checks.check_wrapper_batch_output(torch.zeros(20, 100, 768))
    with pytest.raises(CheckFailure, match="not of each head"):
        cu.checks.check_split_batch_output(torch.zeros(40, 80, 4608))
    with pytest.raises(CheckFailure, match="expects the output tensor"):
        cu.checks.check_split_batch_output(None)


# --------------------------------------------------------------------------- right but unusual answers
@pytest.mark.parametrize(("check", "args"), unusual_right_answers(correct))
def test_unusual_right_answers_pass(check, args, capsys):
    assert_passes(getattr(cu.checks, check), *args, capsys=capsys)
