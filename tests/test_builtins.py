"""The course's MultiHeadAttention computes exactly what PyTorch's built-ins compute.

Chapter 06 claims two equalities (dropout off):

* our layer == ``F.scaled_dot_product_attention(q, k, v, is_causal=True)`` on our own
  projections, and == SDPA with a boolean mask where True means "attend";
* our layer == ``nn.MultiheadAttention`` once its packed ``in_proj_weight`` holds our
  query, key and value matrices (in that order) and ``attn_mask`` is True where attention
  is *forbidden*.

An inverted mask must be detected as unequal, for both built-ins. The helpers are chapter 06's
own exported functions (``cu.chapters``), so these tests check the chapter's claims directly.
"""

import pytest
import torch
from torch import nn

import course_utils as cu

ATOL = 1e-5

# (batch, n_tokens, d_model, num_heads, context_length, qkv_bias)
SHAPES = [
    (2, 6, 8, 2, 6, False),
    (3, 4, 12, 3, 10, True),
    (1, 1, 4, 1, 4, False),
    (4, 16, 64, 4, 16, False),
    (2, 5, 6, 6, 7, True),
]
IDS = [f"b{b}-n{n}-d{d}-h{h}-ctx{c}-bias{q}" for b, n, d, h, c, q in SHAPES]


def _build(batch, n, d, heads, context, qkv_bias, dropout=0.0, seed=0):
    torch.manual_seed(seed)
    ours = cu.chapters.MultiHeadAttention(d, d, context, dropout, heads, qkv_bias=qkv_bias).eval()
    x = torch.randn(batch, n, d)  # (b, n, d)
    return ours, x


def _projections(ours, x):
    split = cu.chapters.split_heads  # (b, n, d) -> (b, h, n, hd)
    return (
        split(ours.W_query(x), ours.num_heads),
        split(ours.W_key(x), ours.num_heads),
        split(ours.W_value(x), ours.num_heads),
    )


def _sdpa(ours, x, **kwargs):
    return cu.chapters.attention_via_sdpa(ours, x, **kwargs)  # chapter 06's claim, tested here


def _torch_mha_copy(ours):
    theirs = nn.MultiheadAttention(
        ours.out_proj.out_features, ours.num_heads, batch_first=True
    ).eval()
    cu.chapters.copy_into_torch_mha(ours, theirs)
    return theirs


def _forbidden(n):
    return cu.chapters.torch_mha_mask(n)  # (n, n): True = future


def _close(a, b):
    return bool(torch.allclose(a, b, atol=ATOL, rtol=1e-4))


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_sdpa_is_causal_equals_ours(shape):
    ours, x = _build(*shape)
    with torch.no_grad():
        assert _close(_sdpa(ours, x, is_causal=True), ours(x))


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_sdpa_bool_mask_true_means_attend(shape):
    ours, x = _build(*shape)
    n = x.shape[1]
    with torch.no_grad():
        assert _close(_sdpa(ours, x, attn_mask=~_forbidden(n)), ours(x))


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_torch_mha_equals_ours_after_copying_weights(shape):
    ours, x = _build(*shape)
    theirs = _torch_mha_copy(ours)
    n = x.shape[1]
    with torch.no_grad():
        got = theirs(x, x, x, attn_mask=_forbidden(n), need_weights=False)[0]
        assert _close(got, ours(x))
    # the same mask as a float mask that is *added* to the scores
    additive = torch.zeros(n, n).masked_fill(_forbidden(n), float("-inf"))
    with torch.no_grad():
        assert _close(theirs(x, x, x, attn_mask=additive, need_weights=False)[0], ours(x))


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_torch_mha_equals_ours_with_gradients_on(shape):
    """Outside no_grad, nn.MultiheadAttention takes its slow path: it must match too."""
    ours, x = _build(*shape)
    theirs = _torch_mha_copy(ours)
    got = theirs(x, x, x, attn_mask=_forbidden(x.shape[1]), need_weights=False)[0]
    assert _close(got, ours(x))


def test_dropout_is_off_in_eval_mode():
    ours, x = _build(2, 6, 8, 2, 6, False, dropout=0.5)
    theirs = _torch_mha_copy(ours)
    with torch.no_grad():
        assert _close(_sdpa(ours, x, is_causal=True), ours(x))
        assert _close(theirs(x, x, x, attn_mask=_forbidden(6), need_weights=False)[0], ours(x))


def test_torch_mha_head_averaged_weights_match_ours():
    ours, x = _build(2, 5, 8, 2, 5, False)
    theirs = _torch_mha_copy(ours)
    q, k, _ = _projections(ours, x)
    scores = (q @ k.transpose(2, 3)).masked_fill(_forbidden(5), float("-inf"))  # (b, h, n, n)
    weights = torch.softmax(scores / ours.head_dim**0.5, dim=-1)  # (b, h, n, n)
    _, averaged = theirs(x, x, x, attn_mask=_forbidden(5))  # (b, n, n)
    assert _close(averaged, weights.mean(dim=1))


@pytest.mark.parametrize(
    "shape", [s for s in SHAPES if s[1] > 1], ids=[i for s, i in zip(SHAPES, IDS) if s[1] > 1]
)
def test_inverted_mask_is_detected_as_unequal(shape):
    ours, x = _build(*shape)
    theirs = _torch_mha_copy(ours)
    n = x.shape[1]
    with torch.no_grad():
        expected = ours(x)
        # nn.MultiheadAttention given SDPA's convention (True = attend):
        wrong_mha = theirs(x, x, x, attn_mask=~_forbidden(n), need_weights=False)[0]
        # SDPA given nn.MultiheadAttention's convention (True = do not attend):
        wrong_sdpa = _sdpa(ours, x, attn_mask=_forbidden(n))
    assert not _close(wrong_mha, expected)
    assert not _close(wrong_sdpa, expected)


def test_wrong_qkv_order_is_detected_as_unequal():
    ours, x = _build(2, 6, 8, 2, 6, False)
    theirs = _torch_mha_copy(ours)
    with torch.no_grad():
        theirs.in_proj_weight.copy_(
            torch.cat([ours.W_key.weight, ours.W_query.weight, ours.W_value.weight], dim=0)
        )
        got = theirs(x, x, x, attn_mask=_forbidden(6), need_weights=False)[0]
        assert not _close(got, ours(x))
