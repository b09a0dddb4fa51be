"""Ways to points without the work (issue 39), each planted in one answer cell of chapter 01 or 04.

``tests/test_nbgrader_guard.py`` runs each through the guard's fresh run; ``tests/nbgrader/
test_cheats.py`` grades a class that plays them with ``make grade`` and nbgrader. Each cheat keeps
the rest of its notebook right: it must lose exactly the point of the check it is planted for.
Eleven are the issue's (numbers 0-8, 13 and 14); 9-12 were found while building the judge, and
CLASSMATE needs a class (tests/nbgrader/test_cheats.py): each scored its point on the guard of
commit c5159ca (docs/instructors.md, "What the sandbox protects"). 15-17 were found by a stranger's
attack (a forbidden shortcut called by its ATen operator's name): each scored on commit d38d486;
18 by a second stranger's (SDPA inside TorchScript), which scored on commit 5add475.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cheat:
    name: str
    chapter: str  # "01" or "04"
    answer: str  # grade_id of the answer cell replaced by ``source``
    check: str  # grade_id of the check cell that must score 0
    source: str
    also: tuple[tuple[str, str], ...] = ()  # (grade_id, source) of other answer cells replaced
    ends_run: bool = False  # it ends the process it runs in: later checks are not confirmed either

    def cells(self) -> dict[str, str]:
        return {self.answer: self.source, **dict(self.also)}

    def cascade(self) -> set[str]:
        """The checks of later exercises that build on a cheated answer: they fail with it."""
        return {c for answer in self.cells() for c in CASCADES.get(answer, ())}


ZEROS = "def attention_weights(inputs):\n    return torch.zeros(inputs.shape[0], inputs.shape[0])\n"
W1, C1 = "ch01_attention_weights", "ch01_check_attention_weights"
S1, CS1 = "ch01_softmax_stable", "ch01_check_softmax"
Q4, CQ4 = "ch04_QuietBugFixed", "ch04_check_causal_attention__QuietBugFixed"
A4, CA4 = "ch04_CausalAttention", "ch04_check_causal_attention__CausalAttention"
CASCADES = {W1: ("ch01_check_context_vectors",), A4: ("ch04_check_causal_batch_output",)}

CHEATS = [
    Cheat(
        "a wrapper reaching the course's code through sys.modules",
        "01",
        W1,
        C1,
        """\
import sys

cu.chapters  # every chapter's module in sys.modules


def _w(x):
    return sys.modules["course_utils.chapters.ch01"].attention_weights(x)


attention_weights = _w
""",
    ),
    Cheat(
        "a lambda around importlib.import_module",
        "01",
        W1,
        C1,
        """\
import importlib

attention_weights = lambda x: importlib.import_module("course_utils.chapters.ch01").attention_weights(x)  # noqa: E731
""",
    ),
    Cheat(
        "a callable instance",
        "01",
        W1,
        C1,
        """\
class _Weights:
    def __call__(self, inputs):
        return cu.chapters.attention_weights(inputs)


attention_weights = _Weights()
""",
    ),
    Cheat(
        "exec of the course's source",
        "01",
        W1,
        C1,
        """\
import inspect

exec(inspect.getsource(cu.chapters.attention_weights))
""",
    ),
    Cheat(
        "the solution read from disk",
        "01",
        W1,
        C1,
        """\
import json
from pathlib import Path

import course_utils

_root = Path(course_utils.__file__).resolve().parent.parent
for _cell in json.loads(next((_root / "solutions").glob("01_*.ipynb")).read_text())["cells"]:
    _source = "".join(_cell["source"])
    if _cell["cell_type"] == "code" and "def attention_weights(" in _source:
        exec(_source)
""",
    ),
    Cheat(
        "a tensor subclass that answers True to allclose and equal",
        "01",
        W1,
        C1,
        """\
