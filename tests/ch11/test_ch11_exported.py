"""Chapter 11's exported code (course_utils/chapters/ch11, generated from the solution), each name
tested directly against an independent reference: loops over heads and tokens, the papers'
formulas as written, the published configs' numbers, PyTorch's own attention.

Where another file already tests a name in depth it is listed here too (the mapping):
recall_texts, RecallModel -> test_ch11_recall.py; decode_cost, sparse_decode_step, mla_keys_cached
counted against FlopCounterMode -> test_ch11_cost.py; lightning_index, sparse_attention,
shared_kv_forward properties -> test_ch11_sparse.py, test_ch11_sharing.py (the checks' files).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import course_utils as cu

ch = cu.chapters


def _rand(*shape, seed=0):
    return torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------- section 1
def test_kv_layout_accepts_the_published_shapes_and_refuses_bad_ones():
    assert ch.KVLayout(26, 1, 256, window=512, windowed_caches=22).windowed_caches == 22
    bad = [
        dict(layers=0, kv_heads=1, head_dim=8),
        dict(layers=4, kv_heads=1, head_dim=8, layers_per_cache=3),
        dict(layers=4, kv_heads=1, head_dim=8, window=8, windowed_caches=5),
        dict(layers=4, kv_heads=1, head_dim=8, windowed_caches=2),
        dict(layers=4, kv_heads=1, head_dim=8, window=0, windowed_caches=2),
        dict(layers=4, kv_heads=1, head_dim=8, rope_dim=64),
    ]
    for kwargs in bad:
        with pytest.raises(ValueError):
            ch.KVLayout(**kwargs)


def test_the_published_numbers_are_the_configs():
    """config.json of each model (the chapter's table): layers, key/value heads, head width,
    windows, MLA's kv_lora_rank and qk_rope_head_dim, max_position_embeddings, query heads."""
    shapes = {name: (lay.layers, lay.kv_heads, lay.head_dim) for name, lay in ch.PUBLISHED.items()}
    assert shapes == {
        "GPT-2 small": (12, 12, 64),
        "Llama 3 8B": (32, 8, 128),
        "Mistral 7B": (32, 8, 128),
        "Gemma 3 1B": (26, 1, 256),
        "Qwen3 8B": (36, 8, 128),
        "DeepSeek-V3": (61, 128, 128),
    }
    assert ch.PUBLISHED["Mistral 7B"].window == 4096 and ch.PUBLISHED["Gemma 3 1B"].window == 512
    assert (ch.PUBLISHED["DeepSeek-V3"].latent_dim, ch.PUBLISHED["DeepSeek-V3"].rope_dim) == (
        512,
        64,
    )
    assert list(ch.MAX_CONTEXT.values()) == [1024, 8192, 32768, 32768, 40960, 163840]
    # Mistral's paper (context_len 8192), Qwen3 8B's card (32,768 native), DeepSeek-V3's README (128K)
    assert list(ch.STATED_CONTEXT.values()) == [1024, 8192, 8192, 32768, 32768, 131072]
    assert list(ch.QUERY_HEADS.values()) == [12, 32, 32, 4, 32, 128]
    assert (
        list(ch.MAX_CONTEXT)
        == list(ch.STATED_CONTEXT)
        == list(ch.QUERY_HEADS)
        == list(ch.PUBLISHED)
    )


def test_beyond_limit_names_only_a_context_past_what_the_model_reads():
    assert ch.beyond_limit("Llama 3 8B", 8192) == ""
    assert ch.beyond_limit("Llama 3 8B", 8193) == (
        "beyond its 8,192-token config limit (Llama 3.1 8B, the same shape, reads it)"
    )
    assert ch.beyond_limit("Llama 3 8B", 131_073) == "beyond its 8,192-token config limit"
    assert ch.beyond_limit("GPT-2 small", 1025) == "beyond its 1,024-token config limit"
    assert ch.beyond_limit("DeepSeek-V3", 131_072) == ""
    assert (
        ch.beyond_limit("DeepSeek-V3", 131_073)
        == "past its stated 131,072 tokens (config: 163,840)"
    )
    assert ch.beyond_limit("Mistral 7B", 8193) == "past its stated 8,192 tokens (config: 32,768)"
    assert ch.beyond_limit("Qwen3 8B", 32_768) == ""
    assert ch.beyond_limit("Qwen3 8B", 40_961).startswith("beyond its 40,960-token config limit")


def test_kv_cache_bytes_by_hand():
    gemma = ch.PUBLISHED["Gemma 3 1B"]  # 22 windowed caches of 512 tokens, 4 full ones
    assert ch.kv_cache_bytes(gemma, 32_768) == (22 * 512 + 4 * 32_768) * 2 * 1 * 256 * 2
    assert ch.kv_cache_bytes(gemma, 100) == 26 * 100 * 2 * 256 * 2  # shorter than the window
    assert ch.kv_cache_bytes(ch.PUBLISHED["DeepSeek-V3"], 1) == 61 * (512 + 64) * 2
    shared = ch.KVLayout(6, 2, 4, layers_per_cache=3, latent_dim=0)
    assert ch.kv_cache_bytes(shared, 10, batch=3, bytes_per_value=4) == 3 * 2 * 10 * 2 * 2 * 4 * 4
    assert isinstance(ch.kv_cache_bytes(gemma, 7), int)


def test_layout_variants_keep_the_shape_and_change_the_cache():
    for model, published in ch.PUBLISHED.items():
        variants = ch.layout_variants(model)
        assert variants["published"] == published
        assert variants["MHA"].kv_heads == ch.QUERY_HEADS[model]
        assert variants["MQA"].kv_heads == 1 and variants["MLA 512 + 64"].latent_dim == 512
        layouts = [v for v in variants.values() if not isinstance(v, str)]
        assert all(v.layers == published.layers for v in layouts)
        assert isinstance(variants["2 layers per cache"], str) == (published.layers % 2 == 1)
        heads = ch.QUERY_HEADS[model]  # 8 groups need a multiple of 8 above 8
        assert isinstance(variants["GQA 8"], str) == (heads <= 8 or heads % 8 != 0)
    assert (
        ch.layout_variants("Gemma 3 1B")["GQA 8"]
        == "not possible: 4 query heads do not form 8 groups"
    )
    assert ch.layout_variants("DeepSeek-V3")["2 layers per cache"] == (
        "not possible: 61 layers do not pair up"
    )
    with pytest.raises(ValueError, match="model must be one of"):
        ch.layout_variants("GPT-5")


def test_deepseek_variants_cache_what_its_naive_mode_caches():
    """Keys of 128 + 64 and values of 128 per key/value head (section 2's 40,960 numbers for MHA,
    Q2's 320 for MQA), not 2 x 128: the explorer's DeepSeek-V3 bars agree with the text."""
    variants = ch.layout_variants("DeepSeek-V3")
    assert ch.kv_cache_bytes(variants["MHA"], 1) == 61 * 128 * (192 + 128) * 2
    assert ch.kv_cache_bytes(variants["MQA"], 1) == 61 * 320 * 2
    assert ch.kv_cache_bytes(variants["MHA"], 32_768) / 2**30 == 152.5


# ----------------------------------------------------------------------------- section 2
def test_mla_weights_shapes_range_seed_and_latent_dim():
    w = ch.mla_weights(d=10, heads=3, head_dim=4, latent_dim=5, rope_dim=2, seed=7)
    shapes = {k: tuple(v.shape) for k, v in vars(w).items() if torch.is_tensor(v)}
    assert shapes == {
        "w_q": (12, 10), "w_qr": (6, 10), "w_dkv": (5, 10), "w_kr": (2, 10),
        "w_uk": (12, 5), "w_uv": (12, 5), "w_o": (10, 12),
    }  # fmt: skip
    assert w.latent_dim == 5 and (w.heads, w.head_dim, w.rope_dim) == (3, 4, 2)
    assert w.w_q.abs().max() <= 1 / math.sqrt(10) and w.w_o.abs().max() <= 1 / math.sqrt(12)
    again = ch.mla_weights(10, 3, 4, 5, 2, seed=7)
    assert torch.equal(w.w_uk, again.w_uk) and not torch.equal(
        w.w_uk, ch.mla_weights(10, 3, 4, 5, 2).w_uk
    )
    w64 = w.to(torch.float64)
    assert w64.w_uv.dtype == torch.float64 and w.w_uv.dtype == torch.float32 and w64.latent_dim == 5
    for args in ((0, 3, 4, 5, 2), (10, 3, 4, 5, 3), (10, 3, 4, 5, 0), (10, 3.0, 4, 5, 2)):
        with pytest.raises(ValueError):
            ch.mla_weights(*args)


def mla_by_loops(x, w, start=0, earlier=None):
    """MLA token by token and head by head: the formula of section 2, no absorption."""
    b, n, _ = x.shape
    h, hd, dr = w.heads, w.head_dim, w.rope_dim
    everything = x if earlier is None else torch.cat([earlier, x], dim=1)  # (b, N, d)
    N = everything.shape[1]
    latent = everything @ w.w_dkv.T
    rope_k = ch.apply_rope(everything @ w.w_kr.T, torch.arange(N))  # (b, N, dr)
    out = torch.zeros(b, n, h * hd, dtype=x.dtype)
    for i in range(n):
        pos = N - n + i
        for head in range(h):
            rows = slice(head * hd, (head + 1) * hd)
            q = x[:, i] @ w.w_q[rows].T  # (b, hd)
            q_r = ch.apply_rope(
                (x[:, i] @ w.w_qr[head * dr : (head + 1) * dr].T)[:, None], torch.tensor([pos])
            )[:, 0]
            keys = latent[:, : pos + 1] @ w.w_uk[rows].T  # (b, pos + 1, hd)
            values = latent[:, : pos + 1] @ w.w_uv[rows].T
            scores = (keys @ q[..., None])[..., 0] + (rope_k[:, : pos + 1] @ q_r[..., None])[..., 0]
            weights = torch.softmax(scores / math.sqrt(hd + dr), dim=-1)  # (b, pos + 1)
            out[:, i, rows] = (weights[..., None] * values).sum(1)
    return out @ w.w_o.T


@pytest.mark.parametrize("form", ["mla_attention", "mla_absorbed", "mla_keys_cached"])
def test_each_mla_form_is_the_formula_in_one_pass_and_with_a_cache(form):
    step = getattr(ch, form)
    w = ch.mla_weights(12, 3, 4, 5, 2, seed=1).to(torch.float64)
    x = _rand(2, 6, 12, seed=2)
    assert torch.allclose(step(x, w)[0], mla_by_loops(x, w), atol=1e-12)
    first, cache = step(x[:, :4], w)
    second, cache = step(x[:, 4:], w, cache)
    assert torch.allclose(second, mla_by_loops(x[:, 4:], w, earlier=x[:, :4]), atol=1e-12)
    assert torch.allclose(torch.cat([first, second], 1), mla_by_loops(x, w), atol=1e-12)
    if form == "mla_keys_cached":  # every head's key (rotary part included) and value
        assert cache[0].shape == (2, 3, 6, 4 + 2) and cache[1].shape == (2, 3, 6, 4)
    else:  # the latent and the one rotary key
        assert cache[0].shape == (2, 6, 5) and cache[1].shape == (2, 6, 2)
        assert torch.allclose(cache[0], x @ w.w_dkv.T, atol=1e-12)


# ----------------------------------------------------------------------------- section 3
def test_feature_map_is_elu_plus_one_and_positive():
    x = torch.linspace(-30, 5, 200, dtype=torch.float64)
    assert torch.allclose(ch.feature_map(x), torch.where(x > 0, x + 1, torch.exp(x)), atol=1e-15)
    assert (ch.feature_map(x) > 0).all()


def linear_by_loops(q, k, v):
    fq, fk = ch.feature_map(q), ch.feature_map(k)
    out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    for i in range(q.shape[2]):
        sims = (fq[:, :, i, None, :] * fk[:, :, : i + 1]).sum(-1)  # (b, h, i + 1)
        out[:, :, i] = (sims[..., None] * v[:, :, : i + 1]).sum(2) / sims.sum(-1, keepdim=True)
    return out


def test_linear_attention_three_ways_are_the_sum_of_the_formula():
    q, k, v = _rand(2, 3, 9, 4, seed=3), _rand(2, 3, 9, 4, seed=4), _rand(2, 3, 9, 5, seed=5)
    expected = linear_by_loops(q, k, v)
    assert torch.allclose(ch.linear_attention_quadratic(q, k, v), expected, atol=1e-12)
    out, (S, z) = ch.linear_attention_recurrent(q, k, v)
    assert torch.allclose(out, expected, atol=1e-12)
    fk = ch.feature_map(k)
    assert torch.allclose(S, fk.mT @ v, atol=1e-12) and torch.allclose(z, fk.sum(2), atol=1e-12)
    for chunk in (1, 2, 4, 9, 20):  # 9 = 4 + 4 + 1: a last, shorter chunk
        assert torch.allclose(ch.linear_attention_chunked(q, k, v, chunk), expected, atol=1e-12)


def test_the_recurrence_continues_from_a_state_and_leaves_it_alone():
    q, k, v = _rand(1, 2, 7, 3, seed=6), _rand(1, 2, 7, 3, seed=7), _rand(1, 2, 7, 3, seed=8)
    _, state = ch.linear_attention_recurrent(q[:, :, :4], k[:, :, :4], v[:, :, :4])
    kept = tuple(t.clone() for t in state)
    rest, _ = ch.linear_attention_recurrent(q[:, :, 4:], k[:, :, 4:], v[:, :, 4:], state)
    assert torch.allclose(rest, linear_by_loops(q, k, v)[:, :, 4:], atol=1e-12)
    assert all(torch.equal(a, b) for a, b in zip(state, kept))


def test_gated_delta_rule_is_the_papers_product_form():
    """Yang et al. 2024: S_t = S_{t-1} alpha_t (I - beta_t k_t k_t^T) + beta_t v_t k_t^T, o_t = S_t q_t."""
    b, h, n, dk, dv = 2, 2, 6, 4, 3
    q, v = _rand(b, h, n, dk, seed=9), _rand(b, h, n, dv, seed=10)
    k = F.normalize(_rand(b, h, n, dk, seed=11), dim=-1)
    alpha, beta = torch.sigmoid(_rand(b, h, n, seed=12)), torch.sigmoid(_rand(b, h, n, seed=13))
    S = _rand(b, h, dv, dk, seed=14)
    start, outs = S.clone(), []
    for t in range(n):
        kt = k[:, :, t, :, None]  # (b, h, dk, 1)
        a, bt = alpha[:, :, t, None, None], beta[:, :, t, None, None]
        S = (
            S @ (a * (torch.eye(dk, dtype=S.dtype) - bt * kt @ kt.mT))
            + bt * v[:, :, t, :, None] @ kt.mT
        )
        outs.append((S @ q[:, :, t, :, None])[..., 0])
    got, memory = ch.gated_delta_rule(q, k, v, alpha, beta, start)
    assert torch.allclose(got, torch.stack(outs, 2), atol=1e-12) and torch.allclose(
        memory, S, atol=1e-12
    )
    assert torch.equal(start, _rand(b, h, dv, dk, seed=14))  # the caller's state untouched


# ----------------------------------------------------------------------------- sections 4 and 5
def test_lightning_index_and_attend_by_their_formulas():
    qi, ki, wi = _rand(2, 3, 4, 5, seed=15), _rand(2, 7, 5, seed=16), _rand(2, 3, 4, seed=17)
    loops = torch.zeros(2, 3, 7, dtype=torch.float64)
    for j in range(4):
        loops += wi[:, :, j, None] * torch.relu(qi[:, :, j] @ ki.mT)
    assert torch.allclose(ch.lightning_index(qi, ki, wi), loops, atol=1e-12)
    q, k, v = _rand(2, 3, 4, 6, seed=18), _rand(2, 3, 7, 6, seed=19), _rand(2, 3, 7, 2, seed=20)
    allowed = ch.sliding_window_mask(4, 7, 7)
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    assert torch.allclose(ch.attend(q, k, v, allowed), sdpa, atol=1e-12)


def test_sparse_attention_keeps_each_querys_best_earlier_keys():
    q, k, v = _rand(1, 2, 5, 3, seed=21), _rand(1, 2, 8, 3, seed=22), _rand(1, 2, 8, 2, seed=23)
    scores = _rand(1, 5, 8, seed=24)
    got = ch.sparse_attention(q, k, v, scores, 2)
    for i in range(5):  # query i sits at position 3 + i and may choose keys 0 .. 3 + i
        best = scores[0, i, : 4 + i].topk(2).indices
        allowed = torch.zeros(1, 8, dtype=torch.bool)
        allowed[0, best] = True
        expected = ch.attend(q[:, :, i : i + 1], k, v, allowed)
        assert torch.allclose(got[:, :, i : i + 1], expected, atol=1e-12)


def test_stack_weights_and_a_stack_that_shares_one_cache():
    layers = ch.stack_weights(d=8, layers=3, seed=4)
    assert len(layers) == 3 and all(set(w) == {"w_q", "w_k", "w_v", "w_o"} for w in layers)
    assert all(t.shape == (8, 8) and t.abs().max() <= 8**-0.5 for w in layers for t in w.values())
    assert torch.equal(layers[2]["w_v"], ch.stack_weights(8, 3, seed=4)[2]["w_v"])
    layers = [{m: t.double() for m, t in w.items()} for w in layers]
    x = _rand(1, 5, 8, seed=25)
    out, cache = ch.shared_kv_forward(x, layers, [0, 0, 0], heads=2)
    keys, values = (ch.split_heads(x @ layers[0][m].T, 2) for m in ("w_k", "w_v"))
    expected = x
    for w in layers:  # every layer attends to layer 0's keys and values
        att = ch.attend(
            ch.split_heads(expected @ w["w_q"].T, 2), keys, values, ch.sliding_window_mask(5, 5, 5)
        )
        expected = expected + ch.merge_heads(att) @ w["w_o"].T
    assert torch.allclose(out, expected, atol=1e-12) and sorted(cache) == [0]


def test_the_gathering_sparse_step_is_exercise_7_token_by_token():
    w = {m: t.double() for m, t in ch.stack_weights(d=8, layers=1, seed=6)[0].items()}
    w |= {"w_qi": _rand(6, 8, seed=26), "w_ki": _rand(2, 8, seed=27), "w_wi": _rand(3, 8, seed=28)}
    x = _rand(2, 7, 8, seed=29)  # a batch of two texts
    q, k, v = (ch.split_heads(x @ w[m].T, 2) for m in ("w_q", "w_k", "w_v"))
    scores = ch.lightning_index(
        (x @ w["w_qi"].T).view(2, 7, 3, 2), x @ w["w_ki"].T, x @ w["w_wi"].T
    )
    for topk in (1, 4, 50):  # 50: more than the text, every earlier key
        expected = ch.merge_heads(ch.sparse_attention(q, k, v, scores, topk)) @ w["w_o"].T
        cache = None
        for t in range(7):
            out, cache = ch.sparse_decode_step(x[:, t : t + 1], w, cache, topk, heads=2)
            assert out.shape == (2, 1, 8)
            assert torch.allclose(out, expected[:, t : t + 1], atol=1e-12), (topk, t)
        assert cache[0].shape == (2, 2, 7, 4) and cache[2].shape == (2, 7, 2)
