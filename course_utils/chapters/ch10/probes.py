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


def on_device(c: E.Check, fn, args, where: str, owned=()) -> None:
    """``fn(*args)`` as if ``args`` and ``owned`` (a module's parameters and buffers) were on another
    device (``E.Placement``): a tensor made on the CPU that meets them is named, and so is a result
    left on the CPU when something was made there on purpose (a factory without device=, .cpu(),
    .numpy()); a result the simulation cannot follow (made under torch.vmap) is not blamed."""
    __tracebackhide__ = True
    placed, watch = E.Placement([*args, *owned]), Calls()
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


class Calls(E.Watch):
    """E.Watch, also counting .cpu() and .numpy() among the tensors made on the CPU on purpose, and
    keeping every call's name, arguments and result (``seen``): what a forward did, read from the
    calls it made, never from its source text."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in ("cpu", "numpy"):
            self.without_device.append(func.__name__)
        result = super().__torch_function__(func, types, args, kwargs)
        self.seen.append((getattr(func, "__name__", ""), args, kwargs or {}, result))
        return result

    def called(self, names) -> str | None:
        """The first of ``names`` the forward called (F.layer_norm, nn.GELU and torch.ops alike)."""
        return next((n for n, *_ in self.seen if n in names), None)

    def below(self, dtype: torch.dtype) -> bool:
        """Whether any tensor the forward used or made is a float of lower precision than dtype."""
        flat = E.watch.tree_flatten([(a, kw, r) for _, a, kw, r in self.seen])[0]
        bits = [
            torch.finfo(t.dtype).bits for t in flat if torch.is_tensor(t) and t.is_floating_point()
        ]
        return min(bits, default=64) < torch.finfo(dtype).bits

    def cast_back(self) -> bool:
        """Whether a float32 tensor was cast to float64 (x.float() ... .type_as(x), Llama's way)."""
        casts = ("to", "type_as", "type", "double")
        return any(
            n in casts
            and a
            and getattr(a[0], "dtype", 0) == torch.float32
            and getattr(r, "dtype", 0) == torch.float64
            for n, a, _, r in self.seen
        )

    def dropped_keepdim(self) -> bool:
        """Whether a reduction over the last axis dropped that axis (no keepdim=True)."""
        reductions = ("mean", "var", "std", "sum", "norm", "var_mean", "std_mean", "amax", "rms")
        for name, args, kw, _ in self.seen:
            dim = kw.get("dim", args[1] if len(args) > 1 else None)
            dims = dim if isinstance(dim, (tuple, list)) else (dim,)
            if name in reductions and args and isinstance(args[0], torch.Tensor):
                last = {-1, args[0].dim() - 1}
                if any(d in last for d in dims) and not kw.get("keepdim", False):
                    return True
        return False
