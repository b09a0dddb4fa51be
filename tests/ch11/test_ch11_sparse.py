"""Chapter 11, section 4: sparse attention's check names each bug and passes unusual right answers;
its properties (causal, at most k, dense when k covers the prefix, cached == uncached) asserted."""

from __future__ import annotations

import pytest
import torch

import course_utils as cu
from course_utils.chapters import attend, lightning_index, sliding_window_mask, sparse_attention
from tests.ch11 import buggy_sparse
from tests.ch11.correct_sparse_sharing import SPARSE_RIGHT
from tests.check_helpers import assert_names_bug

RIGHT = SPARSE_RIGHT  # the course's own sparse_attention is refused (tests/test_honesty.py)


@pytest.mark.parametrize("fn", RIGHT, ids=[fn.__name__ for fn in RIGHT])
def test_right_answers_pass_with_one_line(fn, capsys):
    cu.checks.check_sparse_attention(fn)
    out = capsys.readouterr().out
    assert out.startswith("✓ check_sparse_attention:") and out.count("\n") == 1, out


@pytest.mark.parametrize(
    ("fn", "bug"), buggy_sparse.SPARSE_BUGS, ids=[fn.__name__ for fn, _ in buggy_sparse.SPARSE_BUGS]
)
def test_each_bug_is_named(fn, bug):
    assert_names_bug(cu.checks.check_sparse_attention, fn, bug=bug)


def _inputs(n=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(2, 3, n, 4, dtype=torch.float64, generator=g) for _ in range(2))
    v = torch.randn(2, 3, n, 5, dtype=torch.float64, generator=g)
    idx = lightning_index(
        torch.randn(2, n, 2, 4, dtype=torch.float64, generator=g),
        torch.randn(2, n, 4, dtype=torch.float64, generator=g),
        torch.randn(2, n, 2, dtype=torch.float64, generator=g),
    )  # (2, n, n), with ReLU ties at 0
    return q, k, v, idx


@pytest.mark.parametrize("topk", [1, 4, 12, 20])
def test_causal_at_most_k_and_dense_when_k_covers_the_prefix(topk):
    q, k, v, idx = _inputs()
    causal = sliding_window_mask(12, 12, 12)
    weights = sparse_attention(
        q, k, torch.eye(12, dtype=torch.float64).expand(2, 3, 12, 12), idx, topk
    )
    assert (weights[..., ~causal] == 0).all()
    assert ((weights > 0).sum(-1) == torch.arange(1, 13).clamp(max=topk)).all()
    if topk >= 12:
        assert torch.allclose(
            sparse_attention(q, k, v, idx, topk), attend(q, k, v, causal), atol=1e-12
        )


@pytest.mark.parametrize("topk", [1, 3, 12])
def test_cached_steps_equal_one_pass(topk):
    q, k, v, idx = _inputs(seed=1)
    steps = [(0, 5), (5, 6), (6, 9), (9, 12)]
    got = torch.cat(
        [
            sparse_attention(q[:, :, a:b], k[:, :, :b], v[:, :, :b], idx[:, a:b, :b], topk)
            for a, b in steps
        ],
        2,
    )
    assert torch.allclose(got, sparse_attention(q, k, v, idx, topk), atol=1e-12, rtol=0)


def test_the_lightning_index_is_the_papers_sum():
    g = torch.Generator().manual_seed(2)
    qi, ki, w = (
        torch.randn(1, 3, 2, 4, generator=g),
        torch.randn(1, 5, 4, generator=g),
        torch.randn(1, 3, 2, generator=g),
    )
    by_hand = sum(w[0, 1, j] * torch.relu(qi[0, 1, j] @ ki[0, 4]) for j in range(2))
    assert torch.allclose(lightning_index(qi, ki, w)[0, 1, 4], by_hand)
