"""The wire between the judge (the process that runs the checks) and the student process (the one
that runs the notebook): how values cross it, and how the two copies of a shared object are kept
alike. Standard library and torch only: the student process loads this file inside its sandbox.

What crosses is plain data: ``None``, exact ``bool``/``int``/``float``/``str``/``bytes``, tuples,
lists, dicts, sets, dtypes, devices, and tensors as their bytes (a subclass arrives as a plain
``torch.Tensor``, an ``nn.Parameter`` as a parameter). Everything is tagged nested tuples and lists
pickled with protocol 5; the judge unpickles what the student process sends with an unpickler that
refuses every global (:func:`loads_plain`), so no student class or function is ever built there.

Shared objects are *pairs*: a tensor, or an instance of a trusted class (torch's modules and
optimizers, the course's exported classes), has a copy on each side under one pair id (even ids
made by the judge, odd ones by the student process). Before each request a side sends the pairs it
changed (``codec.Codec.changes``: a tensor's version counter, gradient and flags; an object's
attributes, by identity), the other side applies them (``Codec.apply``). Anything else is
``foreign``: the judge names the student's objects by handle, the student process names the
judge's callables by a callback number (``judge.py``, ``student.py``).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import pickle
import struct
import sys
import weakref

import torch
import torch.overrides
from torch import nn

PLAIN = (bool, int, float, str, bytes)
TRUSTED = ("torch", "course_utils")  # modules whose classes may be rebuilt from plain state
MAX_MESSAGE = 1 << 31
MAX_DEPTH = 64
_LENGTH = struct.Struct("!Q")


class WireError(Exception):
    """A message that does not follow the protocol (a side that lies, or a bug)."""


# ----------------------------------------------------------------------------- framing
class _Refusing(pickle.Unpickler):
    def find_class(self, module, name):
        raise WireError(f"the message names {module}.{name}: only plain data may cross")


def loads_plain(data: bytes):
    """Unpickle nested tuples, lists, dicts and plain values, refusing every class and function."""
    return _Refusing(io.BytesIO(data)).load()


def send(sock, message) -> None:
    data = pickle.dumps(message, protocol=5)
    sock.sendall(_LENGTH.pack(len(data)) + data)


def receive(sock, plain: bool):
    """One message; ``plain``: from the other side that must not make us build anything."""
    head = _exactly(sock, _LENGTH.size)
    (size,) = _LENGTH.unpack(head)
    if size > MAX_MESSAGE:
        raise WireError(f"a message of {size} bytes")
    data = _exactly(sock, size)
    return loads_plain(data) if plain else pickle.loads(data)


def _exactly(sock, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 22))
        if not chunk:
            raise EOFError("the other side closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# ----------------------------------------------------------------------------- torch's privates
# tools/'s one home of torch's private API (tests/test_house.py), each name with a fallback that
# tests/test_sandbox.py exercises with the name taken away.
VERSION, NO_FUNCTION, TENSOR_BASE = "_version", "DisableTorchFunction", "TensorBase"
STACK, POP, PUSH = (
    "_get_current_function_mode_stack",
    "_pop_torch_function_stack",
    "_push_on_torch_function_stack",
)


def version(t: torch.Tensor) -> int:
    """The tensor's version counter, bumped by every in-place change (private ``_version``;
    without it: a digest of its values, which sees every change that alters them)."""
    counter = getattr(t, VERSION, None)
    if counter is not None:
        return counter
    with torch.no_grad():
        return hash(tensor_state(t)[2]) if t.device.type != "meta" else 0


def tensor_base() -> type:
    """torch's C tensor class, the owner of a tensor's attributes (private ``torch._C.TensorBase``;
    without it: torch.Tensor's first base)."""
    found = getattr(torch._C, TENSOR_BASE, None)
    return found if isinstance(found, type) else torch.Tensor.__mro__[1]


def no_torch_function():
    """A block where no torch function mode and no tensor subclass's ``__torch_function__`` acts
    (private ``torch._C.DisableTorchFunction``; without it: a block that disables nothing)."""
    disable = getattr(torch._C, NO_FUNCTION, None)
    return disable() if disable is not None else contextlib.nullcontext()


def modes_in_effect() -> bool:
    """Whether a torch function mode is in effect (private stack function of torch.overrides;
    without it: assumed, so that what the modes would see is always recorded)."""
    stack = getattr(torch.overrides, STACK, None)
    return True if stack is None else bool(stack())


@contextlib.contextmanager
def mode_below(mode):
    """``mode`` pushed *under* the torch function modes in effect, for the block (private stack
    functions of torch.overrides and torch._C; without them: pushed on top)."""
    stack = getattr(torch.overrides, STACK, None)
    pop, push = getattr(torch._C, POP, None), getattr(torch._C, PUSH, None)
    if stack is None or pop is None or push is None:
        with mode:
            yield
        return
    above = [pop() for _ in range(len(stack()))][::-1]
    push(mode)
    try:
        for m in above:
            push(m)
        yield
    finally:
        for _ in above:
            pop()
        pop()
        for m in above:
            push(m)


# ----------------------------------------------------------------------------- tensors


def tensor_state(t: torch.Tensor) -> tuple:
    """(dtype, shape, bytes, requires_grad, is a Parameter): the values, never the subclass."""
    with torch.no_grad(), no_torch_function():
        data = torch.Tensor.detach(t)
        if type(data) is not torch.Tensor:
            data = data.as_subclass(torch.Tensor)
        if data.device.type == "meta":
            raw = None
        else:
            data = data.cpu().contiguous().resolve_conj().resolve_neg()
            raw = data.reshape(-1).view(torch.uint8).numpy().tobytes() if data.numel() else b""
    dtype = str(t.dtype).removeprefix("torch.")
    return (
        dtype,
        tuple(int(s) for s in t.shape),
        raw,
        bool(t.requires_grad),
        isinstance(t, nn.Parameter),
    )


def tensor_from_state(state) -> torch.Tensor:
    dtype_name, shape, raw, requires_grad, parameter = state
    dtype = getattr(torch, str(dtype_name), None)
    if not isinstance(dtype, torch.dtype) or not all(type(s) is int and s >= 0 for s in shape):
        raise WireError(f"not a tensor: {dtype_name!r} {shape!r}")
    if raw is None:
        t = torch.empty(shape, dtype=dtype, device="meta")
    else:
        count = 1
        for s in shape:
            count *= s
        if len(raw) != count * torch.empty((), dtype=dtype).element_size():
            raise WireError("a tensor's bytes do not match its shape")
        flat = (
            torch.frombuffer(bytearray(raw), dtype=torch.uint8)
            if raw
            else torch.empty(0, dtype=torch.uint8)
        )
        t = flat.view(dtype).reshape(shape) if raw else torch.empty(shape, dtype=dtype)
    if parameter:
        return nn.Parameter(t, requires_grad=bool(requires_grad))
    return (
        t.requires_grad_(True) if requires_grad and (t.is_floating_point() or t.is_complex()) else t
    )


def storage(t: torch.Tensor) -> int:
    """The address of the memory ``t`` is a view of (0: none)."""
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return 0


def whole(t: torch.Tensor) -> bool:
    """Whether ``t`` lays out all of its memory, in order, from its start (as a copy of it would)."""
    try:
        size = t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError):
        return False
    return t.is_contiguous() and t.storage_offset() == 0 and t.numel() * t.element_size() == size


