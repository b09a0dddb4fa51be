"""The student process of a fresh run: it runs a notebook's cells and answers the judge's requests,
inside the sandbox. It is loaded there as a plain file beside ``wire.py`` (``tools/`` is not in
the sandbox's view), so it imports nothing of the course's but its core.

The judge (``judge.py``) sends one request at a time: run a cell, give the values of some names,
or do one operation on one of this process's objects (call it, read an attribute, iterate...).
Before each, it sends its changes to the objects both sides share and its global torch state
(random state, gradient mode); the reply carries the result, this side's changes, the random
state after, and, when the judge has torch function modes in effect, the record of the torch
calls the student's code made (the judge plays them through its modes: ``judge.Replay``).

What the course hides while chapter N is graded is absent from this process: the checks, and the
exported code of chapter N and later (``course_utils.chapters.chNN`` is a stand-in whose every
name raises, and the attempt is reported). The earlier chapters' code arrives from the judge
as source and is loaded as modules. Writes outside the scratch folder fail (read-only view);
the attempts are reported too (:func:`watch_writes`).
"""

from __future__ import annotations

import linecache
import os
import signal
import sys
import time
import types

import torch
from torch.overrides import TorchFunctionMode

try:
    from tools.grading import wire
    from tools.grading.codec import Codec
except ImportError:  # in the sandbox, beside this file
    import wire
    from codec import Codec

DUNDERS = (
    "__call__", "__len__", "__iter__", "__next__", "__getitem__", "__setitem__", "__delitem__",
    "__contains__", "__enter__", "__exit__", "__float__", "__int__", "__index__",
)  # fmt: skip
WRITABLE = ("/home/student", "/tmp", "/dev/shm", "/dev/null")  # the scratch folders of the sandbox
HIDDEN = "the course's own code for this chapter is not available while it is graded"
CURRENT = {"cell": None, "given": False}  # the notebook cell of the judge's request; a given one?


class OpTimeout(BaseException):
    """The judge's time for this request ran out."""


class Callback:
    """One of the judge's callables handed to the student's code: calling it asks the judge."""

    __slots__ = ("server", "number")

    def __init__(self, server, number: int) -> None:
        self.server, self.number = server, number

    def __call__(self, *args, **kwargs):
        return self.server.callback(self.number, args, kwargs)


