"""Chapter 10: the block, decoder, sinusoid and packed-mask checks accept right answers (one ✓
line) and name each bug of tests/ch10/buggy.py by its id (the real ones: test_ch10_real.py); the
chapter's blocks equal PyTorch's encoder and decoder layers, forward and backward."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import course_utils as cu
from tests.ch10 import buggy, correct
from tests.check_helpers import (
    THREADS_LEFT,
    assert_names_bug,
    assert_passes,
    cpu_seconds_on_one_thread,
    unusual_right_answers,
)

check_block = cu.checks.check_transformer_block
check_sinusoid = cu.checks.check_sinusoidal_positions
check_decoder = cu.checks.check_decoder_block
check_packed = cu.checks.check_packed_causal_mask


# ----------------------------------------------------------------------------- the checks
@pytest.mark.parametrize("cls", [buggy.Block], ids=lambda c: c.__name__)
def test_block_accepts_right_classes(cls, capsys):
    assert_passes(check_block, cls, capsys=capsys)


@pytest.mark.parametrize(
    ("cls", "bug"), buggy.BLOCK_BUGS, ids=[c.__name__ for c, _ in buggy.BLOCK_BUGS]
)
def test_block_names_the_bug(cls, bug):
    assert_names_bug(check_block, cls, bug=bug)


def test_block_names_which_placement_was_asked_for():
    failure = assert_names_bug(check_block, buggy.AlwaysPreNorm, bug="block_norm_placement")
    assert "computes the pre-norm block where the post-norm one was asked for" in str(failure)


@pytest.mark.parametrize("cls", [buggy.Decoder], ids=lambda c: c.__name__)
def test_decoder_accepts_right_classes(cls, capsys):
    assert_passes(check_decoder, cls, capsys=capsys)


@pytest.mark.parametrize(
    ("cls", "bug"), buggy.DECODER_BUGS, ids=[c.__name__ for c, _ in buggy.DECODER_BUGS]
)
def test_decoder_names_the_bug(cls, bug):
    assert_names_bug(check_decoder, cls, bug=bug)


def test_packed_refuses_the_chapters_own_function():
    assert_names_bug(check_packed, cu.chapters.packed_causal_mask, bug="course_code_handed_in")


@pytest.mark.parametrize(
    ("fn", "bug"), buggy.PACKED_BUGS, ids=[f.__name__ for f, _ in buggy.PACKED_BUGS]
)
def test_packed_names_the_bug(fn, bug):
    assert_names_bug(check_packed, fn, bug=bug)


def test_sinusoid_refuses_the_chapters_own_function():
    assert_names_bug(check_sinusoid, cu.chapters.sinusoidal_positions, bug="course_code_handed_in")


@pytest.mark.parametrize(
    ("fn", "bug"), buggy.SINUSOID_BUGS, ids=[f.__name__ for f, _ in buggy.SINUSOID_BUGS]
)
def test_sinusoid_names_the_bug(fn, bug):
    assert_names_bug(check_sinusoid, fn, bug=bug)


@pytest.mark.parametrize(("check", "args"), unusual_right_answers(correct))
def test_unusual_right_answers_pass(check, args, capsys):
    assert_passes(getattr(cu.checks, check), *args, capsys=capsys)


@pytest.mark.parametrize(
    ("check", "answer"),
    [
        (check_block, buggy.Block),
        (check_decoder, buggy.Decoder),
        (check_sinusoid, correct.sinusoid_with_exp_log),
    ],
    ids=["block", "decoder", "sinusoid"],
)
def test_keeps_random_state_threads_and_is_fast(check, answer, capsys):
    torch.manual_seed(42)
    seconds, threads = cpu_seconds_on_one_thread(check, answer)
    assert seconds < 1.0 and threads == THREADS_LEFT  # the caller's thread count put back
    after_check = torch.rand(3)
    torch.manual_seed(42)
    assert torch.equal(after_check, torch.rand(3))


@pytest.mark.parametrize("seed", [0, 1234])
def test_training_verdicts_do_not_depend_on_the_global_seed(seed, capsys):
    """The reference reuses the masks the student's forward drew, whatever the seed before it."""
    for answer in (correct.BlockBothWirings, correct.BlockMaskFromOnes):
        torch.manual_seed(seed)
        assert_passes(check_block, answer, capsys=capsys)
    torch.manual_seed(seed)
    assert_names_bug(check_block, buggy.DropoutAfterResidual, bug="block_dropout_after_residual")


def test_the_accepted_wrong_answer_of_issue_38_is_named_where_it_is():
    failure = assert_names_bug(
        check_block, buggy.DropoutAfterResidual, bug="block_dropout_after_residual"
    )
    assert "With norm_first=True, in training with dropout=0.3" in str(failure)


def test_bad_input_gets_a_clear_error():
    failure = assert_names_bug(check_block, buggy.Block(8, 2, 16, 6), bug="instance_not_class")
    assert "Block" in str(failure)
    assert_names_bug(check_packed, "packed_causal_mask", bug="wrong_argument")


# ----------------------------------------------------------------------------- equal to PyTorch
def _grads(out, weights):
    loss = (out * torch.linspace(-1, 1, out.numel()).view(out.shape)).sum()
    return list(torch.autograd.grad(loss, weights))


