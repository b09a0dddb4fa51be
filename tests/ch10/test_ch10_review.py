"""The wrong answers of a stranger's review of chapter 10 (tests/ch10/buggy_review.py) are named by
their cause; torch's own layers are right in every probe and refused only for being torch's layers."""

from __future__ import annotations

import pytest

import course_utils as cu
from tests.ch10 import buggy_review, correct_norms
from tests.check_helpers import assert_names_bug


def _param(check, args, bug=None):
    return pytest.param(check, args, bug, id=f"{check}-{getattr(args[-1], '__name__', '')}")


@pytest.mark.parametrize(("check", "args", "bug"), [_param(*c) for c in buggy_review.CASES])
def test_review_wrong_answer_is_named(check, args, bug):
    assert_names_bug(getattr(cu.checks, check), *args, bug=bug)


@pytest.mark.parametrize(("check", "args", "bug"), [_param(*c) for c in correct_norms.LIBRARY])
def test_torch_layer_is_right_but_refused_as_a_library_call(check, args, bug):
    failure = assert_names_bug(getattr(cu.checks, check), *args, bug="layer_library_call")
    assert "the right numbers" in str(failure)
