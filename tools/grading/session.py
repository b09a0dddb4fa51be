"""The judge's conversation with one student process (:class:`Session`), and the sandboxed
template that forks a student process per notebook (:class:`StudentTemplate`).

One request at a time: the judge's changes to shared objects, its torch state and the request go
out; the reply brings the result, the student side's changes and torch state, the lists, dicts
and sets the request carried as they are now, the shortcuts seen, the hidden code reached for,
and the record of torch calls when the check has modes in effect. While the judge waits, the
student's code may call back one of the check's functions it was handed.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from tools.grading import sandbox, wire
from tools.grading.judge import (
    SAFE_ERRORS,
    GraderLost,
    JudgeCodec,
    Replay,
    StudentError,
    StudentTimeout,
)
from tools.grading.student import func_ref

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
SERVER_FILES = ("wire.py", "codec.py", "student.py", "student_server.py", "sandbox.py")
MAX_FILES = 20 << 20  # bytes of a notebook's folder copied into the student's scratch folder


class Session:
    """The judge's side of one notebook's student process (see the module text)."""

    def __init__(self, sock: socket.socket, chapter: int, forbidden=()) -> None:
        self.sock, self.chapter, self.forbidden = sock, chapter, tuple(forbidden)
        self.codec = JudgeCodec(self)
        self.deadline: float | None = None
        self.seen: list[str] = []
        self.attempts: list[str] = []
        self.broken: str | None = None
        self._rng: bytes | None = None
        self._reset = False
        # CPU seconds: the student process's in the student's code, and the judge's in coding the
        # wire (what the check costs through the judge is its own time less coding, plus student)
        self.student_cpu = self.coding_cpu = 0.0
        self.cell: int | None = None  # the notebook cell being run or checked
        self.given = (
            False  # that cell is a locked cell of the release (it may build on hidden code)
        )

    # -- the requests a check cell's code makes through proxies
    def op(self, kind: str, *args):
        if self.broken:
            raise GraderLost(self.broken)
        codec = self.codec
        codec.containers, start = [], time.process_time()
        try:
            with wire.no_torch_function():
                changes = codec.changes()
                payload = codec.encode(args)
        except wire.WireError as exc:
            raise StudentError(f"the check's value cannot be given to your code: {exc}") from None
        finally:
            self.coding_cpu += time.process_time() - start
        containers, codec.containers = codec.containers, []
        free = codec.releasable()
        released = {"pairs": free, "handles": list(codec.released_handles)}
        if self._reset:
            released["all"], self._reset = True, False
        codec.forget(free)
        codec.released_handles.clear()
        try:
            wire.send(self.sock, (kind, payload, changes, self._env(), released))
            reply = self._await()
        except (OSError, EOFError, wire.WireError) as exc:
            self.broken = f"the student process stopped answering ({exc})"
            raise GraderLost(self.broken) from None
        except BaseException:
            self.broken = "the student process was left running past the judge's limit"
            raise
        return self._finish(kind, reply, containers)

    def _finish(self, kind, reply, containers):
        status, result, changes, env, back, extra = reply
        codec, calls, value = self.codec, [], None
        outside = wire.no_torch_function()  # the check's modes see the record, not this coding
        outside.__enter__()
        start = time.process_time()
        try:
            if type(extra) is not dict:
                raise wire.WireError("no extra")
            codec.local = []  # the record's own tensors; the result may be one of them
            calls = self._calls(extra["record"]) if "record" in extra else []
            aliases = extra.get("aliases", [])
            codec.aliases = {int(p): codec.local[int(i)] for p, i in wire._list(aliases)}
            codec.apply(changes)
            if type(env) is dict and env.get("rng") is not None:
                with wire.no_torch_function():
                    rng = torch.frombuffer(bytearray(env["rng"]), dtype=torch.uint8).clone()
                    torch.set_rng_state(rng)
                self._rng = env["rng"]
            if status == "ok":  # first, as the student process encoded it: a tensor's values
                value = codec.decode(result)  # come with its first mention, maybe in the result
            for container, tree in zip(containers, wire._list(back)):
                _refill(container, codec.decode(tree))
            self.seen += [str(s) for s in wire._list(extra.get("seen", []))]
            self.attempts += [str(s) for s in wire._list(extra.get("attempts", []))]
        except (wire.WireError, IndexError, TypeError, ValueError) as exc:
            raise StudentError(str(exc)) from None
        finally:
            codec.local, codec.aliases = None, {}
            outside.__exit__(None, None, None)
            self.coding_cpu += time.process_time() - start
            if type(extra) is dict and type(extra.get("cpu")) is float:
                self.student_cpu += max(0.0, extra["cpu"])
        self.replay(calls)
        if status == "ok":
            return value
        if status == "err":
            raise _mapped(result, kind)
        if status == "timeout":
            raise StudentTimeout()
        raise StudentError(f"the student process could not answer: {result}")

    def _env(self) -> dict:
        env = {
            "grad": torch.is_grad_enabled(),
            "dtype": str(torch.get_default_dtype()).removeprefix("torch."),
            "threads": torch.get_num_threads(),
            "forbidden": list(self.forbidden),
            "cell": self.cell,
            "given": self.given,
        }
        with wire.no_torch_function():  # the check's modes see the student's calls, not ours
            rng = torch.get_rng_state().numpy().tobytes()
        if rng != self._rng:
            env["rng"] = self._rng = rng
        if wire.modes_in_effect():
            env["record"] = True
        if self.deadline is not None:
            env["limit"] = max(0.001, self.deadline - time.monotonic())
        return env

    def _await(self):
        while True:
            message = wire.receive(self.sock, plain=True)
            if type(message) is not tuple or not message:
                raise wire.WireError("a reply that is not a message")
            if message[0] == "cb" and len(message) == 4:
                self._callback(message)
                continue
            if len(message) != 6:
                raise wire.WireError("a reply of the wrong length")
            return message

    def _callback(self, message) -> None:
        _, number, payload, changes = message
        codec = self.codec
        try:
            codec.apply(changes)
            args, kwargs = codec.decode(payload)
            function = codec.callbacks[int(number)]
            value, status = codec.encode(function(*args, **dict(kwargs))), "ok"
        except Exception as exc:  # noqa: BLE001 - the student's code gets it as an error
            value, status = f"{type(exc).__name__}: {exc}", "err"
        wire.send(self.sock, ("cbret", status, value, codec.changes()))

    def _calls(self, record) -> list:
        """The recorded torch calls, decoded (into ``codec.local`` for their own tensors), each with
        the changes in place its tensors had before it and after it."""
        calls, codec = [], self.codec
        for entry in wire._list(record):
            ref, args, kwargs, result, raised = entry
            codec.updates = []
            try:
                args, kwargs = codec.decode(args), codec.decode(kwargs)
                before, codec.updates = codec.updates, []
                result = codec.decode(result)
                after, codec.updates = codec.updates, []
            except (wire.WireError, IndexError):  # a call the judge cannot read: its modes skip it
                continue
            calls.append(
                (
                    None if raised else _function(ref),
                    tuple(ref),
                    args,
                    kwargs,
                    result,
                    before,
                    after,
                )
            )
        return calls

    def replay(self, calls) -> None:
        """Play the torch calls the student's code made through the check's modes: each returns
        what it returned there (a mode that raises, raises here as from the call)."""
        if not calls:
            return
        bottom = Replay()
        with wire.mode_below(bottom):
            for func, ref, args, kwargs, result, before, after in calls:
                _put(before)
                if func is not None:
                    bottom.ref, bottom.result, bottom.pending = ref, result, True
                    func(*args, **kwargs)
                _put(after)

    # -- whole cells and names
    def run_cell(self, source: str, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds if seconds else None
        try:
            self.op("cell", source)
        finally:
            self.deadline = None

    def names(self, names) -> dict:
        return self.op("names", sorted(names))

    def end_check(self) -> None:
        """Forget every object of the check that ended (both sides)."""
        self.codec.reset()
        self._reset = True

    def close(self) -> None:
        try:
            wire.send(self.sock, ("bye",))
        except OSError:
            pass
        self.sock.close()


def _function(ref):
    """The torch function a record names (None: not one this process has)."""
    import importlib

    import torch.nn.functional as F

    try:
        kind = ref[0]
        if kind == "get":
            return getattr(torch.Tensor, str(ref[1])).__get__
        if kind == "meth":
            return getattr(torch.Tensor, str(ref[1]))
        module, qualname, name = str(ref[1]), str(ref[2]), str(ref[3])
        if kind != "fn" or not module.startswith("torch"):
            return None
    except (IndexError, TypeError, AttributeError):
        return None
    places = [
        lambda: wire.resolve(module, qualname),
        lambda: getattr(importlib.import_module(module), name),
    ]
    places += [lambda: getattr(torch, name), lambda: getattr(F, name)]
    # torch.Tensor's operators that wrap a TensorBase method keep its name (x ** 3: "TensorBase.pow")
    places.append(lambda: next(v for v in vars(torch.Tensor).values() if func_ref(v) == tuple(ref)))
    for place in places:
        try:
            found = place()
        except Exception:  # noqa: BLE001 - not there: the next place
            continue
        if callable(found) and func_ref(found) == tuple(ref):
            return found
    return None


def _put(updates) -> None:
    """Give record tensors the values they had at that point of the student's code."""
    with wire.no_torch_function(), torch.no_grad():
        for t, value in updates:
            if t.shape == value.shape and t.dtype == value.dtype:
                t.copy_(value)
            else:
                t.data = value