@pytest.mark.parametrize("norm_first", [True, False], ids=["pre-norm", "post-norm"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "encoder"])
def test_block_equals_transformer_encoder_layer(norm_first, causal):
    torch.manual_seed(10)
    ours = cu.chapters.TransformerBlock(24, 4, 48, 9, norm_first=norm_first, causal=causal)
    theirs = nn.TransformerEncoderLayer(
        24, 4, 48, dropout=0.0, activation="gelu", batch_first=True, norm_first=norm_first
    )
    cu.chapters.copy_into_encoder_layer(ours, theirs)
    x = torch.randn(2, 7, 24)
    mask = torch.ones(7, 7, dtype=torch.bool).triu(1) if causal else None
    x_ours, x_theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    out_ours = ours(x_ours)
    out_theirs = theirs(x_theirs, src_mask=mask, is_causal=causal)
    torch.testing.assert_close(out_ours, out_theirs, atol=1e-5, rtol=1e-4)
    g_ours = _grads(
        out_ours,
        [
            x_ours,
            ours.attn.W_value.weight,
            ours.attn.out_proj.weight,
            ours.norm2.weight,
            ours.ff[2].weight,
            ours.ff[0].bias,
        ],
    )
    g_theirs = _grads(
        out_theirs,
        [
            x_theirs,
            theirs.self_attn.in_proj_weight,
            theirs.self_attn.out_proj.weight,
            theirs.norm2.weight,
            theirs.linear2.weight,
            theirs.linear1.bias,
        ],
    )
    g_theirs[1] = g_theirs[1][48:]  # W_value's rows of in_proj_weight
    for a, b in zip(g_ours, g_theirs):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_gpt2_small_block_has_published_size():
    block = cu.chapters.TransformerBlock(768, 12, 3072, 1024)
    per_block = sum(p.numel() for p in block.parameters())
    assert per_block == 7_087_872
    assert 50_257 * 768 + 1_024 * 768 + 12 * per_block + 2 * 768 == 124_439_808


def test_attention_causal_equals_chapter_05():
    torch.manual_seed(11)
    ours = cu.chapters.Attention(12, 12, 6, 0.0, num_heads=3)
    theirs = cu.chapters.MultiHeadAttention(12, 12, 6, 0.0, num_heads=3)
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(2, 6, 12)
    torch.testing.assert_close(ours(x), theirs(x))
    with pytest.raises(ValueError, match="context_length=6"):
        ours(torch.randn(1, 7, 12))


@pytest.mark.parametrize("norm_first", [True, False], ids=["pre-norm", "post-norm"])
def test_decoder_equals_transformer_decoder_layer(norm_first):
    torch.manual_seed(12)
    ours = cu.chapters.DecoderBlock(24, 4, 48, 9, norm_first=norm_first)
    theirs = nn.TransformerDecoderLayer(
        24, 4, 48, dropout=0.0, activation="gelu", batch_first=True, norm_first=norm_first
    )
    cu.chapters.copy_into_decoder_layer(ours, theirs)
    x, memory = torch.randn(2, 6, 24), torch.randn(2, 9, 24)
    real = cu.chapters.padding_mask([9, 5], 9)
    causal = torch.ones(6, 6, dtype=torch.bool).triu(1)
    inputs_ours = [x.clone().requires_grad_(), memory.clone().requires_grad_()]
    inputs_theirs = [x.clone().requires_grad_(), memory.clone().requires_grad_()]
    out_ours = ours(*inputs_ours, real)
    out_theirs = theirs(
        *inputs_theirs, tgt_mask=causal, memory_key_padding_mask=~real, tgt_is_causal=True
    )
    torch.testing.assert_close(out_ours, out_theirs, atol=1e-5, rtol=1e-4)
    g_ours = _grads(out_ours, [*inputs_ours, ours.cross_attn.W_key.weight, ours.norm3.bias])
    g_theirs = _grads(
        out_theirs, [*inputs_theirs, theirs.multihead_attn.in_proj_weight, theirs.norm3.bias]
    )
    g_theirs[2] = g_theirs[2][24:48]  # W_key's rows of in_proj_weight
    for a, b in zip(g_ours, g_theirs):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_cross_attention_equals_multihead_attention_with_key_padding():
    torch.manual_seed(13)
    ours = cu.chapters.Attention(16, 16, 8, 0.0, num_heads=2, qkv_bias=True, causal=False)
    theirs = nn.MultiheadAttention(16, 2, batch_first=True)
    cu.chapters.copy_into_torch_mha(ours, theirs)
    x, memory = torch.randn(3, 4, 16, requires_grad=True), torch.randn(3, 8, 16, requires_grad=True)
    real = cu.chapters.padding_mask([8, 3, 6], 8)
    out_ours = ours(x, memory, real)
    out_theirs, _ = theirs(x, memory, memory, key_padding_mask=~real, need_weights=False)
    torch.testing.assert_close(out_ours, out_theirs, atol=1e-5, rtol=1e-4)
    g_ours = _grads(out_ours, [x, memory, ours.W_value.weight])
    g_theirs = _grads(out_theirs, [x, memory, theirs.in_proj_weight])
    g_theirs[2] = g_theirs[2][32:]
    for a, b in zip(g_ours, g_theirs):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
