"""Input checks with messages that say what was expected and what was given."""

from __future__ import annotations

from collections.abc import Sequence

import torch


class CourseInputError(ValueError):
    """Raised when a course helper is called with input it cannot use.

    It subclasses :class:`ValueError`, so ``except ValueError`` also catches it.
    """


def _describe(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    return f"a {type(value).__name__} ({value!r})"


def expect_tensor(
    value: object,
    name: str,
    *,
    ndim: int | Sequence[int] | None = None,
    floating: bool = False,
    shape: Sequence[int | None] | None = None,
) -> torch.Tensor:
    """Return ``value`` if it is a tensor of the expected kind, else raise a clear error.

    Args:
        value: the object to check.
        name: the argument's name, used in the message.
        ndim: the allowed number of dimensions (an int, or several ints).
        floating: require a floating-point dtype.
        shape: the expected shape; ``None`` entries match any size. Implies ``ndim``.

    Raises:
        CourseInputError: with a message naming the argument, what was expected and
            what was given.
    """
    if not isinstance(value, torch.Tensor):
        raise CourseInputError(f"{name} must be a torch.Tensor, but got {_describe(value)}.")
    if shape is not None:
        ndim = len(shape)
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if value.dim() not in allowed:
            wanted = " or ".join(f"{n}-d" for n in allowed)
            raise CourseInputError(
                f"{name} must be a {wanted} tensor, but got a {value.dim()}-d tensor "
                f"of shape {tuple(value.shape)}."
            )
    if shape is not None:
        for axis, (want, got) in enumerate(zip(shape, value.shape)):
            if want is not None and want != got:
                wanted = "(" + ", ".join("any" if s is None else str(s) for s in shape) + ")"
                raise CourseInputError(
                    f"{name} must have shape {wanted}, but got shape {tuple(value.shape)} "
                    f"(axis {axis} is {got}, expected {want})."
                )
    if floating and not value.is_floating_point():
        raise CourseInputError(
            f"{name} must be a floating-point tensor (e.g. torch.float32), but got dtype "
            f"{value.dtype}. Tip: call .float() on it."
        )
    return value


def expect_int(
    value: object, name: str, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    """Return ``value`` if it is an int (not a bool) from ``minimum`` to ``maximum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise CourseInputError(f"{name} must be an int, but got {_describe(value)}.")
    if minimum is not None and value < minimum:
        raise CourseInputError(f"{name} must be at least {minimum}, but got {value}.")
    if maximum is not None and value > maximum:
        raise CourseInputError(f"{name} must be at most {maximum}, but got {value}.")
    return value


def expect_probability(value: object, name: str) -> float:
    """Return ``value`` as a float if it lies in [0, 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CourseInputError(f"{name} must be a number in [0, 1), but got {_describe(value)}.")
    if not 0.0 <= float(value) < 1.0:
        raise CourseInputError(f"{name} must be in [0, 1) (a drop probability), but got {value}.")
    return float(value)
