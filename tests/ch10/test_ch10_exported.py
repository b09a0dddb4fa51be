"""Every function and class chapter 10 exports (course_utils/chapters/ch10/__init__.py, generated
from the solution's `#| export` cells), tested directly against PyTorch or a hand computation."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import course_utils as cu
from course_utils.chapters import ch10

CH = cu.chapters


def test_every_export_has_a_test_here():
    source = open(__file__, encoding="utf-8").read()
    untested = [name for name in ch10.__all__ if f"CH.{name}" not in source]
    assert untested == []


# ----------------------------------------------------------------------------- attention
def test_attention_causal_equals_chapter_05_and_refuses_long_inputs():
    torch.manual_seed(0)
    ours = CH.Attention(12, 12, 6, 0.0, num_heads=3)
    theirs = CH.MultiHeadAttention(12, 12, 6, 0.0, num_heads=3)
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(2, 5, 12)
    torch.testing.assert_close(ours(x), theirs(x))
    with pytest.raises(ValueError, match="context_length=6"):
        ours(torch.randn(1, 7, 12))


def test_attention_with_memory_equals_nn_multihead_attention():
    torch.manual_seed(1)
    ours = CH.Attention(8, 8, 9, 0.0, num_heads=2, causal=False)
    theirs = nn.MultiheadAttention(8, 2, batch_first=True)
    CH.copy_into_torch_mha(ours, theirs)
    x, memory = torch.randn(2, 4, 8), torch.randn(2, 6, 8)
    real = torch.tensor([[True] * 6, [True] * 3 + [False] * 3])
    expected, _ = theirs(x, memory, memory, key_padding_mask=~real, need_weights=False)
    torch.testing.assert_close(ours(x, memory, real), expected, atol=1e-5, rtol=1e-4)


# ----------------------------------------------------------------------------- norms and GELU
def test_layer_norm_equals_nn_layer_norm_and_keeps_the_dtype():
    torch.manual_seed(2)
    ours, theirs = CH.LayerNorm(10), nn.LayerNorm(10)
    with torch.no_grad():
        ours.weight.normal_()
        ours.bias.normal_()
    theirs.load_state_dict(ours.state_dict())
    x = 3 + 4 * torch.randn(2, 3, 10)
    torch.testing.assert_close(ours(x), theirs(x), atol=1e-5, rtol=1e-4)
    assert ours.double()(x.double()).dtype == torch.float64


def test_rms_norm_is_its_formula():
    torch.manual_seed(3)
    norm = CH.RMSNorm(6)
    with torch.no_grad():
        norm.weight.normal_()
    x = torch.randn(4, 6)
    expected = x / torch.sqrt((x**2).mean(-1, keepdim=True) + 1e-5) * norm.weight
    torch.testing.assert_close(norm(x), expected)
    if hasattr(nn, "RMSNorm"):
        theirs = nn.RMSNorm(6, eps=1e-5)
        theirs.load_state_dict(norm.state_dict())
        torch.testing.assert_close(norm(x), theirs(x), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("form", ["none", "tanh"])
def test_gelu_and_the_gelu_layer_equal_f_gelu(form):
    x = torch.linspace(-8, 8, 401)
    torch.testing.assert_close(CH.gelu(x, form), F.gelu(x, approximate=form))
    torch.testing.assert_close(CH.GELU(form)(x), F.gelu(x, approximate=form))


def test_gelu_refuses_another_form_by_name():
    with pytest.raises(ValueError, match="'none' or 'tanh'.*'exact'"):
        CH.gelu(torch.zeros(2), "exact")


def test_swiglu_is_w2_of_silu_w1_times_w3():
    torch.manual_seed(4)
    ffn = CH.SwiGLU(6, 10)
    x = torch.randn(3, 6)
    expected = x @ ffn.w1.weight.T
    expected = (expected * torch.sigmoid(expected) * (x @ ffn.w3.weight.T)) @ ffn.w2.weight.T
    torch.testing.assert_close(ffn(x), expected, atol=1e-6, rtol=1e-5)
    assert all(layer.bias is None for layer in (ffn.w1, ffn.w2, ffn.w3))


# ----------------------------------------------------------------------------- blocks
@pytest.mark.parametrize("norm_first", [True, False])
def test_block_and_copy_into_encoder_layer_equal_pytorch(norm_first):
    torch.manual_seed(5)
    ours = CH.TransformerBlock(16, 4, 32, 8, norm_first=norm_first, causal=False)
    theirs = nn.TransformerEncoderLayer(
        16, 4, 32, dropout=0.0, activation="gelu", batch_first=True, norm_first=norm_first
    )
    CH.copy_into_encoder_layer(ours, theirs)
    assert torch.equal(theirs.linear2.weight, ours.ff[2].weight)
    x = torch.randn(2, 5, 16)
    torch.testing.assert_close(ours(x), theirs(x), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("norm_first", [True, False])
def test_decoder_block_and_copy_into_decoder_layer_equal_pytorch(norm_first):
    torch.manual_seed(6)
    ours = CH.DecoderBlock(16, 4, 32, 8, norm_first=norm_first)
    theirs = nn.TransformerDecoderLayer(
        16, 4, 32, dropout=0.0, activation="gelu", batch_first=True, norm_first=norm_first
    )
    CH.copy_into_decoder_layer(ours, theirs)
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    real = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    causal = torch.ones(5, 5, dtype=torch.bool).triu(1)
    expected = theirs(x, memory, tgt_mask=causal, memory_key_padding_mask=~real)
    torch.testing.assert_close(ours(x, memory, real), expected, atol=1e-5, rtol=1e-4)


# ----------------------------------------------------------------------------- positions
def test_sinusoidal_positions_values_and_odd_width():
    table = CH.sinusoidal_positions(3, 4)
    p = torch.arange(3.0)[:, None]
    expected = torch.stack(
        [
            torch.sin(p[:, 0]),
            torch.cos(p[:, 0]),
            torch.sin(p[:, 0] / 100),
            torch.cos(p[:, 0] / 100),
        ],
        dim=1,
    )
    torch.testing.assert_close(table, expected)
    assert table.dtype == torch.float32
    with pytest.raises(ValueError, match="even width.*d=7"):
        CH.sinusoidal_positions(5, 7)


def _authors_slopes(n):
    """The ALiBi authors' get_slopes (ofirpress/attention_with_linear_biases, fairseq/models/
    transformer.py), written out here on Python floats."""
    if math.log2(n).is_integer():
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start**i for i in range(1, n + 1)]
    closest = 2 ** math.floor(math.log2(n))
    return _authors_slopes(closest) + _authors_slopes(2 * closest)[0::2][: n - closest]


@pytest.mark.parametrize("heads", [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 24, 32, 40])
def test_alibi_slopes_follow_the_authors_rule(heads):
    got = CH.alibi_slopes(heads)
    assert got.dtype == torch.float32 and got.shape == (heads,)
    torch.testing.assert_close(got, torch.tensor(_authors_slopes(heads)))


def test_alibi_slopes_for_8_heads_are_the_papers():
    torch.testing.assert_close(CH.alibi_slopes(8), 2.0 ** -torch.arange(1.0, 9.0))


def test_alibi_bias_is_minus_slope_times_distance_and_causal():
    bias = CH.alibi_bias(4, 3)
    assert bias.shape == (3, 4, 4) and bias.dtype == torch.float32
    m = CH.alibi_slopes(3)
    assert bias[2, 3, 0] == -3 * m[2] and bias[0, 1, 1] == 0
    assert torch.isinf(bias[:, 0, 1:]).all() and (bias[:, 0, 1:] < 0).all()


# ----------------------------------------------------------------------------- packing
def test_packed_causal_mask_and_masked_block_attention():
    mask = CH.packed_causal_mask(torch.tensor([[4, 4, 9]]))
    assert mask.tolist() == [[[True, False, False], [True, True, False], [False, False, True]]]
    torch.manual_seed(7)
    attn = CH.Attention(8, 8, 6, 0.0, num_heads=2)
    x = torch.randn(1, 6, 8)
    one_doc = CH.packed_causal_mask(torch.zeros(1, 6, dtype=torch.long))
    torch.testing.assert_close(CH.masked_block_attention(attn, x, one_doc), attn(x))


# ----------------------------------------------------------------------------- two layers
def test_repeated_spans_repeats_a_span_and_marks_the_predictable_tokens():
    ids, predictable, length = CH.repeated_spans(200, 32, 64, torch.Generator().manual_seed(8))
    assert ids.shape == predictable.shape == (200, 32) and length.shape == (200,)
    assert ((length >= 4) & (length <= 14)).all()
    rows, positions = predictable.nonzero(as_tuple=True)
    copied = positions - length[rows]
    assert (copied >= 0).all()
    assert torch.equal(ids[rows, positions], ids[rows, copied])  # a copy of the earlier span
    assert torch.equal(ids[rows, positions + 1], ids[rows, copied + 1])  # and so is the next token
    assert (predictable.sum(dim=1) == length - 1).all()


def test_attention_only_lm_maps_and_switching_heads_off():
    torch.manual_seed(9)
    model = CH.AttentionOnlyLM(16, 8, 8, 2, 2)
    ids = torch.randint(0, 16, (3, 8))
    maps = model.maps(ids)
    assert len(maps) == 2 and maps[0].shape == (3, 2, 8, 8) and not maps[0].requires_grad
    torch.testing.assert_close(maps[1].sum(-1), torch.ones(3, 2, 8))
    assert torch.equal(maps[0].triu(1), torch.zeros_like(maps[0]))  # causal
    all_off = {(layer, head) for layer in range(2) for head in range(2)}
    biases = sum(attn.out_proj.bias for attn in model.layers)  # what out_proj adds to zeros
    bare = model.head(model.tok_emb(ids) + model.pos_emb(torch.arange(8)) + biases)
    torch.testing.assert_close(model(ids, off=all_off), bare)
    assert not torch.allclose(model(ids), bare)


class _Lookup(nn.Module):
    """A model that predicts, at every position, the token a table says comes next."""

    def __init__(self, answers):
        super().__init__()
        self.answers = answers  # (b, n): the token to predict after each position

    def forward(self, ids, off=()):
        return F.one_hot(self.answers[:, : ids.shape[1]], 10).float()


def test_copy_accuracy_counts_only_predictable_positions():
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    predictable = torch.tensor([[False, True, True, False, False]])
    right = _Lookup(ids[:, 1:])
    assert CH.copy_accuracy(right, ids, predictable) == 1.0
    half = _Lookup(torch.tensor([[2, 3, 0, 0]]))  # right at position 1 only
    assert CH.copy_accuracy(half, ids, predictable) == 0.5


class _FixedMaps:
    """A stand-in model whose maps are given: what head_scores reads."""

    def __init__(self, maps):
        self._maps = maps

    def maps(self, ids):
        return list(self._maps)


def _planted_maps(b=3, n=12, length=4):
    """Layer 0: head 0 looks one back, head 1 at itself; layer 1: head 0 at the induction target,
    head 1 at the first token. Returns maps (2, b, 2, n, n), predictable (b, n), length (b,)."""
    maps = torch.zeros(2, b, 2, n, n)
    eye = torch.eye(n)
    maps[0, :, 0] = torch.diag(torch.ones(n - 1), -1) + torch.diag(
        torch.tensor([1.0] + [0.0] * (n - 1))
    )
    maps[0, :, 1] = eye
    maps[1, :, 1, :, 0] = 1.0
    start = 2
    predictable = torch.zeros(b, n, dtype=torch.bool)
    predictable[:, start + length : start + 2 * length - 1] = True
    for q in range(start + length, start + 2 * length - 1):
        maps[1, :, 0, q, q - length + 1] = 1.0
    for q in range(n):  # every other query of layer 1, head 0: itself
        if maps[1, 0, 0, q].sum() == 0:
            maps[1, :, 0, q, q] = 1.0
    return maps, predictable, torch.full((b,), length)


def test_head_scores_on_planted_maps():
    maps, predictable, length = _planted_maps()
    previous, induction = CH.head_scores(_FixedMaps(maps), None, predictable, length)
    assert previous.shape == induction.shape == (2, 2)
    torch.testing.assert_close(
        previous, torch.tensor([[1.0, 0.0], [0.0, 1 / 11]])
    )  # 1 of 11 one back
    torch.testing.assert_close(induction, torch.tensor([[0.0, 0.0], [1.0, 0.0]]))


def test_the_old_indexing_fails_on_the_same_maps():
    """Before issue 38: maps[:, rows, :, queries, target].mean(dim=1), whose advanced indices,
    separated by a slice, put the query axis first: it averages the layers."""
    maps, predictable, length = _planted_maps()
    rows, queries = predictable.nonzero(as_tuple=True)
    target = queries - length[rows] + 1
    old = maps[:, rows, :, queries, target].mean(dim=1)
    assert old.shape != (2, 2)  # (queries, heads)
    assert not torch.allclose(old[:2], torch.tensor([[0.0, 0.0], [1.0, 0.0]]))