class StudentCodec(Codec):
    first_pair = 1

    def __init__(self, server) -> None:
        super().__init__()
        self.server = server
        self.handles: dict[int, object] = {}
        self.handle_of: dict[int, int] = {}
        # described to the judge, kept: a freed class's id could come back for another class
        self.sent_classes: dict[int, type] = {}
        self.stand_ins: dict[tuple, type] = {}
        self.local: dict | None = None  # record-local tensors, by (id, version)
        self.bases: dict[int, tuple] = {}  # memory address -> (pair, tensor laying it all out)

    def reset(self) -> None:
        self.clear()
        self.bases.clear()
        self.handles.clear()
        self.handle_of.clear()

    def encode(self, value, depth: int = 0):
        kind = type(value)
        if kind not in wire.PLAIN and isinstance(value, wire.PLAIN):  # a subclass: its plain value
            value = next(base for base in wire.PLAIN if isinstance(value, base))(value)
        elif kind not in (tuple, list, dict) and isinstance(value, (tuple, list, dict)):
            if not (isinstance(value, tuple) and self.nameable(kind)):
                base = next(b for b in (tuple, list, dict) if isinstance(value, b))
                value = dict(dict.items(value)) if base is dict else base(base.__iter__(value))
        return super().encode(value, depth)

    def _encode_tensor(self, t):
        if self.local is not None and self.pair(t) is None:
            known = self.local.get(id(t))
            if known is not None and known[1] is t:  # the same tensor: its values again if changed
                index, _, seen = known
                if seen == wire.version(t):
                    return ("rt", index, None)
                self.local[id(t)] = (index, t, wire.version(t))
                return ("rt", index, (wire.tensor_state(t),))
            self.local[id(t)] = (len(self.local), t, wire.version(t))
            return ("rt", self.local[id(t)][0], (wire.tensor_state(t),))
        return super()._encode_tensor(t)

    def _tensor_payload(self, t):
        state, grad, graph, _ = super()._tensor_payload(t)
        view = None
        base = self.bases.get(wire.storage(t))
        if (
            base is not None
            and base[1] is not t
            and self.get(base[0]) is base[1]
            and wire.whole(base[1])
        ):
            view = (base[0], t.storage_offset(), list(t.shape), list(t.stride()))
        if graph:  # the pairs it came from: the judge's copy joins its autograd graph through them
            graph = [
                self.pair_of[id(leaf)] for leaf in graph_leaves(t) if self.pair(leaf) is not None
            ]
        return (state, grad, graph if graph else None, view)

    def _keep(self, obj, pair, home):
        super()._keep(obj, pair, home)
        if isinstance(obj, torch.Tensor) and wire.whole(obj) and wire.storage(obj):
            self.bases.setdefault(wire.storage(obj), (pair, obj))

    def encode_other(self, value, depth):
        if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.MethodType)):
            return self.encode_foreign(value)  # code runs here, where it was written: by handle
        return super().encode_other(value, depth)

    def by_value(self, obj) -> bool:
        """An instance of a class of torch's or the course's that the judge can find by name."""
        kind = type(obj)
        return (
            str(getattr(kind, "__module__", "")).startswith(wire.TRUSTED)
            and isinstance(getattr(obj, "__dict__", None), dict)
            and not isinstance(obj, (type, types.FunctionType, types.MethodType, BaseException))
            and self.nameable(kind)
        )

    def encode_foreign(self, obj):
        if type(obj) is Callback:
            return ("k", obj.number)
        number = self.handle_of.get(id(obj))
        if number is None or self.handles.get(number) is not obj:
            number = 2 * len(self.handles) + 1 + 2 * max(self.handles, default=0)
            self.handles[number], self.handle_of[id(obj)] = obj, number
        kind = type(obj)
        info = None
        if self.sent_classes.get(id(kind)) is not kind:
            self.sent_classes[id(kind)] = kind
            mro = [
                (str(getattr(k, "__module__", "")), str(getattr(k, "__qualname__", "")))
                for k in kind.__mro__
            ]
            info = (mro, [name for name in DUNDERS if hasattr(kind, name)])
        return ("h", number, id(kind), info)

    def decode_foreign(self, tree):
        if tree[0] == "h" and tree[1] in self.handles:
            return self.handles[tree[1]]
        if tree[0] == "k":
            return Callback(self.server, int(tree[1]))
        if tree[0] == "rt":
            raise wire.WireError("a record-local tensor sent to the student process")
        raise wire.WireError(f"unknown value {tree[0]!r}")

    def find_class(self, ref):
        module, qualname, mro = ref
        try:
            found = wire.resolve(module, qualname)
            if isinstance(found, type):
                return found
        except Exception:  # noqa: BLE001 - hidden from this process: a stand-in with its data only
            pass
        key = (module, qualname)
        if key not in self.stand_ins:
            base = object
            for m, q in mro:
                try:
                    candidate = wire.resolve(m, q)
                except Exception:  # noqa: BLE001
                    continue
                if isinstance(candidate, type):
                    base = candidate
                    break
            attrs = {"__module__": module, "__qualname__": qualname}
            self.stand_ins[key] = type(qualname.rsplit(".", 1)[-1], (base,), attrs)
        return self.stand_ins[key]

    def find_function(self, module, qualname):
        return wire.resolve(module, qualname)

    def find_module(self, name):
        import importlib

        return importlib.import_module(name)


def graph_leaves(t: torch.Tensor) -> list[torch.Tensor]:
    """The leaf tensors ``t`` came from (its autograd graph's AccumulateGrad nodes), each once.

    ``seen`` keeps each node visited, not only its id: under torch 2.3 ``next_functions`` gives a node a
    new Python object once its last one is freed, so a freed one's id came back for another node,
    which was then skipped (a leaf lost, and the judge told the student that it got no gradient)."""
    found, seen, todo = {}, {}, [t.grad_fn]  # found: id -> leaf, kept (so ids stay its own)
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen[id(node)] = node
        # only an AccumulateGrad node holds a leaf: a custom Function's node is its ctx, where a
        # student may keep any tensor as ctx.variable
        leaf = getattr(node, "variable", None) if type(node).__name__ == "AccumulateGrad" else None
        if isinstance(leaf, torch.Tensor):  # once: the judge adds a leaf's gradient per listing
            found.setdefault(id(leaf), leaf)
        todo.extend(n for n, _ in getattr(node, "next_functions", ()))
    return list(found.values())


