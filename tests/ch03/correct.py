"""Right but unusual answers to chapter 03's exercises: every one must pass its check."""

import torch


def mask_from_tril(n):
    """The complement of the keep-mask that torch.tril draws."""
    return ~torch.tril(torch.ones(n, n, dtype=torch.bool))


def mask_float_then_bool(n):
    """Built in float (as the book does), handed back as bool."""
    return torch.ones(n, n).triu(diagonal=1).bool()


def after_with_where(scores, d_k):
    """Zeroes the future with torch.where, then renormalises each row."""
    weights = torch.softmax(scores / d_k**0.5, dim=-1)
    n = scores.shape[-1]
    keep = torch.ones(n, n, dtype=torch.bool, device=scores.device).tril()
    weights = torch.where(keep, weights, torch.zeros_like(weights))
    return weights / weights.sum(dim=-1, keepdim=True)


def before_with_where(scores, d_k):
    """torch.where puts -inf in the future before the softmax."""
    n = scores.shape[-1]
    future = torch.ones(n, n, dtype=torch.bool, device=scores.device).triu(1)
    masked = torch.where(future, torch.tensor(float("-inf"), device=scores.device), scores)
    return torch.softmax(masked / d_k**0.5, dim=-1)


def before_additive_full(scores, d_k):
    """An additive mask made by torch.full(-inf).triu(1): 0 on and below the diagonal."""
    n = scores.shape[-1]
    additive = torch.full((n, n), float("-inf"), device=scores.device).triu(1)
    return torch.softmax(scores / d_k**0.5 + additive, dim=-1)


def before_float64(scores, d_k):
    """Computed in float64, returned in the scores' dtype."""
    n = scores.shape[-1]
    future = torch.ones(n, n, dtype=torch.bool, device=scores.device).triu(1)
    weights = torch.softmax(scores.double().masked_fill(future, float("-inf")) / d_k**0.5, dim=-1)
    return weights.to(scores.dtype)


def before_triu_indices(scores, d_k):
    """-inf written through index tensors made on the CPU: PyTorch moves CPU indices to the scores'
    device, so this runs on a GPU too."""
    n = scores.shape[-1]
    rows, cols = torch.triu_indices(n, n, offset=1)  # (k,) each, on the CPU
    masked = scores.clone()
    masked[..., rows, cols] = float("-inf")
    return torch.softmax(masked / d_k**0.5, dim=-1)


ANSWERS = [
    ("check_causal_mask", (mask_from_tril,)),
    ("check_causal_mask", (mask_float_then_bool,)),
    ("check_mask_after_softmax", (after_with_where,)),
    ("check_mask_before_softmax", (before_with_where,)),
    ("check_mask_before_softmax", (before_additive_full,)),
    ("check_mask_before_softmax", (before_float64,)),
    ("check_mask_before_softmax", (before_triu_indices,)),
]
