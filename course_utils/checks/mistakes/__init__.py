"""The mistake catalogue: every mistake a self-check can name, defined once.

Each entry has an id (what tests assert), a diagnosis (what went wrong, in plain words) and
a hint (how to fix it). Diagnoses may hold ``{placeholders}`` that the check fills in.
Checks refer to mistakes only by id; ``python -m tools.build.render_check_messages`` prints them all.

The entries live in each chapter's folder (``course_utils/chapters/chNN/mistakes.txt``, read in
chapter order, found by scanning) and, for the mistakes the engine itself names, in this folder's
``engine.txt`` (read last). Format: ``# ...`` lines are comments and blank lines are ignored; ``== id``
starts a mistake, its diagnosis, then a line starting with ``Hint:``; prose may wrap over several
lines (joined with one space; a line must not start with ``#``). ``== @name`` with only a ``Hint:``
defines a shared hint, used later as ``Hint: @name``. A malformed file raises ``ValueError``
naming the file, the line and what was expected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ...registry import chapter_files


@dataclass(frozen=True)
class Bug:
    """A known mistake: an id, what it means for the student, and how to fix it."""

    name: str
    diagnosis: str
    hint: str


def _expect(ok: object, where: str, expected: str) -> None:
    if not ok:
        raise ValueError(f"{where}: expected {expected}")


def _blocks(source: str, text: str) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """Split one file into (where, id, [(where, line), ...]) blocks, one per '== id' line."""
    blocks = []
    for lineno, line in enumerate(text.splitlines(), 1):
        where, line = f"{source}, line {lineno}", line.strip()
        if line.startswith("#"):
            _expect(
                re.fullmatch(r"#( .*)?", line),
                where,
                "a comment, '# ...' (a line of prose must not start with '#')",
            )
        elif line.startswith("=="):
            _expect(
                re.fullmatch(r"== @?\w+", line), where, "'== id' or '== @name' alone on its line"
            )
            blocks.append((where, line[3:], []))
        elif line:
            _expect(blocks, where, "'== id' or '== @name' before any prose")
            blocks[-1][2].append((where, line))
    return blocks


def load(files: dict[str, str]) -> dict[str, Bug]:
    """Build the catalogue from ``{file name: text}`` in the format above, keeping the order."""
    seen, shared, mistakes = {}, {}, {}
    for where, name, body in [
        block for source, text in files.items() for block in _blocks(source, text)
    ]:
        _expect(
            name not in seen, where, f"a new id, but {name} is already defined at {seen.get(name)}"
        )
        seen[name] = where
        hints = [i for i, (_, line) in enumerate(body) if line.startswith("Hint:")]
        _expect(len(hints) == 1, where, f"exactly one 'Hint:' line in {name}")
        hint_where, hint = (
            body[hints[0]][0],
            " ".join(line for _, line in body[hints[0] :])[5:].strip(),
        )
        _expect(hint, hint_where, f"a hint after 'Hint:' in {name}")
        if name.startswith("@"):
            _expect(hints == [0], where, f"only a 'Hint:' line after '== {name}'")
            shared[name] = hint
        else:
            _expect(hints != [0], where, f"a diagnosis before the 'Hint:' line of {name}")
            _expect(
                not hint.startswith("@") or hint in shared,
                hint_where,
                f"a shared hint defined earlier by '== {hint}'",
            )
            mistakes[name] = Bug(
                name, " ".join(line for _, line in body[: hints[0]]), shared.get(hint, hint)
            )
    return mistakes


MISTAKES: dict[str, Bug] = load(
    {
        str(path): path.read_text(encoding="utf-8")
        for path in [*chapter_files("mistakes.txt"), Path(__file__).parent / "engine.txt"]
    }
)