class Recorder(TorchFunctionMode):
    """Under the student's own modes: records each torch call (for the judge's modes) and the
    shortcuts its chapter forbids, called from the student's code (the honesty guard's rule)."""

    def __init__(self, codec: StudentCodec, record: bool, forbidden: tuple) -> None:
        super().__init__()
        self.codec, self.record, self.forbidden = codec, record, set(forbidden)
        self.calls: list = []
        self.seen: list[str] = []
        self.memo: dict = {}  # the record's own tensors: id -> (index, tensor, version sent)
        self.coding = (
            0.0  # CPU seconds spent encoding the record (the judge's cost, not the code's)
        )

    def __enter__(self):
        self._profile = sys.getprofile()
        if self.forbidden:  # a shortcut written in Python (flex_attention) is no torch function
            sys.setprofile(self._watch_calls)
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            sys.setprofile(self._profile)
        except TypeError:  # a profiler written in C cannot be put back from Python
            sys.setprofile(None)
        return super().__exit__(*exc)

    def _watch_calls(self, frame, event, arg) -> None:
        if event != "call":
            return
        code = frame.f_code
        name = code.co_name  # an ATen operator's redispatch/decompose skip torch function modes
        if name in ("redispatch", "decompose") and code.co_filename == _OPS:
            name = op_name(frame.f_locals.get("self"))
        if name in self.forbidden and code.co_filename.startswith(_TORCH):
            if from_student(frame.f_back):
                self.seen.append(name)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if torch.compiler.is_compiling():  # FlexAttention compiles its own call: not the student's
            return func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        op = op_name(func) if name.__class__ is str and "." in name else name  # no call: cheap
        if op in self.forbidden and from_student(sys._getframe(1)):
            self.seen.append(op)
        if not self.record:
            return func(*args, **kwargs)
        entry = self._encoded(lambda: [func_ref(func), *map(self.codec.encode, (args, kwargs))])
        if entry is None:  # not something the judge could read: its modes do not see it
            return func(*args, **kwargs)
        entry += [None, False]
        self.calls.append(entry)
        try:
            result = func(*args, **kwargs)
        except BaseException:
            entry[4] = True  # it raised: the judge's modes do not see it
            raise
        to_cpu = _to_cpu(name, args, kwargs) and isinstance(result, torch.Tensor)
        if (to_cpu or "dropout" in name) and args and result is args[0]:
            result = result.clone()  # as if from another device; an in-place dropout's apart
        encoded = self._encoded(lambda: [self.codec.encode(result)])
        entry[3], entry[4] = (encoded[0], False) if encoded else (None, True)
        return result

    def _encoded(self, encode) -> list | None:
        """``encode()`` with the record's own tensors; None (and the record as it was) on failure."""
        codec, outer, before = self.codec, self.codec.local, dict(self.memo)
        codec.local, start = self.memo, time.process_time()
        try:
            return encode()
        except Exception:  # noqa: BLE001 - a value without data (a fake tensor while compiling)
            self.memo.clear()
            self.memo.update(before)
            return None
        finally:
            codec.local = outer
            self.coding += time.process_time() - start


def _to_cpu(name: str, args, kwargs) -> bool:
    """``x.cpu()`` or ``x.to("cpu", ...)``: a copy on a GPU, the tensor itself on the CPU."""
    named = [*args[1:], *kwargs.values()]
    return name == "cpu" or (
        name in ("to", "type_as") and any(isinstance(a, str) and a.startswith("cpu") for a in named)
    )


def func_ref(func) -> tuple:
    """How the judge finds the torch function the student's code called."""
    owner = getattr(func, "__self__", None)
    if (
        type(owner).__name__ == "getset_descriptor"
        and getattr(owner, "__objclass__", None) is wire.tensor_base()
    ):
        return ("get", owner.__name__)
    objclass = getattr(func, "__objclass__", None)
    if objclass is not None and issubclass(torch.Tensor, objclass):
        return ("meth", func.__name__)
    return (
        "fn",
        str(getattr(func, "__module__", "")),
        str(getattr(func, "__qualname__", "")),
        getattr(func, "__name__", ""),
    )


_TORCH = os.path.dirname(torch.__file__)
_OPS = os.path.join(_TORCH, "_ops.py")


def op_name(func) -> str:
    """A torch function's name; an ATen operator's without its overload (``torch.ops.aten.X``,
    ``torch.ops.aten.X.default``: ``"X"``), as in ``torch.X`` or ``torch._C._VariableFunctions.X``."""
    return str(getattr(func, "__name__", "")).partition(".")[0]


_HERE = os.path.dirname(os.path.abspath(__file__))


def from_student(frame) -> bool:
    """Whether a torch call from ``frame`` is the student's: the first frame outside torch and this
    grader is not the course's (no such frame: the student handed in torch's function itself)."""
    import course_utils

    course = os.path.dirname(course_utils.__file__)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith("<course_utils") or name.startswith(course):
            return False
        if not (name.startswith(_TORCH) or name.startswith(_HERE)):
            return True
        frame = frame.f_back
    return True