# the type's own slot, read past any metaclass (a student's could make it a property of theirs)
_WEAKREF_OFFSET = type.__dict__["__weakrefoffset__"].__get__


class _Same:
    """An object in a signature by identity, held by a weak reference where it can be: a new object
    given a freed one's id (a new ``.grad`` where the last one was) must not look unchanged, and a
    signature should not keep what it describes alive. The few kinds without weak references that
    ``_sig`` leaves to identity (a dtype, a device, a slice, an ``object()``, a list nested past its
    depth) are held strongly until the pair's next signature."""

    __slots__ = ("ref", "obj")

    def __init__(self, obj) -> None:
        self.ref, self.obj = None, obj
        if _WEAKREF_OFFSET(type(obj)):  # its instances take weak references
            try:
                self.ref, self.obj = weakref.ref(obj), None
            except TypeError:
                pass

    def target(self):
        return self.ref() if self.ref is not None else self.obj

    def __eq__(self, other) -> bool:
        if type(other) is not _Same:
            return False
        mine = self.target()
        if mine is None and (self.ref is not None or other.ref is not None):
            return False  # freed since: whatever is there now is another object
        return mine is other.target()

    def __hash__(self) -> int:
        return id(self.target())

    def __repr__(self) -> str:
        return f"@{id(self.target()):x}"


def _tensor_sig(t: torch.Tensor) -> tuple:
    grad = t.grad if t.is_leaf else None
    ptr = t.data_ptr() if t.device.type != "meta" else 0
    return (
        version(t),
        t.requires_grad,
        t.dtype,
        tuple(t.shape),
        ptr,
        _Same(grad),
        version(grad) if grad is not None else -1,
    )


