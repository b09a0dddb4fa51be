"""Chapter 02's self-checks accept right answers and name each wrong one."""

import warnings

import pytest
import torch

import course_utils as cu
from course_utils.checks import CheckFailure
from tests.ch02 import buggy as b
from tests.ch02 import correct
from tests.check_helpers import assert_names_bug, assert_passes, unusual_right_answers


@pytest.mark.parametrize(
    ("check", "right"),
    [
        (cu.checks.check_self_attention_v1, b.V1Right),
        (cu.checks.check_self_attention_v2, b.V2Right),
        (cu.checks.check_weight_transfer, b.transfer_right),
        (cu.checks.check_weight_transfer, b.transfer_with_data),
        (cu.checks.check_batched_self_attention, b.BatchedRight),
    ],
)
def test_right_answers_pass_with_one_line(check, right, capsys):
    assert_passes(check, right, capsys=capsys)


@pytest.mark.parametrize(
    ("check", "buggy", "expect"),
    [
        (cu.checks.check_self_attention_v1, b.V1NoScaling, {"bug": "no_scaling"}),
        (cu.checks.check_self_attention_v1, b.V1SoftmaxDim0, {"bug": "softmax_over_queries"}),
        (cu.checks.check_self_attention_v1, b.V1ScaleByDin, {"bug": "scale_d_in"}),
        (cu.checks.check_self_attention_v1, b.V1KeysFromQueries, {"bug": "keys_from_query"}),
        (cu.checks.check_self_attention_v1, b.V1ReturnsWeights, {"bug": "returns_weights"}),
        (cu.checks.check_self_attention_v1, b.V1ScaleAfterSoftmax, {"bug": "scale_after_softmax"}),
        (
            cu.checks.check_self_attention_v1,
            b.V1PlainTensors,
            {"bug": "projection_plain_tensor", "diagnosis": "plain tensor, not an nn.Parameter"},
        ),
        (
            cu.checks.check_self_attention_v1,
            b.V1StoredTransposed,
            {"bug": "projection_wrong_shape", "diagnosis": "must have shape (3, 5)"},
        ),
        (
            cu.checks.check_self_attention_v1,
            b.V1RandnInit,
            {"bug": "init_differs", "diagnosis": "not initialised like the chapter's"},
        ),
        (
            cu.checks.check_self_attention_v1,
            b.V1KeyFirst,
            {"bug": "init_order", "diagnosis": "in a different order"},
        ),
        (cu.checks.check_self_attention_v1, b.V1Frozen, {"bug": "parameter_frozen"}),
        (
            cu.checks.check_self_attention_v1,
            b.V1Stub,
            {"diagnosis": "NotImplementedError: the exercise stub"},
        ),
        (
            cu.checks.check_self_attention_v1,
            b.V2Right,
            {"bug": "projection_not_parameter", "diagnosis": "should be an nn.Parameter"},
        ),
        (cu.checks.check_self_attention_v2, b.V2Precedence, {"bug": "scale_precedence"}),
        (cu.checks.check_self_attention_v2, b.V2PrecedenceInline, {"bug": "scale_precedence"}),
        (cu.checks.check_self_attention_v2, b.V2AlwaysBias, {"bug": "qkv_bias_ignored"}),
        (cu.checks.check_self_attention_v2, b.V2ValuesFromKeys, {"bug": "values_from_key"}),
        (cu.checks.check_self_attention_v2, b.V2ScaleNegativeExponent, {"bug": "scale_multiplied"}),
        (cu.checks.check_self_attention_v2, b.V2KeysValuesSwapped, {"bug": "keys_values_swapped"}),
        (cu.checks.check_self_attention_v2, b.V2ScoresTransposed, {"bug": "scores_transposed"}),
        (cu.checks.check_self_attention_v2, b.V2MixesInputs, {"bug": "context_from_inputs"}),
        (cu.checks.check_self_attention_v2, b.V2SwappedLinearArgs, {"bug": "linear_wrong_size"}),
        (cu.checks.check_self_attention_v2, b.V2ValueFirst, {"diagnosis": "in a different order"}),
        (cu.checks.check_self_attention_v2, b.V2OtherNames, {"bug": "attribute_missing"}),
        (cu.checks.check_self_attention_v2, b.V1Right, {"bug": "not_a_linear"}),
        (
            cu.checks.check_weight_transfer,
            b.transfer_no_transpose,
            {"bug": "transfer_no_transpose"},
        ),
        (
            cu.checks.check_weight_transfer,
            b.transfer_no_transpose_data,
            {"bug": "transfer_no_transpose"},
        ),
        (cu.checks.check_weight_transfer, b.transfer_swapped_qk, {"bug": "transfer_swapped"}),
        (cu.checks.check_weight_transfer, b.transfer_forgot_value, {"bug": "transfer_missing"}),
        (cu.checks.check_weight_transfer, b.transfer_reversed, {"bug": "transfer_reversed"}),
        (
            cu.checks.check_weight_transfer,
            b.transfer_no_grad_missing,
            {"bug": "copy_without_no_grad"},
        ),
        (cu.checks.check_weight_transfer, b.transfer_shared, {"bug": "shared_parameter"}),
        (
            cu.checks.check_weight_transfer,
            b.transfer_transposes_source_in_place,
            {"bug": "transfer_changed_source"},
        ),
        (
            cu.checks.check_weight_transfer,
            b.transfer_deletes_the_parameter,
            {"bug": "transfer_replaced_parameter"},
        ),
        (
            cu.checks.check_weight_transfer,
            b.transfer_keeps_a_batch_axis,
            {"bug": "transfer_wrong_shape"},
        ),
        (cu.checks.check_weight_transfer, b.transfer_frozen, {"bug": "transfer_frozen"}),
        (cu.checks.check_batched_self_attention, b.BatchedDotT, {"bug": "dot_t_on_batch"}),
        (
            cu.checks.check_batched_self_attention,
            b.BatchedNameError,
            {"diagnosis": "raised NameError: name 'keyz'"},
        ),
        (
            cu.checks.check_batched_self_attention,
            b.BatchedSoftmaxDim1,
            {"bug": "softmax_over_queries"},
        ),
        (
            cu.checks.check_batched_self_attention,
            b.BatchedSoftmaxDim0,
            {"bug": "softmax_over_batch"},
        ),
        (cu.checks.check_batched_self_attention, b.BatchedNoScaling, {"bug": "no_scaling"}),
        (
            cu.checks.check_batched_self_attention,
            b.BatchedKeysFromQueries,
            {"bug": "keys_from_query"},
        ),
    ],
)
def test_each_bug_is_named(check, buggy, expect):
    assert_names_bug(check, buggy, **expect)