def _refill(container, new) -> None:
    """``container`` (the judge's) given the contents the student's code left in its copy; an entry
    that came back as it went (a tuple or list of the same objects) stays the very object it was, as it
    would in one process (a check may ask whether the caller's dict still holds its own pairs)."""
    if isinstance(container, dict) and isinstance(new, dict):
        new = {
            k: container[k] if k in container and _same(container[k], v) else v
            for k, v in new.items()
        }
        container.clear()
        container.update(new)
    elif isinstance(container, list) and isinstance(new, list):
        old = list(container)
        container[:] = [
            old[i] if i < len(old) and _same(old[i], v) else v for i, v in enumerate(new)
        ]
    elif isinstance(container, set) and isinstance(new, list):
        container.clear()
        container.update(new)


def _same(old, new) -> bool:
    """``new`` is ``old``, or a tuple or list of the very objects ``old`` holds."""
    if old is new:
        return True
    return (
        type(old) in (tuple, list)
        and type(new) is type(old)
        and len(old) == len(new)
        and all(_same(a, b) for a, b in zip(old, new))
    )


def _mapped(result, kind: str) -> BaseException:
    """The exception the student's code raised, as one of Python's own kinds (or StudentError)."""
    try:
        names, message = result
        names, message = [str(n) for n in wire._list(names)], str(message)
    except (TypeError, ValueError, wire.WireError):
        return StudentError("an error the student process could not describe")
    for name in names:
        cls = SAFE_ERRORS.get(name)
        if cls is StopIteration and kind != "next":
            cls = RuntimeError
        if cls is not None:
            return cls(message)
    return StudentError(f"{names[0] if names else 'Error'}: {message}")