# ----------------------------------------------------------------------------- hidden chapters
def install_chapters(
    sources: dict, hidden: dict, attempts: list, given: dict | None = None
) -> None:
    """``course_utils.chapters``: the earlier chapters' modules from ``sources`` (name -> source),
    and a stand-in for each hidden chapter (name -> its exported names), whose names raise, but
    in a locked cell of the release (``CURRENT["given"]``), which may build on the chapter's
    classes: it gets them from ``given`` (name -> source), each with its constructor only."""
    import course_utils

    package = types.ModuleType("course_utils.chapters", "The earlier chapters' code (grading).")
    package.__path__, package.__all__ = [], []
    sys.modules["course_utils.chapters"] = course_utils.chapters = package
    hidden_names = {n: chapter for chapter, names in hidden.items() for n in names}
    offered: dict[str, object] = {}
    for chapter in sorted({*sources, *hidden}):
        name = f"course_utils.chapters.{chapter}"
        module = types.ModuleType(name)
        module.__path__ = []
        sys.modules[name] = module
        parent, _, leaf = name.rpartition(".")
        setattr(sys.modules[parent], leaf, module)
        if chapter in sources:
            try:
                _load(module, f"<course_utils {chapter}>", sources[chapter])
            except Exception:  # noqa: BLE001 - a chapter that cannot load: its names are missing
                continue
            if "." not in chapter:
                for export in getattr(module, "__all__", ()):
                    setattr(package, export, getattr(module, export))
                package.__all__ += list(getattr(module, "__all__", ()))
        else:
            for export in hidden.get(chapter, ()) if chapter in (given or {}) else ():
                offered[export] = (chapter, given[chapter])
            module.__getattr__ = _refuse(name, attempts, None, offered)
    package.__getattr__ = _refuse("course_utils.chapters", attempts, hidden_names, offered)


def _load(module, filename: str, source: str) -> None:
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    module.__file__ = filename
    exec(compile(source, filename, "exec"), module.__dict__)


_GIVEN: dict[str, types.ModuleType] = {}


def _given(chapter: str, source: str, name: str):
    """``name`` of the chapter's constructors-only module, loaded on first use."""
    if chapter not in _GIVEN:
        module = types.ModuleType(f"course_utils.chapters.{chapter}")
        module.__path__ = []
        _load(module, f"<course_utils {chapter}, constructors only>", source)
        _GIVEN[chapter] = module
    return getattr(_GIVEN[chapter], name)


def _refuse(owner: str, attempts: list, names: dict | None = None, offered: dict | None = None):
    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if CURRENT.get("given") and name in (offered or {}):
            return _given(*offered[name], name)
        if names is None or name in names:
            attempts.append(f"{owner}.{name}")
            raise AttributeError(f"{owner}.{name}: {HIDDEN}")
        raise AttributeError(f"module {owner!r} has no attribute {name!r}")

    return __getattr__


def install_stand_ins() -> None:
    """No checks and no explorers in this process: a check cell runs in the judge, an explorer
    draws nothing while nbgrader grades (``cu.light_run()``)."""
    import course_utils
    from course_utils.plotting import GRADING_NOTE

    checks = types.ModuleType("course_utils.checks", "Checks run in the grader's judge process.")

    def _no_check(name):
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args, **kwargs: print(f"{name}: checked by the grader")

    checks.__getattr__ = _no_check
    widgets = types.ModuleType("course_utils.widgets", "Explorers draw nothing while grading.")
    widgets.__getattr__ = lambda name: lambda *a, **k: print(GRADING_NOTE)
    for name, module in (("checks", checks), ("widgets", widgets)):
        sys.modules[f"course_utils.{name}"] = module
        setattr(course_utils, name, module)


def watch_writes(report) -> None:
    """Report (``report(text)``) every attempt to write outside the scratch folders: an audit hook
    (PEP 578), which no later code can remove; the read-only view is what stops the write."""
    events = {
        "os.remove",
        "os.rename",
        "os.rmdir",
        "os.mkdir",
        "os.symlink",
        "os.link",
        "os.chmod",
        "os.truncate",
        "shutil.rmtree",
        "shutil.move",
        "os.utime",
    }
    spawns = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn"}

    def hook(event, args):
        if event == "open" and len(args) >= 2 and isinstance(args[0], (str, bytes, os.PathLike)):
            mode, flags = args[1], args[2] if len(args) > 2 else 0
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int)
                and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND)
            )
            if writes:
                _outside(os.fsdecode(args[0]), report)
        elif event in events and args and isinstance(args[0], (str, bytes, os.PathLike)):
            _outside(os.fsdecode(args[0]), report, event)
        elif event in spawns:
            report(f"started a program: {str(args[:2])[:200]}")

    sys.addaudithook(hook)


def _outside(path: str, report, event: str = "open for writing") -> None:
    full = os.path.abspath(path)
    if not any(full == w or full.startswith(w + "/") for w in WRITABLE):
        report(f"{event}: {full}")


def time_limit(seconds: float):
    """SIGALRM after ``seconds`` raises :class:`OpTimeout` (0: no limit)."""

    def stop(signum, frame):
        raise OpTimeout()

    signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, max(0.0, float(seconds)))
