"""Registries found by scanning the chapter folders, never written by hand.

Each chapter lives in ``course_utils/chapters/chNN/``: ``__init__.py`` (its exported code,
generated), ``checks.py``, ``mistakes.txt``, ``explorer.py`` and ``top_level.txt`` (each
optional; the last names the chapter's modules offered as ``cu.<name>``). The packages
students call (``cu.checks``, ``cu.widgets``) and the mistake catalogue collect their parts here,
so a new chapter adds files and edits none. They collect on first use (:func:`exports`), so a
chapter's own module can be imported first without meeting its package half-built.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from types import ModuleType

CHAPTERS = Path(__file__).resolve().parent / "chapters"


def chapter_folders() -> list[Path]:
    """``course_utils/chapters/chNN/`` folders, in chapter order."""
    return sorted(p for p in CHAPTERS.iterdir() if p.is_dir() and re.fullmatch(r"ch\d\d", p.name))


def chapter_files(name: str) -> list[Path]:
    """The file ``name`` (``checks.py``, ``mistakes.txt``...) of every chapter that has one."""
    return [folder / name for folder in chapter_folders() if (folder / name).is_file()]


def top_level(name: str) -> str | None:
    """The chapter module offered as ``cu.<name>``: ``course_utils.chapters.chNN.<name>`` of the
    one chapter whose ``top_level.txt`` lists ``name`` (chapter 07's timing tools: ``cu.bench``),
    or one already loaded under that name (the grader installs a chapter's module by name where
    the chapter folders are out of sight). None when no chapter, or more than one, offers it."""
    found = [
        f"course_utils.chapters.{chapter}.{offered}"
        for chapter, offered in _offers()
        if offered == name
    ] or [m for m in sys.modules if re.fullmatch(rf"course_utils\.chapters\.ch\d\d\.{name}", m)]
    return found[0] if len(found) == 1 and name.isidentifier() else None


def top_level_names() -> list[str]:
    """Every name a chapter offers as ``cu.<name>`` (:func:`top_level`)."""
    return [name for _, name in _offers()]


def _offers() -> list[tuple[str, str]]:
    """(chapter folder, name) for each name a chapter's ``top_level.txt`` lists."""
    return [
        (path.parent.name, name)
        for path in chapter_files("top_level.txt")
        for name in path.read_text(encoding="utf-8").split()
    ]


def chapter_modules(part: str) -> list[ModuleType]:
    """``course_utils.chapters.chNN.<part>`` of every chapter that has ``<part>.py``, imported."""
    return [
        importlib.import_module(f"course_utils.chapters.{path.parent.name}.{part}")
        for path in chapter_files(f"{part}.py")
    ]


def collect(part: str, namespace: dict) -> list[str]:
    """Put the public names (``__all__``) of every chapter's ``<part>.py`` into ``namespace``.

    Returns the names, in chapter order; a name defined by two chapters raises ``ImportError``.
    """
    names: dict[str, str] = {}
    for module in chapter_modules(part):
        for name in module.__all__:
            if name in names:
                raise ImportError(
                    f"{module.__name__} defines {name!r}, already defined by {names[name]}: "
                    "each name has one home"
                )
            names[name] = module.__name__
            namespace[name] = getattr(module, name)
    return list(names)


def exports(package: str, part: str, fixed: list[str]):
    """``(__getattr__, __dir__)`` for ``package``: on first use of a name it does not hold yet, the
    public names of every chapter's ``<part>.py`` are put into it (:func:`collect`) and ``__all__``
    is set to ``fixed`` plus those names."""
    namespace = sys.modules[package].__dict__

    def load() -> None:
        if "__all__" not in namespace:
            namespace["__all__"] = list(fixed)  # set first: a chapter importing the package is fine
            namespace["__all__"] += collect(part, namespace)

    def __getattr__(name: str):
        load()
        if name in namespace:
            return namespace[name]
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        load()
        return sorted(namespace)

    return __getattr__, __dir__
