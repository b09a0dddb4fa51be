"""The mistake catalogue's text format: what it builds, and the errors an instructor gets."""

from __future__ import annotations

import ast
import string

import pytest

from course_utils.checks.mistakes import MISTAKES, Bug, load
from tests.check_helpers import calls_in_checks

GOOD = """\
# a comment
#
== @axis
Hint: use dim=-1.

== first
A diagnosis that wraps
over {n} lines.
Hint: a hint that
wraps too.
== second
Only one line.
Hint: @axis
"""


def test_a_file_builds_bugs_in_order_with_shared_hints():
    assert load({"t.txt": GOOD}) == {
        "first": Bug("first", "A diagnosis that wraps over {n} lines.", "a hint that wraps too."),
        "second": Bug("second", "Only one line.", "use dim=-1."),
    }
    assert list(load({"t.txt": GOOD})) == ["first", "second"]


def test_the_shipped_catalogue_loads_and_resolves_every_shared_hint():
    assert len(MISTAKES) > 100
    assert all(
        bug.diagnosis and bug.hint and not bug.hint.startswith("@") for bug in MISTAKES.values()
    )


@pytest.mark.parametrize(
    "text, error",
    [
        (
            "== a\nx\nHint: y\n== a\nz\nHint: w\n",
            r"t\.txt, line 4: expected a new id, but a is already defined at t\.txt, line 1",
        ),
        ("== a\nx\n", r"t\.txt, line 1: expected exactly one 'Hint:' line in a"),
        ("== a\nx\nHint: y\nHint: z\n", r"t\.txt, line 1: expected exactly one 'Hint:' line in a"),
        ("== a\nx\nHint:\n", r"t\.txt, line 3: expected a hint after 'Hint:' in a"),
        ("== a\nHint: y\n", r"t\.txt, line 1: expected a diagnosis before the 'Hint:' line of a"),
        (
            "== a\nx\nHint: @nope\n",
            r"t\.txt, line 3: expected a shared hint defined earlier by '== @nope'",
        ),
        ("== @s\nx\nHint: y\n", r"t\.txt, line 1: expected only a 'Hint:' line after '== @s'"),
        ("stray prose\n", r"t\.txt, line 1: expected '== id' or '== @name' before any prose"),
        ("==a\n", r"t\.txt, line 1: expected '== id' or '== @name' alone on its line"),
        ("== a b\n", r"t\.txt, line 1: expected '== id' or '== @name' alone on its line"),
        (
            "== a\nsee\n#1008 for more\nHint: y\n",
            r"t\.txt, line 3: expected a comment, '# \.\.\.' \(a line of prose must not start with '#'\)",
        ),
    ],
)
def test_a_malformed_file_names_the_file_the_line_and_what_was_expected(text, error):
    with pytest.raises(ValueError, match=error):
        load({"t.txt": text})


def test_a_shared_hint_from_an_earlier_file_is_known_and_ids_are_unique_across_files():
    shared = "== @s\nHint: y\n"
    assert load({"a.txt": shared, "b.txt": "== a\nx\nHint: @s\n"})["a"].hint == "y"
    duplicate = r"b\.txt, line 1: expected a new id, but @s is already defined at a\.txt, line 1"
    with pytest.raises(ValueError, match=duplicate):
        load({"a.txt": shared, "b.txt": shared})


def test_every_raised_mistake_gets_its_placeholders():
    """c.bug always fills the entry's {placeholders}: a call must pass each one (check is given)."""

    sites = [
        (f"{path.name}:{node.lineno}", node.args[0].value, {k.arg for k in node.keywords})
        for path, node in calls_in_checks("bug")
        if len(node.args) >= 1 and isinstance(node.args[0], ast.Constant)
    ]  # a literal mistake id
    assert len(sites) > 100
    missing = []
    for where, bug, given in sites:
        assert bug in MISTAKES, f"{where}: unknown mistake id {bug!r}"
        needed = {
            name
            for text in (MISTAKES[bug].diagnosis, MISTAKES[bug].hint)
            for _, name, _, _ in string.Formatter().parse(text)
            if name
        }
        if None not in given and needed - given - {
            "check"
        }:  # None: a **mapping, checked when it runs
            missing.append(f"{where} {bug}: {sorted(needed - given - {'check'})}")
    assert missing == []
