"""ch11-REVIEW.md section 3, items 2 to 5: each wrong answer is named by its mistake's id (no longer
only NaN, a largest difference or another chapter's hint), and the unusual right answers beside them
pass with one line."""

from __future__ import annotations

import pytest

import course_utils as cu
from tests.ch11.buggy_review3 import BUGS, RIGHT
from tests.check_helpers import assert_names_bug


@pytest.mark.parametrize(("check", "fn", "bug"), BUGS, ids=[fn.__name__ for _, fn, _ in BUGS])
def test_each_wrong_answer_is_named(check, fn, bug):
    failure = assert_names_bug(getattr(cu.checks, check), fn, bug=bug)
    assert "weights @ values" not in (failure.hint or "")  # another exercise's hint
    assert "largest difference" not in str(failure) and "contains NaN" not in str(failure)


@pytest.mark.parametrize(("check", "fn"), RIGHT, ids=[fn.__name__ for _, fn in RIGHT])
def test_unusual_right_answers_pass_with_one_line(check, fn, capsys):
    getattr(cu.checks, check)(fn)
    out = capsys.readouterr().out
    assert out.startswith(f"✓ {check}:") and out.count("\n") == 1, out
