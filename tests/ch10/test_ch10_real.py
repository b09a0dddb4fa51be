"""Chapter 10's checks on wrong code from other projects (tests/ch10/buggy_real.py and
buggy_real_tables.py): each is rejected and named by its cause, and the share so named is at least
90% (issue 38's bar)."""

from __future__ import annotations

import pytest

import course_utils as cu
from course_utils.checks import CheckFailure
from tests.ch10 import buggy_real_tables
from tests.ch10.buggy_real import COLLECTION
from tests.check_helpers import assert_names_bug


@pytest.mark.parametrize(
    ("check", "answer", "bug"), COLLECTION, ids=[a.__name__ for _, a, _ in COLLECTION]
)
def test_each_real_mistake_is_named_by_id(check, answer, bug):
    assert_names_bug(getattr(cu.checks, check), answer, bug=bug)


def _verdict(check: str, answer) -> str | None:
    """The id the check names, '' when it rejects without naming a cause, None when it accepts."""
    try:
        getattr(cu.checks, check)(answer)
    except CheckFailure as failure:
        return failure.bug or ""
    return None


def test_at_least_90_percent_of_the_collection_is_named_by_cause(capsys):
    verdicts = {answer.__name__: _verdict(check, answer) for check, answer, _ in COLLECTION}
    capsys.readouterr()  # the ✓ lines of answers accepted
    unnamed = sorted(name for name, bug in verdicts.items() if not bug)
    named = len(verdicts) - len(unnamed)
    assert len(COLLECTION) >= 20 and set(buggy_real_tables.TABLES) <= set(COLLECTION)
    assert named / len(verdicts) >= 0.9, f"{named} of {len(verdicts)} named; not: {unnamed}"
