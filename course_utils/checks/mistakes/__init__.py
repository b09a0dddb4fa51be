"""The mistake catalogue: every mistake a self-check can name, defined once.

Each entry has an id (what tests assert), a diagnosis (what went wrong, in plain words) and
a hint (how to fix it). Diagnoses may hold ``{placeholders}`` that the check fills in.
Checks refer to mistakes only by id; ``tests/golden/check_messages.txt`` renders them all.

Each group of chapters has its own file in this folder (``ch01_03.py``, ``ch04_05.py``,
``ch06_07.py``, ``ch09.py``); a new chapter adds a file and one import line below.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Bug:
    """A known mistake: an id, what it means for the student, and how to fix it."""

    name: str
    diagnosis: str
    hint: str


MISTAKES: dict[str, Bug] = {}


def mistake(name: str, diagnosis: str, hint: str) -> Bug:
    """Define a mistake (each id exactly once) and return it."""
    if name in MISTAKES:
        raise KeyError(f"mistake {name!r} is defined twice")
    MISTAKES[name] = Bug(name, diagnosis, hint)
    return MISTAKES[name]


SOFTMAX_AXIS_HINT = "normalise over the keys, the last axis: torch.softmax(scores, dim=-1)."
SCALE_HINT = "divide the scores by sqrt(d_k), the width of the keys (keys.shape[-1] ** 0.5), before the softmax."
VALUE_ERROR_HINT = ("check the number of tokens against context_length first and raise a ValueError that "
                    "names both numbers: the course's one rule for an input that is too long.")


# the catalogue itself, one file per group of chapters (each defines its mistakes on import)
from . import ch01_03, ch04_05, ch06_07, ch08, ch09  # noqa: E402,F401
