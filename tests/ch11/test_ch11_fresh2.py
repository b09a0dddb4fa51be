"""The second fresh attack on chapter 11's checks (``cases_fresh2.py``): every right but unusual
answer must pass, every wrong answer and grader probe must be rejected with an id that names its
cause (``cases_fresh2.py`` says which; 24 of 37 and 7 of 12 were before the detectors it names), and
the named rate is printed (``pytest -s``)."""

import contextlib
import io

import pytest

import course_utils as cu
from tests.ch11.cases_fresh2 import PROBES, RIGHT, WRONG, reset_kept_state


def run(module, name):
    """(verdict, bug id, first line of the diagnosis) of the fixture's check."""
    check = getattr(cu.checks, module.CHECK[name])
    reset_kept_state()
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            check(getattr(module, name))
        except cu.checks.CheckFailure as failure:
            lines = [line for line in str(failure).splitlines()[1:] if line.strip()]
            return "rejected", failure.bug, (lines[1] if len(lines) > 1 else "")[:110]
    return "accepted", None, ""


@pytest.mark.parametrize("module, name", RIGHT, ids=[name for _, name in RIGHT])
def test_right_answer_passes(module, name):
    verdict, bug, said = run(module, name)
    assert verdict == "accepted", f"{name} rejected as {bug}: {said}"


CASES = [*WRONG, *PROBES]


@pytest.mark.parametrize("module, name, cause, naming_ids", CASES, ids=[c[1] for c in CASES])
def test_wrong_answer_is_named(module, name, cause, naming_ids):
    verdict, bug, said = run(module, name)
    assert verdict == "rejected", f"{name} ({cause}) was accepted"
    assert bug in naming_ids, f"{name} ({cause}) rejected as {bug}, not {naming_ids}: {said}"


@pytest.mark.parametrize("label, cases", [("wrong answers", WRONG), ("grader probes", PROBES)])
def test_named_rate(label, cases):
    named, accepted = 0, []
    print(f"\n{label}:")
    for module, name, cause, naming_ids in cases:
        verdict, bug, said = run(module, name)
        is_named = verdict == "rejected" and bug in naming_ids
        named += is_named
        if verdict == "accepted":
            accepted.append(name)
        mark = "named" if is_named else "NOT named"
        print(f"  {name:40} {verdict:8} {str(bug):28} {mark:9} ({cause})")
    print(
        f"{label}: named {named} of {len(cases)} ({named / len(cases):.0%}); accepted: {accepted}"
    )
    assert accepted == [] and named / len(cases) >= 0.9
