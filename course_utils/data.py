"""The course's running example: six tokens embedded in three dimensions."""

from __future__ import annotations

import torch

EXAMPLE_SENTENCE = "Your journey starts with one step"
"""The sentence behind the running example."""

EXAMPLE_TOKENS: tuple[str, ...] = ("Your", "journey", "starts", "with", "one", "step")
"""One label per token (one word each), used on the axes of every attention map."""

EXAMPLE_VALUES: tuple[tuple[float, float, float], ...] = (
    (0.43, 0.15, 0.89),  # Your     (x^1)
    (0.55, 0.87, 0.66),  # journey  (x^2)
    (0.57, 0.85, 0.64),  # starts   (x^3)
    (0.22, 0.58, 0.33),  # with     (x^4)
    (0.77, 0.25, 0.10),  # one      (x^5)
    (0.05, 0.80, 0.55),  # step     (x^6)
)
"""The 3-d embedding of each token: the values used in the book's chapter 3."""


def example_inputs(device: torch.device | str | None = None) -> torch.Tensor:
    """Return a fresh (6, 3) float32 tensor with the running example's embeddings.

    A new tensor is returned on every call, so a notebook cannot change the example
    for later cells by editing it in place.
    """
    return torch.tensor(EXAMPLE_VALUES, dtype=torch.float32, device=device)


def example_scores() -> torch.Tensor:
    """(6, 6) dot-product scores of the running example with itself (chapter 01's matrix)."""
    x = example_inputs()
    return x @ x.T
