"""Chapter 02's self-checks accept right answers and name each wrong one."""

import warnings

import pytest
import torch

import course_utils as cu
from course_utils.checks import CheckFailure
from tests.buggy import ch02 as b
from tests.check_helpers import assert_names_bug, assert_passes


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
    ("check", "buggy", "diagnosis"),
    [
        (cu.checks.check_self_attention_v1, b.V1NoScaling, "without* the division by sqrt(d_k)"),
        (cu.checks.check_self_attention_v1, b.V1SoftmaxDim0, "normalises over the *queries*"),
        (cu.checks.check_self_attention_v1, b.V1ScaleByDin, "sqrt(d_in), the width of the *input*"),
        (cu.checks.check_self_attention_v1, b.V1KeysFromQueries, "keys are made with the *query* weights"),
        (cu.checks.check_self_attention_v1, b.V1ReturnsWeights, "returned the attention weights"),
        (cu.checks.check_self_attention_v1, b.V1ScaleAfterSoftmax, "*after* the softmax"),
        (cu.checks.check_self_attention_v1, b.V1PlainTensors, "plain tensor, not an nn.Parameter"),
        (cu.checks.check_self_attention_v1, b.V1StoredTransposed, "must have shape (3, 5)"),
        (cu.checks.check_self_attention_v1, b.V1RandnInit, "torch.randn"),
        (cu.checks.check_self_attention_v1, b.V1KeyFirst, "in a different order"),
        (cu.checks.check_self_attention_v1, b.V1Stub, "NotImplementedError: the exercise stub"),
        (cu.checks.check_self_attention_v1, b.V2Right, "should be an nn.Parameter"),
        (cu.checks.check_self_attention_v2, b.V2Precedence, "`d_k ** 1/2` does not take a square root"),
        (cu.checks.check_self_attention_v2, b.V2PrecedenceInline, "`d_k ** 1/2` does not take a square root"),
        (cu.checks.check_self_attention_v2, b.V2AlwaysBias, "nn.Linear adds one by default"),
        (cu.checks.check_self_attention_v2, b.V2ValuesFromKeys, "values are made with the *key* weights"),
        (cu.checks.check_self_attention_v2, b.V2ScoresTransposed, "score matrix is transposed"),
        (cu.checks.check_self_attention_v2, b.V2MixesInputs, "mixed the raw inputs x"),
        (cu.checks.check_self_attention_v2, b.V2SwappedLinearArgs, "must map 3 features to 5"),
        (cu.checks.check_self_attention_v2, b.V2ValueFirst, "different initial weights"),
        (cu.checks.check_self_attention_v2, b.V2OtherNames, "no attribute 'W_query'"),
        (cu.checks.check_self_attention_v2, b.V1Right, "should be an nn.Linear layer"),
        (cu.checks.check_weight_transfer, b.transfer_no_transpose, "without transposing them"),
        (cu.checks.check_weight_transfer, b.transfer_no_transpose_data, "without transposing them"),
        (cu.checks.check_weight_transfer, b.transfer_swapped_qk, "v1.W_query received v2.W_key"),
        (cu.checks.check_weight_transfer, b.transfer_forgot_value, "v1.W_value still holds its own"),
        (cu.checks.check_weight_transfer, b.transfer_reversed, "copied in the wrong direction"),
        (cu.checks.check_weight_transfer, b.transfer_no_grad_missing, "with torch.no_grad()"),
        (cu.checks.check_weight_transfer, b.transfer_shared, "shares memory with v2's weight"),
        (cu.checks.check_batched_self_attention, b.BatchedDotT, "uses `.T` on a 3-d tensor"),
        (cu.checks.check_batched_self_attention, b.BatchedSoftmaxDim1, "normalises over the *queries*"),
        (cu.checks.check_batched_self_attention, b.BatchedSoftmaxDim0, "over the batch axis"),
        (cu.checks.check_batched_self_attention, b.BatchedNoScaling, "without* the division by sqrt(d_k)"),
        (cu.checks.check_batched_self_attention, b.BatchedKeysFromQueries, "keys are made with the *query*"),
    ],
)
def test_each_bug_is_named(check, buggy, diagnosis):
    assert_names_bug(check, buggy, diagnosis=diagnosis)


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
