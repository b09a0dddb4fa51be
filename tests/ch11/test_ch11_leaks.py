"""Chapter 11's exercise notebook shows no near-solution: no code cell a student sees repeats most of
an exercise's answer in other words.

The house test (tests/test_notebooks.py) catches an answer's lines copied verbatim. The outside
review of chapter 11 (2026-11-28) found two cells it could not see: `mla_keys_cached` (section 6)
held the positions, rotary queries and keys, mask and attention of exercise 2, `sparse_decode_step`
the stable top-k of exercise 7, each written differently. Both are solution-only now; this test
compares token sequences, so a rewritten copy is caught too.
"""

from __future__ import annotations

import difflib
import io
import tokenize

from tools.build import nbtools

SOLUTION = nbtools.SOLUTIONS / "11_past_the_kv_wall.ipynb"
SHARE = 0.4  # of an answer's tokens, in order, that one visible cell may hold
LONG = 100  # answers of fewer tokens (a line or two) are left to the house test


def _tokens(source: str) -> list[str]:
    lines = "\n".join(line.strip() for line in source.split("\n"))  # indentation aside
    kinds = (tokenize.NAME, tokenize.OP, tokenize.NUMBER, tokenize.STRING)
    try:
        return [
            t.string
            for t in tokenize.generate_tokens(io.StringIO(lines).readline)
            if t.type in kinds
        ]
    except (tokenize.TokenError, IndentationError):
        return []


def near_solutions(nb) -> list[tuple[int, int, float]]:
    """(answer index, cell index, share of the answer's tokens) where a visible code cell holds more
    than SHARE of a long answer's tokens in order."""
    answers = [_tokens("\n".join(r)) for r in nbtools.solution_regions(nb)]
    visible = [
        (index, _tokens(cell.source))
        for index, cell in enumerate(nb.cells)
        if cell.cell_type == "code"
        and nbtools.SOLUTION_ONLY_TAG not in cell.metadata.get("tags", [])
        and nbtools.BEGIN_CODE not in cell.source  # an exercise cell: the student's own stub
    ]
    found = []
    for a, answer in enumerate(answers):
        if len(answer) < LONG:
            continue
        for index, tokens in visible:
            match = difflib.SequenceMatcher(None, answer, tokens, autojunk=False)
            share = sum(block.size for block in match.get_matching_blocks()) / len(answer)
            if share > SHARE:
                found.append((a, index, round(share, 2)))
    return found


def test_no_visible_cell_holds_most_of_an_answer():
    assert near_solutions(nbtools.read(SOLUTION)) == []


def test_a_solution_only_cell_made_visible_is_found():
    """The planted fault: `mla_keys_cached` shown to the student again, as before the review."""
    nb = nbtools.read(SOLUTION)
    (cell,) = [c for c in nb.cells if c.source.startswith("#| export\ndef mla_keys_cached")]
    assert nbtools.SOLUTION_ONLY_TAG in cell.metadata["tags"]
    cell.metadata["tags"] = []
    assert any(index == nb.cells.index(cell) for _, index, _ in near_solutions(nb))
