"""The self-checks' hints point the way without writing the answer, never recommend what the course
teaches against, and speak only of what the exercise has: no line of any exercise's solution in a hint,
no `keys.T`, no float mask, no `self.` in a function exercise, no keys, heads or batches in chapter 01."""

from __future__ import annotations

import ast
import inspect
import json
import re
import textwrap
from pathlib import Path

import pytest

import course_utils as cu
from course_utils.checks import CheckFailure
from course_utils.checks.mistakes import MISTAKES
from tests.ch01 import buggy as ch01
from tests.ch03 import buggy as ch03
from tests.ch07 import buggy as ch07
from tests.ch09 import buggy as ch09
from tests.check_helpers import CHECKS, chapter_check_modules

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = re.compile(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", re.S)


def _norm(text: str) -> str:
    """Whitespace, backticks and quote styles do not make a line another line."""
    return re.sub(r"\s+", "", text.replace("`", "").replace('"', "'"))


def _statements(block: str) -> list[str]:
    """Each statement of a solution block as written, a returned expression without `return`, and the
    returned expression with the names assigned before it put back in (per_head -> [head(x) ...])."""
    tree = ast.parse("def _():\n" + textwrap.indent(textwrap.dedent(block), "    "))
    names: dict[str, ast.expr] = {}

    class Inline(ast.NodeTransformer):
        def visit_Name(self, node):
            return names.get(node.id, node) if isinstance(node.ctx, ast.Load) else node

    def walk(body):
        for stmt in body:
            if isinstance(stmt, (ast.If, ast.For, ast.While, ast.With)):
                yield ast.unparse(stmt).splitlines()[0]
                yield from walk(stmt.body)
                yield from walk(getattr(stmt, "orelse", []))
            elif isinstance(stmt, ast.Return) and stmt.value is not None:
                yield ast.unparse(stmt.value)
                yield ast.unparse(Inline().visit(ast.parse(ast.unparse(stmt.value), mode="eval")))
            else:
                yield ast.unparse(stmt)
                if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
                    names[stmt.targets[0].id] = ast.parse(ast.unparse(stmt.value), mode="eval").body

    return list(walk(tree.body[0].body))


def _course():
    """(solution statements {normalised: (notebook, statement)}, normalised code shown to students)."""
    answers, shown = {}, set()
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            source = "".join(cell["source"])
            if cell["cell_type"] == "code":
                for block in SOLUTION.findall(source):
                    for statement in _statements(block):
                        if (
                            statement.isidentifier()
                        ):  # `return table`: a name alone writes no answer
                            continue
                        answers.setdefault(_norm(statement), (path.name, statement))
                for line in SOLUTION.sub("", source).splitlines():
                    code = re.sub(r"\s+#.*$", "", line.strip())
                    shown.add(_norm(re.sub(r"^return\s+", "", code)))
            else:
                text = re.sub(
                    r"<!-- BEGIN ANSWER -->.*?<!-- END ANSWER -->", "", source, flags=re.S
                )
                shown.update(_norm(span) for span in re.findall(r"`([^`\n]+)`", text))
    return answers, shown


def _inline_hints() -> list[tuple[str, str]]:
    """The string constants of the checks' own code (inline hints of E.fail and the like): the
    shared engine's and each chapter's checks (a stranger put a solution line in a hint of
    ch01/checks.py, which this list did not read)."""
    found = []
    for path in sorted(CHECKS.rglob("*.py")) + sorted(chapter_check_modules()):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
            ):
                found.append((f"{path.name}:{node.lineno}", node.value))
    return found


HINTS = [(f"mistake {bug.name}", bug.hint) for bug in MISTAKES.values()] + _inline_hints()


def test_no_hint_writes_a_line_of_an_exercise_solution():
    """A line the course already shows outside its solutions (in code or in the text) is no answer."""
    answers, shown = _course()
    assert len(answers) > 150
    leaks = [
        f"{where} writes {notebook}'s solution line {statement!r}"
        for key, (notebook, statement) in answers.items()
        if key not in shown
        for where, hint in HINTS
        if key in _norm(hint)
    ]
    assert leaks == []


def test_the_leak_test_sees_the_two_hints_that_gave_answers_away():
    """Chapter 01 exercise 1's and chapter 05 exercise 1's former hints, word for word, are caught."""
    answers, _ = _course()
    former = [
        "sum over the last dimension: `(inputs * query).sum(dim=-1)`.",
        "torch.cat([head(x) for head in self.heads], dim=-1).",
    ]
    assert all(any(key in _norm(hint) for key in answers) for hint in former)


def test_no_hint_recommends_what_the_course_teaches_against():
    for where, hint in HINTS:
        assert "keys.T" not in hint, f"{where}: .T on a batch of keys reverses every axis"
        if (
            "torch.ones(" in hint
        ):  # a mask built in a hint is a bool one (the mask check rejects floats)
            assert "dtype=torch.bool" in hint or ".bool()" in hint, f"{where}: {hint}"


def _function_answers():
    """(check, wrong answer) for the function exercises of chapters 01, 03, 07 and 09."""
    prefixes = {
        ch01: {
            "scores_": "check_attention_scores",
            "softmax_": "check_softmax",
            "weights_": "check_attention_weights",
            "context_": "check_context_vectors",
        },
        ch03: {
            "mask_": "check_causal_mask",
            "after_": "check_mask_after_softmax",
            "before_": "check_mask_before_softmax",
        },
        ch07: {"": "check_blockwise_attention"},
    }
    pairs = []
    for module, by_prefix in prefixes.items():
        for name, fn in vars(module).items():
            if inspect.isfunction(fn) and fn.__module__ == module.__name__ and name[0] != "_":
                check = next((c for p, c in by_prefix.items() if name.startswith(p)), None)
                if check:
                    pairs.append(pytest.param(check, fn, id=f"{module.__name__[-4:]}-{name}"))
    lists = {
        "check_sliding_window_mask": ch09.WINDOW_BUGS,
        "check_attend_new_tokens": ch09.CACHE_BUGS,
        "check_padded_causal_attention": ch09.PADDING_BUGS,
        "check_apply_rope": ch09.ROPE_BUGS,
        "check_repeat_kv": ch09.REPEAT_BUGS,
    }
    pairs += [
        pytest.param(check, fn, id=f"ch09-{fn.__name__}")
        for check, bugs in lists.items()
        for fn, _ in bugs
    ]
    return pairs


CHAPTER_01 = (
    "check_attention_scores",
    "check_softmax",
    "check_attention_weights",
    "check_context_vectors",
)
NOT_YET_TAUGHT = re.compile(r"\b(keys?|heads?|batch(es)?|self\.\w+|d_k)\b")


@pytest.mark.parametrize(("check", "fn"), _function_answers())
def test_function_exercises_are_told_only_what_they_have(check, fn, capsys):
    """No `self.mask` (or any self.) for a function; chapter 01 knows no keys, heads or batches, and
    its softmax exercise forbids torch.softmax, so no message of that check recommends it."""
    try:
        getattr(cu.checks, check)(fn)
    except CheckFailure as failure:
        text = str(failure)
        assert not re.search(r"\bself\.", text), text
        if check in CHAPTER_01:
            assert not NOT_YET_TAUGHT.search(text), text
        if check == "check_softmax":
            assert "torch.softmax" not in (failure.hint or ""), text
    capsys.readouterr()