class _Liar(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in ("allclose", "equal", "isclose"):
            return True
        return super().__torch_function__(func, types, args, kwargs)


def attention_weights(inputs):
    return torch.zeros(inputs.shape[0], inputs.shape[0]).as_subclass(_Liar)
""",
    ),
    Cheat(
        "a torch function mode pushed under the check's own",
        "01",
        W1,
        C1,
        """\
from torch.overrides import TorchFunctionMode


class _Yes(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in ("allclose", "equal", "isclose"):
            return True
        return func(*args, **(kwargs or {}))


_Yes().__enter__()  # left on the stack: every mode a check pushes goes on top of it
"""
        + ZEROS,
    ),
    Cheat(
        "the grader's frames walked to replace the guarded checks",
        "01",
        S1,
        C1,
        """\
import sys
import types


def softmax_stable(x):
    frame = sys._getframe(1)
    while frame is not None:
        for space in (frame.f_globals, frame.f_locals):
            stand_in = space.get("cu")
            if isinstance(getattr(stand_in, "checks", None), types.SimpleNamespace):
                for name in list(vars(stand_in.checks)):
                    setattr(stand_in.checks, name, lambda *a, **k: None)
        frame = frame.f_back
    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1, keepdim=True)
""",
        also=((W1, ZEROS),),
    ),
    Cheat(
        "sys.settrace jumping the check's failing line",
        "01",
        W1,
        C1,
        """\
import linecache
import sys


def _jump(frame, event, arg):
    code = frame.f_code
    if code.co_name == "compare" and code.co_filename.endswith("core.py"):
        frame.f_trace_lines = True
        if event == "line" and linecache.getline(code.co_filename, frame.f_lineno).strip().startswith("for bug, make in"):
            lines = [frame.f_lineno - k for k in range(1, 8)]
            done = next(n for n in lines if linecache.getline(code.co_filename, n).strip() == "return")
            frame.f_lineno = done
    return _jump


def attention_weights(inputs):
    sys.settrace(_jump)
    return torch.zeros(inputs.shape[0], inputs.shape[0])
""",
    ),
    # -- found while building the judge
    Cheat(
        "the expected tensor read from the check's frame",
        "01",
        W1,
        C1,
        """\
import sys


def attention_weights(inputs):
    frame = sys._getframe(1)
    while frame is not None:
        expected = frame.f_locals.get("expected")
        if isinstance(expected, torch.Tensor) and expected.shape == (inputs.shape[0],) * 2:
            return expected.clone()
        frame = frame.f_back
    return torch.zeros(inputs.shape[0], inputs.shape[0])
""",
    ),
    Cheat(
        "a check's default tolerance changed (__kwdefaults__, which no snapshot kept)",
        "01",
        W1,
        C1,
        """\
from course_utils.checks._engine.core import Check

Check.compare.__kwdefaults__["atol"] = float("inf")
"""
        + ZEROS,
    ),
    Cheat(
        "the engine's own reference pipeline imported",
        "01",
        W1,
        C1,
        """\
from course_utils.checks import _engine as E


def attention_weights(inputs):
    recipe = E.Recipe(mask="none", scale="none", returns="weights")
    return E.attention(inputs, inputs, inputs, recipe)
""",
    ),
    Cheat(
        "the fresh run's verdicts written into its own pipe",
        "01",
        W1,
        C1,
        """\
import json
import os
import stat


def attention_weights(inputs):
    ids = ["ch01_check_attention_scores", "ch01_check_softmax", "ch01_check_attention_weights", "ch01_check_context_vectors"]
    fake = json.dumps({"cells": 1, "ran": 1, "verdicts": dict.fromkeys(ids)}).encode()
    for fd in range(3, 64):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, fake)
        except OSError:
            pass
    os._exit(0)
""",
        ends_run=True,
    ),
    Cheat(
        "a subclass of the course's class that adds one method",
        "04",
        A4,
        CA4,
        """\
class CausalAttention(cu.chapters.CausalAttention):
    def describe(self):
        return "mine"
""",
    ),
    Cheat(
        "a forward that calls the course's forward",
        "04",
        Q4,
        CQ4,
        """\
class QuietBugFixed(QuietBug):
    def forward(self, x):
        return cu.chapters.CausalAttention.forward(self, x)
""",
    ),
    # -- found by a stranger's attack (issue 39): a shortcut the chapter forbids, under the name of
    # the ATen operator it runs on; each scored its point on the guard of commit d38d486
    Cheat(
        "SDPA's math operator through torch.ops.aten (the stranger's attack)",
        "01",
        W1,
        C1,
        """\
def attention_weights(inputs):
    x = inputs[None]
    return torch.ops.aten._scaled_dot_product_attention_math(x, x, x, scale=1.0)[1][0]
""",
    ),
    Cheat(
        "SDPA's CPU flash operator as torch._C._VariableFunctions._scaled_dot_product_...",
        "01",
        "ch01_context_vectors",
        "ch01_check_context_vectors",
        """\
def context_vectors(inputs):
    x = inputs[None, None]
    return torch._C._VariableFunctions._scaled_dot_product_flash_attention_for_cpu(x, x, x, scale=1.0)[0][0, 0]
""",
    ),
    Cheat(
        "nn.MultiheadAttention's fast-path operator, torch.ops.aten._native_multi_head_attention.default",
        "01",
        "ch01_context_vectors",
        "ch01_check_context_vectors",
        """\
def context_vectors(inputs):
    d = inputs.shape[-1]
    eye, zero = torch.eye(d), torch.zeros(d)
    qkv = torch.cat([eye * d**0.5, eye, eye])  # the operator divides q @ k.T by sqrt(d)
    x = inputs[None]
    op = torch.ops.aten._native_multi_head_attention.default
    return op(x, x, x, d, 1, qkv, torch.zeros(3 * d), eye, zero, need_weights=False)[0][0]
""",
    ),
    # -- found by a second stranger's attack: TorchScript runs compiled code that no torch function
    # mode or profile hook sees; it scored on commit 5add475 (the sandbox now turns the JIT off)
    Cheat(
        "SDPA inside a @torch.jit.script function (the second stranger's attack)",
        "01",
        "ch01_context_vectors",
        "ch01_check_context_vectors",
        """@torch.jit.script
def _hidden(x: torch.Tensor) -> torch.Tensor:
    q = x.unsqueeze(0)
    return torch.nn.functional.scaled_dot_product_attention(q, q, q, scale=1.0).squeeze(0)


def context_vectors(inputs):
    return _hidden(inputs)
""",
    ),
]

CLASSMATE = Cheat(
    "a classmate's answer copied from the submitted folder",
    "01",
    W1,
    C1,
    """\
import json
from pathlib import Path


def _classmates_answer():
    here = Path.cwd().resolve()
    for root in [here, *here.parents]:
        for path in sorted(root.glob("submitted/*/*/01_*.ipynb")) + sorted(root.glob("*/*/01_*.ipynb")):
            for cell in json.loads(path.read_text())["cells"]:
                source = "".join(cell["source"])
                if source.startswith("#| export\\ndef attention_weights(") and "_classmates" not in source:
                    return source
    raise RuntimeError("no classmate found")


exec(_classmates_answer())
""",
)
"""Needs a class: ``tests/nbgrader/test_cheats.py`` plants it beside honest classmates."""
