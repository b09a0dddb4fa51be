"""How the shape-comment test judges one size against one comment (see tests/shape_comments.py).

- a number, or arithmetic on numbers (`3 * 768`), must match exactly;
- a symbol that names a Python int where the comment sits must equal it: a variable of the
  notebook at a cell's top level (`layers = 2`); inside a function a local variable, an int
  attribute of `self`, or a global the function itself reads (`N_TOKENS`), not one it never
  mentions (a function is written for any size, whatever `n` the notebook defined);
- any other symbol is bound to the first size it meets, and every later use must agree, within one
  run of a cell's top level, one call of a function, or one pass of a loop (a pass sees what was
  bound before the loop; what it binds holds for that pass only, as the next may be another size);
- arithmetic on symbols (`n + 1`, `hd/2`, `3d`, `len(prompt)`, `min(topk, N)`) is evaluated once
  its symbols are known, later in the same scope if need be, else it counts by rank only (the
  run reports it as waiting); `a|b` accepts either, `<= w` bounds the size, `dk=8` states a value.
"""

import ast
import numbers
import re

SYMBOL = re.compile(r"^[A-Za-z_]\w*$")
STATED = re.compile(r"^([A-Za-z_]\w*)\s*=\s*(\d+)$")  # `dk=8`
SAFE_CALLS = {"len": len, "min": min, "max": max}
ARITHMETIC = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop, ast.Constant)
ARITHMETIC += (ast.Name, ast.Load, ast.Call, ast.Subscript, ast.Attribute)


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


class Scope:
    """The sizes bound to symbols in one run of a cell's top level, one call of a function, or one
    pass of a loop (a child: it reads its parent's bindings and keeps its own). A function's scope
    also knows the notebook's globals and which of them the function reads (`reads`)."""

    def __init__(self, parent=None, function=False, module=None, reads=()):
        self.parent, self.function, self.module, self.reads = parent, function, module, reads
        self.bound = {}  # symbol -> (size, where it was bound)
        self.waiting = []  # (tag, shape, size, part): arithmetic waiting for its symbols

    def child(self) -> "Scope":
        return Scope(self, self.function, self.module, self.reads)

    def binding(self, name):
        scope = self
        while scope is not None:
            if name in scope.bound:
                return scope.bound[name]
            scope = scope.parent
        return None


def new_scope(function: bool = False, module=None, reads=()) -> Scope:
    return Scope(function=function, module=module, reads=frozenset(reads))


def _variable(scope: Scope, names: dict, name: str):
    """(value, how it is known) of the Python int `name` names where the comment sits, or None:
    at a cell's top level the notebook's variable; in a function a local, an attribute of `self`,
    or a global the function itself reads (`N_TOKENS`), never one it does not mention."""
    value = names.get(name)
    if _is_int(value):
        return value, f"the variable {name} is {value}"
    if not scope.function:
        return None
    own = getattr(names.get("self"), "__dict__", {})
    if _is_int(own.get(name)):
        return own[name], f"self.{name} is {own[name]}"
    value = scope.module.get(name) if scope.module is not None and name in scope.reads else None
    return (value, f"the global {name} is {value}") if _is_int(value) else None


def _lookup(scope: Scope, names: dict, fresh: dict, name: str, number: bool):
    """What a symbol of an arithmetic size stands for; None while unknown. A variable of another
    type (`prompt` in `len(prompt)`) only where `number` is False."""
    if known := _variable(scope, names, name):
        return known[0]
    if bound := fresh.get(name) or scope.binding(name):
        return bound[0]
    value = names.get(name)
    if value is None and scope.function and scope.module is not None and name in scope.reads:
        value = scope.module.get(name)  # a global the function reads: `lengths` in `lengths[i]`
    return None if number or _is_int(value) else value


