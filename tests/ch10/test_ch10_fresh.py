"""Chapter 10's self-checks against a fresh collection of real wrong answers, unusual right answers
and grader-style probes, gathered by a reviewer who had not read the checks (``fresh_cases.py``).

Every right answer passes; every wrong one is rejected with the id judged to name its true cause
(the one "yes" among its verdicts), never accepted, never a traceback from the check; at least 90%
are named by cause (issue 38's bar: ``-s`` prints the table); every probe is rejected with its id."""

import contextlib
import functools
import io

import pytest

import course_utils as cu
from course_utils.checks import CheckFailure
from tests.ch10 import correct_fresh, fresh_cases
from tests.check_helpers import needs_torch


def verdict(check, answer):
    """('accepted' | 'rejected' | 'crash', CheckFailure.bug or the exception's type, text)."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            getattr(cu.checks, check)(answer)
    except CheckFailure as failure:
        return "rejected", failure.bug, str(failure)
    except Exception as error:  # the check itself crashed: a traceback reaches the student
        return "crash", type(error).__name__, repr(error)
    return "accepted", None, out.getvalue()


seen = functools.cache(verdict)  # one run per wrong answer, shared by the two tests that read it


def expected_id(verdicts: dict) -> str:
    """The one id judged to name the cause ("yes ...")."""
    named = [bug for bug, judged in verdicts.items() if judged.startswith("yes")]
    assert len(named) == 1 and named[0] is not None, verdicts
    return named[0]


@pytest.mark.parametrize(
    "check, answer",
    [pytest.param(c, a, id=name, marks=needs_torch(a)) for name, c, a, _ in correct_fresh.RIGHT],
)
def test_unusual_right_answer_passes(check, answer):
    result, bug, text = verdict(check, answer)
    assert result == "accepted", f"{result} ({bug}):\n{text}"
    assert text.startswith("✓ check_") and text.count("\n") == 1, text


@pytest.mark.parametrize(
    "answer, check, verdicts",
    [pytest.param(a, c, v, id=a.__name__) for a, c, _, _, v in fresh_cases.WRONG],
)
def test_real_wrong_answer_is_named_by_its_cause(answer, check, verdicts):
    result, bug, text = seen(check, answer)
    assert result == "rejected", f"{result} ({bug}):\n{text}"
    assert bug == expected_id(verdicts), text


def test_at_least_90_percent_are_named_by_cause(capsys):
    """Prints each wrong answer's verdict (with -s) and asserts issue 38's bar."""
    rows, named = [], 0
    for answer, check, source, _cause, verdicts in fresh_cases.WRONG:
        result, bug, _ = seen(check, answer)
        judged = verdicts.get(bug, "unreviewed")
        named += judged.startswith("yes")
        rows.append(f"{answer.__name__:38} {source:48} {result:8} {bug!s:38} {judged}")
    total = len(fresh_cases.WRONG)
    with capsys.disabled():
        print("\nchapter 10, fresh collection: answer, source, verdict, id, names the cause?")
        print("\n".join(rows))
        print(f"named: {named} of {total} ({named / total:.0%})")
    assert total >= 40 and named / total >= 0.9, f"{named} of {total} named by cause"


@pytest.mark.parametrize(
    "answer, check, bug",
    [pytest.param(a, c, bug, id=a.__name__) for a, c, _, bug, _ in fresh_cases.PROBES],
)
def test_grader_probe_is_rejected_with_its_id(answer, check, bug):
    result, got, text = verdict(check, answer)
    assert (result, got) == ("rejected", bug), text


def test_second_call_gives_the_same_verdict():
    """Running a check twice (a student re-runs the cell) changes nothing."""
    for check, answer in [
        (fresh_cases.BLOCK, correct_fresh.TorchStyleBlock),
        (fresh_cases.DECODER, correct_fresh.TorchStyleDecoder),
        (fresh_cases.MASK, correct_fresh.boundary_cumsum),
        (fresh_cases.TABLE, fresh_cases.t.warner_context_size),
    ]:
        assert verdict(check, answer)[:2] == verdict(check, answer)[:2]
