"""Every equality chapter 09 claims, tested on the chapter's own exported code."""

from __future__ import annotations

import importlib
import json
import math
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import course_utils as cu

NOTEBOOK = Path(__file__).resolve().parent.parent / "solutions" / "09_modern_attention.ipynb"


def _chapter():
    """The exported code: course_utils.chapters.ch09 once generated, else the notebook's export cells."""
    try:
        return importlib.import_module("course_utils.chapters.ch09")
    except ImportError:
        namespace = {"torch": torch, "nn": nn, "F": F, "math": math}
        for cell in json.loads(NOTEBOOK.read_text())["cells"]:
            source = "".join(cell["source"])
            if cell["cell_type"] == "code" and source.startswith("#| export"):
                exec(compile(source, str(NOTEBOOK), "exec"), namespace)  # noqa: S102 - our own notebook
        return SimpleNamespace(**namespace)


ch = _chapter()


def _randn(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# --------------------------------------------------------------------------- 1. padding
def test_padding_masks_both_sides_and_clear_errors():
    assert ch.padding_mask([4, 2, 3], 5).int().tolist() == [
        [1, 1, 1, 1, 0],
        [1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0],
    ]
    assert ch.padding_mask([4, 2, 3], 5, side="left").int().tolist() == [
        [0, 1, 1, 1, 1],
        [0, 0, 0, 1, 1],
        [0, 0, 1, 1, 1],
    ]
    for bad in (
        dict(lengths=[6], n=5),
        dict(lengths=[2], n=5, side="middle"),
        dict(lengths=[1.5], n=5),
    ):
        with pytest.raises(ValueError, match="lengths|side|length"):
            ch.padding_mask(**bad)


def test_fully_masked_row_is_nan_and_the_fix_is_finite():
    real = ch.padding_mask([5, 2, 3], 5, side="left")
    allowed = ch.causal_padding_mask(real)  # (3, 1, 5, 5)
    q, k, v = (_randn(3, 2, 5, 4, seed=s) for s in (1, 2, 3))
    weights = torch.softmax((q @ k.transpose(-2, -1)).masked_fill(~allowed, -torch.inf), dim=-1)
    assert torch.isnan(weights[1, :, :3]).all() and not torch.isnan(weights[1, :, 3:]).any()
    fixed = torch.softmax(
        (q @ k.transpose(-2, -1)).masked_fill(
            ~(allowed | torch.eye(5, dtype=torch.bool)), -torch.inf
        ),
        -1,
    )
    assert torch.isfinite(fixed).all()


@pytest.mark.parametrize("side", ["right", "left"])
def test_padding_changes_nothing_for_real_tokens(side):
    lengths = [4, 2, 3]
    real = ch.padding_mask(lengths, 5, side=side)
    q, k, v = (_randn(3, 2, 5, 4, seed=s) for s in (4, 5, 6))
    allowed = ch.causal_padding_mask(real) | torch.eye(5, dtype=torch.bool)
    batched = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    for i in range(3):
        cols = real[i].nonzero().squeeze(1)
        alone = F.scaled_dot_product_attention(
            q[i : i + 1, :, cols], k[i : i + 1, :, cols], v[i : i + 1, :, cols], is_causal=True
        )
        torch.testing.assert_close(alone, batched[i : i + 1, :, cols])


def test_nn_multihead_attention_convention_matches_sdpa_convention():
    torch.manual_seed(1)
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = _randn(3, 5, 8, seed=7)
    real = ch.padding_mask([4, 2, 3], 5)
    with torch.no_grad():
        theirs, _ = mha(
            x, x, x, key_padding_mask=~real, attn_mask=torch.ones(5, 5, dtype=torch.bool).triu(1)
        )
        heads = [
            F.linear(x, w, b).view(3, 5, 2, 4).transpose(1, 2)
            for w, b in zip(mha.in_proj_weight.chunk(3), mha.in_proj_bias.chunk(3))
        ]
        ours = F.scaled_dot_product_attention(*heads, attn_mask=ch.causal_padding_mask(real))
        ours = mha.out_proj(ours.transpose(1, 2).reshape(3, 5, 8))
    torch.testing.assert_close(ours[real], theirs[real])


# --------------------------------------------------------------------------- 2. sliding window
def test_band_mask_counts_and_off_by_one():
    mask = ch.sliding_window_mask(6, 6, 3)
    assert mask.sum(-1).tolist() == [1, 2, 3, 3, 3, 3]
    assert ch.sliding_window_mask(2, 6, 3).int().tolist() == [
        [0, 0, 1, 1, 1, 0],
        [0, 0, 0, 1, 1, 1],
    ]
    assert torch.equal(ch.sliding_window_mask(7, 7, 7), torch.ones(7, 7, dtype=torch.bool).tril())


def test_flex_attention_mask_mod_equals_the_boolean_mask():
    flex = pytest.importorskip("torch.nn.attention.flex_attention")

    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < 3)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert torch.equal(
            flex.create_mask(mask_mod, None, None, 6, 6, device="cpu")[0, 0],
            ch.sliding_window_mask(6, 6, 3),
        )
        q, k, v = _randn(3, 1, 2, 6, 4, seed=8)
        out = flex.flex_attention(
            q, k, v, block_mask=flex.create_block_mask(mask_mod, None, None, 6, 6, device="cpu")
        )
    torch.testing.assert_close(
        out, F.scaled_dot_product_attention(q, k, v, attn_mask=ch.sliding_window_mask(6, 6, 3))
    )


