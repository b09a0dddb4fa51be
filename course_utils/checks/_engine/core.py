"""The engine's core: failures, comparing tensors, and calling student code safely."""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import os
import re
import sysconfig
import textwrap
import traceback
import types
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import torch
from torch import nn

from ... import registry
from ..mistakes import MISTAKES, Bug

ATOL, RTOL = 1e-5, 1e-4


class CheckFailure(AssertionError):
    """A self-check found a problem. ``bug`` is the mistake's id when it is a known one."""

    def __init__(
        self, check: str, diagnosis: str, hint: str | None = None, bug: str | None = None
    ) -> None:
        self.check, self.diagnosis, self.hint, self.bug = check, diagnosis, hint, bug
        text = f"{check} found a problem.\n\n{diagnosis}"
        if hint:
            text += f"\n\nHint: {hint}"
        if os.environ.get("NBGRADER_EXECUTION"):  # nbgrader validate cuts lines at 90 characters
            text = "\n".join(textwrap.fill(p, 80, break_on_hyphens=False) for p in text.split("\n"))
        super().__init__(text)

    def _render_traceback_(self) -> list[str]:
        """What IPython shows (so JupyterLab, nbgrader's feedback and nbval): the diagnosis, without
        the checks' frames; a relayed crash (``raise fail(...) from exc``) keeps the student's lines."""
        return [*(student_traceback(self.__cause__) if self.__cause__ else []), str(self)]


_PACKAGE = str(Path(__file__).resolve().parents[2])
_NOT_STUDENTS = (_PACKAGE, *(sysconfig.get_path(k) for k in ("stdlib", "purelib", "platlib")))
_CHECKS = re.compile(re.escape(_PACKAGE) + r"[/\\](checks[/\\]|chapters[/\\]ch\d\d[/\\]checks\.py)")


def student_traceback(exc: BaseException) -> list[str]:
    """``exc``'s traceback as IPython draws it, from its first frame in the student's code (a cell,
    their module) on, without the checks' frames; no lines when no frame is the student's."""
    frames, tb = [], exc.__traceback__
    while tb is not None:
        frames, tb = [*frames, tb], tb.tb_next
    files = [t.tb_frame.f_code.co_filename for t in frames]
    first = next((i for i, f in enumerate(files) if not f.startswith(_NOT_STUDENTS)), len(files))
    tb = None
    for t, file in reversed(list(zip(frames[first:], files[first:]))):
        tb = (
            tb
            if _CHECKS.match(file)
            else types.TracebackType(tb, t.tb_frame, t.tb_lasti, t.tb_lineno)
        )
    from IPython import get_ipython  # the hook is called by IPython

    if tb is None or get_ipython() is None:
        return traceback.format_exception(type(exc), exc, tb) if tb else []
    return get_ipython().InteractiveTB.structured_traceback(type(exc), exc, tb)


def same(a: object, b: object, *, atol: float = ATOL, rtol: float = RTOL) -> bool:
    """True when two tensors have the same shape and values (NaNs in the same places match)."""
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.shape != b.shape:
        return False
    if a.device != b.device or a.is_complex() or b.is_complex():
        return False
    return bool(
        torch.allclose(
            a.detach().double(), b.detach().double(), atol=atol, rtol=rtol, equal_nan=True
        )
    )


def describe_difference(expected: torch.Tensor, got: torch.Tensor) -> str:
    """Where two tensors differ most, in words."""
    if expected.shape != got.shape:
        return f"expected shape {tuple(expected.shape)}, got shape {tuple(got.shape)}"
    if got.device.type == "meta" or got.is_complex():
        return f"your result is a {got.dtype} tensor on the {got.device.type} device, which cannot be compared"
    got = got.detach().to(expected.device)
    if torch.isnan(got).any() and not torch.isnan(expected).any():
        index = tuple(int(i) for i in torch.nonzero(torch.isnan(got))[0])
        return f"your result contains NaN (first at index {index}), the reference has none"
    diff = torch.nan_to_num((expected.double() - got.double()).abs(), nan=float("inf"))
    index = tuple(int(i) for i in torch.unravel_index(torch.argmax(diff), diff.shape))
    return (
        f"largest difference at index {index}: expected {expected[index].item():.6f}, "
        f"got {got[index].item():.6f}"
    )


Variants = Iterable[tuple[str, Callable[[], torch.Tensor]]]  # (mistake id, recompute) pairs


