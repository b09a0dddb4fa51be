"""The machinery shared by every self-check.

A check is a function ``check_something(student_thing)`` that either prints one short
success line or raises :class:`CheckFailure` (an ``AssertionError``) whose message is a
plain-language diagnosis. Bugs are recognised *by behaviour*: when the student's output
differs from the reference, the check computes what each known mistake would have
produced and names the one that matches.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

ATOL = 1e-5
RTOL = 1e-4


class CheckFailure(AssertionError):
    """A self-check found a problem. The message says what and, where known, why."""

    def __init__(self, check: str, diagnosis: str, hint: str | None = None) -> None:
        self.check = check
        self.diagnosis = diagnosis
        self.hint = hint
        text = f"{check} found a problem.\n\n{diagnosis}"
        if hint:
            text += f"\n\nHint: {hint}"
        super().__init__(text)


@dataclass(frozen=True)
class Bug:
    """A known mistake: a name, what it means for the student, and how to fix it."""

    name: str
    diagnosis: str
    hint: str


def passed(check: str, what: str) -> None:
    """Print the one success line every check ends with."""
    print(f"✓ {check}: {what}")


def same(a: torch.Tensor, b: torch.Tensor, *, atol: float = ATOL, rtol: float = RTOL) -> bool:
    """True when two tensors have the same shape and values (NaNs in the same places match)."""
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return False
    if a.shape != b.shape:
        return False
    return bool(torch.allclose(a.double(), b.double(), atol=atol, rtol=rtol, equal_nan=True))


def describe_difference(expected: torch.Tensor, got: torch.Tensor) -> str:
    """Where two same-shaped tensors differ most, in words."""
    if expected.shape != got.shape:
        return f"expected shape {tuple(expected.shape)}, got shape {tuple(got.shape)}"
    if torch.isnan(got).any() and not torch.isnan(expected).any():
        index = tuple(int(i) for i in torch.nonzero(torch.isnan(got))[0])
        return f"your result contains NaN (first at index {index}), the reference has none"
    diff = (expected.double() - got.double()).abs()
    diff = torch.nan_to_num(diff, nan=float("inf"))
    flat = int(torch.argmax(diff))
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), diff.shape))
    return (
        f"largest difference at index {index}: expected {expected[index].item():.6f}, "
        f"got {got[index].item():.6f}"
    )


def match_bug(
    got: torch.Tensor, candidates: Sequence[tuple[Bug, Callable[[], torch.Tensor]]]
) -> Bug | None:
    """Return the first known bug whose output equals ``got``, or None."""
    for bug, make in candidates:
        try:
            produced = make()
        except Exception:  # a variant that cannot run on this input simply does not match
            continue
        if same(produced, got):
            return bug
    return None


def fail(check: str, diagnosis: str, hint: str | None = None) -> CheckFailure:
    """Build the exception to raise (``raise fail(...)`` keeps tracebacks short)."""
    return CheckFailure(check, diagnosis, hint)


def fail_with_bug(check: str, bug: Bug, context: str = "") -> CheckFailure:
    prefix = f"{context}\n" if context else ""
    return CheckFailure(check, f"{prefix}{bug.diagnosis}", bug.hint)


def generator(seed: int) -> torch.Generator:
    """A CPU generator seeded for one test case (never disturbs the global seed)."""
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=generator(seed))


@contextlib.contextmanager
def preserved_rng() -> Iterator[None]:
    """Run a block without changing the global torch RNG state seen by the notebook."""
    state = torch.random.get_rng_state()
    try:
        yield
    finally:
        torch.random.set_rng_state(state)


def ensure_callable(check: str, obj: object, what: str) -> None:
    if not callable(obj):
        raise fail(check, f"{check} expects {what}, but was given {type(obj).__name__} {obj!r}.")


def ensure_class(check: str, obj: object, what: str) -> type:
    if not inspect.isclass(obj):
        hint = None
        if isinstance(obj, torch.nn.Module):
            hint = f"pass the class itself, e.g. {check}({type(obj).__name__}), not an instance."
        raise fail(
            check, f"{check} expects {what}, but was given {type(obj).__name__} {obj!r}.", hint
        )
    return obj


def call(check: str, fn: Callable, *args, what: str, **kwargs):
    """Call student code; turn a crash into a diagnosis that names the input."""
    __tracebackhide__ = True
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise fail(
            check,
            f"{what} raised NotImplementedError: the exercise stub is still in place.",
            "replace `raise NotImplementedError()` with your code, run that cell, then this one.",
        ) from None
    except CheckFailure:
        raise
    except Exception as exc:  # noqa: BLE001 - we report any crash in plain words
        raise fail(
            check, f"{what} raised {type(exc).__name__}: {exc}"
        ) from exc


@dataclass
class DropoutCall:
    input: torch.Tensor
    p: float
    training: bool
    output: torch.Tensor


@contextlib.contextmanager
def record_dropout() -> Iterator[list[DropoutCall]]:
    """Record every call to ``torch.nn.functional.dropout`` (``nn.Dropout`` uses it too)."""
    import torch.nn.functional as F

    original = F.dropout
    calls: list[DropoutCall] = []

    def recording(input, p=0.5, training=True, inplace=False):  # noqa: A002 - torch's name
        before = input.detach().clone()
        out = original(input, p, training, inplace)
        calls.append(DropoutCall(before, float(p), bool(training), out.detach().clone()))
        return out

    F.dropout = recording
    try:
        yield calls
    finally:
        F.dropout = original
