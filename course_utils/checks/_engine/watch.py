"""Watching torch calls: a second device simulated on the CPU, and a record of dropout,
SDPA and softmax calls and of tensors made without a device.

The one module of the checks that uses a private torch API (``torch.utils._pytree``), with a
plain fallback for a torch without it (``tests/test_core.py`` tests both)."""

from __future__ import annotations

import sys

import torch
from torch.overrides import TorchFunctionMode

try:  # private: torch's own flattening of nested args (knows every container torch passes)
    from torch.utils._pytree import tree_flatten
except ImportError:  # a torch without it: lists, tuples and dicts, which is what calls pass

    def tree_flatten(tree: object) -> tuple[list, None]:
        return _flatten(tree), None


def _flatten(tree: object) -> list:
    """The leaves of nested lists, tuples and dicts (the fallback of ``tree_flatten``)."""
    if isinstance(tree, dict):
        return [leaf for value in tree.values() for leaf in _flatten(value)]
    if isinstance(tree, (list, tuple)):
        return [leaf for item in tree for leaf in _flatten(item)]
    return [tree]


class DeviceMix(RuntimeError):
    pass


def device_free(t: torch.Tensor) -> bool:
    """A device-free attention bias (``causal_lower_right``), looked up, never imported: its module
    imports ``torch._dynamo``, seconds that no check should pay."""
    bias = sys.modules.get("torch.nn.attention.bias")
    return bias is not None and isinstance(t, getattr(bias, "CausalBias", ()))


def storage(t: torch.Tensor) -> int:
    """Address of ``t``'s storage (shared by its views); 0 when it has none (empty, or no storage)."""
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return 0


class Placement(TorchFunctionMode):
    """A second device without a second device (the meta device's first use costs seconds of imports).
    The tensors given, everything computed from them and everything made with an explicit device
    count as *placed*; a tensor of one or more dimensions made without a device (``torch.ones(n, n)``)
    that meets a placed one raises :class:`DeviceMix`, as a GPU would (a placed tensor may be indexed with
    one; a CPU tensor indexed with a placed index may not; values assigned must be placed or 0-d), as
    PyTorch does on a GPU. ``.cpu()`` and ``.to("cpu")`` give CPU tensors."""

    _MOVES = ("to", "type_as", "cuda")
    _INDEXING = ("__getitem__", "__setitem__", "index_put_", "index_put")

    def __init__(self, placed) -> None:
        super().__init__()
        self.placed: dict[
            int, torch.Tensor
        ] = {}  # the tensors are kept, so ids and storages stay unique
        self.storages: set[int] = set()
        self._mark(list(placed))

    def _mark(self, result) -> None:
        for item in tree_flatten(result)[0]:
            if isinstance(item, torch.Tensor):
                self.placed[id(item)] = item
                self.storages.add(storage(item))
        self.storages.discard(0)

    def is_placed(self, t: torch.Tensor) -> bool:
        """Whether ``t`` counts as on the other device (a view shares its base's storage: torch 2.3 slices
        without calling the mode)."""
        return id(t) in self.placed or storage(t) in self.storages

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        flat = tree_flatten((args, kwargs))[0]
        tensors = [t for t in flat if isinstance(t, torch.Tensor)]
        here = any(self.is_placed(t) for t in tensors)
        moved = name in self._MOVES and any(
            isinstance(a, torch.device) or (isinstance(a, torch.Tensor) and self.is_placed(a))
            for a in flat[1:]
        )
        # x.cpu() and x.to("cpu") name the CPU in so many words (x.device would be a torch.device)
        to_cpu = (
            name == "cpu"
            or name in self._MOVES
            and any(isinstance(a, str) and a.startswith("cpu") for a in flat[1:])
        )
        if here and not moved and not to_cpu:
            # PyTorch's rules: index tensors may stay on the CPU (a placed index may index a placed
            # tensor only), 0-d tensors and device-free biases (causal_lower_right) go anywhere
            checked = tensors
            if name in self._INDEXING:
                checked = [args[0], *args[2:3]]  # the indexed tensor and the values assigned
            stray = [
                t
                for t in checked
                if isinstance(t, torch.Tensor)
                and not self.is_placed(t)
                and t.dim() > 0
                and not device_free(t)
            ]
            if stray:
                raise DeviceMix(
                    f"a tensor of shape {tuple(stray[0].shape)} made on the CPU met your input's "
                    f"device in {name}"
                )
        result = func(*args, **kwargs)
        if to_cpu and isinstance(result, torch.Tensor) and self.is_placed(result):
            result = (
                result.clone()
            )  # on the CPU these return the tensor itself; on a GPU, a new CPU tensor
        device = kwargs.get("device")
        if not to_cpu and (moved or here or (device is not None and device != "cpu")):
            self._mark(result)
        return result


FACTORIES = {"arange", "ones", "zeros", "full", "empty", "eye", "tensor", "as_tensor", "linspace"}
RECORDED = ("dropout", "scaled_dot_product_attention", "softmax", "_softmax", "log_softmax")


class Watch(TorchFunctionMode):
    """Records dropout, SDPA and softmax calls, the shapes of all results, the tensors made from
    scratch without a device (``without_device``) and whether anything was moved with .to (``moved``)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls, self.shapes, self.without_device, self.moved = [], [], [], False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in FACTORIES and kwargs.get("device") is None:
            self.without_device.append(name)
        self.moved = self.moved or name in ("to", "cuda")
        before = (
            args[0].detach().clone()
            if name == "dropout" and args and isinstance(args[0], torch.Tensor)
            else None
        )
        result = func(*args, **kwargs)
        if name in RECORDED:  # a dropout's output copied: a later x += ... must not change it
            kept = result.detach().clone() if before is not None else result
            self.calls.append((name, before, args, kwargs, kept))
        for item in result if isinstance(result, (tuple, list)) else (result,):
            if isinstance(item, torch.Tensor):
                self.shapes.append(tuple(item.shape))
        return result

    def dropouts(self) -> list[tuple[torch.Tensor, float, torch.Tensor]]:
        """(input, p, output) of every active dropout call (train mode, p > 0)."""
        found = []
        for name, before, args, kwargs, result in self.calls:
            if name == "dropout":
                p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
                training = kwargs.get(
                    "training", kwargs.get("train", args[2] if len(args) > 2 else True)
                )
                if training and p > 0:
                    found.append((before, float(p), result.detach()))
        return found

    def sdpa_dropout(self) -> float:
        return max(
            [
                float(kw.get("dropout_p", a[4] if len(a) > 4 else 0.0))
                for n, _, a, kw, _ in self.calls
                if n == "scaled_dot_product_attention"
            ]
            or [0.0]
        )


__all__ = ["DeviceMix", "Placement", "Watch", "storage"]