def handed_in(obj: object, chapter: str | None) -> str | None:
    """How ``obj`` is ``chapter``'s own exported code ('', ' (a copy of its code)'...), else None:
    it is an exported object, or all its code (a class's across its non-torch MRO) is in that file."""
    module = importlib.import_module(f"course_utils.chapters.{chapter}") if chapter else None
    ids = {id(getattr(module, n, None)) for n in getattr(module, "__all__", ())}
    while isinstance(obj, functools.partial) or hasattr(obj, "__wrapped__"):
        obj = obj.func if isinstance(obj, functools.partial) else obj.__wrapped__
    mro = getattr(obj, "__mro__", [obj])
    mro = [k for k in mro if not str(getattr(k, "__module__", "")).startswith("torch")]
    code = [getattr(v, "__func__", v) for k in mro if inspect.isclass(k) for v in vars(k).values()]
    code = [f for f in code if inspect.isfunction(f)] + [k for k in mro if inspect.isfunction(k)]
    if not ids or id(obj) in ids:
        return "" if ids else None
    if not code or any(f.__code__.co_filename != module.__file__ for f in code):
        return None
    course = [f" (a subclass of {k.__name__} that adds nothing)" for k in mro if id(k) in ids]
    return (course or [" (a copy of its code)"])[0]


