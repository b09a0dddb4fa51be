"""No import circle in course_utils or tools, the core names no chapter, tools/ is in rooms.

An import is read from the source (``ast``), wherever it stands: at the top of a module or inside
a function, where a circle hides until the function runs. ``from package import name`` counts as
an import of ``package.name`` when that is a module. The circles are found as strongly connected
components of the graph of modules.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("course_utils", "tools")

# Circles allowed to stay (none: the last, through the grading files, went when they moved into
# tools/grading/, issue 40). Only goes down.
KNOWN_CIRCLES: list[set[str]] = []

# tools/ keeps at its top level only entry points the Makefile calls: none, every job has its room.
TOP_LEVEL = {"__init__.py"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    """Every module of the two packages: dotted name -> file."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "__pycache__" not in path.parts:
                found[_module_name(path)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that the module ``name`` (file ``path``) imports anywhere."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {m for m in found if m in known and m != name}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def circles(edges: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_finder_sees_a_circle_hidden_in_a_function(tmp_path):
    """The circle issue 40 found: the core's data.py importing chapter 03's code inside a
    function (``from .chapters import ...``), planted back into the real graph."""
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    planted = tmp_path / "course_utils" / "data.py"
    planted.parent.mkdir()
    planted.write_text("def f():\n    from .chapters import mask_before_softmax\n")
    known = modules()
    edges = graph()
    edges["course_utils.data"] = imports("course_utils.data", planted, known)
    assert edges["course_utils.data"] == {"course_utils.chapters"}
    found = [c for c in circles(edges) if c not in KNOWN_CIRCLES]
    assert any({"course_utils", "course_utils.data", "course_utils.chapters"} <= c for c in found)


def test_no_import_circle_in_course_utils_or_tools():
    found = [c for c in circles(graph()) if c not in KNOWN_CIRCLES]
    assert found == [], [sorted(c) for c in found]


def test_the_known_circles_still_exist():
    """A known circle that is gone leaves the table (it only goes down)."""
    found = circles(graph())
    assert [sorted(c) for c in KNOWN_CIRCLES if c not in found] == []


def test_the_core_imports_no_chapter():
    """course_utils outside chapters/ is shared by every chapter: a new chapter never grows it,
    and it never reaches into one (chapter 03's example weights live in chapter 03)."""
    edges = graph()
    core = [m for m in edges if m.startswith("course_utils") and ".chapters" not in f"{m}."]
    offenders = {
        m: sorted(t for t in edges[m] if t.startswith("course_utils.chapters.ch")) for m in core
    }
    assert {m: t for m, t in offenders.items() if t} == {}


def test_tools_top_level_holds_only_the_rooms():
    """tools/ is in rooms by job (build, figures, bench, testing, site, grading)."""
    top = {p.name for p in (ROOT / "tools").glob("*.py")}
    assert sorted(top - TOP_LEVEL) == []
    assert sorted(TOP_LEVEL - top) == [], "moved: take it off the list"


# Strings of the core that name a chapter (``ch07``, ``.chapters.ch07.bench``), a ratchet: it only
# goes down, and is empty: ``cu.bench`` (chapter 07's timing tools) was the last, a lazy alias in
# course_utils/__init__.py; chapter 07's top_level.txt offers it now (registry.top_level).
NAMED_CHAPTERS: dict[str, list[str]] = {}
CHAPTER_NAME = re.compile(r"\bch\d\d\b")


def strings_naming_a_chapter(source: str) -> list[str]:
    """The string constants of a module (f-string parts included, docstrings left out: they may
    say where an idea comes from) that name a chapter folder."""
    tree = ast.parse(source)
    documented = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, documented) and node.body and isinstance(node.body[0], ast.Expr)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and CHAPTER_NAME.search(node.value)
    ]


def test_the_chapter_finder_sees_a_planted_name():
    planted = 'def f():\n    """Chapter 03\'s ch03 weights."""\n    return import_module(f".chapters.ch03")\n'
    assert strings_naming_a_chapter(planted) == [".chapters.ch03"]
    assert strings_naming_a_chapter('"""ch03: documented."""\nX = "a ch03b word"\n') == []


def test_no_core_string_names_a_chapter():
    """The core reaches a chapter only through the registries' scans (course_utils/registry.py)."""
    found = {}
    for path in sorted((ROOT / "course_utils").rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if not name.startswith("course_utils/chapters/"):
            if named := strings_naming_a_chapter(path.read_text(encoding="utf-8")):
                found[name] = named
    assert found == NAMED_CHAPTERS, "a core string names a chapter (or one left: update the list)"


def test_a_chapter_offers_a_module_at_the_top_by_scanning(monkeypatch):
    """``cu.bench`` is chapter 07's bench.py, found through its top_level.txt; in the grading
    sandbox, where the chapter folders are hidden, through the module the grader installed by
    name; a name two chapters offer, or none, is not an attribute."""
    import sys
    import types

    import course_utils as cu
    from course_utils import registry

    assert registry.top_level("bench") == "course_utils.chapters.ch07.bench"
    assert "bench" in dir(cu) and cu.bench.__name__ == "course_utils.chapters.ch07.bench"
    monkeypatch.setattr(registry, "chapter_files", lambda name: [])  # the sandbox's view
    monkeypatch.setitem(sys.modules, "course_utils.chapters.ch99.tool", types.ModuleType("t"))
    assert registry.top_level("tool") == "course_utils.chapters.ch99.tool"
    monkeypatch.setitem(sys.modules, "course_utils.chapters.ch98.tool", types.ModuleType("u"))
    assert registry.top_level("tool") is None  # two chapters: neither
    with pytest.raises(AttributeError, match="no attribute 'tool'"):
        cu.tool  # noqa: B018
