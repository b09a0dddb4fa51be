"""A finite mask in its two forms: added to the scores (BERT's ``(1 - mask) * -10000.0``, the
second fresh attack's fixtures, test_ch11_fresh2.py) and filled in, which a huge later score cannot
beat but which wins over allowed scores that all lie below it. The filled-in form is GPT-2's in
huggingface/transformers, src/transformers/modeling_gpt2.py at 0070d91 (Attention._attn:
``w = w * b - 1e4 * (1 - b)``), adapted here to exercises 2 and 8 with the rest right. The same
answers filled with -1e9 or the dtype's lowest float are right for any score the probe makes and
must pass."""

import contextlib
import io
import math

import pytest
import torch

import course_utils as cu
from tests.ch11 import correct_fresh2 as ok

ch = cu.chapters


def gpt2_fill(scores, allowed, fill):
    """GPT-2's ``w * b - fill * (1 - b)``: the hidden scores replaced by -fill."""
    b = allowed.to(scores.dtype)
    return scores * b - fill * (1 - b)


def mla_filled(fill):
    def mla_attention(x, w, cache=None):
        b, n, _ = x.shape
        h, hd, dr = w.heads, w.head_dim, w.rope_dim
        start = 0 if cache is None else cache[0].shape[1]
        pos = torch.arange(start, start + n, device=x.device)
        latent, rope_keys = x @ w.w_dkv.T, ch.apply_rope(x @ w.w_kr.T, pos)
        if cache is not None:
            latent = torch.cat([cache[0], latent], 1)
            rope_keys = torch.cat([cache[1], rope_keys], 1)
        N = latent.shape[1]
        q = ch.split_heads(x @ w.w_q.T, h)
        q_rope = ch.apply_rope(ch.split_heads(x @ w.w_qr.T, h), pos)
        k, v = ch.split_heads(latent @ w.w_uk.T, h), ch.split_heads(latent @ w.w_uv.T, h)
        scores = (q @ k.mT + q_rope @ rope_keys[:, None].mT) / math.sqrt(hd + dr)
        scores = gpt2_fill(scores, ch.sliding_window_mask(n, N, N, device=x.device), fill)
        return ch.merge_heads(scores.softmax(-1) @ v) @ w.w_o.T, (latent, rope_keys)

    return mla_attention


def shared_filled(fill):
    def shared_kv_forward(x, layers, kv_source, heads, cache=None):
        n, cache = x.shape[1], {} if cache is None else dict(cache)
        for i, w in enumerate(layers):
            q = ch.split_heads(x @ w["w_q"].T, heads)
            if kv_source[i] == i:
                k, v = (ch.split_heads(x @ w[m].T, heads) for m in ("w_k", "w_v"))
                if i in cache:
                    k, v = torch.cat([cache[i][0], k], 2), torch.cat([cache[i][1], v], 2)
                cache[i] = (k, v)
            k, v = cache[kv_source[i]]
            N = k.shape[2]
            scores = q @ k.mT / math.sqrt(q.shape[-1])
            scores = gpt2_fill(scores, ch.sliding_window_mask(n, N, N, device=x.device), fill)
            x = x + ch.merge_heads(scores.softmax(-1) @ v) @ w["w_o"].T
        return x, cache

    return shared_kv_forward


def verdict(check, fn):
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            getattr(cu.checks, check)(fn)
        except cu.checks.CheckFailure as failure:
            return failure.bug
    return "accepted"


CASES = [("check_mla_attention", mla_filled), ("check_shared_kv_forward", shared_filled)]


@pytest.mark.parametrize("check, make", CASES, ids=["mla", "shared"])
def test_mask_filled_with_minus_ten_thousand_is_named(check, make):
    assert verdict(check, make(1e4)) == "mask_finite"


@pytest.mark.parametrize("check, make", CASES, ids=["mla", "shared"])
@pytest.mark.parametrize("fill", [1e9, -torch.finfo(torch.float32).min], ids=["1e9", "lowest"])
def test_a_fill_beyond_every_score_passes(check, make, fill):
    assert verdict(check, make(fill)) == "accepted"


def test_the_probe_leaves_right_answers_alone():
    """The right answers of the second attack (an additive -inf mask, masked_fill) pass it too."""
    assert verdict("check_mla_attention", ok.mla_concatenated_heads) == "accepted"
    assert verdict("check_shared_kv_forward", ok.shared_kv_handed_along) == "accepted"
