"""Chapter 11's checks against real code: the wrong answers collected from public repositories and
issue threads (tests/ch11/collected_*.py) are rejected and named by cause, at least 90% of them; so is
every wrong fixture of the chapter; and the unusual right answers pass."""

from __future__ import annotations

import contextlib
import inspect
import io
import re

import pytest

import course_utils as cu
from course_utils.checks import CheckFailure
from tests.ch11 import (
    buggy,
    buggy_sharing,
    buggy_sparse,
    buggy_trial,
    collected_mla,
    collected_recurrent,
)

COLLECTED = collected_mla.COLLECTED + collected_recurrent.COLLECTED
CHECKED = {  # check name: the lists of (answer, id) of the hand-made fixtures of tests/ch11
    "check_kv_cache_bytes": [buggy.BYTES_BUGS],
    "check_mla_attention": [buggy.MLA_BUGS, buggy_trial.MLA_BUGS],
    "check_mla_absorbed": [buggy.MLA_BUGS, buggy_trial.MLA_BUGS, buggy_trial.ABSORBED_BUGS],
    "check_linear_attention_recurrent": [buggy.LINEAR_BUGS, buggy_trial.LINEAR_BUGS],
    "check_linear_attention_chunked": [buggy.CHUNK_BUGS, buggy_trial.CHUNK_BUGS],
    "check_gated_delta_rule": [buggy.DELTA_BUGS, buggy_trial.DELTA_BUGS],
    "check_sparse_attention": [buggy_sparse.SPARSE_BUGS],
    "check_shared_kv_forward": [buggy_sharing.SHARE_BUGS],
}
FIXTURES = [
    (check, fn, bug) for check, lists in CHECKED.items() for one in lists for fn, bug in one
]


def verdict(check: str, fn) -> str | None:
    """The id of the mistake the check names, '' when it rejects without naming one, None when it
    accepts the answer."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            getattr(cu.checks, check)(fn)
    except CheckFailure as failure:
        return failure.bug or ""
    return None


def named_rate(answers) -> tuple[float, list[str]]:
    """The share of (check, answer, ids) whose rejection names one of ids, and the others, each as
    'answer: what the check said'."""
    missed = []
    for check, fn, ids in answers:
        got = verdict(check, fn)
        if got not in ((ids,) if isinstance(ids, str) else ids):
            missed.append(f"{fn.__name__}: {'accepted' if got is None else got or 'unnamed'}")
    return 1 - len(missed) / len(answers), missed


def test_the_collection_holds_20_real_answers_each_citing_its_source():
    assert len(COLLECTED) >= 20
    for _, fn, _ in COLLECTED:
        comments = inspect.getsource(fn) + (inspect.getdoc(fn) or "")
        issue = re.search(r"[\w.-]+/[\w.-]+#\d+", comments)
        cited = issue or re.search(r"[\w-]+/[\w.-]+,\s+(#\s+)?[\w./-]+\.(py|go)", comments)
        helper = re.search(r"The same (file|function)|_fla_|_naive\(|_extend", comments)
        assert cited or helper, f"{fn.__name__} does not say where it comes from"


def test_at_least_90_percent_of_the_collection_are_named_by_cause():
    rate, missed = named_rate(COLLECTED)
    print(f"named {rate:.0%} of {len(COLLECTED)} collected wrong answers; not named: {missed}")
    assert rate >= 0.9, missed


def test_every_wrong_fixture_of_the_chapter_is_named_by_cause():
    rate, missed = named_rate(FIXTURES)
    assert missed == [], f"{rate:.0%} named; not named: {missed}"


@pytest.mark.parametrize(
    ("check", "fn", "ids"), COLLECTED, ids=[f.__name__ for _, f, _ in COLLECTED]
)
def test_each_collected_answer_is_rejected(check, fn, ids):
    assert verdict(check, fn) is not None, f"{check} accepts {fn.__name__}"