class Check:
    """One run of a self-check, made once at its top: ``c = E.Check("check_x")``. It carries the
    check's name, so nothing else is told it; every way a check ends goes through it:
    ``c.passed(...)``, ``raise c.bug("id", ...)`` (a catalogued mistake: the one way to name one),
    ``c.compare(got, expected, where, variants)`` (the mistake that reproduces a wrong result) and
    ``raise c.fail(...)`` (only to relay a crash or say where numbers differ)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def passed(self, what: str) -> None:
        """Print the one success line every check ends with."""
        print(f"✓ {self.name}: {what}")

    def fail(self, diagnosis: str, hint: str | None = None) -> CheckFailure:
        """A failure that names no catalogued mistake (a crash relayed, a difference located)."""
        return CheckFailure(self.name, diagnosis, hint)

    def bug(self, bug: str | Bug, context: str = "", **detail: object) -> CheckFailure:
        """The failure naming the catalogued mistake ``bug``, after ``context``; ``detail`` (and
        the check's name) fill the placeholders of its diagnosis and hint."""
        bug = MISTAKES[bug] if isinstance(bug, str) else bug
        diagnosis = bug.diagnosis.format(check=self.name, **detail)
        hint = bug.hint.format(check=self.name, **detail)
        text = f"{context}\n{diagnosis}" if context else diagnosis
        return CheckFailure(self.name, text, hint, bug.name)

    def compare(
        self,
        got: object,
        expected: torch.Tensor,
        where: str,
        variants: Variants = (),
        *,
        atol: float = ATOL,
        hint: str | None = None,
        context: str | None = None,
        in_dtype_of_got: bool = False,
        detail: dict | None = None,
    ) -> None:
        """Return when ``got`` equals ``expected``. Else raise the first mistake of ``variants``
        whose recomputed result equals ``got`` (after ``context``, default ``where``; ``detail``
        fills its placeholders), else say after ``where`` where the numbers differ (with ``hint``).
        ``in_dtype_of_got``: compare on the CPU in ``got``'s dtype (a float64 reference)."""
        __tracebackhide__ = True
        cast = (lambda t: t.to(got.dtype)) if in_dtype_of_got else (lambda t: t)
        seen = got.cpu() if in_dtype_of_got else got
        if same(seen, cast(expected), atol=atol):
            return
        for bug, make in variants if isinstance(got, torch.Tensor) else ():
            try:
                reproduced = same(cast(make()), seen, atol=atol)
            except Exception:  # noqa: BLE001 - a variant that cannot run on this input does not match
                continue
            if reproduced:
                raise self.bug(bug, where if context is None else context, **(detail or {}))
        expected = expected.cpu() if in_dtype_of_got else expected
        raise self.fail(f"{where} {describe_difference(expected, seen)}.", hint)

    # ----------------------------------------------------------------------- calling student code
    def stub(self, what: str) -> CheckFailure:
        return self.bug("stub_in_place", what=what)

    def call(self, fn: Callable, *args, what: str, hint: str | None = None, **kwargs):
        """Call student code; a crash becomes a diagnosis naming the call (the stub gets its own)."""
        __tracebackhide__ = True
        try:
            return fn(*args, **kwargs)
        except NotImplementedError:
            raise self.stub(what) from None
        except CheckFailure:
            raise
        except Exception as exc:  # noqa: BLE001 - any crash is reported in plain words
            raise self.fail(f"{what} raised {type(exc).__name__}: {exc}", hint) from exc

    def call_pure(self, fn: Callable, inputs: Sequence[torch.Tensor], *rest, what: str, **kwargs):
        """Call ``fn(*inputs, *rest)`` and require the caller's tensors unchanged afterwards."""
        __tracebackhide__ = True
        before = [t.detach().clone() for t in inputs]
        got = self.call(fn, *inputs, *rest, what=what, **kwargs)
        for name, (t, b) in zip(("input", "second input", "third input"), zip(inputs, before)):
            if not torch.equal(t.detach(), b) and not (
                torch.isnan(t).any() and torch.equal(t.isnan(), b.isnan())
            ):
                raise self.bug("input_modified", f"After {what}:", what=f"{name} tensor")
        return got

    def refuse_course_code(self, obj: object) -> None:
        """Refuse the course's own export for this check's chapter (that of its checks.py)."""
        mods = registry.chapter_modules("checks")
        chapter = next((m.__name__.split(".")[-2] for m in mods if self.name in m.__all__), None)
        if (how := handed_in(obj, chapter)) is not None:
            raise self.bug("course_code_handed_in", shown=shown(obj), how=how)

    def ensure_callable(self, obj: object, what: str) -> None:
        if (
            not callable(obj)
            or inspect.isclass(obj)
            and not issubclass(obj, nn.Module)
            and what.startswith("a function")
        ):
            raise self.bug("wrong_argument", what=what, kind=type(obj).__name__, shown=shown(obj))
        self.refuse_course_code(obj)

    def ensure_class(self, obj: object, what: str) -> type:
        if not inspect.isclass(obj):
            bug = "instance_not_class" if isinstance(obj, nn.Module) else "wrong_argument"
            raise self.bug(bug, what=what, kind=type(obj).__name__, shown=shown(obj))
        self.refuse_course_code(obj)
        return obj

    def expect_tensor_output(
        self, got: object, what: str, shape: tuple[int, ...] | None = None
    ) -> torch.Tensor:
        """``got`` if it is a tensor (of ``shape``); else the not_a_tensor / wrong_shape mistake."""
        if not isinstance(got, torch.Tensor):
            kind = (
                "None"
                if got is None
                else f"a {type(got).__module__.split('.')[0]}.{type(got).__name__}"
            )
            raise self.bug("not_a_tensor", what=what, kind=kind.replace("builtins.", ""))
        if got.device.type == "meta":
            raise self.bug("meta_tensor", what=what)
        if shape is not None and tuple(got.shape) != tuple(shape):
            raise self.bug("wrong_shape", what=what, got=tuple(got.shape), expected=tuple(shape))
        return got


# --------------------------------------------------------------------------- randomness, calling
def randn(*shape: int, seed: int) -> torch.Tensor:
    """Normal draws from a seeded CPU generator (never disturbs the global seed)."""
    return torch.randn(*shape, generator=generator(seed))


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@contextlib.contextmanager
def preserved_rng() -> Iterator[None]:
    """Run a block without changing the global torch RNG state seen by the notebook."""
    state = torch.random.get_rng_state()
    try:
        yield
    finally:
        torch.random.set_rng_state(state)


@contextlib.contextmanager
def isolated() -> Iterator[None]:
    """No gradients, one CPU thread (tiny tensors), the notebook's RNG and threads kept."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with preserved_rng(), torch.no_grad():
            yield
    finally:
        torch.set_num_threads(threads)


def shown(obj: object, limit: int = 80) -> str:
    """``repr(obj)`` cut to ``limit`` characters; an object whose repr fails is named by its type."""
    try:
        text = repr(obj)
    except Exception:  # noqa: BLE001 - a student's broken __repr__ must not crash the check
        return f"<{type(obj).__name__} object>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


__all__ = [
    "ATOL",
    "RTOL",
    "Check",
    "CheckFailure",
    "Variants",
    "describe_difference",
    "generator",
    "isolated",
    "preserved_rng",
    "randn",
    "same",
    "shown",
]
