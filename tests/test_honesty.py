"""The engine's guard (course_utils/checks/_engine/honesty.py): points must be earned.

A check refuses the course's own object for its exercise (the object, a subclass that adds
nothing, a copy of its code, a wrapper of the same name that delegates to it) and the library
shortcuts its chapter does not allow (chapters 01, 04 and 05: no F.scaled_dot_product_attention,
no nn.MultiheadAttention); the same checks still accept honest answers, including ones that use an
earlier chapter's exported code.
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import course_utils as cu
from course_utils.checks import CheckFailure
from tests.check_helpers import assert_passes
from tests.correct import ch04 as correct04
from tests.correct import ch05 as correct05

C = cu.chapters


def _refused(check, given, bug):
    with pytest.raises(CheckFailure) as info:
        check(given)
    assert info.value.bug == bug, str(info.value)
    return str(info.value)


class _Sub(C.CausalAttention):
    pass


_Copy = type("_Copy", (nn.Module,), dict(vars(C.CausalAttention)))


class CausalAttention(nn.Module):  # a wrapper with the exercise's name, delegating to the course's
    def __init__(self, *args, **kwargs):
        super().__init__()
        self.inner = C.CausalAttention(*args, **kwargs)
        self.W_query, self.W_key, self.W_value = (
            self.inner.W_query,
            self.inner.W_key,
            self.inner.W_value,
        )
        self.register_buffer("mask", self.inner.mask)

    def forward(self, x):
        return self.inner(x)


def attention_weights(inputs):  # a wrapper of the course's function, with its name
    return C.attention_weights(inputs)


@pytest.mark.parametrize(
    ("check", "given", "how"),
    [
        (cu.checks.check_causal_attention, C.CausalAttention, ""),
        (cu.checks.check_causal_attention, _Sub, "a subclass of CausalAttention that adds nothing"),
        (cu.checks.check_causal_attention, _Copy, "a copy of its code"),
        (cu.checks.check_causal_attention, CausalAttention, "calls the course's CausalAttention"),
        (cu.checks.check_attention_weights, attention_weights, "calls the course's"),
        (cu.checks.check_multihead_wrapper, C.MultiHeadAttentionWrapper, ""),
        (cu.checks.check_multihead_attention, C.MultiHeadAttention, ""),
        (cu.checks.check_tiny_gpt, C.TinyGPT, ""),
        (cu.checks.check_train_step, C.train_step, ""),
        (cu.checks.check_repeat_kv, C.repeat_kv, ""),
    ],
)
def test_the_courses_own_code_is_refused_with_a_reason(check, given, how):
    message = _refused(check, given, "course_code_handed_in")
    assert "the course's own code for this exercise" in message and how in message


def _context_by_sdpa(inputs):
    x = inputs[None]  # (1, n, d)
    return F.scaled_dot_product_attention(x, x, x, scale=1.0)[0]


@pytest.mark.parametrize(
    ("check", "given"),
    [
        (cu.checks.check_context_vectors, _context_by_sdpa),
        (cu.checks.check_causal_attention, correct04.CausalSdpa),
        (cu.checks.check_multihead_attention, correct05.SplitSdpa),
    ],
)
def test_sdpa_is_refused_where_the_chapter_asks_for_attention_by_hand(check, given):
    message = _refused(check, given, "shortcut_not_allowed")
    assert "F.scaled_dot_product_attention" in message


def test_each_chapter_states_its_shortcuts():
    from course_utils.checks import ch01, ch04, ch05

    assert ch01.ALLOWED_SHORTCUTS == ch04.ALLOWED_SHORTCUTS == ch05.ALLOWED_SHORTCUTS == ()


def test_honest_answers_keep_their_points(capsys):
    class Wrapper(nn.Module):  # chapter 05's exercise, built on chapter 04's exported class
        def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
            super().__init__()
            self.heads = nn.ModuleList(
                C.CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)
                for _ in range(num_heads)
            )

        def forward(self, x):
            return torch.cat([head(x) for head in self.heads], dim=-1)

    assert_passes(cu.checks.check_multihead_wrapper, Wrapper, capsys=capsys)
    assert_passes(
        cu.checks.check_context_vectors,
        lambda x: torch.softmax(x @ x.T, dim=-1) @ x,
        capsys=capsys,
    )
    # the course's own exported code is still right without the guard
    assert_passes(cu.checks.check_causal_attention.__wrapped__, C.CausalAttention, capsys=capsys)