# ----------------------------------------------------------------------------- the template
class StudentTemplate:
    """The template student process of a grading run (``student_server.py``), in the sandbox
    (or, when the instructor chose to grade without one, a plain process): it forks one student
    process per notebook, and is reset after each."""

    def __init__(self, sandboxed: bool | None = None) -> None:
        """``sandboxed``: None, as the environment says (the sandbox unless COURSE_UNSANDBOXED)."""
        self.process: subprocess.Popen | None = None
        self.pid: int | None = None  # the template's own process, once seen (bwrap's child)
        self.control: socket.socket | None = None
        self.sandboxed = sandbox.active() if sandboxed is None else sandboxed
        self.work = None

    def trouble(self) -> str | None:
        """Why the template cannot fork now ("it was stopped", "it died", "it exited"), or None."""
        if self.process is None:
            return "not started"
        self.pid = self.pid or sandbox.inner(self.process, self.sandboxed)
        return sandbox.trouble(self.process, self.pid)

    def start(self) -> None:
        """Start the template, or start a fresh one where the last is gone, stopped or dead (a
        sandboxed one is its sandbox's process 1, which no student process can stop or kill;
        one without a sandbox can be): no notebook waits for, or fails by, an earlier one."""
        if self.process is not None and not self.trouble():
            return
        self.stop()
        ours, theirs = socket.socketpair()
        if self.sandboxed:
            script = f"{sandbox.GRADER}/student_server.py"
            argv = [sys.executable, "-s", script, str(theirs.fileno()), sandbox.WORK, "inside"]
            read_only = [(str(ROOT / "course_utils"), f"{sandbox.COURSE}/course_utils")]
            read_only += [(str(HERE / name), f"{sandbox.GRADER}/{name}") for name in SERVER_FILES]
            hidden = [f"{sandbox.COURSE}/course_utils/{d}" for d in ("checks", "chapters")]
            argv = sandbox.command(
                argv, read_only=read_only, hidden=hidden, env=sandbox.inside_env(), server=True
            )
            env = None
        else:
            self.work = tempfile.mkdtemp(prefix="course-student-")
            argv = [
                sys.executable,
                str(HERE / "student_server.py"),
                str(theirs.fileno()),
                self.work,
                "outside",
            ]
            env = dict(
                os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE)]), MPLBACKEND="Agg"
            )
        output = sandbox.capped_output(2)  # not the grader's files (make grade's worker log)
        self.process = subprocess.Popen(
            argv,
            pass_fds=[theirs.fileno()],
            env=env,
            cwd=self.work or "/",
            stdout=output,
            stderr=output,
        )
        os.close(output)
        theirs.close()
        self.control = ours
        self.control.settimeout(300)
        message, _ = sandbox.receive_message(self.control)
        if not message or not message.get("ready"):
            self.stop()
            raise RuntimeError("the student process's template did not start")
        self.trouble()  # it runs: its own process is known from now on

    def fork(self, setup: dict) -> socket.socket:
        """A student process for one notebook: the judge's end of its socket."""
        self.start()
        ours, theirs = socket.socketpair()
        try:
            sandbox.send_message(self.control, {"op": "fork", "setup": setup}, [theirs.fileno()])
            message, _ = sandbox.receive_message(self.control)
        finally:
            theirs.close()
        if not message or "pid" not in message:
            ours.close()
            self.stop()
            raise RuntimeError("the student process's template did not fork")
        return ours

    def reset(self) -> list[str]:
        """Kill what the last notebook left running, empty the scratch folders; the writes that
        the sandbox refused, in words."""
        if self.control is None or self.process is None or self.trouble():
            self.stop()  # the next fork starts a fresh one
            return []
        try:
            sandbox.send_message(self.control, {"op": "reset"})
            message, _ = sandbox.receive_message(self.control)
        except OSError:
            message = None
        if not message:
            self.stop()
            return []
        return [str(w) for w in message.get("writes", [])]

    def stop(self) -> None:
        if self.control is not None:
            self.control.close()
            self.control = None
        if self.process is not None:
            sandbox.kill(self.process, self.sandboxed)
            self.process, self.pid = None, None


