"""Chapter 10's self-checks against a fresh collection of real wrong answers, unusual right answers
and grader-style probes, gathered by a reviewer who had not read the checks (``fresh_cases.py``).

Every right answer must pass; every wrong one must be rejected with a diagnosis (never accepted,
never a traceback from the check). How many diagnoses name the true cause is printed, not asserted
(``-s`` shows the table). Probes the checks accept today are strict xfails: a fix makes them pass,
and the marker must then go."""

import contextlib
import functools
import io

import pytest

import course_utils as cu
from course_utils.checks import CheckFailure
from tests.ch10 import correct_fresh, fresh_cases


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


def even_only(fn):
    """``fn`` refusing an odd width with a ValueError, as check_sinusoidal_positions demands."""

    @functools.wraps(fn)
    def table(n, d):
        if d % 2:
            raise ValueError(f"sinusoidal_positions needs an even d, got d={d}")
        return fn(n, d)

    return table


ODD_WIDTH = (
    "check_sinusoidal_positions demands a ValueError for an odd d, which the exercise never asks "
    "for ('(d even)' is all it says, and the solution's own code raises none)"
)


def right_params():
    for name, check, answer, _ in correct_fresh.RIGHT:
        if check == fresh_cases.TABLE:
            yield pytest.param(
                check, answer, id=name, marks=pytest.mark.xfail(strict=True, reason=ODD_WIDTH)
            )
            yield pytest.param(check, even_only(answer), id=f"{name}-even_only")
        else:
            yield pytest.param(check, answer, id=name)


@pytest.mark.parametrize("check, answer", list(right_params()))
def test_unusual_right_answer_passes(check, answer):
    result, bug, text = verdict(check, answer)
    assert result == "accepted", f"{result} ({bug}):\n{text}"
    assert text.startswith("✓ check_") and text.count("\n") == 1, text


@pytest.mark.parametrize(
    "answer, check", [pytest.param(a, c, id=a.__name__) for a, c, *_ in fresh_cases.WRONG]
)
def test_real_wrong_answer_is_rejected(answer, check):
    result, bug, text = seen(check, answer)
    assert result == "rejected", f"{result} ({bug}):\n{text}"


def test_named_rate_is_reported(capsys):
    """Prints each wrong answer's verdict and the share whose diagnosis names the true cause."""
    rows, named, unreviewed = [], 0, []
    for answer, check, source, _cause, verdicts in fresh_cases.WRONG:
        result, bug, _ = seen(check, answer)
        judged = verdicts.get(bug)
        if judged is None:
            unreviewed.append(answer.__name__)
            judged = "unreviewed"
        named += judged.startswith("yes")
        rows.append(f"{answer.__name__:38} {source:48} {result:8} {bug!s:38} {judged}")
    with capsys.disabled():
        print("\nchapter 10, fresh collection: answer, source, verdict, id, names the cause?")
        print("\n".join(rows))
        total = len(fresh_cases.WRONG)
        print(f"named: {named} of {total} ({named / total:.0%}); unreviewed ids: {unreviewed}")


def probe_params():
    for answer, check, what, wanted, seen in fresh_cases.PROBES:
        marks = ()
        if seen.startswith("accepted"):
            marks = pytest.mark.xfail(strict=True, reason=f"{what}: {seen}")
        yield pytest.param(answer, check, wanted, id=answer.__name__, marks=marks)


@pytest.mark.parametrize("answer, check, wanted", list(probe_params()))
def test_grader_probe(answer, check, wanted):
    result, bug, text = verdict(check, answer)
    assert result != "crash", f"the check crashed ({bug}): {text}"
    assert result == ("rejected" if wanted == "reject" else "accepted"), (
        f"{result} ({bug}):\n{text}"
    )


def test_second_call_gives_the_same_verdict():
    """Running a check twice (a student re-runs the cell) changes nothing."""
    for check, answer in [
        (fresh_cases.BLOCK, correct_fresh.TorchStyleBlock),
        (fresh_cases.DECODER, correct_fresh.TorchStyleDecoder),
        (fresh_cases.MASK, correct_fresh.boundary_cumsum),
        (fresh_cases.TABLE, fresh_cases.t.warner_context_size),
    ]:
        assert verdict(check, answer)[:2] == verdict(check, answer)[:2]
