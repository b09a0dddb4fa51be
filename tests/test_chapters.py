"""The exported chapter code (cu.chapters) keeps the course's promises.

Its one source is the solution notebooks (see tests/test_export.py); these tests check what the
chapters state: the book's printed values, and the course's rule that an input the layer cannot
take raises a ValueError naming both numbers.
"""

from __future__ import annotations

import pytest
import torch

import course_utils as cu

BOOK_FIRST_ROWS = {
    # class -> (constructor arguments, first output row for the book's batch, seed 123)
    "CausalAttention": ((3, 2, 6, 0.0), [-0.4519, 0.2216]),
    "MultiHeadAttentionWrapper": ((3, 2, 6, 0.0, 2), [-0.4519, 0.2216, 0.4772, 0.1063]),
    "MultiHeadAttention": ((3, 2, 6, 0.0, 2), [0.3190, 0.4858]),
}


@pytest.mark.parametrize("name", list(BOOK_FIRST_ROWS))
def test_book_values(name):
    batch = torch.stack((cu.example_inputs(), cu.example_inputs()))  # (2, 6, 3)
    args, first_row = BOOK_FIRST_ROWS[name]
    torch.manual_seed(123)
    with torch.no_grad():
        out = getattr(cu.chapters, name)(*args)(batch)  # (2, 6, d_out)
    assert out.shape[:2] == (2, 6)
    assert torch.allclose(out[0, 0], torch.tensor(first_row), atol=5e-5), out[0, 0]


@pytest.mark.parametrize(
    "build",
    [
        lambda: cu.chapters.CausalAttention(3, 2, 6, 0.0),
        lambda: cu.chapters.MultiHeadAttentionWrapper(3, 2, 6, 0.0, 2),
        lambda: cu.chapters.MultiHeadAttention(3, 2, 6, 0.0, 2),
    ],
    ids=["CausalAttention", "MultiHeadAttentionWrapper", "MultiHeadAttention"],
)
def test_layers_refuse_inputs_longer_than_context_length(build):
    with pytest.raises(ValueError, match=r"7 tokens.*context_length=6"):
        build()(torch.randn(1, 7, 3))


def test_models_refuse_token_ids_longer_than_context_length():
    for model in (cu.chapters.InputEmbedding(50, 4, 8), cu.chapters.TinyGPT(50, 4, 8, 2)):
        with pytest.raises(ValueError, match=r"5 tokens.*context_length=4"):
            model(torch.zeros(1, 5, dtype=torch.long))


def test_split_heads_refuse_widths_the_heads_cannot_share():
    with pytest.raises(ValueError, match=r"d_out=5.*num_heads=2"):
        cu.chapters.MultiHeadAttention(3, 5, 6, 0.0, 2)


def test_dropout_off_in_eval_mode_and_same_seed_same_layer():
    x = torch.randn(2, 5, 4, generator=torch.Generator().manual_seed(0))  # (2, 5, 4)
    outs = []
    for _ in range(2):
        torch.manual_seed(7)
        layer = cu.chapters.MultiHeadAttention(4, 4, 6, 0.5, 2).eval()
        with torch.no_grad():
            outs.append(layer(x))  # (2, 5, 4)
    assert torch.equal(*outs)


@pytest.mark.parametrize(
    ("check", "name"),
    [
        ("check_causal_attention", "CausalAttention"),
        ("check_multihead_wrapper", "MultiHeadAttentionWrapper"),
        ("check_multihead_attention", "MultiHeadAttention"),
    ],
)
def test_the_chapter_checks_accept_the_exported_classes(check, name, capsys):
    """The exported class's behaviour is right; handed in itself it is refused (test_honesty.py),
    so a student's subclass with its own forward (calling the course's) carries it in."""
    cls = getattr(cu.chapters, name)
    getattr(cu.checks, check)(type(name, (cls,), {"forward": lambda s, x: cls.forward(s, x)}))
    assert capsys.readouterr().out.startswith(f"✓ {check}")
