"""Assertions shared by the self-check tests of every chapter."""

import pytest

from course_utils.checks import CheckFailure


def assert_passes(check, *args, capsys) -> None:
    """The check accepts the answer and prints exactly one success line."""
    check(*args)
    out = capsys.readouterr().out
    assert out.startswith("✓ check_") and out.count("\n") == 1, out


def assert_names_bug(check, *args, diagnosis: str) -> CheckFailure:
    """The check rejects the answer with a CheckFailure (an AssertionError) naming the bug."""
    with pytest.raises(CheckFailure) as info:
        check(*args)
    assert isinstance(info.value, AssertionError)
    assert diagnosis in str(info.value), str(info.value)
    return info.value
