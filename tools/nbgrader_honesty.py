"""Points that must be earned: when a class is graded, every check refuses the course's own code
for its exercise, and the library shortcuts its chapter does not allow.

Instructor machinery: the grader's fresh process (``tools/nbgrader_guard.py``) calls each check
through :func:`guard`. Before the check, :func:`guard` refuses the course's own object of the
checked chapter (``cu.chapters.Name``, an alias, a subclass that defines nothing of its own, or a
copy of its code) with the engine's ``handed_in``, which ``Check.ensure_callable``/``ensure_class``
also apply in a student's own kernel; here it covers every check, even one that calls neither.
While the check runs it watches two things: student code that calls into the course's object of
the same name (a wrapper ``Name`` delegating to ``cu.chapters.Name``, or ``super().forward`` in a
subclass of it; other exported code of the chapter stays usable), and student code that calls a
library shortcut the chapter forbids. Each chapter states its shortcuts in its ``checks.py`` as
``ALLOWED_SHORTCUTS`` (names of :data:`SHORTCUTS`).

Code counts as the student's when its file is neither in ``course_utils`` nor in ``torch``; the
checks may call the course's code themselves (their references), which is never counted. The
diagnoses are the engine's ``course_code_handed_in`` and ``shortcut_not_allowed``
(``course_utils/checks/mistakes/engine.txt``).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import io
import re
import sys
import types
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

import course_utils
from course_utils.checks._engine.core import Check, CheckFailure, handed_in, shown

# A chapter's ALLOWED_SHORTCUTS names these keys: (the torch function watched, what students call)
SHORTCUTS = {
    "sdpa": ("scaled_dot_product_attention", "F.scaled_dot_product_attention"),
    "mha": ("multi_head_attention_forward", "nn.MultiheadAttention"),
    "flex": ("flex_attention", "FlexAttention"),
}
# The module of a shortcut that an older supported torch lacks (FlexAttention came with 2.5): on
# such a torch the student's attempt dies in its import, before any call can be watched.
SHORTCUT_MODULES = {"torch.nn.attention.flex_attention": "flex_attention"}
_COURSE = str(Path(course_utils.__file__).resolve().parent)  # .../course_utils
_TORCH = str(Path(torch.__file__).resolve().parent)
_HERE = __file__


def chapter_of(module_name: str) -> str | None:
    """``"course_utils.chapters.ch04.checks"`` -> ``"ch04"``."""
    match = re.search(r"\bch(\d\d)\b", module_name)
    return f"ch{match.group(1)}" if match else None


@functools.cache
def course_code(chapter: str) -> tuple[frozenset, frozenset[str]]:
    """(the chapter's exported objects, the files their code lives in)."""
    try:
        module = importlib.import_module(f"course_utils.chapters.{chapter}")
    except ImportError:
        return frozenset(), frozenset()
    objects = [getattr(module, name) for name in getattr(module, "__all__", ())]
    objects = [o for o in objects if inspect.isfunction(o) or inspect.isclass(o)]
    files = set()
    for obj in objects:
        for fn in _functions(obj):
            files.add(fn.__code__.co_filename)
    return frozenset(map(id, objects)), frozenset(files)


def _functions(obj: object) -> list:
    """The plain functions of a function or of a class's own namespace."""
    if inspect.isfunction(obj):
        return [obj]
    if inspect.isclass(obj):
        found = []
        for value in vars(obj).values():
            value = getattr(value, "__func__", value)  # staticmethod, classmethod
            if inspect.isfunction(value):
                found.append(value)
        return found
    return []


def _unwrap(obj: object) -> object:
    while isinstance(obj, functools.partial) or hasattr(obj, "__wrapped__"):
        obj = obj.func if isinstance(obj, functools.partial) else obj.__wrapped__
    return obj


def _exported(filename: str) -> bool:
    """Whether ``filename`` is a chapter's exported code (``course_utils/chapters/chNN/__init__.py``)."""
    path = Path(filename)
    return path.name == "__init__.py" and path.parent.parent.name == "chapters"


def _students_frame(frame) -> bool:
    """Whether the first frame outside torch, this module and the course's code is the student's."""
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith(_TORCH) or name == _HERE or name.startswith(_COURSE)):
            return True
        if name.startswith(_COURSE) and not _exported(name):
            return False  # a check calling the course's code as its reference
        frame = frame.f_back
    return False


