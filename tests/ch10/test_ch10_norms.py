"""Chapter 10's LayerNorm, GELU, RMSNorm, SwiGLU and ALiBi checks: right answers (the chapter's,
PyTorch's and unusual ones) pass with one line; wrong ones from real code are named by cause."""

from __future__ import annotations

import pytest
import torch

import course_utils as cu
from tests.ch10 import buggy_norms as buggy
from tests.ch10 import correct_norms as correct
from tests.check_helpers import (
    THREADS_LEFT,
    assert_names_bug,
    assert_passes,
    cpu_seconds_on_one_thread,
    unusual_right_answers,
)

C = cu.checks
RIGHT = [
    (C.check_layer_norm, (buggy.LayerNorm,)),
    (C.check_rms_norm, (buggy.RMSNorm,)),
    (C.check_gelu, (buggy.gelu,)),
    (C.check_swiglu, (buggy.SwiGLU,)),
    (C.check_alibi, (buggy.alibi_slopes, buggy.alibi_bias)),
]


@pytest.mark.parametrize(("check", "args"), RIGHT, ids=lambda v: getattr(v, "__name__", ""))
def test_right_answers_pass_fast_and_leave_the_random_state(check, args, capsys):
    torch.manual_seed(42)
    seconds, threads = cpu_seconds_on_one_thread(check, *args)
    assert seconds < 1.0 and threads == THREADS_LEFT
    after = torch.rand(3)
    torch.manual_seed(42)
    assert torch.equal(after, torch.rand(3))
    assert capsys.readouterr().out.count("✓") == 2  # one per call of the helper's two


@pytest.mark.parametrize(("check", "args"), unusual_right_answers(correct))
def test_unusual_right_answers_pass(check, args, capsys):
    assert_passes(getattr(cu.checks, check), *args, capsys=capsys)


def _cases(check, bugs):
    return [pytest.param(check, answer, bug, id=answer.__name__) for answer, bug in bugs]


@pytest.mark.parametrize(
    ("check", "answer", "bug"),
    [
        *_cases(C.check_layer_norm, buggy.LAYER_NORM_BUGS),
        *_cases(C.check_rms_norm, buggy.RMS_NORM_BUGS),
        *_cases(C.check_gelu, buggy.GELU_BUGS),
        *_cases(C.check_swiglu, buggy.SWIGLU_BUGS),
    ],
)
def test_each_wrong_layer_is_named(check, answer, bug):
    assert_names_bug(check, answer, bug=bug)


@pytest.mark.parametrize(
    ("slopes", "bug"), buggy.SLOPE_BUGS, ids=lambda v: getattr(v, "__name__", v)
)
def test_each_wrong_slope_rule_is_named(slopes, bug):
    assert_names_bug(C.check_alibi, slopes, buggy.alibi_bias, bug=bug)


@pytest.mark.parametrize(("bias", "bug"), buggy.BIAS_BUGS, ids=lambda v: getattr(v, "__name__", v))
def test_each_wrong_bias_is_named(bias, bug):
    assert_names_bug(C.check_alibi, buggy.alibi_slopes, bias, bug=bug)


def test_a_crash_is_relayed_in_words_not_raised():
    failure = assert_names_bug(C.check_gelu, buggy.gelu_python_float_sqrt)
    assert "raised TypeError" in str(failure)


@pytest.mark.parametrize(
    ("check", "args", "bug"),
    [
        (C.check_layer_norm, (buggy.LayerNorm(4),), "instance_not_class"),
        (C.check_gelu, (torch.nn.functional.gelu(torch.zeros(1)),), "wrong_argument"),
        (C.check_alibi, (buggy.alibi_slopes, "alibi_bias"), "wrong_argument"),
    ],
    ids=["instance", "a tensor", "a string"],
)
def test_bad_arguments_are_named(check, args, bug):
    assert_names_bug(check, *args, bug=bug)


@pytest.mark.parametrize(
    ("check", "own"),
    [
        (C.check_layer_norm, "LayerNorm"),
        (C.check_rms_norm, "RMSNorm"),
        (C.check_gelu, "gelu"),
        (C.check_swiglu, "SwiGLU"),
    ],
)
def test_the_chapters_own_code_is_refused(check, own):
    assert_names_bug(check, getattr(cu.chapters, own), bug="course_code_handed_in")


def test_the_chapters_own_alibi_is_refused():
    assert_names_bug(
        C.check_alibi, cu.chapters.alibi_slopes, cu.chapters.alibi_bias, bug="course_code_handed_in"
    )