def _evaluate(text: str, lookup):
    """The number an arithmetic size stands for; None while a symbol is unknown (or for text that
    is not arithmetic the test reads). Names are looked up, nothing else of the kernel is reached."""
    text = re.sub(r"(?<![\w.])(\d+)([A-Za-z_])", r"\1 * \2", text.strip())  # `3d` is 3 * d
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return None
    holders = set()  # names whose value may be an object: `len(prompt)`, `lengths[i]`
    for node in ast.walk(tree):
        if not isinstance(node, ARITHMETIC):
            return None
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in SAFE_CALLS:
                return None
            holders.update(id(arg) for arg in node.args)
        elif isinstance(node, (ast.Subscript, ast.Attribute)):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
                return None
            holders.add(id(node.value))
    values = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id not in SAFE_CALLS:
            value = lookup(node.id, id(node) not in holders)
            if value is None:
                return None
            values[node.id] = value
    try:
        result = eval(compile(tree, "<shape>", "eval"), {"__builtins__": SAFE_CALLS}, values)
        result = result.item() if hasattr(result, "item") and result.numel() == 1 else result
    except Exception:  # an index out of range, a division by zero: not a size the test can read
        return None
    return result if isinstance(result, numbers.Real) and not isinstance(result, bool) else None


def _judge(size: int, part: str, lookup):
    """(True or False, why) for an arithmetic part of a comment; (None, "") while it is unknown."""
    if "|" in part:
        verdicts = [_judge(size, alt.strip(), lookup)[0] for alt in part.split("|")]
        if True in verdicts or None in verdicts:
            return (True if True in verdicts else None), ""
        return False, f"size {size} where the comment says {part}"
    if part.startswith("<="):
        limit = _evaluate(part[2:], lookup)
        return (
            (None, "")
            if limit is None
            else (size <= limit, f"size {size} > {part[2:].strip()} = {limit:g}")
        )
    value = _evaluate(part, lookup)
    return (None, "") if value is None else (size == value, f"size {size} where {part} = {value:g}")


def _symbol(scope: Scope, names: dict, fresh: dict, name: str, size: int) -> str | None:
    """Why `size` cannot be the symbol `name`; None when it can (binding it in `fresh` if new)."""
    if known := _variable(scope, names, name):
        return None if size == known[0] else f"{name} is {size} here, but {known[1]}"
    if bound := fresh.get(name) or scope.binding(name):
        return None if size == bound[0] else f"{name} is {size} here, but {bound[0]} {bound[1]}"
    fresh[name] = (size, "earlier in this comment")
    return None


def mismatch(shape, dims, scope: Scope | None = None, names=None, where="", tag=None):
    """Why `shape` does not fit the parsed comment `dims`, or None when it fits; then its new
    symbols are bound in `scope` (noted as bound `where`) and its arithmetic still unknown waits
    there, under `tag`, for `settle`."""
    shape, scope, names = tuple(shape), scope or Scope(), names or {}
    if "..." in dims:
        fixed = [d for d in dims if d != "..."]
        if len(shape) < len(fixed):
            return f"rank {len(shape)} < {len(fixed)}"
        pairs = list(zip(shape[len(shape) - len(fixed) :], fixed))
    else:
        if len(shape) != len(dims):
            return f"rank {len(shape)}, the comment says {len(dims)}"
        pairs = list(zip(shape, dims))
    fresh, later = {}, []
    for size, dim in pairs:
        stated = STATED.match(dim) if isinstance(dim, str) else None
        if isinstance(dim, int) or stated:
            value = dim if isinstance(dim, int) else int(stated[2])
            if size != value:
                return f"size {size} where the comment says {dim}"
        if stated or (isinstance(dim, str) and SYMBOL.match(dim)):
            if why := _symbol(scope, names, fresh, stated[1] if stated else dim, size):
                return why
        elif isinstance(dim, str):
            later.append((size, dim))
    waiting = []
    for size, part in later:
        verdict, why = _judge(size, part, lambda n, num: _lookup(scope, names, fresh, n, num))
        if verdict is False:
            return why
        if verdict is None:
            waiting.append((tag, shape, size, part))
    scope.bound.update({name: (size, where) for name, (size, _) in fresh.items()})
    scope.waiting.extend(waiting)
    return None


def settle(scope: Scope, names: dict) -> list:
    """Judge the waiting arithmetic of `scope` whose symbols are now known: (tag, shape, why) of
    each that is wrong, (tag, shape, None) of each that is right; the rest keeps waiting."""
    done, still = [], []
    for tag, shape, size, part in scope.waiting:
        verdict, why = _judge(size, part, lambda n, num: _lookup(scope, names, {}, n, num))
        if verdict is None:
            still.append((tag, shape, size, part))
        else:
            done.append((tag, shape, None if verdict else why))
    scope.waiting = still
    return done
