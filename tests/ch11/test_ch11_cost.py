"""Chapter 11, section 6: decode_cost's FLOPs, weights and cache per generated token, derived from
the shapes, against PyTorch's FlopCounterMode on the chapter's own decode steps and against the
numbers held in the tensors, on configurations other than the notebook's. Every kind is counted:
GQA with and without a window, a layer reading a shared cache, the gathering sparse step, MLA three
ways (and with a query latent), the recurrences (less the products they write elementwise)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import course_utils as cu

ch = cu.chapters


def counted(step) -> int:
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        step()
    return counter.get_total_flops()


@pytest.mark.parametrize(
    ("d", "h", "g", "window"), [(24, 3, 3, None), (48, 6, 2, None), (40, 4, 1, 7)]
)
@pytest.mark.parametrize("N", [1, 2, 7, 12])
def test_gqa_step_is_counted_as_derived(d, h, g, window, N):
    torch.manual_seed(N)
    attn = ch.GroupedQueryAttention(d, d, 32, 0.0, h, g, window=window)
    x = torch.randn(1, N, d)  # (1, N, d)
    cache = ch.gqa_attend_with_cache(attn, x[:, :-1])[1] if N > 1 else None
    flops, weights, cached = ch.decode_cost("gqa", N, d, h, d // h, g, window)
    # chapter 09's cache keeps W tokens; the step multiplies them and its own: W + 1, not W
    assert counted(lambda: ch.gqa_attend_with_cache(attn, x[:, -1:], cache)) == flops
    handed = (0, 0) if cache is None else (cache[0].numel(), cache[1].numel())
    assert cached == sum(handed) + 2 * g * (d // h)  # what it is handed and its own key and value
    assert weights == sum(
        m.weight.numel() for m in (attn.W_query, attn.W_key, attn.W_value, attn.out_proj)
    )


@pytest.mark.parametrize(("d", "h", "hd", "dc", "dr"), [(20, 2, 6, 10, 6), (12, 3, 4, 4, 2)])
@pytest.mark.parametrize("N", [1, 5, 17])
def test_mla_steps_are_counted_as_derived(d, h, hd, dc, dr, N):
    w = ch.mla_weights(d, h, hd, dc, dr, seed=N)
    x = torch.randn(1, N, d, generator=torch.Generator().manual_seed(N))  # (1, N, d)
    steps = {
        "mla": ch.mla_attention,
        "mla_absorbed": ch.mla_absorbed,
        "mla_kv_cache": ch.mla_keys_cached,
    }
    for kind, step in steps.items():
        earlier = step(x[:, :-1], w)[1] if N > 1 else None
        flops, weights, cached = ch.decode_cost(kind, N, d, h, hd, latent_dim=dc, rope_dim=dr)
        assert counted(lambda: step(x[:, -1:], w, earlier)) == flops, kind
        assert weights == sum(t.numel() for t in vars(w).values() if torch.is_tensor(t))
        assert cached == sum(t.numel() for t in step(x, w)[1])


@pytest.mark.parametrize(("h", "hd"), [(2, 5), (3, 4)])
def test_recurrences_count_their_reads_and_keep_a_fixed_state(h, hd):
    q, k, v = torch.randn(
        3, 1, h, 1, hd, generator=torch.Generator().manual_seed(h)
    )  # (1, h, 1, hd) each
    gates = torch.full((1, h, 1), 0.5)  # (1, h, 1)
    linear_state = ch.linear_attention_recurrent(q, k, v)[1]
    delta_state = ch.gated_delta_rule(q, k / k.norm(dim=-1, keepdim=True), v, gates, gates)[1]
    d = 8  # the projections' part, 8 d h hd, is not run here
    projections = 8 * d * h * hd
    # the outer-product writes (and linear attention's normaliser) are elementwise: not counted
    read = counted(lambda: ch.linear_attention_recurrent(q, k, v, linear_state))
    assert (
        read
        == ch.decode_cost("linear", 50, d, h, hd)[0] - projections - 2 * h * hd * hd - 2 * h * hd
    )
    read = counted(lambda: ch.gated_delta_rule(q, k, v, gates, gates, delta_state))
    assert read == ch.decode_cost("delta", 50, d, h, hd)[0] - projections - 2 * h * hd * hd
    assert ch.decode_cost("linear", 1, d, h, hd)[2] == sum(t.numel() for t in linear_state)
    assert ch.decode_cost("delta", 1, d, h, hd)[2] == delta_state.numel()
    assert ch.decode_cost("delta", 1, d, h, hd) == ch.decode_cost("delta", 10**6, d, h, hd)


def test_the_window_counts_what_chapter_09s_step_multiplies():
    """W + 1 keys once N > W (the W it keeps and its own); the old count, W, is one key short."""
    assert ch.decode_cost("gqa", 9, 32, 4, 8, 2, 5) == ch.decode_cost("gqa", 6, 32, 4, 8, 2)
    assert ch.decode_cost("gqa", 5, 32, 4, 8, 2, 5) == ch.decode_cost("gqa", 5, 32, 4, 8, 2)


@pytest.mark.parametrize("kv_source", [[0, 1, 2], [0, 0, 0], [0, 0, 2]])
@pytest.mark.parametrize("N", [1, 6])
def test_a_shared_stack_is_counted_layer_by_layer(kv_source, N):
    layers = ch.stack_weights(d=12, layers=3, seed=N)
    x = torch.randn(1, N, 12, generator=torch.Generator().manual_seed(1))  # (1, N, d)
    cache = ch.shared_kv_forward(x[:, :-1], layers, kv_source, heads=3)[1] if N > 1 else None
    kinds = ["gqa" if i == source else "shared" for i, source in enumerate(kv_source)]
    derived = sum(ch.decode_cost(kind, N, 12, 3, 4)[0] for kind in kinds)
    assert counted(lambda: ch.shared_kv_forward(x[:, -1:], layers, kv_source, 3, cache)) == derived
    assert ch.decode_cost("shared", N, 12, 3, 4)[1] == 2 * 12 * 12  # W_q and W_o only


@pytest.mark.parametrize("N", [1, 4, 11])
def test_the_gathering_sparse_step_is_counted_less_its_elementwise_head_sum(N):
    w = ch.stack_weights(d=12, layers=1, seed=2)[0] | {
        name: torch.randn(rows, 12, generator=torch.Generator().manual_seed(rows))
        for name, rows in (("w_qi", 10), ("w_ki", 5), ("w_wi", 2))
    }  # an indexer of 2 heads of 5
    x = torch.randn(1, N, 12, generator=torch.Generator().manual_seed(3))
    cache = None
    for t in range(N - 1):
        cache = ch.sparse_decode_step(x[:, t : t + 1], w, cache, 4, 3)[1]
    flops, weights, cached = ch.decode_cost(
        "sparse", N, 12, 3, 4, topk=4, index_heads=2, index_dim=5
    )
    step = counted(lambda: ch.sparse_decode_step(x[:, -1:], w, cache, 4, 3))
    assert step == flops - 2 * 2 * N  # lightning_index sums its weighted heads elementwise
    assert weights == sum(t.numel() for t in w.values())
    assert cached == 2 * 3 * 4 * min(N, 4) + 5 * N  # the kept keys and values, every indexer key


def test_a_query_latent_is_counted_as_two_smaller_products():
    """DeepSeek-V3's queries: x down to q_lora_rank, then up to every head (the norm between
    them is no matrix product)."""
    d, h, hd, dr, dq = 20, 3, 4, 2, 6
    x = torch.randn(1, 1, d)
    wq_a, wq_b = torch.randn(dq, d), torch.randn(h * (hd + dr), dq)
    compressed = counted(lambda: (x @ wq_a.T) @ wq_b.T)
    plain = counted(lambda: x @ torch.randn(h * (hd + dr), d).T)
    for kind in ("mla", "mla_kv_cache", "mla_absorbed"):
        with_latent = ch.decode_cost(
            kind, 7, d, h, hd, latent_dim=5, rope_dim=dr, query_latent_dim=dq
        )
        without = ch.decode_cost(kind, 7, d, h, hd, latent_dim=5, rope_dim=dr)
        assert with_latent[0] - without[0] == compressed - plain
        assert with_latent[1] - without[1] == wq_a.numel() + wq_b.numel() - h * (hd + dr) * d
        assert with_latent[2] == without[2]  # the cache does not see the queries


def test_bad_input_is_refused_with_what_was_expected():
    with pytest.raises(ValueError, match="kind must be one of"):
        ch.decode_cost("ssm", 10, 32, 4, 8)
    with pytest.raises(ValueError, match="N .* must be an int >= 1"):
        ch.decode_cost("gqa", 0, 32, 4, 8)
    with pytest.raises(ValueError, match="'sparse' needs topk"):
        ch.decode_cost("sparse", 10, 32, 4, 8)
    with pytest.raises(ValueError, match="MLA needs latent_dim"):
        ch.decode_cost("mla_absorbed", 10, 32, 4, 8)
