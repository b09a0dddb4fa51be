"""Shape comments (`x = ...  # (b, n, d_out)`) checked against the real shapes while a notebook runs.

`instrument(source, cell)` rewrites one code cell so that every assignment, `return` or `print`
whose line ends in a shape comment reports the value's shape to `__shape_check__`; `run_notebook`
executes a whole notebook that way in a Jupyter kernel and returns what was checked and what
disagreed. `a -> b` comments are checked against the shape after the last arrow, `# (...) each`
against every element of a tuple, and `...` stands for any number of leading dimensions.
Numbers must match exactly and each symbol stands for one size where it is used: a notebook's int
of that name, else one size per run of a cell, call of a function or pass of a loop (the rules:
tests/shape_sizes.py).
"""

import ast
import io
import json
import re
import tokenize

from tests.shape_sizes import Scope, mismatch, new_scope, settle

__all__ = ["instrument", "mismatch", "new_scope", "parse_spec", "record", "run_notebook"]

NUMERIC = re.compile(r"^[\d\s+\-*/()]+$")


def _balanced(text: str, start: int) -> str | None:
    """The parenthesised group opening at text[start], or None when it never closes."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return text[start : i + 1]
    return None


def parse_spec(comment: str):
    """`# (b, n, 3 * 4): note` -> ['b', 'n', 12]; None when the comment states no shape."""
    text = comment.lstrip("#").strip()
    if not text.startswith("("):
        return None
    if "->" in text:
        tail = text.rsplit("->", 1)[1].lstrip()
        if not tail.startswith("("):
            return None  # a mapping such as `(variant, n) -> Timing`, not a shape
        text = tail
    group = _balanced(text, 0)
    if group is None:
        return None
    inner = group[1:-1].strip()
    if not inner:
        return []
    if "," not in inner:
        return None  # `(1)`, `(8)`: a label, not a shape (a 1-d shape is written `(n,)`)
    parts, depth, current = [], 0, ""
    for ch in inner:
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current.strip())
    dims = []
    for part in parts:
        if NUMERIC.match(part):
            value = eval(part, {"__builtins__": {}})  # digits and arithmetic only
            dims.append(int(value) if float(value).is_integer() else part)
        else:
            dims.append(part)
    return dims


def _trailing_comments(source: str) -> dict[int, str]:
    """Line number -> the comment that ends that line of code (not full-line comments)."""
    lines = source.split("\n")
    found = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and lines[tok.start[0] - 1][: tok.start[1]].strip():
            found[tok.start[0]] = tok.string
    return found


def shape_comments(source: str) -> dict[int, str]:
    """The trailing comments of a cell that state a shape, by line."""
    try:
        comments = _trailing_comments(source)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return {}
    return {line: c for line, c in comments.items() if parse_spec(c) is not None}


def _statement(code: str) -> ast.stmt:
    return ast.parse(code).body[0]


def _load(target):
    node = ast.parse(ast.unparse(target), mode="eval").body
    return node


class _Instrument(ast.NodeTransformer):
    def __init__(self, cell: int, comments: dict[int, str]):
        self.cell, self.comments, self.checked, self.loops = cell, comments, set(), 0

    def _holds_comment(self, node) -> bool:
        return any(node.lineno <= line <= node.end_lineno for line in self.comments)

    def visit_FunctionDef(self, node):
        """Each call of a function that holds a shape comment binds its symbols afresh, and knows
        which globals (or enclosing names) the function reads: those it loads, never assigns."""
        loads, stores = set(), {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
        for name in ast.walk(node):  # before the instrumentation adds its own names
            if isinstance(name, ast.Name):
                (loads if isinstance(name.ctx, ast.Load) else stores).add(name.id)
        node = self.generic_visit(node)
        if self._holds_comment(node):
            reads = tuple(sorted(loads - stores))
            scope = f"__shape_scope__ = __shape_new_scope__(True, globals(), {reads!r})"
            node.body.insert(
                int(ast.get_docstring(node, clean=False) is not None), _statement(scope)
            )
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def _comment(self, node):
        for line in (node.end_lineno, node.lineno):
            if line in self.comments:
                return line, self.comments[line]
        return None

    def _call(self, line, comment, value):
        self.checked.add(line)
        return ast.Call(
            ast.Name("__shape_check__", ast.Load()),
            [ast.Constant(self.cell), ast.Constant(line), ast.Constant(comment), value],
            [
                ast.keyword("scope", ast.Name("__shape_scope__", ast.Load())),
                ast.keyword("names", ast.Call(ast.Name("locals", ast.Load()), [], [])),
            ],
        )

    def _targets(self, targets, comment):
        """(target, comment) pairs to check: a name or attribute; for a tuple of names, every one
        with ` each`, one per group with `(a) and (b)`, else the first (`out, cache = ...`)."""
        if len(targets) != 1:
            return []
        target = targets[0]
        if isinstance(target, (ast.Name, ast.Attribute, ast.Subscript)):
            return [(target, comment)]
        if not isinstance(target, ast.Tuple) or not all(
            isinstance(e, (ast.Name, ast.Attribute, ast.Starred)) for e in target.elts
        ):
            return []
        names = [e for e in target.elts if not isinstance(e, ast.Starred)]
        if " each" in comment:
            return [(e, comment) for e in names]
        groups = re.findall(r"\([^()]*\)", comment.split(":")[0])
        if len(groups) == len(target.elts) and " and " in comment:
            return [(e, "# " + g) for e, g in zip(target.elts, groups)]
        return [(target.elts[0], comment)] if names and target.elts[0] is names[0] else []

    def generic_visit(self, node):
        super().generic_visit(node)
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                setattr(node, field, self._expand(body))
        return node

    def _expand(self, body):
        out = []
        for stmt in body:
            if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)) and self._holds_comment(stmt):
                self.loops += 1  # each pass of the loop binds its own symbols
                outer = f"__shape_outer_{self.loops}__"
                stmt.body.insert(0, _statement(f"__shape_scope__ = {outer}.child()"))
                out += [_statement(f"{outer} = __shape_scope__"), stmt]
                out.append(_statement(f"__shape_scope__ = {outer}"))
                continue
            found = None
            if not hasattr(stmt, "body") and hasattr(stmt, "lineno"):
                found = self._comment(stmt)
            if found and isinstance(stmt, ast.Return) and stmt.value is not None:
                stmt.value = self._call(*found, stmt.value)
            elif found and isinstance(stmt, ast.Expr):
                call = stmt.value
                if (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Name)
                    and call.func.id == "print"
                    and len(call.args) == 1
                    and not call.keywords
                ):
                    call.args = [self._call(*found, call.args[0])]  # print(x)  # (n, n)
                elif (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Attribute)
                    and call.func.attr == "register_buffer"
                    and len(call.args) >= 2
                ):
                    call.args[1] = self._call(*found, call.args[1])  # the buffer registered
                else:
                    stmt.value = self._call(*found, call)
            out.append(stmt)
            if found and isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for target, comment in self._targets(targets, found[1]):
                    out.append(ast.Expr(self._call(found[0], comment, _load(target))))
        return out


def instrument(source: str, cell: int) -> tuple[str, set[int], dict[int, str]]:
    """(instrumented source, lines checked, every shape comment) of one code cell.

    A cell Python cannot parse (IPython magics) comes back unchanged with nothing checked."""
    comments = shape_comments(source)
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source, set(), comments
    visitor = _Instrument(cell, comments)
    tree = visitor.visit(tree)  # expands every body, the module's included
    if comments:  # each run of the cell binds its symbols afresh
        tree.body.insert(0, _statement("__shape_scope__ = __shape_new_scope__()"))
    return ast.unparse(ast.fix_missing_locations(tree)), visitor.checked, comments


class Ledger:
    """What the checks of one notebook run found: keys `cell:line` seen, wrong (with why), and
    arithmetic still waiting for its symbols (a size checked by rank only)."""

    def __init__(self):
        self.seen, self.bad, self.waiting = set(), {}, {}

    def report(self) -> str:
        return json.dumps({"seen": sorted(self.seen), "bad": self.bad, "waiting": self.waiting})


def record(ledger: Ledger, cell: int, line: int, comment: str, value, scope=None, names=None):
    """What `__shape_check__` does in the kernel: note the check, and any disagreement."""
    key = f"{cell}:{line}"
    ledger.seen.add(key)
    scope, names = scope if scope is not None else Scope(), names if names is not None else {}
    shape = getattr(value, "shape", None)
    if shape is None and isinstance(value, tuple) and all(type(v) is int for v in value):
        shape = value  # print(x.shape)  # (n, d): a torch.Size
    if shape is None and isinstance(value, (tuple, list)) and value:
        each = " each" in comment  # else `(b, m, vocab) and the cache`: the first element
        for part in value if each else value[:1]:  # a list's items may differ as a loop's
            part_scope = scope.child() if isinstance(value, list) else scope  # passes do
            record(ledger, cell, line, comment.replace(" each", ""), part, part_scope, names)
        return value
    if shape is None:
        ledger.bad.setdefault(key, f"{comment!r}: the value has no shape ({type(value).__name__})")
        return value
    tag, where = (key, comment), f"on line {line} ({comment})"
    if why := mismatch(shape, parse_spec(comment), scope, names, where, tag):
        ledger.bad.setdefault(key, f"{comment!r}: got {tuple(shape)}, {why}")
    for (late_key, late_comment), _, _, part in scope.waiting:
        ledger.waiting.setdefault(late_key, f"{late_comment!r}: {part}")
    for (late_key, late_comment), late_shape, why in settle(scope, names):
        ledger.waiting.pop(late_key, None)
        if why:
            ledger.bad.setdefault(late_key, f"{late_comment!r}: got {tuple(late_shape)}, {why}")
    return value


PRELUDE = """
import functools as __functools
from tests import shape_comments as __shape_comments
__shape_ledger__ = __shape_comments.Ledger()
__shape_check__ = __functools.partial(__shape_comments.record, __shape_ledger__)
__shape_new_scope__ = __shape_comments.new_scope
__shape_scope__ = __shape_new_scope__()
"""


def run_notebook(path, timeout: int = 600) -> dict:
    """Execute a solution notebook with its shape comments instrumented.

    Returns {'comments': n, 'unchecked': [...], 'never_run': [...], 'wrong': {...}, 'waiting':
    {...}} (waiting: arithmetic sizes whose symbols were never known, checked by rank only)."""
    import os
    from pathlib import Path

    from nbclient import NotebookClient

    from tools.build import nbtools

    os.environ["COURSE_STATIC_WIDGETS"] = "1"
    path = Path(path).resolve()
    nb = nbtools.read(path)
    root = str(path.parent.parent)
    all_comments, instrumented = [], []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        source, checked, comments = instrument(cell.source, index)
        cell.source = source
        cell.outputs = []
        for line, comment in comments.items():
            all_comments.append((f"{index}:{line}", comment, line in checked))
        instrumented.extend(f"{index}:{line}" for line in checked)
    prelude = nbtools.nbformat.v4.new_code_cell(
        f"import sys\nsys.path.insert(0, {root!r})\n{PRELUDE}"
    )
    report = nbtools.nbformat.v4.new_code_cell("print(__shape_ledger__.report())")
    nb.cells = [prelude, *nb.cells, report]
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
    return summary(all_comments, instrumented, json.loads(nb.cells[-1].outputs[0]["text"]))


def summary(all_comments, instrumented, result: dict) -> dict:
    """What :func:`run_notebook` returns, from the comments found, the lines instrumented and the
    ledger's report (``tests/solution_run.py`` builds it from nbval's run the same way)."""
    return {
        "comments": len(all_comments),
        "unchecked": [f"{key} {c}" for key, c, checked in all_comments if not checked],
        "never_run": sorted(set(instrumented) - set(result["seen"])),
        "wrong": result["bad"],
        "waiting": result["waiting"],
    }


def assert_clean(report: dict) -> None:
    """A solution's shape comments: some, each on a line the test can check, none wrong."""
    assert report["comments"] > 0
    assert not report["unchecked"], (
        "shape comments on lines the test cannot check (put them on an assignment, a return "
        "or a print):\n" + "\n".join(report["unchecked"])
    )
    wrong = [f"cell {where}: {why}" for where, why in sorted(report["wrong"].items())]
    assert not wrong, "shape comments that disagree with the code:\n" + "\n".join(wrong)
