"""Code taught by chapter 01, exported from its `#| export` cells.

Generated from solutions/01_toy_attention.ipynb by `make exercises`; do not edit: edit the notebook.
"""

import torch

__all__ = ["attention_scores", "attention_weights", "context_vectors"]


def attention_scores(query, inputs):
    """Dot product of query (d,) with each row of inputs (n, d) -> (n,)."""
    return (inputs * query).sum(dim=-1)


def attention_weights(inputs):
    """(n, d) -> (n, n): row q holds query q's weights over all n tokens."""
    pairwise = torch.einsum("qd,kd->qk", inputs, inputs)
    return torch.softmax(pairwise, dim=1)


def context_vectors(inputs):
    """(n, d) -> (n, d): row q is the weighted average of the inputs for query q."""
    return attention_weights(inputs) @ inputs
