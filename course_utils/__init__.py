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

# name -> module, loaded on first use; a chapter's own module offered at the top (chapter 07's
# timing tools, cu.bench) is found by scanning: its folder's top_level.txt names it
_LAZY = {
    "checks": ".checks",
    "chapters": ".chapters",
    "plotting": ".plotting",
    "widgets": ".widgets",
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
    from .registry import top_level

    path = _LAZY.get(name) or (None if name.startswith("_") else top_level(name))
    if path is None:
        raise AttributeError(f"module 'course_utils' has no attribute {name!r}")
    module = importlib.import_module(path, __name__)
    globals()[name] = module
    return module


def __dir__() -> list[str]:
    from .registry import top_level_names

    return sorted(set(globals()) | set(_LAZY) | set(top_level_names()))
