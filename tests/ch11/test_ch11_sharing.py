"""Chapter 11, section 5: the KV-sharing check names each bug and passes unusual right answers;
the shared cache equals explicit sharing, step by step, at section 1's byte count."""

from __future__ import annotations

import pytest
import torch

import course_utils as cu
from course_utils.chapters import (
    KVLayout,
    attend,
    kv_cache_bytes,
    merge_heads,
    shared_kv_forward,
    sliding_window_mask,
    split_heads,
    stack_weights,
)
from tests.ch11 import buggy_sharing
from tests.ch11.correct_sparse_sharing import SHARE_RIGHT
from tests.check_helpers import assert_names_bug

RIGHT = SHARE_RIGHT  # the course's own shared_kv_forward is refused (tests/test_honesty.py)


@pytest.mark.parametrize("fn", RIGHT, ids=[fn.__name__ for fn in RIGHT])
def test_right_answers_pass_with_one_line(fn, capsys):
    cu.checks.check_shared_kv_forward(fn)
    out = capsys.readouterr().out
    assert out.startswith("✓ check_shared_kv_forward:") and out.count("\n") == 1, out


@pytest.mark.parametrize(
    ("fn", "bug"), buggy_sharing.SHARE_BUGS, ids=[fn.__name__ for fn, _ in buggy_sharing.SHARE_BUGS]
)
def test_each_bug_is_named(fn, bug):
    assert_names_bug(cu.checks.check_shared_kv_forward, fn, bug=bug)


def _stack(layers=6, seed=0):
    weights = [{m: t.double() for m, t in w.items()} for w in stack_weights(12, layers, seed=seed)]
    return weights, torch.randn(
        2, 8, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)
    )


def test_equal_to_explicit_sharing_in_threes():
    layers, x = _stack()
    mask, explicit = sliding_window_mask(8, 8, 8), x
    for i, w in enumerate(layers):
        if i % 3 == 0:  # layers 0 and 3 make keys and values, the next two read them
            handed = [split_heads(explicit @ w[m].T, 3) for m in ("w_k", "w_v")]
        explicit = (
            explicit
            + merge_heads(attend(split_heads(explicit @ w["w_q"].T, 3), *handed, mask)) @ w["w_o"].T
        )
    out, cache = shared_kv_forward(x, layers, [0, 0, 0, 3, 3, 3], heads=3)
    assert torch.allclose(out, explicit, atol=1e-12, rtol=0) and sorted(cache) == [0, 3]


def test_no_sharing_is_the_plain_stack_and_steps_equal_one_pass():
    layers, x = _stack(seed=1)
    plain = x
    for w in layers:
        q, k, v = (split_heads(plain @ w[m].T, 4) for m in ("w_q", "w_k", "w_v"))
        plain = plain + merge_heads(attend(q, k, v, sliding_window_mask(8, 8, 8))) @ w["w_o"].T
    assert torch.allclose(
        shared_kv_forward(x, layers, list(range(6)), heads=4)[0], plain, atol=1e-12
    )
    sources, cache, pieces = [0, 1, 1, 3, 1, 3], None, []
    for a, b in ((0, 3), (3, 4), (4, 8)):
        out, cache = shared_kv_forward(x[:, a:b], layers, sources, heads=4, cache=cache)
        pieces.append(out)
    one_pass, _ = shared_kv_forward(x, layers, sources, heads=4)
    assert torch.allclose(torch.cat(pieces, 1), one_pass, atol=1e-12, rtol=0)


@pytest.mark.parametrize("per", [1, 2, 3])
def test_the_cache_holds_section_1s_bytes(per):
    layers, x = _stack()
    _, cache = shared_kv_forward(x, layers, [i - i % per for i in range(6)], heads=4)
    held = sum(t.numel() * t.element_size() for kv in cache.values() for t in kv)
    layout = KVLayout(layers=6, kv_heads=4, head_dim=3, layers_per_cache=per)
    assert held == kv_cache_bytes(layout, 8, batch=2, bytes_per_value=8)


def test_the_callers_cache_is_not_changed():
    layers, x = _stack()
    _, cache = shared_kv_forward(x[:, :4], layers, [0, 0, 2, 2, 4, 4], heads=4)
    before = {i: kv for i, kv in cache.items()}
    shared_kv_forward(x[:, 4:], layers, [0, 0, 2, 2, 4, 4], heads=4, cache=cache)
    assert all(cache[i] is before[i] for i in before) and sorted(cache) == [0, 2, 4]
