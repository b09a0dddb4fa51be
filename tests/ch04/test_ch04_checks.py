"""check_causal_attention accepts right classes and names each known bug in wrong ones."""

from __future__ import annotations

import pytest
import torch

import course_utils as cu
from course_utils.checks import CheckFailure
from course_utils.checks.mistakes import MISTAKES as BUGS
from tests.ch04 import buggy, buggy_probes, correct
from tests.check_helpers import assert_passes, cpu_seconds_on_one_thread, unusual_right_answers

check = cu.checks.check_causal_attention


@pytest.mark.parametrize("cls", buggy.CORRECT, ids=lambda c: c.__name__)
def test_accepts_right_classes(cls, capsys):
    check(cls)
    assert capsys.readouterr().out.startswith("✓ check_causal_attention:")


NAMED_BUGS = [
    (buggy.SoftmaxOverQueries, "softmax_over_queries"),
    (buggy.SoftmaxOverBatch, "softmax_over_batch"),
    (buggy.NoScaling, "no_scaling"),
    (buggy.ScaleByDk, "scale_d_k"),
    (buggy.ScaleByDin, "scale_d_in"),
    (buggy.ScaleAfterSoftmax, "scale_after_softmax"),
    (buggy_probes.ScaleNegativeExponent, "scale_multiplied"),
    (buggy_probes.KeyCreatedFirst, "layer_init_order"),
    (buggy_probes.RandomDrawBeforeLayers, "layer_init_differs"),
    (buggy_probes.KeysValuesSwapped, "keys_values_swapped"),
    (buggy.MaskAfterSoftmax, "mask_after_softmax"),
    (buggy.MaskAfterSoftmaxInf, "mask_after_softmax"),
    (buggy.NoMask, "mask_missing"),
    (buggy.MaskWithDiagonal, "mask_diagonal"),
    (buggy.MaskLeaksNextToken, "mask_leak"),
    (buggy.MaskHidesPast, "mask_past"),
    (buggy.MaskFilledWithZero, "mask_zero_fill"),
    (buggy.MaskNotSliced, "mask_not_sliced"),
    (buggy.MaskNotBuffer, "mask_not_buffer"),
    (buggy.MaskAsParameter, "mask_parameter"),
    (buggy.NoLengthLimit, "no_length_check"),
    (buggy.KeysFromQuery, "keys_from_query"),
    (buggy.ValuesFromQuery, "values_from_query"),
    (buggy.ScoresTransposed, "scores_transposed"),
    (buggy.BiasAlwaysOn, "qkv_bias_ignored"),
    (buggy.DropoutIgnored, "dropout_ignored"),
    (buggy.DropoutResultUnused, "dropout_unused"),
    (buggy.DropoutInEval, "dropout_in_eval"),
    (buggy.DropoutFixedP, "dropout_wrong_p"),
    (buggy.DropoutOnContext, "dropout_on_context"),
    (buggy.DropoutBeforeSoftmax, "dropout_before_softmax"),
    (buggy.DropoutOnInputs, "dropout_on_projections"),
    # behaviour probes: right numbers on the first call, wrong elsewhere
    (buggy_probes.MaskOverwritten, "mask_overwritten"),
    (buggy_probes.MaskReregisteredCut, "mask_overwritten"),
    (buggy_probes.MaskBuiltOnCpu, "cpu_tensor_in_forward"),
    (buggy_probes.MaskFromArangeOnCpu, "cpu_tensor_in_forward"),
    (buggy_probes.InplaceDropoutAfterSoftmax, "inplace_breaks_autograd"),
    (buggy_probes.InplaceRenormalise, "inplace_breaks_autograd"),
    (buggy_probes.InputScaledInPlace, "input_modified"),
    (buggy_probes.InputCenteredInPlace, "input_modified"),
    (buggy_probes.DropoutAlwaysTraining, "dropout_in_eval"),
    (buggy_probes.KeysDetached, "gradient_blocked"),
    (buggy_probes.WeightsDetached, "gradient_blocked"),
    (buggy_probes.SdpaWithTorchMhaMask, "sdpa_mask_inverted"),
    (buggy_probes.LeftoverLinear, "parameter_count"),
    (buggy_probes.LengthAssert, "length_error_not_value_error"),
    (buggy_probes.LengthIndexError, "length_error_not_value_error"),
    (buggy_probes.ReseedsInForward, "dropout_same_mask"),
    (buggy_probes.KeysKeptBetweenCalls, "state_between_calls"),
    (buggy_probes.InputDetachedInForward, "gradient_blocked"),
    (buggy_probes.EvalInForward, "mode_changed_in_forward"),
    (buggy_probes.QueryFrozen, "parameter_frozen"),
    (buggy_probes.KeyIsQuery, "projections_shared"),
    (buggy_probes.MaskMovedToCpu, "cpu_tensor_in_forward"),
    (buggy_probes.DropoutRateFixed, "dropout_wrong_p"),
    (buggy_probes.SdpaDropoutRateFixed, "dropout_wrong_p"),
    (buggy_probes.DropoutZeroBecomesDefault, "dropout_hard_coded"),
]