def test_windowed_cache_of_exactly_w_tokens_equals_full_windowed_attention():
    q, k, v = _randn(3, 1, 2, 12, 4, seed=9)
    full = F.scaled_dot_product_attention(q, k, v, attn_mask=ch.sliding_window_mask(12, 12, 5))
    keep = F.scaled_dot_product_attention(q[:, :, -1:], k[:, :, -5:], v[:, :, -5:])
    short = F.scaled_dot_product_attention(q[:, :, -1:], k[:, :, -4:], v[:, :, -4:])
    torch.testing.assert_close(keep, full[:, :, -1:])
    assert not torch.allclose(short, full[:, :, -1:], atol=1e-6)


# --------------------------------------------------------------------------- 3. is_causal
def test_is_causal_is_top_left_and_the_bottom_right_mask_is_right():
    q, k, v = _randn(3, 1, 2, 12, 4, seed=2)
    full = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    top_left = F.scaled_dot_product_attention(q[:, :, 10:], k, v, is_causal=True)
    bottom_right = F.scaled_dot_product_attention(
        q[:, :, 10:], k, v, attn_mask=ch.sliding_window_mask(2, 12, 12)
    )
    torch.testing.assert_close(bottom_right, full[:, :, 10:])
    assert not torch.allclose(top_left, full[:, :, 10:], atol=1e-6)


