"""Chapter 09's checks accept right (and unusual but right) answers and name every known bug."""

from __future__ import annotations

import pytest
import torch

import course_utils as cu
from course_utils.checks import CheckFailure
from course_utils.checks.mistakes import MISTAKES
from tests.ch09 import buggy, correct
from tests.check_helpers import assert_names_bug

CHECKS = {
    "window": (cu.checks.check_sliding_window_mask, correct.WINDOW_CORRECT, buggy.WINDOW_BUGS),
    "cache": (cu.checks.check_attend_new_tokens, correct.CACHE_CORRECT, buggy.CACHE_BUGS),
    "padding": (
        cu.checks.check_padded_causal_attention,
        correct.PADDING_CORRECT,
        buggy.PADDING_BUGS,
    ),
    "rope": (cu.checks.check_apply_rope, correct.ROPE_CORRECT, buggy.ROPE_BUGS),
    "repeat": (cu.checks.check_repeat_kv, correct.REPEAT_CORRECT, buggy.REPEAT_BUGS),
}
RIGHT = [(check, fn) for check, rights, _ in CHECKS.values() for fn in rights]
WRONG = [(check, fn, bug) for check, _, bugs in CHECKS.values() for fn, bug in bugs]


@pytest.mark.parametrize(("check", "fn"), RIGHT, ids=[fn.__name__ for _, fn in RIGHT])
def test_right_answers_pass_with_one_line(check, fn, capsys):
    check(fn)
    out = capsys.readouterr().out
    assert out.startswith(f"✓ {check.__name__}:") and out.count("\n") == 1, out


@pytest.mark.parametrize(("check", "fn", "bug"), WRONG, ids=[fn.__name__ for _, fn, _ in WRONG])
def test_each_bug_is_named(check, fn, bug):
    assert_names_bug(check, fn, bug=bug)  # the id, its hint, and every placeholder filled


# Answers that build a tensor on the CPU crash on a GPU; the checks run them as if on another device.
DEVICE_BUGS = [
    (cu.checks.check_attend_new_tokens, buggy.cache_cpu_mask),
    (cu.checks.check_padded_causal_attention, buggy.padded_cpu_causal),
    (cu.checks.check_apply_rope, buggy.rope_cpu_frequencies),
    (cu.checks.check_repeat_kv, buggy.repeat_cpu_index),
]


@pytest.mark.parametrize(("check", "fn"), DEVICE_BUGS, ids=[fn.__name__ for _, fn in DEVICE_BUGS])
def test_cpu_made_tensors_are_named_with_the_meeting_shape(check, fn):
    failure = assert_names_bug(check, fn, bug="cpu_tensor_in_forward")
    assert "on another device" in str(failure) and "made on the CPU met your input's device" in str(
        failure
    )


@pytest.mark.parametrize(
    "fn", [buggy.window_device_ignored, buggy.window_back_to_cpu, buggy.window_device_on_one_side]
)
def test_a_window_mask_off_the_requested_device_is_named(fn):
    failure = assert_names_bug(cu.checks.check_sliding_window_mask, fn, bug="mask_device_ignored")
    assert "torch.arange(...) is called without device=..." in str(failure)


def test_a_window_mask_returned_on_the_cpu_is_named():
    def back_on_cpu(n_queries, n_keys, window, device=None):  # every tensor made with device="cpu"
        d = torch.arange(n_keys - n_queries, n_keys, device="cpu")[:, None] - torch.arange(
            n_keys, device="cpu"
        )
        return (d >= 0) & (d < window)

    failure = assert_names_bug(
        cu.checks.check_sliding_window_mask, back_on_cpu, bug="mask_device_ignored"
    )
    assert "the tensor you return is on the CPU" in str(failure)


@pytest.mark.parametrize(
    ("check", "fn"),
    [
        (cu.checks.check_attend_new_tokens, buggy.cache_float64),
        (cu.checks.check_apply_rope, buggy.rope_float64),
    ],
)
def test_a_float64_result_for_float32_input_is_named(check, fn):
    failure = assert_names_bug(check, fn, bug="output_dtype_changed")
    assert "returned dtype torch.float64, but its input has dtype torch.float32" in str(failure)


def test_every_chapter_09_mistake_is_exercised_by_a_buggy_answer():
    named = {bug for _, _, bugs in CHECKS.values() for _, bug in bugs}
    ours = {
        "window_not_bool",
        "window_inverted",
        "window_cut_short",
        "window_one_too_many",
        "window_not_causal",
        "window_top_left",
        "mask_device_ignored",
        "is_causal_top_left",
        "cache_mask_missing",
        "padding_mask_inverted",
        "padding_ignored",
        "padding_not_causal",
        "padding_nan_rows",
        "rope_layout_mixed",
        "rope_rotation_reversed",
        "rope_frequency_exponent",
        "rope_positions_ignored",
        "rope_base_ignored",
        "gqa_repeat_not_interleave",
        "gqa_repeat_wrong_axis",
        "output_dtype_changed",
    }
    assert ours <= set(MISTAKES) and ours <= named


def _raises(*args, **kwargs):
    raise RuntimeError("boom")


def _stub(*args, **kwargs):
    raise NotImplementedError()


NON_ANSWERS = [
    None,
    3,
    "text",
    [1, 2],
    torch.zeros(2),
    _raises,
    _stub,
    lambda *a, **k: None,
    lambda *a, **k: (torch.zeros(1), torch.zeros(1)),
    lambda *a, **k: [[1.0]],
    lambda *a, **k: torch.zeros(1, 1, 1),
    lambda *a, **k: float("nan"),
]


@pytest.mark.parametrize("check", [c for c, _, _ in CHECKS.values()], ids=list(CHECKS))
@pytest.mark.parametrize("answer", NON_ANSWERS, ids=range(len(NON_ANSWERS)))
def test_non_answers_raise_only_check_failure(check, answer):
    with pytest.raises(CheckFailure):
        check(answer)


def test_stub_is_reported_as_the_stub():
    with pytest.raises(CheckFailure, match="exercise stub is still in place"):
        cu.checks.check_repeat_kv(_stub)


def test_checks_leave_the_global_random_state_alone():
    state = torch.random.get_rng_state()
    cu.checks.check_apply_rope(correct.rope_complex)
    assert torch.equal(state, torch.random.get_rng_state())
