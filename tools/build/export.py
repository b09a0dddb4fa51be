"""Chapters are the source of their code: ``#| export`` cells -> ``course_utils/chapters/``.

Every code cell of ``solutions/NN_*.ipynb`` whose first line is ``#| export`` is copied, with
the answer markers (``### BEGIN/END SOLUTION``) dropped and the code kept, into
``course_utils/chapters/chNN/__init__.py``. What a module imports is decided by the names its cells use
(read with :mod:`ast`), never by hand:

* ``math``, ``torch``, ``nn``, ``F`` and ``cu`` (for ``cu.chapters.X``) come from a fixed table;
* an import written in an exported cell moves to the top of the module;
* a name defined by an *earlier* chapter's exports becomes ``from ..chMM import Name``.

``course_utils/chapters/__init__.py`` re-exports every public name, so students and helpers
write ``cu.chapters.MultiHeadAttention``. A name the cells use but nobody defines, or a name
exported by two chapters, stops the export with a message naming the cell.
``python -m tools.build.nbtools check`` (and ``tests/test_export.py``) fail when the committed
files differ from a fresh export.
"""

from __future__ import annotations

import ast
import builtins
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

EXPORT_MARK = "#| export"
ANSWER_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")
PACKAGE = "chapters"
HEADER = '"""{what}\n\nGenerated from {source} by `make exercises`; do not edit: edit the notebook.\n"""\n'

# name the exported code uses -> (isort section, import line)
KNOWN_IMPORTS = {
    "math": (0, "import math"),
    "torch": (1, "import torch"),
    "F": (1, "import torch.nn.functional as F"),
    "nn": (1, "from torch import nn"),
    "cu": (2, "import course_utils as cu"),
}
BUILTINS = set(dir(builtins)) | {"__name__", "__file__", "__doc__"}


class ExportError(ValueError):
    """An exported cell cannot become a module (unknown name, clash, not plain definitions)."""


@dataclass
class Chapter:
    number: str  # "05"
    source: str  # "solutions/05_multihead.ipynb"
    cells: list[str] = field(default_factory=list)  # exported code, markers removed

    @property
    def module(self) -> str:
        return f"ch{self.number}"


def is_export_cell(cell) -> bool:
    return (
        cell.cell_type == "code" and cell.source.lstrip().split("\n", 1)[0].strip() == EXPORT_MARK
    )


def exported_code(cell) -> str:
    """The cell's code without its ``#| export`` line and answer markers."""
    lines = cell.source.lstrip().split("\n")[1:]
    return "\n".join(line for line in lines if line.strip() not in ANSWER_MARKERS).strip("\n")


def read_chapter(path: Path, root: Path) -> Chapter:
    nb = nbformat.read(str(path), as_version=4)
    rel = path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name
    return Chapter(path.name[:2], rel, [exported_code(c) for c in nb.cells if is_export_cell(c)])


# ----------------------------------------------------------------------------- name analysis
def _bound_and_loaded(tree: ast.AST) -> tuple[set[str], set[str]]:
    bound: set[str] = set()
    loaded: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return bound, loaded


def _top_level_names(tree: ast.Module) -> list[str]:
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.extend(t.id for t in targets if isinstance(t, ast.Name))
    return names


def _chapters_attributes(tree: ast.AST) -> set[str]:
    """X for every ``cu.chapters.X`` in the code."""
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == PACKAGE
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id == "cu"
    }


def _split_imports(code: str, where: str) -> tuple[list[str], str]:
    """Top-level import statements of a cell, and the cell without them."""
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        raise ExportError(f"{where}: exported code does not parse: {exc}") from None
    lines = code.split("\n")
    imports, drop = [], set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if not (isinstance(node, ast.ImportFrom) and node.module == f"course_utils.{PACKAGE}"):
                imports.append(
                    " ".join(lines[i].strip() for i in range(node.lineno - 1, node.end_lineno))
                )
            # else: `from course_utils.chapters import X` becomes `from ..chMM import X` below
            drop.update(range(node.lineno - 1, node.end_lineno))
        elif not isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)
        ) and not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            raise ExportError(
                f"{where}, line {node.lineno}: an exported cell holds only imports and "
                f"definitions (def, class, NAME = ...), not {type(node).__name__} statements; "
                "move prints and demos to a cell without '#| export'"
            )
    body = "\n".join(line for i, line in enumerate(lines) if i not in drop)
    return imports, re.sub(r"\n{3,}", "\n\n\n", body).strip("\n")


# ----------------------------------------------------------------------------- rendering
def _import_key(line: str) -> tuple:
    module = line.split()[1]
    return (line.startswith("from "), module.lower(), line)


def _member_key(name: str) -> tuple:
    # ruff/isort "order-by-type": CONSTANTS, then Classes, then functions and variables
    kind = 0 if name.isupper() and len(name) > 1 else 1 if name[:1].isupper() else 2
    return (kind, name.lower(), name)


def _section_of(line: str) -> int:
    module = line.split()[1]
    if module.startswith("."):
        return 3
    top = module.split(".")[0]
    return 2 if top == "course_utils" else 0 if top in _STDLIB else 1


_STDLIB = {
    "math",
    "functools",
    "itertools",
    "dataclasses",
    "typing",
    "collections",
    "contextlib",
    "warnings",
    "time",
    "os",
    "sys",
    "re",
    "enum",
}


