"""Helpers for the *Attention from Scratch* course.

Every notebook imports this package the same way::

    import course_utils as cu

and reaches everything through ``cu``: ``cu.seed_everything``, ``cu.example_inputs``,
``cu.gpt2_tokenizer``, ``cu.checks.check_causal_attention``, ``cu.plotting.heatmap`` and
so on. Submodules that pull in heavier libraries (matplotlib, ipywidgets) are loaded
on first use, so ``import course_utils`` stays fast.
"""

from __future__ import annotations

import importlib
from typing import Any

from .data import EXAMPLE_SENTENCE, EXAMPLE_TOKENS, EXAMPLE_VALUES, example_inputs
from .repro import get_device, light_run, portable_dropout_mask, portable_rand, seed_everything
from .tokenizer import gpt2_tokenizer
from .validation import CourseInputError, expect_tensor

__version__ = "1.0.0"

# name -> module, loaded on first use; chapter 07's timing tools live in its folder
_LAZY = {
    "checks": ".checks",
    "chapters": ".chapters",
    "plotting": ".plotting",
    "widgets": ".widgets",
    "bench": ".chapters.ch07.bench",
}

__all__ = [
    "EXAMPLE_SENTENCE",
    "EXAMPLE_TOKENS",
    "EXAMPLE_VALUES",
    "CourseInputError",
    "example_inputs",
    "expect_tensor",
    "get_device",
    "gpt2_tokenizer",
    "light_run",
    "portable_dropout_mask",
    "portable_rand",
    "seed_everything",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module = importlib.import_module(_LAZY[name], __name__)
        globals()[name] = module
        return module
    raise AttributeError(f"module 'course_utils' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
