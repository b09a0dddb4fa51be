"""Right but unusual answers to chapter 07's blockwise (online-softmax) exercise: every one must pass."""

import math

import torch


def _causal_block(q, k_b, start):
    n = q.shape[0]
    query = torch.arange(n, device=q.device).unsqueeze(1)  # (n, 1)
    key = torch.arange(start, start + k_b.shape[0], device=q.device)  # (block,)
    return (q @ k_b.T / math.sqrt(q.shape[1])).masked_fill(key > query, float("-inf"))  # (n, block)


def two_pass(q, k, v, block_size):
    """Flash-style in two passes: the row maxima block by block first, then the sums and outputs."""
    blocks = range(0, k.shape[0], block_size)
    row_max = torch.full((q.shape[0], 1), float("-inf"), device=q.device)
    for s in blocks:
        row_max = torch.maximum(
            row_max, _causal_block(q, k[s : s + block_size], s).amax(dim=1, keepdim=True)
        )
    total, out = torch.zeros_like(row_max), torch.zeros(q.shape[0], v.shape[1], device=q.device)
    for s in blocks:
        p = torch.exp(_causal_block(q, k[s : s + block_size], s) - row_max)  # (n, block)
        total, out = total + p.sum(dim=1, keepdim=True), out + p @ v[s : s + block_size]
    return out / total


def log_sum_exp_state(q, k, v, block_size):
    """Keeps the running log of the denominator (logsumexp) instead of a maximum and a sum."""
    lse = torch.full((q.shape[0], 1), float("-inf"), device=q.device)
    out = torch.zeros(q.shape[0], v.shape[1], device=q.device)
    for s in range(0, k.shape[0], block_size):
        scores = _causal_block(q, k[s : s + block_size], s)  # (n, block)
        block_lse = torch.logsumexp(scores, dim=1, keepdim=True)  # (n, 1)
        new_lse = torch.logaddexp(lse, block_lse)
        block_out = torch.exp(scores - block_lse).nan_to_num() @ v[s : s + block_size]
        out = out * torch.exp(lse - new_lse) + block_out * torch.exp(block_lse - new_lse)
        lse = new_lse
    return out


def float64_state(q, k, v, block_size):
    """The usual running max and sum, accumulated in float64 and returned in q's dtype."""
    q64, k64, v64 = q.double(), k.double(), v.double()
    run_max = torch.full((q.shape[0], 1), float("-inf"), dtype=torch.float64, device=q.device)
    run_sum = torch.zeros_like(run_max)
    out = torch.zeros(q.shape[0], v.shape[1], dtype=torch.float64, device=q.device)
    for s in range(0, k.shape[0], block_size):
        scores = _causal_block(q64, k64[s : s + block_size], s)
        new_max = torch.maximum(run_max, scores.amax(dim=1, keepdim=True))
        p, factor = torch.exp(scores - new_max), torch.exp(run_max - new_max)
        run_sum = run_sum * factor + p.sum(dim=1, keepdim=True)
        out = out * factor + p @ v64[s : s + block_size]
        run_max = new_max
    return (out / run_sum).to(q.dtype)


def guarded_exponent(q, k, v, block_size):
    """FlashAttention's guard: where a row's maximum is still -inf, exponentiate against 0 (all its
    weights are 0 anyway); the running maximum itself keeps -inf."""
    run_max = torch.full((q.shape[0], 1), float("-inf"), device=q.device)
    run_sum = torch.zeros_like(run_max)
    out = torch.zeros(q.shape[0], v.shape[1], device=q.device)
    for s in range(0, k.shape[0], block_size):
        scores = _causal_block(q, k[s : s + block_size], s)
        new_max = torch.maximum(run_max, scores.amax(dim=1, keepdim=True))
        safe = torch.where(new_max == float("-inf"), 0.0, new_max)
        p, factor = torch.exp(scores - safe), torch.exp(run_max - safe)
        run_sum = run_sum * factor + p.sum(dim=1, keepdim=True)
        out = out * factor + p @ v[s : s + block_size]
        run_max = new_max
    return out / run_sum


ANSWERS = [
    ("check_blockwise_attention", (fn,))
    for fn in (two_pass, log_sum_exp_state, float64_state, guarded_exponent)
]
