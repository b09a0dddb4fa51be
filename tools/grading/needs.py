"""Which code cells of a graded notebook its checks need: the guard's fresh run skips the others.

Instructor machinery, used by ``tools/grading/guard.py`` (whose module text says why skipping
changes no score). The analysis is static: each cell is read after IPython's own transformation,
with ``symtable`` for the globals a cell reads and binds and ``ast`` for the rest.
"""

from __future__ import annotations

import ast

DYNAMIC_NAMES = {"exec", "eval", "compile", "globals", "locals", "vars", "setattr", "delattr"}
DYNAMIC_NAMES |= {"__import__", "__builtins__", "builtins", "importlib", "sys", "get_ipython"}
DYNAMIC_ATTRIBUTES = {"__dict__", "__code__", "__globals__", "__builtins__", "modules"}


def cell_names(source: str) -> tuple[set[str], set[str], bool]:
    """(global names the cell reads, global names it binds, whether it must always run) of a code
    cell, read after IPython's own transformation (a magic becomes a ``get_ipython()`` call).

    Read: every global name loaded, inside function and class bodies too (``symtable`` tells a
    function's locals from the globals it reads). Bound: assignment targets of any kind, ``def``,
    ``class``, ``import``, ``del``, ``for``/``with``/``except`` targets, walrus, ``global`` names
    assigned in a function, and the name under an attribute or subscript assignment
    (``W[0] = 1``, ``model.x = 2``). Always run: a cell that does not parse, or that reaches names
    or modules indirectly (``exec``, ``globals()``, ``setattr``, ``sys``, ``get_ipython``,
    ``__dict__``...)."""
    import symtable

    from IPython.core.inputtransformer2 import TransformerManager

    try:
        source = TransformerManager().transform_cell(source)
        tree = ast.parse(source)
        table = symtable.symtable(source, "<cell>", "exec")
    except Exception:  # noqa: BLE001 - a cell this cannot read always runs
        return set(), set(), True
    reads = {s.get_name() for s in table.get_symbols() if s.is_referenced()}
    binds = {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported()}
    nested = list(table.get_children())
    while nested:
        scope = nested.pop()
        nested.extend(scope.get_children())
        for symbol in scope.get_symbols():
            if symbol.is_referenced() and symbol.is_global():
                reads.add(symbol.get_name())
            if symbol.is_declared_global() and symbol.is_assigned():
                binds.add(symbol.get_name())
                reads.add(symbol.get_name())  # ``global n; n += 1`` reads it too
    dynamic = bool(reads & DYNAMIC_NAMES) or any(
        isinstance(node, ast.Match)
        or (isinstance(node, ast.Attribute) and node.attr in DYNAMIC_ATTRIBUTES)
        for node in ast.walk(tree)
    )
    reads |= {  # ``total += x`` reads total (symtable counts it as an assignment only)
        node.target.id
        for node in _outside_functions(tree)
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name)
    }
    return reads, binds | _stored_into(tree), dynamic


def _outside_functions(node):
    """The nodes of the cell's own scope: not inside a function, lambda or class body."""
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            yield child
            yield from _outside_functions(child)


def _stored_into(tree) -> set[str]:
    """Names under an attribute or subscript assignment or ``del`` in the cell's own scope
    (``W[0] = 1``, ``model.head.bias = None``, ``del cache[k]``)."""
    found = set()
    for node in _outside_functions(tree):
        if isinstance(node, (ast.Attribute, ast.Subscript)) and not isinstance(node.ctx, ast.Load):
            base = node.value
            while isinstance(base, (ast.Attribute, ast.Subscript, ast.Call)):
                base = base.func if isinstance(base, ast.Call) else base.value
            if isinstance(base, ast.Name):
                found.add(base.id)
    return found


def needed_cells(nb, last: int) -> set[int]:
    """Indices of the code cells up to ``last`` that a fresh run of the checks needs: every cell
    with nbgrader metadata (checks, the student's answers, read-only given code), every cell that
    :func:`cell_names` says must always run, and, transitively, every earlier cell binding a name
    that a needed cell reads. What is left (teaching cells that print, plot, time or train
    objects no check reads) is skipped; ``tools.grading.guard.confirm`` re-runs in full a check that then fails."""
    keep: set[int] = set()
    wanted: set[str] = set()
    for index in range(last, -1, -1):
        cell = nb.cells[index]
        if cell.cell_type != "code":
            continue
        reads, binds, always = cell_names(cell.source)
        if always or cell.metadata.get("nbgrader") or binds & wanted:
            keep.add(index)
            wanted |= reads
    return keep
