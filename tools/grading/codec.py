"""One side's half of the grader's wire (``wire.py`` says what crosses): its pairs, and how it
encodes and decodes values. Standard library and torch only: loaded in the sandbox too."""

from __future__ import annotations

import collections
import sys
import types

import torch
from torch import nn

try:
    from tools.grading.wire import (
        MAX_DEPTH,
        PLAIN,
        SIMPLE,
        TRUSTED,
        WireError,
        _list,
        _sig,
        _tensor_sig,
        class_ref,
        numpy_scalar,
        resolve,
        storage,
        tensor_from_state,
        tensor_state,
    )
except ImportError:  # in the sandbox, beside this file
    from wire import (  # type: ignore[no-redef]
        MAX_DEPTH,
        PLAIN,
        SIMPLE,
        TRUSTED,
        WireError,
        _list,
        _sig,
        _tensor_sig,
        class_ref,
        numpy_scalar,
        resolve,
        storage,
        tensor_from_state,
        tensor_state,
    )


class Codec:
    """One side's half of the wire: its pairs, and how it encodes and decodes values.

    Subclasses say what is foreign (:meth:`encode_foreign`, :meth:`decode_foreign`), which objects
    cross by value (:meth:`by_value`), and how a class named by the other side is found
    (:meth:`find_class`)."""

    first_pair = 0  # 0 for the judge (even pair ids), 1 for the student process (odd)

    def __init__(self) -> None:
        self.objects: dict[int, object] = {}  # pair id -> object (or a weakref to it)
        self.pair_of: dict[int, int] = {}  # id(object) -> pair id
        self.homes: dict[int, bool] = {}  # pair id -> made on this side
        self.sigs: dict[int, tuple] = {}
        self.released: list[int] = []
        self._next = self.first_pair
        self.containers: list = []  # the lists, dicts and sets of the message being coded

    # -- pairs
    def _keep(self, obj, pair: int, home: bool) -> None:
        self.objects[pair], self.pair_of[id(obj)], self.homes[pair] = obj, pair, home

    def get(self, pair: int):
        return self.objects.get(pair)

    def forget(self, pairs) -> None:
        for pair in pairs:
            obj = self.get(pair)
            self.objects.pop(pair, None)
            self.homes.pop(pair, None)
            self.sigs.pop(pair, None)
            if obj is not None and self.pair_of.get(id(obj)) == pair:
                del self.pair_of[id(obj)]

    def clear(self) -> None:
        self.forget(list(self.objects))
        self.released.clear()

    def _new_pair(self, obj) -> int:
        pair, self._next = self._next, self._next + 2
        self._keep(obj, pair, True)
        return pair

    def pair(self, obj) -> int | None:
        pair = self.pair_of.get(id(obj))
        return pair if pair is not None and self.get(pair) is obj else None

    # -- hooks
    def encode_foreign(self, obj):
        raise WireError(f"{type(obj).__name__} cannot cross")

    def decode_foreign(self, tree):
        raise WireError(f"unknown tag {tree[0]!r}")

    def by_value(self, obj) -> bool:
        return False

    def find_class(self, ref):
        raise WireError(f"no class {ref!r}")

    def accept(self, obj, attrs: dict) -> None:
        """Called before another side's attributes replace those of ``obj`` (may refuse)."""

    # -- encoding
    def encode(self, value, depth: int = 0):
        if depth > MAX_DEPTH:
            raise WireError("a value nested too deeply")
        kind = type(value)
        if value is None or kind in PLAIN:
            return value
        number = numpy_scalar(value)
        if number is not None:
            return number
        enc = self.encode
        if kind is tuple:
            return ("T", [enc(v, depth + 1) for v in value])
        if kind is list or kind is set or kind is frozenset:
            self.containers.append(value)
            tag = {list: "L", set: "S", frozenset: "F"}[kind]
            return (tag, [enc(v, depth + 1) for v in value])
        if kind in (dict, collections.OrderedDict, collections.defaultdict):
            self.containers.append(value)
            factory = (
                enc(value.default_factory, depth + 1) if kind is collections.defaultdict else None
            )
            items = [(enc(k, depth + 1), enc(v, depth + 1)) for k, v in value.items()]
            return ("D", kind.__name__, items, factory)
        if isinstance(value, torch.Tensor):
            bias = sys.modules.get("torch.nn.attention.bias")
            if bias is not None and type(value) is getattr(bias, "CausalBias", None):
                return ("cbias", int(value.variant.value), value.seq_len_q, value.seq_len_kv)
            return self._encode_tensor(value)
        if kind is torch.Generator:
            pair = self.pair(value)
            if pair is not None:
                return ("g", pair, None)
            pair = self._new_pair(value)
            self.sigs[pair] = self._sig_of(value)
            return ("g", pair, value.get_state().numpy().tobytes())
        if kind is torch.dtype:
            return ("dt", str(value).removeprefix("torch."))
        if kind is torch.device:
            return ("dv", str(value))
        if kind is torch.Size:
            return ("sz", [int(s) for s in value])
        if kind in (torch.memory_format, torch.layout):
            return ("tm", str(value).removeprefix("torch."))
        if kind is complex:
            return ("j", value.real, value.imag)
        if kind is slice:
            return ("sl", [enc(value.start), enc(value.stop), enc(value.step)])
        if kind is range:
            return ("r", value.start, value.stop, value.step)
        if value is Ellipsis:
            return ("e",)
        if kind is types.ModuleType:
            return ("m", value.__name__)
        return self.encode_other(value, depth)

    def encode_other(self, value, depth: int):
        """Classes, functions, objects by value, then what the subclass calls foreign."""
        if isinstance(value, type) and self.nameable(value):
            return ("c", *class_ref(value))
        if isinstance(value, (types.FunctionType, types.BuiltinFunctionType)) and self.nameable(
            value
        ):
            return ("f", value.__module__, value.__qualname__)
        if isinstance(value, tuple) and self.nameable(
            type(value)
        ):  # torch.return_types, named tuples
            return ("nt", *class_ref(type(value)), [self.encode(v, depth + 1) for v in value])
        if self.pair(value) is not None:  # an object both sides already share
            return ("o", self.pair(value), None)
        if self.by_value(value):
            pair = self._new_pair(value)
            self.sigs[pair] = self._sig_of(value)
            return ("o", pair, (class_ref(type(value)), self._encode_attrs(value, depth)))
        return self.encode_foreign(value)

    def nameable(self, obj) -> bool:
        """Whether the other side can find ``obj`` (a class or function) by its module and name."""
        module = getattr(obj, "__module__", None) or ""
        if not module.startswith((*TRUSTED, "builtins", "collections", "math", "operator")):
            return False
        try:
            return resolve(module, obj.__qualname__) is obj
        except Exception:  # noqa: BLE001 - not found where it says it lives
            return False

    def _encode_attrs(self, obj, depth: int):
        outer, self.containers = self.containers, []  # an object's own lists are not the call's
        try:
            return [(k, self.encode(v, depth + 1)) for k, v in vars(obj).items()]
        finally:
            self.containers = outer

    def _encode_tensor(self, t: torch.Tensor):
        pair = self.pair(t)
        if pair is not None:
            return ("t", pair, None)
        pair = self._new_pair(t)
        self.sigs[pair] = _tensor_sig(t)
        return ("t", pair, self._tensor_payload(t))

    def _tensor_payload(self, t: torch.Tensor):
        """(values, gradient, computed with gradients, view of another pair or None)."""
        grad = t.grad if t.is_leaf else None
        state = tensor_state(t)
        return (state, None if grad is None else tensor_state(grad), t.grad_fn is not None, None)

    # -- decoding
    def decode(self, tree, depth: int = 0):
        if depth > MAX_DEPTH:
            raise WireError("a value nested too deeply")
        if tree is None or type(tree) in PLAIN:
            return tree
        if type(tree) is not tuple or not tree or type(tree[0]) is not str:
            raise WireError(f"not a tagged value: {type(tree).__name__}")
        tag, dec = tree[0], self.decode
        if tag == "T":
            return tuple(dec(v, depth + 1) for v in _list(tree[1]))
        if tag in ("L", "S", "F", "D"):  # its place among the containers first, as when encoded
            slot = len(self.containers)
            self.containers.append(None)
            self.containers[slot] = made = self._container(tree, depth)
            return made
        if tag == "t":
            return self._decode_tensor(tree)
        if tag == "g":
            return self._decode_generator(tree)
        if tag == "o":
            return self._decode_object(tree, depth)
        simple = SIMPLE.get(tag)
        if simple is not None:
            return simple(self, tree)
        if tag == "c":
            return self.find_class(tree[1:])
        if tag == "f":
            return self.find_function(tree[1], tree[2])
        if tag == "nt":
            cls = self.find_class(tree[1:4])
            items = [dec(v, depth + 1) for v in _list(tree[4])]
            return cls._make(items) if hasattr(cls, "_make") else cls(items)
        return self.decode_foreign(tree)

    def _container(self, tree, depth: int):
        dec = self.decode
        if tree[0] != "D":
            items = [dec(v, depth + 1) for v in _list(tree[1])]
            return {"L": list, "S": set, "F": frozenset}[tree[0]](items)
        items = [(dec(k, depth + 1), dec(v, depth + 1)) for k, v in _list(tree[2])]
        if tree[1] == "defaultdict":
            return collections.defaultdict(dec(tree[3], depth + 1), items)
        kind = {"dict": dict, "OrderedDict": collections.OrderedDict}.get(tree[1])
        if kind is None:
            raise WireError(f"no dict kind {tree[1]!r}")
        return kind(items)

    def find_function(self, module: str, qualname: str):
        raise WireError(f"no function {module}.{qualname}")

    def find_module(self, name: str):
        raise WireError(f"no module {name}")

    def _decode_tensor(self, tree):
        _, pair, payload = tree
        known = self.get(pair)
        if payload is None:
            if not isinstance(known, torch.Tensor):
                raise WireError(f"no tensor {pair}")
            return known
        t = self._tensor_from(payload)
        if isinstance(known, torch.Tensor):
            shared = payload[3] is not None and storage(t) != storage(known)
            self._update_tensor(known, t, shared)
            return known
        self._keep(t, pair, False)
        self.sigs[pair] = _tensor_sig(t)
        return t

    def _tensor_from(self, payload):
        state, grad, graph, view = payload
        t = tensor_from_state(state)
        if view is not None:  # the same memory as a tensor this side has: so it stays
            base_pair, offset, shape, stride = view
            base = self.get(base_pair)
            if isinstance(base, torch.Tensor) and base.dtype == t.dtype:
                try:
                    shared = base.detach().as_strided(tuple(shape), tuple(stride), int(offset))
                except (RuntimeError, TypeError, ValueError):
                    shared = None
                if shared is not None and tuple(shared.shape) == tuple(t.shape):
                    if isinstance(t, nn.Parameter):
                        t = nn.Parameter(shared, requires_grad=t.requires_grad)
                    else:
                        t = shared.requires_grad_(t.requires_grad) if t.requires_grad else shared
        if grad is not None and t.is_leaf:
            t.grad = tensor_from_state(grad).detach()
        return t

    def _decode_generator(self, tree):
        _, pair, state = tree
        known = self.get(pair)
        if state is None:
            if type(known) is not torch.Generator:
                raise WireError(f"no generator {pair}")
            return known
        g = known if type(known) is torch.Generator else torch.Generator()
        g.set_state(torch.frombuffer(bytearray(state), dtype=torch.uint8).clone())
        if known is None:
            self._keep(g, pair, False)
        self.sigs[pair] = self._sig_of(g)
        return g

    def _decode_object(self, tree, depth: int):
        _, pair, payload = tree
        known = self.get(pair)
        if payload is None:
            if known is None:
                raise WireError(f"no object {pair}")
            return known
        ref, attrs = payload
        if known is None:
            cls = self.find_class(ref)
            known = cls.__new__(cls)
            self._keep(known, pair, False)
            self._set_attrs(known, attrs, depth)
        else:
            self._set_attrs(known, attrs, depth)
        self.sigs[pair] = self._sig_of(known)
        return known

    def _set_attrs(self, obj, attrs, depth: int) -> None:
        outer, self.containers = self.containers, []
        try:
            decoded = {str(k): self.decode(v, depth + 1) for k, v in _list(attrs)}
        finally:
            self.containers = outer
        self.accept(obj, decoded)
        state = vars(obj)
        state.clear()
        state.update(decoded)

    def _update_tensor(self, t: torch.Tensor, new: torch.Tensor, shared: bool = False) -> None:
        with torch.no_grad():
            if shared:  # now a view of another pair's memory, as on the other side
                t.data = new.detach()
            elif t.shape == new.shape and t.dtype == new.dtype:
                if not torch.equal(t.detach(), new.detach()) or t.is_complex():
                    t.detach().copy_(new.detach())
            else:
                t.data = new.detach()
        if t.is_leaf:
            if t.requires_grad != new.requires_grad and (t.is_floating_point() or t.is_complex()):
                t.requires_grad_(new.requires_grad)
            t.grad = new.grad

    # -- changes
    def _sig_of(self, obj):
        if isinstance(obj, torch.Tensor):
            return _tensor_sig(obj)
        if type(obj) is torch.Generator:
            return obj.get_state().numpy().tobytes()
        return _sig(vars(obj))

    def live(self):
        """(pair, object) of every pair still alive on this side."""
        return [(p, o) for p, o in list(self.objects.items()) if o is not None]

    def changes(self) -> list:
        """The pairs changed on this side since they last crossed, encoded."""
        found = []
        for pair, obj in self.live():
            if self.sigs.get(pair) == self._sig_of(obj):
                continue
            if isinstance(obj, torch.Tensor):
                found.append(("t", pair, self._tensor_payload(obj)))
            elif type(obj) is torch.Generator:
                found.append(("g", pair, obj.get_state().numpy().tobytes()))
            else:
                found.append(("o", pair, (class_ref(type(obj)), self._encode_attrs(obj, 0))))
            self.sigs[pair] = self._sig_of(obj)
        return found

    def apply(self, changes) -> None:
        """Apply the other side's changes (to pairs this side has; one it let go is skipped)."""
        alive = self.live()  # held while the changes replace attributes that held them
        for tree in _list(changes):
            if type(tree) is not tuple or len(tree) != 3 or type(tree[1]) is not int:
                raise WireError("a change that is not one")
            if self.get(tree[1]) is not None:
                self.decode(tree)
        del alive
        for pair, obj in self.live():  # what was decoded into them is not a change of ours
            self.sigs[pair] = self._sig_of(obj)
