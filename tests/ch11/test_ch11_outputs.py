"""Chapter 11's checks name answers whose result has the wrong form: a byte count that is no
count, an MLA step or a linear-attention recurrence that does not return (output, cache/state),
a cache of the wrong shape, a cache of the right shape that is not the latent, a state of the
wrong shape. Each wraps the chapter's own solution and spoils only its result, the slips a
student makes when the exercise's return line is unfinished."""

from __future__ import annotations

import pytest

import course_utils as cu
from tests.check_helpers import assert_names_bug

ch = cu.chapters


def bytes_as_text(layout, context, batch=1, bytes_per_value=2):
    return f"{ch.kv_cache_bytes(layout, context, batch, bytes_per_value) / 2**30:.1f} GiB"


def mla_output_only(x, w, cache=None):
    return ch.mla_attention(x, w, cache)[0]


def mla_cache_transposed(x, w, cache=None):
    if cache is not None:  # hand the chapter back the cache it made
        cache = tuple(t.transpose(1, 2) for t in cache)
    out, new = ch.mla_attention(x, w, cache)
    return out, tuple(t.transpose(1, 2) for t in new)


def mla_cache_scaled(x, w, cache=None):
    if cache is not None:
        cache = (cache[0] / 2, cache[1])
    out, (latent, rope) = ch.mla_attention(x, w, cache)
    return out, (latent * 2, rope)  # e.g. a latent stored after a scaling meant for the keys


def recurrent_output_only(q, k, v, state=None):
    return ch.linear_attention_recurrent(q, k, v, state)[0]


def recurrent_state_transposed(q, k, v, state=None):
    if state is not None:
        state = (state[0].transpose(-1, -2), state[1])
    out, (S, z) = ch.linear_attention_recurrent(q, k, v, state)
    return out, (S.transpose(-1, -2), z)  # (b, h, dv, dk) instead of (b, h, dk, dv)


CASES = [
    (cu.checks.check_kv_cache_bytes, bytes_as_text, "kv_not_a_count"),
    (cu.checks.check_mla_attention, mla_output_only, "mla_not_a_pair"),
    (cu.checks.check_mla_attention, mla_cache_transposed, "mla_cache_shape"),
    (cu.checks.check_mla_attention, mla_cache_scaled, "mla_cache_not_latent"),
    (cu.checks.check_linear_attention_recurrent, recurrent_output_only, "recurrence_not_a_pair"),
    (
        cu.checks.check_linear_attention_recurrent,
        recurrent_state_transposed,
        "recurrence_state_transposed",
    ),
]


@pytest.mark.parametrize(("check", "fn", "bug"), CASES, ids=[b for _, _, b in CASES])
def test_a_result_of_the_wrong_form_is_named(check, fn, bug):
    assert_names_bug(check, fn, bug=bug)
