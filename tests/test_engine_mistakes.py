"""The mistakes the shared engine names (course_utils/checks/mistakes/engine.txt), each raised by a
wrong answer and asserted by its id. The layers build on tests/ch04/buggy.py's ``Correct``."""

from __future__ import annotations

import pytest
import torch

import course_utils as cu
from tests.ch04.buggy import Correct


class NotAModule:
    """A plain class where an nn.Module is expected (written for the course: `class X:` without
    `(nn.Module)`, the slip the checks see first in a new student's class)."""

    def __init__(self, *args, **kwargs):
        pass


class MaskBuiltEveryCall(Correct):
    """The causal mask made inside forward and never stored (written for the course; the book and
    nanoGPT register it once as a buffer)."""

    def store_mask(self, mask):
        pass

    def apply_mask(self, scores, n):
        future = torch.triu(torch.ones(n, n, dtype=torch.bool, device=scores.device), 1)
        return scores.masked_fill(future, -torch.inf)


class HandMadeDropout(Correct):
    """Dropout written by hand with torch.rand instead of nn.Dropout (written for the course; the
    mask then follows no nn.Dropout the grader can see)."""

    def drop(self, weights):
        if not self.training or self.dropout.p == 0:
            return weights
        keep = torch.rand_like(weights) >= self.dropout.p
        return weights * keep / (1 - self.dropout.p)


class DropoutOnTransposedKeys(Correct):
    """nn.Dropout applied to the keys on their way into the score product (written for the course:
    dropout placed on a tensor that is neither the weights nor one the checks name)."""

    def scores(self, q, k):
        return q @ self.dropout(k.transpose(1, 2))


def _stub(x):
    raise NotImplementedError()


CASES = [
    (cu.checks.check_softmax, "softmax", "wrong_argument"),
    (
        cu.checks.check_causal_attention,
        cu.chapters.CausalAttention(3, 2, 6, 0.0),
        "instance_not_class",
    ),
    (cu.checks.check_softmax, _stub, "stub_in_place"),
    (cu.checks.check_softmax, lambda x: torch.empty_like(x, device="meta"), "meta_tensor"),
    (cu.checks.check_causal_attention, NotAModule, "not_a_module"),
    (cu.checks.check_causal_attention, MaskBuiltEveryCall, "mask_buffer_missing"),
    (cu.checks.check_causal_batch_output, [[0.0] * 768] * 100, "output_not_tensor"),
    (
        cu.checks.check_causal_batch_output,
        torch.full((20, 100, 768), float("nan")),
        "output_not_finite",
    ),
    (cu.checks.check_causal_attention, HandMadeDropout, "dropout_not_seen"),
    (cu.checks.check_causal_attention, DropoutOnTransposedKeys, "dropout_on_other_tensor"),
]


@pytest.mark.parametrize("check, answer, bug", CASES, ids=[c[2] for c in CASES])
def test_the_engine_names_each_of_its_mistakes(check, answer, bug):
    with pytest.raises(cu.checks.CheckFailure) as info:
        check(answer)
    assert info.value.bug == bug, str(info.value)
