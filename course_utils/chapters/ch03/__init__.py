"""Code taught by chapter 03, exported from its `#| export` cells.

Generated from solutions/03_causal_masking.ipynb by `make exercises`; do not edit: edit the notebook.
"""

import torch

__all__ = ["causal_mask", "mask_after_softmax", "mask_before_softmax"]


def causal_mask(n):
    """(n, n) bool tensor: True where the key comes after the query (to be hidden)."""
    positions = torch.arange(n)  # (n,)
    return positions.unsqueeze(0) > positions.unsqueeze(1)  # (1, n) > (n, 1) -> (n, n)


def mask_after_softmax(scores, d_k):
    """Way 1: scaled softmax, then zero the future weights and renormalise each row."""
    visible = ~causal_mask(scores.shape[-1]).to(scores.device)  # (n, n): True = may look
    probs = torch.softmax(scores / d_k**0.5, dim=-1) * visible  # (..., n, n): future -> 0
    return probs / probs.sum(dim=-1, keepdim=True)  # (..., n, n): rows sum to 1 again


def mask_before_softmax(scores, d_k):
    """Way 2: future scores -> -inf, then the scaled softmax."""
    hidden = causal_mask(scores.shape[-1]).to(scores.device)  # (n, n): True = hide
    return torch.softmax(scores.masked_fill(hidden, float("-inf")) / d_k**0.5, dim=-1)  # (..., n, n)