def imported_shortcut(failure: BaseException, forbidden: dict[str, str]) -> str | None:
    """The forbidden shortcut whose missing module the student's code tried to import, behind a
    relayed crash (``failure``'s causes); None when there is none."""
    exc, seen = failure, set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        function = SHORTCUT_MODULES.get(getattr(exc, "name", None) or "")
        if isinstance(exc, ImportError) and function in forbidden:
            frames = [tb.tb_frame for tb in _tracebacks(exc.__traceback__)]
            frames = [f for f in frames if not f.f_code.co_filename.startswith("<frozen")]
            if frames and _students_frame(frames[-1]):  # the import statement is the student's
                return forbidden[function]
        exc = exc.__cause__ or exc.__context__
    return None


def _tracebacks(tb):
    while tb is not None:
        yield tb
        tb = tb.tb_next


class _Watch(TorchFunctionMode):
    """Records, for one check, forbidden shortcuts and course code called from student code."""

    def __init__(self, files: frozenset[str], forbidden: dict[str, str], name: str | None) -> None:
        super().__init__()
        self.files, self.forbidden, self.name = files, forbidden, name
        self.shortcut: str | None = None
        self.delegated: str | None = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if torch.compiler.is_compiling():  # FlexAttention compiles its own call: profile() sees it
            return func(*args, **(kwargs or {}))
        if self.shortcut is None and name in self.forbidden and _students_frame(sys._getframe(1)):
            self.shortcut = self.forbidden[name]
        return func(*args, **(kwargs or {}))

    def profile(self, frame, event, arg) -> None:
        code = frame.f_code
        if (
            event == "call"
            and code.co_name in self.forbidden
            and code.co_filename.startswith(_TORCH)
        ):
            if self.shortcut is None and _students_frame(frame.f_back):  # flex_attention's Python
                self.shortcut = self.forbidden[code.co_name]
        if event != "call" or self.delegated or frame.f_code.co_filename not in self.files:
            return
        owner = getattr(code, "co_qualname", code.co_name).split(".")[0]
        if owner == self.name and _students_frame(frame.f_back):
            self.delegated = owner

    @contextlib.contextmanager
    def watching(self):
        previous = sys.getprofile()
        with self:
            sys.setprofile(self.profile)
            try:
                yield self
            finally:
                try:
                    sys.setprofile(previous)
                except TypeError:  # a C profiler (cProfile) cannot be put back from Python
                    sys.setprofile(None)


def guard(check):
    """``check`` refusing the course's own code and the shortcuts its chapter does not allow."""
    chapter = chapter_of(check.__module__)
    if chapter is None:
        return check
    allowed = getattr(sys.modules[check.__module__], "ALLOWED_SHORTCUTS", tuple(SHORTCUTS))
    forbidden = dict(v for k, v in SHORTCUTS.items() if k not in allowed)
    name = check.__name__

    @functools.wraps(check)
    def guarded(*args, **kwargs):
        __tracebackhide__ = True
        given = args[0] if args else next(iter(kwargs.values()), None)
        how = handed_in(given, chapter)
        if how is not None:
            raise Check(name).bug("course_code_handed_in", shown=shown(given), how=how)
        watch = _Watch(
            course_code(chapter)[1], forbidden, getattr(_unwrap(given), "__name__", None)
        )
        printed = io.StringIO()
        failure = None
        with contextlib.redirect_stdout(printed), watch.watching():
            try:
                result = check(*args, **kwargs)
            except CheckFailure as exc:
                failure = exc
        if watch.delegated:
            raise Check(name).bug(
                "course_code_handed_in",
                shown=shown(given),
                how=f" (it calls the course's {watch.delegated} to do the work)",
            )
        if watch.shortcut is None and failure is not None:
            watch.shortcut = imported_shortcut(failure, forbidden)
        if watch.shortcut:
            raise Check(name).bug(
                "shortcut_not_allowed",
                function=watch.shortcut,
                chapter=f"chapter {chapter[2:]}",
            )
        if failure is not None:
            raise failure
        print(printed.getvalue(), end="")
        return result

    return guarded


def guarded_checks():
    """Every ``cu.checks.check_*``, guarded (a namespace to stand in for ``cu.checks``)."""
    import course_utils.checks as checks

    return types.SimpleNamespace(
        **{n: guard(getattr(checks, n)) for n in dir(checks) if n.startswith("check_")}
    )