def _render_imports(lines: set[str]) -> str:
    sections: dict[int, list[str]] = {}
    for line in lines:
        sections.setdefault(_section_of(line), []).append(line)
    blocks = ["\n".join(sorted(group, key=_import_key)) for _, group in sorted(sections.items())]
    return "\n\n".join(blocks)


def _from_import(module: str, names: list[str]) -> str:
    names = sorted(names, key=_member_key)
    line = f"from {module} import " + ", ".join(names)
    if len(line) <= 110:
        return line
    return f"from {module} import (\n" + "".join(f"    {n},\n" for n in names) + ")"


def build(chapters: list[Chapter]) -> dict[str, str]:
    """{file name inside course_utils/chapters/: text} for the given chapters (in order)."""
    files: dict[str, str] = {}
    owner: dict[str, str] = {}  # public name -> module that defines it
    exports: dict[str, list[str]] = {}
    for chapter in sorted(chapters, key=lambda c: c.number):
        if not chapter.cells:
            continue
        imports: set[str] = set()
        bodies = []
        for index, code in enumerate(chapter.cells, 1):
            cell_imports, body = _split_imports(code, f"{chapter.source}, exported cell {index}")
            imports.update(cell_imports)
            bodies.append(body)
        module_code = "\n\n\n".join(bodies)
        tree = ast.parse("\n".join(sorted(imports)) + "\n" + module_code)
        bound, loaded = _bound_and_loaded(tree)
        defined = [n for n in _top_level_names(tree) if not n.startswith("_")]
        for name in defined:
            if name in owner:
                raise ExportError(
                    f"{chapter.source}: {name!r} is already exported by {owner[name]}.py; "
                    "each idea has one home: reuse it instead of defining it again"
                )
        earlier: dict[str, list[str]] = {}
        for name in sorted(loaded - bound - BUILTINS):
            if name in KNOWN_IMPORTS:
                imports.add(KNOWN_IMPORTS[name][1])
            elif name in owner:
                earlier.setdefault(owner[name], []).append(name)
            else:
                raise ExportError(
                    f"{chapter.source}: the exported code uses {name!r}, which no exported "
                    "cell of this or an earlier chapter defines and no import provides; "
                    "export the cell that defines it or import it in the exported cell"
                )
        for name in sorted(_chapters_attributes(tree)):
            if name not in owner:
                raise ExportError(
                    f"{chapter.source}: cu.chapters.{name} is not exported by an earlier chapter"
                )
        imports.update(_from_import(f"..{module}", names) for module, names in earlier.items())
        what = f"Code taught by chapter {chapter.number}, exported from its `#| export` cells."
        text = HEADER.format(what=what, source=chapter.source)
        text += "\n" + _render_imports(imports) + "\n\n"
        text += _render_all(defined) + "\n\n"
        text += module_code + "\n"
        files[f"{chapter.module}/__init__.py"] = text
        exports[chapter.module] = defined
        owner.update(dict.fromkeys(defined, chapter.module))
    files["__init__.py"] = _render_init(exports)
    return files


def _render_init(exports: dict[str, list[str]]) -> str:
    text = HEADER.format(
        what="The code the chapters teach, one module per chapter: ``cu.chapters.MultiHeadAttention``.",
        source="the `#| export` cells of solutions/NN_*.ipynb",
    )
    modules = [module for module, names in exports.items() if names]
    stars = "".join(f"from .{module} import *  # noqa: F403\n" for module in modules)
    everything = "[name for module in (" + ", ".join(modules) + ") for name in module.__all__]"
    return (
        text
        + "\nfrom . import "
        + ", ".join(modules)
        + "\n"
        + stars
        + "\n# each name is listed once, in its chapter's __all__\n__all__ = "
        + everything
        + "\n"
    )


def _render_all(names: list[str]) -> str:
    line = "__all__ = [" + ", ".join(f'"{n}"' for n in names) + "]"
    if len(line) <= 110:
        return line + "\n"
    rows = textwrap.wrap(", ".join(f'"{n}"' for n in names) + ",", 104, break_long_words=False)
    return "__all__ = [\n" + "".join(f"    {row}\n" for row in rows) + "]\n"


# ----------------------------------------------------------------------------- files
def fresh_files(solutions: Path, root: Path) -> dict[str, str]:
    paths = sorted(solutions.glob("[0-9][0-9]_*.ipynb"))
    return build([read_chapter(p, root) for p in paths])


def write_chapters(solutions: Path, target: Path, root: Path) -> list[Path]:
    """(Re)write ``target`` (course_utils/chapters/) from the solutions; removes stale modules."""
    files = fresh_files(solutions, root)
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in files.items():
        path = target / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            written.append(path)
    for path in target.glob("ch[0-9][0-9]/__init__.py"):
        if f"{path.parent.name}/__init__.py" not in files:
            path.unlink()
            written.append(path)
    return written


def stale_chapters(solutions: Path, target: Path, root: Path) -> list[str]:
    """Problems a fresh export would fix (empty when course_utils/chapters/ is in sync)."""
    files = fresh_files(solutions, root)
    rel = target.relative_to(root).as_posix() if target.is_relative_to(root) else target.name
    problems = []
    for name, text in files.items():
        path = target / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            problems.append(
                f"{rel}/{name} (differs from the notebooks' #| export cells: run `make exercises`)"
            )
    for path in sorted(target.glob("ch[0-9][0-9]/__init__.py")):
        if f"{path.parent.name}/__init__.py" not in files:
            problems.append(
                f"{rel}/{path.parent.name}/__init__.py (no notebook exports it any more: "
                "run `make exercises`)"
            )
    return problems
