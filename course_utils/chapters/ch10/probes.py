"""Grader probes that chapter 10's checks share. Generic: they move to the engine when the core has
room (the core is at its cap; chapter 11's probes.py holds the same kind of probe, with texts of its
own exercises, so it is not imported here); tests/test_house.py counts this file in the chapter."""

import torch

from course_utils.checks import _engine as E


def call_clean(c: E.Check, fn, inputs, *rest, what: str):
    """``fn(*inputs, *rest)``: the caller's tensors (``c.call_pure``) and torch's global random
    state must be unchanged afterwards."""
    __tracebackhide__ = True
    state = torch.get_rng_state()
    got = c.call_pure(fn, inputs, *rest, what=what)
    if not torch.equal(state, torch.get_rng_state()):
        raise c.bug("random_state_changed", f"After {what}:")
    return got


class _Watch(E.Watch):
    """E.Watch, also counting .cpu() and .numpy() among the tensors made on the CPU on purpose."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in ("cpu", "numpy"):
            self.without_device.append(func.__name__)
        return super().__torch_function__(func, types, args, kwargs)


def on_device(c: E.Check, fn, args, where: str, owned=()) -> None:
    """``fn(*args)`` as if ``args`` and ``owned`` (a module's parameters and buffers) were on another
    device (``E.Placement``): a tensor made on the CPU that meets them is named, and so is a result
    left on the CPU when something was made there on purpose (a factory without device=, .cpu(),
    .numpy()); a result the simulation cannot follow (made under torch.vmap) is not blamed."""
    __tracebackhide__ = True
    placed, watch = E.Placement([*args, *owned]), _Watch()
    try:
        with E.preserved_rng(), torch.no_grad(), placed, watch:
            got = fn(*args)
    except E.DeviceMix as exc:
        raise c.bug("cpu_tensor_in_forward", where, error=str(exc)) from None
    except Exception:  # noqa: BLE001 - the other probes name other failures
        return
    if isinstance(got, torch.Tensor) and got.dim() > 0 and not placed.is_placed(got):
        if watch.without_device:
            raise c.bug("result_on_cpu", where)


def overflows(got: torch.Tensor, expected: torch.Tensor) -> torch.Tensor | None:
    """``got`` when it is NaN or infinite where ``expected`` is finite (a variant for c.compare)."""
    bad = ~got.detach().cpu().isfinite() & expected.detach().cpu().isfinite()
    return got if got.shape == expected.shape and bad.any() else None