def setup_for(chapter: int, folder: str | None, env: dict[str, str]) -> dict:
    """What a notebook of ``chapter`` gets in its student process: the earlier chapters' exported
    code, the names of the hidden chapters (to say so when a name of theirs is reached for), the
    files of its folder, and nbgrader's variables."""
    chapters = sorted(
        p for p in (ROOT / "course_utils" / "chapters").glob("ch[0-9][0-9]") if p.is_dir()
    )
    sources, hidden, given = {}, {}, {}
    for path in chapters:
        number = int(path.name[2:])
        if number < chapter:
            sources[path.name] = (path / "__init__.py").read_text(encoding="utf-8")
        else:
            module = __import__(f"course_utils.chapters.{path.name}", fromlist=["__all__"])
            hidden[path.name] = list(getattr(module, "__all__", ()))
            given[path.name] = constructors_only((path / "__init__.py").read_text(encoding="utf-8"))
    bench = ROOT / "course_utils" / "chapters" / "ch07" / "bench.py"
    if bench.exists():  # chapter 07's timing tools (cu.bench): no exercise's code
        sources["ch07.bench"] = bench.read_text(encoding="utf-8")
    files, total = {}, 0
    for path in sorted(Path(folder).rglob("*")) if folder else []:
        if path.is_file() and not path.is_symlink() and ".ipynb_checkpoints" not in path.parts:
            data = path.read_bytes()
            total += len(data)
            if total > MAX_FILES:
                break
            files[str(path.relative_to(folder))] = data.hex()
    return {"sources": sources, "hidden": hidden, "given": given, "files": files, "env": env}


def constructors_only(source: str) -> str:
    """A chapter's exported code reduced to what a locked cell of the release may build on: its
    imports and its classes, each with its docstring and ``__init__`` only (no ``forward``, no
    other method, no function: none of the exercise's computation)."""
    import ast

    tree = ast.parse(source)
    kept = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            kept.append(node)
        elif isinstance(node, ast.ClassDef):
            body = [n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
            doc = ast.get_docstring(node)
            node.body = ([ast.Expr(ast.Constant(doc))] if doc else []) + body or [ast.Pass()]
            kept.append(node)
    return ast.unparse(ast.Module(body=kept, type_ignores=[]))
