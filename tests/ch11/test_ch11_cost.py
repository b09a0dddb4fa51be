"""Chapter 11, section 6: decode_cost's FLOPs, weights and cache per generated token, derived from
the shapes, against PyTorch's FlopCounterMode on the chapter's own decode steps and against the
numbers held in the tensors, on configurations other than the notebook's."""

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
    spare = 4 * h * (d // h) if window and N > window else 0  # chapter 09 scores W + 1, masks one
    assert counted(lambda: ch.gqa_attend_with_cache(attn, x[:, -1:], cache)) == flops + spare
    keys, values, _ = ch.gqa_attend_with_cache(attn, x)[1]  # (1, g, min(N, W), hd) each
    assert cached == keys.numel() + values.numel()
    assert weights == sum(
        m.weight.numel() for m in (attn.W_query, attn.W_key, attn.W_value, attn.out_proj)
    )


@pytest.mark.parametrize(("d", "h", "hd", "dc", "dr"), [(20, 2, 6, 10, 6), (12, 3, 4, 4, 2)])
@pytest.mark.parametrize("N", [1, 5, 17])
def test_mla_steps_are_counted_as_derived(d, h, hd, dc, dr, N):
    w = ch.mla_weights(d, h, hd, dc, dr, seed=N)
    x = torch.randn(1, N, d, generator=torch.Generator().manual_seed(N))  # (1, N, d)
    cache = ch.mla_attention(x[:, :-1], w)[1] if N > 1 else None
    for kind, step in (("mla", ch.mla_attention), ("mla_absorbed", ch.mla_absorbed)):
        flops, weights, cached = ch.decode_cost(kind, N, d, h, hd, latent_dim=dc, rope_dim=dr)
        assert counted(lambda: step(x[:, -1:], w, cache)) == flops, kind
        assert weights == sum(t.numel() for t in vars(w).values() if torch.is_tensor(t))
        assert cached == sum(t.numel() for t in ch.mla_attention(x, w)[1])


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


def test_bad_input_is_refused_with_what_was_expected():
    with pytest.raises(ValueError, match="kind must be one of"):
        ch.decode_cost("sparse", 10, 32, 4, 8)
    with pytest.raises(ValueError, match="N .* must be an int >= 1"):
        ch.decode_cost("gqa", 0, 32, 4, 8)