# --------------------------------------------------------------------------- 4. RoPE
def test_rope_score_depends_only_on_distance_and_keeps_lengths():
    q_vec, k_vec = _randn(2, 64, seed=3)

    def score(i, j):
        return (
            ch.apply_rope(q_vec[None], torch.tensor([i]))
            @ ch.apply_rope(k_vec[None], torch.tensor([j])).T
        ).item()

    trials = torch.randint(0, 500, (200, 3), generator=torch.Generator().manual_seed(0)).tolist()
    assert all(
        math.isclose(score(i, j), score(i + s, j + s), rel_tol=1e-4, abs_tol=1e-4)
        for i, j, s in trials
    )
    assert not math.isclose(score(10, 7), score(10, 6), abs_tol=1e-3)
    x = _randn(2, 3, 12, 8, seed=4)
    torch.testing.assert_close(ch.apply_rope(x, torch.arange(12)).norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close(
        ch.apply_rope_interleaved(x, torch.arange(12)).norm(dim=-1), x.norm(dim=-1)
    )


def test_rope_layouts_are_one_function_up_to_a_permutation():
    hd = 8
    to_halves = torch.cat((torch.arange(0, hd, 2), torch.arange(1, hd, 2)))
    x, positions = _randn(2, 3, 12, hd, seed=5), torch.arange(7, 19)
    via_halves = ch.apply_rope(x[..., to_halves], positions)[..., torch.argsort(to_halves)]
    torch.testing.assert_close(ch.apply_rope_interleaved(x, positions), via_halves)


def test_mixing_rope_layouts_breaks_scores_and_permuted_weights_fix_them():
    hd, positions = 8, torch.arange(12)
    to_halves = torch.cat((torch.arange(0, hd, 2), torch.arange(1, hd, 2)))
    W_q, W_k = _randn(2, hd, 16, seed=6)
    tokens = _randn(12, 16, seed=7)

    def scores(rope, W_q, W_k):
        return rope(tokens @ W_q.T, positions) @ rope(tokens @ W_k.T, positions).T

    trained = scores(ch.apply_rope_interleaved, W_q, W_k)
    assert not torch.allclose(scores(ch.apply_rope, W_q, W_k), trained, atol=1e-4)
    torch.testing.assert_close(
        scores(ch.apply_rope, W_q[to_halves], W_k[to_halves]), trained, rtol=1e-4, atol=1e-4
    )


def test_rope_angles_values():
    angles = ch.rope_angles(torch.arange(4), 8)
    torch.testing.assert_close(angles[1], torch.tensor([1.0, 0.1, 0.01, 0.001]))


# --------------------------------------------------------------------------- 5. GQA
def test_repeat_kv_interleaves_groups():
    kv = torch.arange(2.0).view(1, 2, 1, 1)
    assert ch.repeat_kv(kv, 3).flatten().tolist() == [0, 0, 0, 1, 1, 1]


def _mha(seed):
    torch.manual_seed(seed)
    return cu.chapters.ch05.MultiHeadAttention(16, 24, context_length=10, dropout=0.0, num_heads=6)


def test_gqa_with_as_many_kv_heads_as_heads_is_chapter_05_layer():
    mha = _mha(5)
    gqa = ch.GroupedQueryAttention(
        16, 24, context_length=10, dropout=0.0, num_heads=6, n_kv_heads=6
    )
    missing, unexpected = gqa.load_state_dict(mha.state_dict(), strict=False)
    assert missing == [] and unexpected == ["mask"]
    x = _randn(3, 10, 16, seed=8)
    with torch.no_grad():
        torch.testing.assert_close(gqa(x), mha(x))


def test_gqa_is_multihead_with_kv_heads_copied_by_repeat_interleave_not_repeat():
    torch.manual_seed(6)
    gqa = ch.GroupedQueryAttention(
        16, 24, context_length=10, dropout=0.0, num_heads=6, n_kv_heads=2
    )
    x = _randn(3, 10, 16, seed=9)
    results = {}
    for name, copy in (
        ("interleave", lambda w: w.repeat_interleave(3, dim=0)),
        ("repeat", lambda w: w.repeat(3, 1, 1)),
    ):
        mha = _mha(0)
        state = dict(gqa.state_dict())
        for key in ("W_key.weight", "W_value.weight"):
            state[key] = copy(state[key].view(2, 4, 16)).reshape(24, 16)
        mha.load_state_dict(state, strict=False)
        with torch.no_grad():
            results[name] = mha(x)
    with torch.no_grad():
        reference = gqa(x)
    torch.testing.assert_close(results["interleave"], reference)
    assert not torch.allclose(results["repeat"], reference, atol=1e-6)


def test_gqa_window_and_rope_match_an_explicit_computation():
    torch.manual_seed(7)
    gqa = ch.GroupedQueryAttention(
        16, 24, context_length=10, dropout=0.0, num_heads=6, n_kv_heads=3, window=4, rope=True
    )
    x = _randn(2, 10, 16, seed=10)
    with torch.no_grad():
        q = gqa.W_query(x).view(2, 10, 6, 4).transpose(1, 2)
        k = gqa.W_key(x).view(2, 10, 3, 4).transpose(1, 2).repeat_interleave(2, dim=1)
        v = gqa.W_value(x).view(2, 10, 3, 4).transpose(1, 2).repeat_interleave(2, dim=1)
        q, k = ch.apply_rope(q, torch.arange(10)), ch.apply_rope(k, torch.arange(10))
        context = F.scaled_dot_product_attention(
            q, k, v, attn_mask=ch.sliding_window_mask(10, 10, 4)
        )
        expected = gqa.out_proj(context.transpose(1, 2).reshape(2, 10, 24))
        torch.testing.assert_close(gqa(x), expected)
    with pytest.raises(ValueError, match="context_length"):
        gqa(_randn(1, 11, 16, seed=0))
    for bad in (4, 0, 12):
        with pytest.raises(ValueError, match="divisible"):
            ch.GroupedQueryAttention(16, 24, 10, 0.0, num_heads=6, n_kv_heads=bad)


@pytest.mark.parametrize(
    ("d", "heads", "kv_heads", "bias", "params"),
    [
        (
            768,
            12,
            12,
            True,
            2_362_368,
        ),  # GPT-2 small: chapter 05's 2,360,064 plus 3 x 768 q/k/v biases
        (4096, 32, 32, False, 67_112_960),  # Llama-3-8B-sized MHA (out_proj keeps its bias here)
        (4096, 32, 8, False, 41_947_136),  # Llama 3 8B's 8 key/value heads
    ],
)
def test_parameter_counts(d, heads, kv_heads, bias, params):
    with torch.device("meta"):
        layer = ch.GroupedQueryAttention(d, d, 8, 0.0, heads, kv_heads, qkv_bias=bias)
    assert sum(p.numel() for p in layer.parameters()) == params


def test_kv_cache_bytes_of_the_two_models():
    assert ch.kv_bytes_per_token(12, 12, 64) == 36_864  # GPT-2 small, 16-bit: 36 KiB per token
    assert ch.kv_bytes_per_token(32, 8, 128) == 128 * 1024  # Llama 3 8B (and Mistral 7B): 128 KiB
    assert ch.kv_bytes_per_token(32, 32, 128) == 512 * 1024  # the same model with full MHA
    assert ch.kv_bytes_per_token(32, 8, 128, bytes_per_value=4) == 256 * 1024


# --------------------------------------------------------------------------- the KV-cache explorer
def test_kv_cache_data_numbers():
    view = cu.widgets.kv_cache_data()  # Llama 3 8B, bfloat16, 8,192 tokens
    assert view.options == [1, 2, 4, 8, 16, 32]
    assert view.per_token == 128 * 1024 and view.gib.tolist() == [0.125, 0.25, 0.5, 1.0, 2.0, 4.0]
    assert cu.widgets.kv_cache_data(1, 131_072, 4).gib.tolist()[-1] == 128.0


def test_kv_cache_explorer_static_live_and_bad_values(monkeypatch, capsys):
    shown = []
    monkeypatch.setattr(cu.plotting, "_display", shown.append)
    monkeypatch.setenv("COURSE_STATIC_WIDGETS", "1")
    cu.widgets.kv_cache_explorer()
    assert capsys.readouterr().out.strip() == cu.plotting.STATIC_NOTE and len(shown) == 1
    pytest.importorskip("ipywidgets")
    monkeypatch.delenv("COURSE_STATIC_WIDGETS")
    cu.widgets.kv_cache_explorer()
    live = shown[-1]
    live.controls["n_kv_heads"].value = 1
    live.controls["bytes_per_value"].value = 4
    assert live.error is None and live.view.per_token == 32 * 1024 and live.png
    for bad in (dict(n_kv_heads=3), dict(context=1000), dict(dtype="fp8")):
        with pytest.raises(cu.CourseInputError):
            cu.widgets.kv_cache_explorer(**bad)


# --------------------------------------------------------------------------- 6. cached generation
@pytest.mark.parametrize(
    ("window", "rope", "n_kv_heads"),
    [(4, True, 2), (None, True, 1), (3, False, 4), (None, False, 2)],
)
def test_cached_gqa_steps_equal_full_recomputation(window, rope, n_kv_heads):
    torch.manual_seed(8)
    attn = ch.GroupedQueryAttention(
        16, 16, 32, 0.0, num_heads=4, n_kv_heads=n_kv_heads, window=window, rope=rope
    ).eval()
    x = _randn(2, 17, 16, seed=11)
    with torch.no_grad():
        full = attn(x)
        out, cache = ch.gqa_attend_with_cache(
            attn, x[:, :5]
        )  # a prompt of 5, then one token at a time
        outs = [out]
        for t in range(5, 17):
            out, cache = ch.gqa_attend_with_cache(attn, x[:, t : t + 1], cache)
            outs.append(out)
            assert cache[0].shape[1] == n_kv_heads and cache[0].shape[2] <= (window or 17)
    torch.testing.assert_close(torch.cat(outs, dim=1), full)
    assert cache[2] == 17


def test_gqa_cache_with_g_equal_h_is_chapter_08_attend_with_cache():
    mha = _mha(5)
    gqa = ch.GroupedQueryAttention(
        16, 24, context_length=10, dropout=0.0, num_heads=6, n_kv_heads=6
    )
    gqa.load_state_dict(mha.state_dict(), strict=False)
    x = _randn(3, 10, 16, seed=8)
    with torch.no_grad():
        ours, theirs = (
            ch.gqa_attend_with_cache(gqa, x[:, :4]),
            cu.chapters.attend_with_cache(mha, x[:, :4]),
        )
        torch.testing.assert_close(ours[0], theirs[0])
        for t in range(4, 10):
            ours = ch.gqa_attend_with_cache(gqa, x[:, t : t + 1], ours[1])
            theirs = cu.chapters.attend_with_cache(mha, x[:, t : t + 1], theirs[1])
            torch.testing.assert_close(ours[0], theirs[0])
    torch.testing.assert_close(ours[1][:2], theirs[1])


def test_mask_mod_broadcast_over_index_tensors_is_the_band_mask():
    def mask_mod(b, h, q_idx, kv_idx):  # the notebook's band_mask_mod(3)
        return (q_idx >= kv_idx) & (q_idx - kv_idx < 3)

    assert torch.equal(
        mask_mod(0, 0, torch.arange(6)[:, None], torch.arange(6)[None, :]),
        ch.sliding_window_mask(6, 6, 3),
    )


def test_sliding_window_figure_draws_the_chapters_masks():
    figures = pytest.importorskip("tools.figures.catalogue")
    assert figures.FIGURES["sliding_window"].chapter == "09"
    fig = figures.render("sliding_window")
    assert len(fig.axes) == 3


def test_pytorchs_causal_lower_right_is_the_bottom_right_mask():
    bias = pytest.importorskip("torch.nn.attention.bias")
    q, k, v = _randn(3, 2, 2, 6, 4, seed=9)
    q = q[:, :, :2]  # (2, 2, 2, 4): the 2 newest of 6 tokens
    torch.testing.assert_close(
        F.scaled_dot_product_attention(q, k, v, attn_mask=bias.causal_lower_right(2, 6)),
        F.scaled_dot_product_attention(q, k, v, attn_mask=ch.sliding_window_mask(2, 6, 6)),
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(n_kv_heads=8.0), "n_kv_heads must be an int, but got"),
        (
            dict(n_kv_heads=3),
            r"n_kv_heads must divide num_heads=32, i.e. be one of \[1, 2, 4, 8, 16, 32\], but got 3",
        ),
        (dict(context="8k"), "context must be an int"),
        (dict(dtype=["bfloat16"]), r"dtype must be one of \['float32', 'bfloat16', 'int8'\]"),
    ],
)
def test_kv_cache_explorer_names_what_it_expected(kwargs, message):
    with pytest.raises(cu.CourseInputError, match=message):
        cu.widgets.kv_cache_explorer(**kwargs)
