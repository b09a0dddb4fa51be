"""Answers to chapter 07's exercise: the right blockwise attention, then mistakes students make."""

import math

import torch


def _blockwise(
    q,
    k,
    v,
    block_size,
    *,
    keep=lambda key, query: key <= query,
    scale=None,
    rescale=True,
    normalise=True,
    global_keys=True,
    device=None,
    guard_max=False,
):
    n, d = q.shape
    device = q.device if device is None else device
    scale = 1 / math.sqrt(d) if scale is None else scale
    run_max = torch.full((n, 1), float("-inf"), device=device)
    run_sum = torch.zeros(n, 1, device=device)
    run_out = torch.zeros(n, v.shape[1], device=device)
    query = torch.arange(n, device=device).unsqueeze(1)
    for start in range(0, n, block_size):
        k_b, v_b = k[start : start + block_size], v[start : start + block_size]
        key = torch.arange(k_b.shape[0], device=device) + (start if global_keys else 0)
        s = (q @ k_b.T) * scale
        s = s.masked_fill(~keep(key, query), float("-inf"))
        if guard_max:  # a running maximum of -inf replaced by 0, "to avoid -inf - -inf"
            run_max = torch.where(run_max == float("-inf"), 0.0, run_max)
        new_max = torch.maximum(run_max, s.amax(dim=1, keepdim=True))
        factor = torch.exp(run_max - new_max) if rescale else 1.0
        p = torch.exp(s - new_max)
        run_sum = run_sum * factor + p.sum(dim=1, keepdim=True)
        run_out = run_out * factor + p @ v_b
        run_max = new_max
    return run_out / run_sum if normalise else run_out


# Sources: typical slips in online-softmax (FlashAttention-style) code: no rescaling of the running
# sums, no final division, block-local key positions, and library shortcuts (SDPA, whole-row softmax).
def right(q, k, v, block_size):
    return _blockwise(q, k, v, block_size)


def no_mask(q, k, v, block_size):
    return _blockwise(q, k, v, block_size, keep=lambda key, query: key >= 0)


def diagonal_masked(q, k, v, block_size):
    return _blockwise(q, k, v, block_size, keep=lambda key, query: key < query)


def block_local_positions(q, k, v, block_size):
    return _blockwise(q, k, v, block_size, global_keys=False)


def no_scale(q, k, v, block_size):
    return _blockwise(q, k, v, block_size, scale=1.0)


def scale_by_d(q, k, v, block_size):
    return _blockwise(q, k, v, block_size, scale=1 / q.shape[1])


def no_rescale(q, k, v, block_size):
    return _blockwise(q, k, v, block_size, rescale=False)


def no_normalise(q, k, v, block_size):
    return _blockwise(q, k, v, block_size, normalise=False)


def full_matrix(q, k, v, block_size):
    """Right numbers, but through the (n, n) score matrix the exercise is about avoiding."""
    return _full(q, k, v)


def _full(q, k, v):
    n = q.shape[0]
    scores = (q @ k.T) / math.sqrt(q.shape[1])
    scores = scores.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), 1), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def output_width_of_q(q, k, v, block_size):
    """Sizes the running output like q, not like v."""
    n, d = q.shape
    out = torch.zeros(n, d)
    return out + _blockwise(q, k, v, block_size).mean()


def one_sdpa_call(q, k, v, block_size):
    """The whole exercise in one library call (seen in public solutions to online-softmax exercises)."""
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def full_row_softmax(q, k, v, block_size):
    """Per query, the scores gathered block by block, then one softmax over the whole row."""
    n, d = q.shape
    out = []
    for i in range(n):
        row = torch.cat(
            [q[i] @ k[s : s + block_size].T for s in range(0, n, block_size)]
        ) / math.sqrt(d)  # (n,)
        row = row.masked_fill(torch.arange(n) > i, float("-inf"))
        out.append(torch.softmax(row, dim=-1) @ v)
    return torch.stack(out)


def running_sums_on_cpu(q, k, v, block_size):
    """Typical slip: torch.zeros(n, 1) without device=q.device, as in many tutorial loops."""
    return _blockwise(q, k, v, block_size, device="cpu")


def returns_list(q, k, v, block_size):
    return _blockwise(q, k, v, block_size).tolist()


def stub(q, k, v, block_size):
    raise NotImplementedError()


def sdpa_with_explicit_mask(q, k, v, block_size):
    """SDPA with a keep-mask instead of is_causal (the same shortcut, written out; block_size unused)."""
    keep = torch.ones(q.shape[0], k.shape[0], dtype=torch.bool, device=q.device).tril()
    return torch.nn.functional.scaled_dot_product_attention(
        q[None], k[None], v[None], attn_mask=keep
    )[0]


def returns_numpy(q, k, v, block_size):
    """Accumulated in NumPy (a NumPy online-softmax tutorial ported as is): an ndarray comes back."""
    return _blockwise(q, k, v, block_size).numpy()


def max_from_zero(q, k, v, block_size):
    # Written to the pattern of guarding the first block's -inf - -inf = NaN by replacing a running
    # maximum of -inf with 0: right for ordinary scores, 0 / 0 = NaN once every score of a row is below
    # about -87 (exp underflows in float32), though the softmax is unchanged by such a shift.
    return _blockwise(q, k, v, block_size, guard_max=True)