def _sig(value, depth: int = 0):
    """What identifies an object's attributes: plain values by value, containers (their subclasses
    too) by their items, read with the built-in type's own methods (never a subclass's), everything
    else by identity."""
    kind = type(value)
    if value is None or kind is complex or any(kind is plain for plain in PLAIN):
        return (kind, value)
    if depth > 6:
        return ("@", _Same(value))
    if issubclass(kind, (list, tuple)):  # a named tuple, torch.Size, a student's list subclass
        items = list.__iter__(value) if issubclass(kind, list) else tuple.__iter__(value)
        return (kind, tuple(_sig(v, depth + 1) for v in items))
    if issubclass(kind, dict):  # OrderedDict, defaultdict, a student's dict subclass
        pairs = dict.items(value)
        return (kind, tuple((_sig(k, depth + 1), _sig(v, depth + 1)) for k, v in pairs))
    if issubclass(kind, (set, frozenset)):
        items = set.__iter__(value) if issubclass(kind, set) else frozenset.__iter__(value)
        return (kind, tuple(sorted((_sig(v, depth + 1) for v in items), key=_order)))
    return ("@", _Same(value))


def _order(sig) -> str:
    """A set member's place, from its signature without running a class's own __repr__."""

    def plain(part):
        if type(part) is tuple:
            return tuple(plain(p) for p in part)
        if type(part) is _Same:
            return id(part.target())
        if isinstance(part, type):
            return id(part)
        return part  # a plain value: str, int, float, bytes, bool, complex or None

    return repr(plain(sig))


def _list(value) -> list:
    if type(value) is not list:
        raise WireError(f"expected a list, got {type(value).__name__}")
    return value


def _dtype(codec, tree):
    dtype = getattr(torch, str(tree[1]), None)
    if not isinstance(dtype, torch.dtype):
        raise WireError(f"no dtype {tree[1]!r}")
    return dtype


def _memory(codec, tree):
    value = getattr(torch, str(tree[1]), None)
    if type(value) not in (torch.memory_format, torch.layout):
        raise WireError(f"no layout {tree[1]!r}")
    return value


def _causal_bias(codec, tree):
    """torch's device-free causal bias (``causal_lower_right``): rebuilt from its three numbers."""
    from torch.nn.attention.bias import CausalBias, CausalVariant

    return CausalBias(CausalVariant(int(tree[1])), int(tree[2]), int(tree[3]))


NUMBER_KINDS = "biufc"  # NumPy's kinds of scalars that cross as their values


def numpy_scalar(value) -> tuple | None:
    """``("np", dtype, bytes)`` for a NumPy number (``np.int32(7)``), which crosses as itself (a
    check may name a 32-bit count that wrapped); None for anything else."""
    np = sys.modules.get("numpy")
    if np is None or not isinstance(value, np.generic) or value.dtype.kind not in NUMBER_KINDS:
        return None
    return ("np", value.dtype.str, value.tobytes())


def _numpy(codec, tree):
    import numpy as np

    dtype = np.dtype(str(tree[1]))
    raw = tree[2]
    if dtype.kind not in NUMBER_KINDS or type(raw) is not bytes or len(raw) != dtype.itemsize:
        raise WireError(f"no NumPy number {tree[1]!r}")
    return np.frombuffer(raw, dtype=dtype)[0]


SIMPLE = {
    "np": _numpy,
    "cbias": _causal_bias,
    "dt": _dtype,
    "dv": lambda codec, tree: torch.device(str(tree[1])),
    "sz": lambda codec, tree: torch.Size([int(s) for s in _list(tree[1])]),
    "tm": _memory,
    "j": lambda codec, tree: complex(float(tree[1]), float(tree[2])),
    "sl": lambda codec, tree: slice(*(codec.decode(v) for v in _list(tree[1])[:3])),
    "r": lambda codec, tree: range(int(tree[1]), int(tree[2]), int(tree[3])),
    "e": lambda codec, tree: Ellipsis,
    "m": lambda codec, tree: codec.find_module(str(tree[1])),
}


def class_ref(cls: type) -> tuple:
    """(module, qualname, the same for each class of its MRO): enough to find it or stand in for it."""
    mro = [(getattr(k, "__module__", ""), getattr(k, "__qualname__", "")) for k in cls.__mro__[1:]]
    return (cls.__module__, cls.__qualname__, mro)


def resolve(module: str, qualname: str):
    """The object ``module.qualname`` names, from an already imported module or one of torch's."""
    found = sys.modules.get(module)
    if found is None:
        if not module.startswith("torch"):
            raise LookupError(module)
        found = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def weak(obj):
    """A weak reference to ``obj``, or ``obj`` itself when it cannot be weakly referenced."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj
