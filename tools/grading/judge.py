"""The judge's side of the wire: it runs the checks, and the student's objects it holds are
proxies (:class:`Remote`) whose every use is one request to the student process (``student.py``).

Nothing the student process sends can run here: it arrives as plain data (``wire.loads_plain``),
tensors are rebuilt from their bytes as plain tensors, an object is rebuilt only when its class is
torch's or one of the course's chapters the student may use (never the chapter being graded, never
the checks), and everything else (the student's functions, classes and objects) stays a handle.
The check's comparisons run on those plain values, with no mode or subclass of the student's in
this process; what the student's code does to its own process (trace hooks, frame walks, patched
modules, modes pushed under anything) happens where no check runs.

A proxy does what the object would do for the check: calls, attributes, items, iteration, ``len``;
``isinstance`` sees the class's nearest torch or Python base (``nn.Module`` for a student's layer);
comparisons and truth are the proxy's own (identity), so an object cannot answer "equal" to a
check. Autograd crosses too: a tensor the student's code computed with gradients arrives as the
output of :class:`FromStudent`, whose backward asks the student process for the gradients of the
shared tensors it came from. Torch function modes the check has in effect see the torch calls the
student's code made: they are recorded there and played here through the modes (:meth:`Session.replay`).
"""

from __future__ import annotations

import builtins
import collections
import functools
import types
import weakref

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from tools.grading import wire
from tools.grading.codec import Codec
from tools.grading.student import DUNDERS, func_ref

SAFE_ERRORS = {
    k.__name__: k
    for k in (
        NotImplementedError, ValueError, TypeError, RuntimeError, IndexError, KeyError,
        AttributeError, ZeroDivisionError, AssertionError, ArithmeticError, LookupError,
        OverflowError, ImportError, ModuleNotFoundError, NameError, RecursionError, MemoryError,
        OSError, FileNotFoundError, PermissionError, UnboundLocalError, StopIteration,
    )
}  # fmt: skip
_BUILTIN_TYPES = {
    (k.__module__, k.__qualname__): k
    for k in [*vars(builtins).values(), *vars(types).values(), *vars(collections).values()]
    if isinstance(k, type)
}
# keyed by the torch function name the chapter forbids (honesty.SHORTCUTS), as session.forbidden holds
SHORTCUT_CLASSES = {"multi_head_attention_forward": nn.MultiheadAttention}


class StudentError(Exception):
    """The student's code raised an exception of a kind that is not one of Python's own."""


class StudentTimeout(BaseException):
    """The student's code ran past the time the judge gave it."""


class GraderLost(BaseException):
    """The student process stopped answering (it died, or ran past every limit)."""


# ----------------------------------------------------------------------------- proxies
class Remote:
    """One of the student's objects, held by the judge (see the module text)."""

    __slots__ = ("_session", "_handle", "__weakref__")
    _shadow = object

    @property
    def __class__(self):
        return type(self)._shadow

    def __getattr__(self, name):
        return self._session.op("getattr", self, name)

    def __setattr__(self, name, value):
        if name in Remote.__slots__:
            object.__setattr__(self, name, value)
        else:
            self._session.op("setattr", self, name, value)

    def __delattr__(self, name):
        self._session.op("delattr", self, name)

    def __repr__(self):
        return self._session.op("repr", self)

    def __str__(self):
        return self._session.op("str", self)

    def __dir__(self):
        return self._session.op("dir", self)

    def __reduce_ex__(self, protocol):
        raise TypeError("a student's object cannot be pickled by the grader")

    def __copy__(self):
        return self._session.op("copy", self)

    def __deepcopy__(self, memo):
        return self._session.op("deepcopy", self)


class RemoteClass(Remote):
    """A proxy of one of the student's classes (``__module__`` is the class's own)."""

    __slots__ = ()

    @property
    def __module__(self):  # noqa: PLE0237 - forwarded, as for the class itself
        return self._session.op("getattr", self, "__module__")


def _call(self, *args, **kwargs):
    return self._session.op("call", self, args, kwargs)


def _forwarding(op: str):
    def method(self, *args):
        return self._session.op(op, self, *args)

    method.__name__ = op
    return method


_DUNDER_METHODS = {
    "__call__": _call,
    **{d: _forwarding(d.strip("_")) for d in DUNDERS if d != "__call__"},
}


# ----------------------------------------------------------------------------- the codec
class JudgeCodec(Codec):
    first_pair = 0

    def __init__(self, session) -> None:
        super().__init__()
        self.session = session
        self.callbacks: dict[int, object] = {}
        self.callback_of: dict[int, int] = {}
        self.proxies: dict[int, weakref.ref] = {}
        self.proxy_types: dict[int, type] = {}
        self.released_handles: list[int] = []
        self.local: list | None = None
        self.pins: dict[int, int] = {}  # pairs an autograd graph of the judge still needs
        self.aliases: dict[int, object] = {}  # pair -> the record's tensor it is
        self.updates: list = []  # (record tensor, its values from here on)

    def pin(self, pair: int) -> _Pin:
        self.pins[pair] = self.pins.get(pair, 0) + 1
        return _Pin(self, pair)

    def releasable(self) -> list[int]:
        """The pairs whose objects died here and that no graph needs (pinned ones wait)."""
        free = [p for p in self.released if not self.pins.get(p)]
        self.released = []
        return free

    def _keep(self, obj, pair, home):
        ref = wire.weak(obj)
        if isinstance(ref, weakref.ref):
            ref = weakref.ref(obj, lambda _, pair=pair: self.released.append(pair))
        self.objects[pair], self.pair_of[id(obj)], self.homes[pair] = ref, pair, home

    def get(self, pair):
        ref = self.objects.get(pair)
        return None if ref is None else ref()

    def live(self):
        return [
            (p, o) for p, o in ((p, r()) for p, r in list(self.objects.items())) if o is not None
        ]

    def reset(self) -> None:
        self.clear()
        self.callbacks.clear()
        self.callback_of.clear()
        self.proxies.clear()
        self.released_handles.clear()

    # -- what goes out
    def by_value(self, obj) -> bool:
        code = (types.FunctionType, types.MethodType, types.BuiltinFunctionType, functools.partial)
        return isinstance(getattr(obj, "__dict__", None), dict) and not isinstance(
            obj, (*code, type)
        )

    def encode_other(self, value, depth):
        if isinstance(value, Remote):
            return ("h", object.__getattribute__(value, "_handle"), None, None)
        if isinstance(value, type):
            return ("c", *wire.class_ref(value))
        return super().encode_other(value, depth)

    def encode_foreign(self, obj):
        if callable(obj):  # a function of the check's: the student's code may call it back
            number = self.callback_of.get(id(obj))
            if number is None:
                number = len(self.callbacks)
                self.callbacks[number], self.callback_of[id(obj)] = obj, number
            return ("k", number)
        raise wire.WireError(f"the check passed a {type(obj).__name__}, which cannot cross")

    # -- what comes in
    def decode_foreign(self, tree):
        tag = tree[0]
        if tag == "h":
            return self._proxy(int(tree[1]), int(tree[2]), tree[3])
        if tag == "k" and int(tree[1]) in self.callbacks:
            return self.callbacks[int(tree[1])]
        if tag == "rt" and self.local is not None:
            index, payload = int(tree[1]), tree[2]
            if payload is None:
                return self.local[index]
            value = wire.tensor_from_state(payload[0])
            if index == len(self.local):
                self.local.append(value)
            else:  # changed in place since: its new values, put in when the record gets there
                self.updates.append((self.local[index], value))
            return self.local[index]
        raise wire.WireError(f"unknown value {tag!r}")

    def _proxy(self, number: int, kind: int, info):
        ref = self.proxies.get(number)
        proxy = ref() if ref is not None else None
        if proxy is not None:
            return proxy
        if kind not in self.proxy_types:
            if info is None:
                raise wire.WireError("a handle of a class never described")
            self.proxy_types[kind] = self._proxy_type(*info)
        proxy = object.__new__(self.proxy_types[kind])
        object.__setattr__(proxy, "_session", self.session)
        object.__setattr__(proxy, "_handle", number)
        self.proxies[number] = weakref.ref(
            proxy, lambda _, n=number: self.released_handles.append(n)
        )
        return proxy

    def _proxy_type(self, mro, dunders) -> type:
        mro = [(str(m), str(q)) for m, q in wire._list(mro)]
        shadow = next((k for k in map(self._shadow_class, mro) if k is not None), object)
        if not isinstance(shadow, type) or shadow is type or issubclass(shadow, type):
            base, shadow = RemoteClass, type if not isinstance(shadow, type) else shadow
        else:
            base = Remote
            if mro and self._shadow_class(mro[0]) is None:  # the student's own class
                shadow = type(mro[0][1].rsplit(".", 1)[-1], (shadow,), {"__module__": mro[0][0]})
        methods = {d: _DUNDER_METHODS[d] for d in wire._list(dunders) if d in _DUNDER_METHODS}
        name = mro[0][1].rsplit(".", 1)[-1] if mro else "Remote"
        attrs = {"__slots__": (), "_shadow": shadow, **methods}
        if base is Remote and mro:
            attrs["__module__"] = mro[0][0]
        return type(name, (base,), attrs)

    def _shadow_class(self, ref):
        if ref in _BUILTIN_TYPES:
            return _BUILTIN_TYPES[ref]
        try:
            return self.find_class((*ref, []))
        except wire.WireError:
            return None

    def allowed(self, module: str) -> bool:
        """Whether the student may hand the judge an object of ``module``'s classes by name."""
        if module.startswith("torch"):
            return True
        if not module.startswith("course_utils") or module.startswith("course_utils.checks"):
            return False
        if module.startswith("course_utils.chapters"):
            chapter = module.split(".")[2] if module.count(".") >= 2 else ""
            return (
                chapter[:2] == "ch"
                and chapter[2:].isdigit()
                and int(chapter[2:]) < self.session.chapter
            )
        return True

    def find_class(self, ref):
        module, qualname = str(ref[0]), str(ref[1])
        if (module, qualname) in _BUILTIN_TYPES:
            return _BUILTIN_TYPES[(module, qualname)]
        if self.allowed(module):
            try:
                found = wire.resolve(module, qualname)
            except Exception:  # noqa: BLE001 - not a class of this process
                found = None
            if isinstance(found, type) and found.__module__ == module:
                if any(
                    issubclass(found, k)
                    for s, k in SHORTCUT_CLASSES.items()
                    if s in self.session.forbidden
                ):
                    raise wire.WireError(f"{qualname} is a shortcut this chapter does not allow")
                return found
        raise wire.WireError(f"the student process named the class {module}.{qualname}")

    def find_module(self, name):
        import sys

        module = sys.modules.get(name)
        if module is None or not (self.allowed(name) or name in ("math", "numpy", "builtins")):
            raise wire.WireError(f"the student process named the module {name}")
        return module

    def accept(self, obj, attrs) -> None:
        pair = self.pair(obj)
        if pair is None or not self.homes.get(pair):
            return
        if not isinstance(obj, (nn.Module, torch.optim.Optimizer)):
            raise wire.WireError(f"the student's code changed the check's {type(obj).__name__}")
        before = {id(r) for r in _remotes(vars(obj))}
        if any(id(r) not in before for r in _remotes(attrs)):
            raise wire.WireError(
                f"the student's code put its own code into the check's {type(obj).__name__}"
            )

    def encode(self, value, depth: int = 0):
        if type(value) is Encoded:
            return value.tree
        return super().encode(value, depth)

    def _decode_tensor(self, tree):
        _, pair, payload = tree
        if payload is not None and self.get(pair) is None and pair in self.aliases:
            if payload[2] in (None, False):  # the same tensor the record showed the modes
                t = self.aliases[pair]
                self._keep(t, pair, False)
                self.sigs[pair] = wire._tensor_sig(t)
                return t
        if payload is None or self.get(pair) is not None or payload[2] in (None, False):
            return super()._decode_tensor(tree)
        state, grad, graph, _ = payload
        t = super()._tensor_from((state, grad, False, None))
        if torch.is_grad_enabled():  # computed with gradients there: joins the judge's graph
            leaves = [self.get(p) for p in wire._list(graph)]
            leaves = [x for x in leaves if isinstance(x, torch.Tensor) and x.requires_grad]
            pairs = [self.pair(x) for x in leaves]
            anchor = leaves or [torch.zeros((), requires_grad=True)]
            t = FromStudent.apply(self.session, pair, pairs, t.detach(), *anchor)
        self._keep(t, pair, False)
        self.sigs[pair] = wire._tensor_sig(t)
        return t


def _remotes(value, depth: int = 0) -> list:
    if isinstance(value, Remote):
        return [value]
    if depth > 6:
        return []
    if isinstance(value, dict):
        return [r for v in value.values() for r in _remotes(v, depth + 1)]
    if isinstance(value, (list, tuple, set, frozenset)):
        return [r for v in value for r in _remotes(v, depth + 1)]
    return []


class _Pin:
    __slots__ = ("codec", "pair")

    def __init__(self, codec, pair) -> None:
        self.codec, self.pair = codec, pair

    def __del__(self) -> None:
        pins = self.codec.pins
        pins[self.pair] = pins.get(self.pair, 1) - 1
        if pins[self.pair] <= 0:
            del pins[self.pair]
            if self.codec.get(self.pair) is None:
                self.codec.released.append(self.pair)


class FromStudent(torch.autograd.Function):
    """A tensor the student's code computed with gradients: its backward asks the student process
    for the gradients of the shared tensors it came from (``pairs``)."""

    @staticmethod
    def forward(ctx, session, pair, pairs, value, *leaves):
        ctx.session, ctx.pair, ctx.pairs, ctx.count = session, pair, pairs, len(leaves)
        # the student process keeps its tensors (the output, the leaves it asks about) while this lives
        ctx.pins = [session.codec.pin(p) for p in (pair, *pairs)]
        return value.clone()

    @staticmethod
    def backward(ctx, grad):
        grads = [None] * ctx.count
        if ctx.pairs:
            found = ctx.session.op(
                "backward", Encoded(("t", ctx.pair, None)), grad.detach(), ctx.pairs
            )
            grads = [g if isinstance(g, torch.Tensor) else None for g in list(found)[: ctx.count]]
            grads += [None] * (ctx.count - len(grads))
        else:  # the leaves it came from are not shared: the student process keeps their gradients
            ctx.session.op("backward", Encoded(("t", ctx.pair, None)), grad.detach(), [])
        return (None, None, None, None, *grads)


class Encoded:
    """A value already in wire form (the judge naming a pair the student process holds)."""

    __slots__ = ("tree",)

    def __init__(self, tree) -> None:
        self.tree = tree


class Replay(TorchFunctionMode):
    """Under the check's modes while a record is played: the recorded call returns its recorded
    result; any other torch call (a mode's own) runs."""

    def __init__(self) -> None:
        super().__init__()
        self.ref, self.result, self.pending = None, None, False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if self.pending and func_ref(func) == self.ref:
            self.pending = False
            return self.result
        return func(*args, **(kwargs or {}))