def test_the_precedence_bug_hides_when_d_k_is_4():
    # Why the checks use several sizes: with d_out = 4, `d_k ** 1/2` equals sqrt(d_k).
    x = torch.randn(5, 3)
    torch.manual_seed(0)
    right = b.V2Right(3, 4)
    buggy = b.V2Precedence(3, 4)
    buggy.load_state_dict(right.state_dict())
    with torch.no_grad():
        assert torch.allclose(right(x), buggy(x))


def test_dot_t_is_caught_even_after_torch_warned_once():
    # PyTorch warns about `.T` on 3-d tensors only once per process; the check must not rely on it.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _ = torch.zeros(2, 3, 4).T
    for _ in range(2):
        with pytest.raises(CheckFailure, match="uses `.T` on a 3-d tensor"):
            cu.checks.check_batched_self_attention(b.BatchedDotT)
    assert "T" not in torch.Tensor.__dict__  # the recording property was removed again
    assert torch.zeros(2, 3).T.shape == (3, 2)


def test_checks_reject_instances_and_non_classes():
    with pytest.raises(CheckFailure, match="not an instance"):
        cu.checks.check_self_attention_v1(b.V1Right(3, 2))
    with pytest.raises(CheckFailure, match="expects a function"):
        cu.checks.check_weight_transfer(42)


def test_checks_leave_the_global_rng_alone():
    torch.manual_seed(0)
    expected = torch.rand(2)
    torch.manual_seed(0)
    cu.checks.check_self_attention_v1(b.V1Right)
    cu.checks.check_self_attention_v2(b.V2Right)
    cu.checks.check_weight_transfer(b.transfer_right)
    cu.checks.check_batched_self_attention(b.BatchedRight)
    assert torch.equal(torch.rand(2), expected)


def test_book_values_of_the_references():
    inputs = cu.example_inputs()
    torch.manual_seed(123)
    v1 = b.V1Right(3, 2)
    torch.manual_seed(789)
    v2 = b.V2Right(3, 2)
    with torch.no_grad():
        assert torch.allclose(v1(inputs)[0], torch.tensor([0.2996, 0.8053]), atol=1e-4)
        assert torch.allclose(v2(inputs)[0], torch.tensor([-0.0739, 0.0713]), atol=1e-4)
        b.transfer_right(v1, v2)
        assert torch.allclose(v1(inputs), v2(inputs))


# --------------------------------------------------------------------------- right but unusual answers
@pytest.mark.parametrize(("check", "args"), unusual_right_answers(correct))
def test_unusual_right_answers_pass(check, args, capsys):
    assert_passes(getattr(cu.checks, check), *args, capsys=capsys)
