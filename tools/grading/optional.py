"""Base classes from packages that only some environments have: nbgrader (and the nbconvert it
brings) live in ``.venv-nbgrader``, so a class built on one of theirs must still import without
it, for its tests and for the tools that only read its module."""

from __future__ import annotations

import importlib


def optional_base(module: str, name: str) -> type:
    """The class ``name`` of ``module``, or ``object`` when ``module`` (or the name in it) is
    missing here."""
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return object