@pytest.mark.parametrize(("cls", "bug"), NAMED_BUGS, ids=[b for _, b in NAMED_BUGS])
def test_names_the_bug(cls, bug):
    with pytest.raises(CheckFailure) as info:
        check(cls)
    message = str(info.value)
    assert info.value.bug == bug, message
    assert BUGS[bug].hint in message


def test_messages_give_the_numbers():
    with pytest.raises(CheckFailure, match=r"built with dropout=0\.3, but its dropout used p=0\.5"):
        check(buggy.DropoutFixedP)
    with pytest.raises(CheckFailure, match=r"forward crashed.*must match the size"):
        check(buggy.MaskNotSliced)


def test_missing_attribute_names_what_is_looked_for():
    with pytest.raises(
        CheckFailure, match=r"looks for the attribute 'W_query' \(nn\.Linear\(3, 2, bias=False\)\)"
    ):
        check(buggy.NamedDifferently)


def test_mask_computed_in_forward_is_asked_for_as_a_buffer():
    with pytest.raises(
        CheckFailure, match=r"looks for the causal mask as a buffer of shape \(6, 6\)"
    ):
        check(buggy.MaskBuiltInForward)


def test_stub_and_wrong_argument():
    with pytest.raises(CheckFailure, match="exercise stub is still in place"):
        check(buggy.Stub)
    with pytest.raises(CheckFailure, match="pass the class itself"):
        check(buggy.Correct(3, 2, 6, 0.0))


def test_keeps_the_notebooks_random_state_and_threads(capsys):
    torch.manual_seed(42)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # not 1 (make test's count), which the check itself sets
    try:
        check(buggy.Correct)
        after_check = torch.rand(3)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
    torch.manual_seed(42)
    assert torch.equal(after_check, torch.rand(3))


def test_is_fast(capsys):
    assert cpu_seconds_on_one_thread(check, buggy.Correct)[0] < 1.0


def test_batch_output_check(capsys):
    cu.checks.check_causal_batch_output(torch.zeros(20, 100, 768))
    assert "(20, 100, 768)" in capsys.readouterr().out
    with pytest.raises(CheckFailure, match="build the layer with d_out=768"):
        cu.checks.check_causal_batch_output(torch.zeros(20, 100, 512))
    with pytest.raises(CheckFailure, match="NaN"):
        cu.checks.check_causal_batch_output(torch.full((20, 100, 768), float("nan")))
    with pytest.raises(CheckFailure, match="expects the output tensor"):
        cu.checks.check_causal_batch_output((20, 100, 768))


# --------------------------------------------------------------------------- right but unusual answers
@pytest.mark.parametrize(("check", "args"), unusual_right_answers(correct))
def test_unusual_right_answers_pass(check, args, capsys):
    assert_passes(getattr(cu.checks, check), *args, capsys=capsys)
