"""The student process's server: the request loop (:class:`Server`) and the template that forks
one student process per notebook inside the sandbox (:func:`serve_template`). Loaded inside the
sandbox beside ``wire.py``, ``student.py`` and ``sandbox.py``; see ``student.py`` for what the
requests are.

    python /grader/student_server.py CONTROL_FD     (started in bwrap by judge.Template)
"""

from __future__ import annotations

import copy
import importlib
import os
import signal
import socket
import sys
import time

import torch

try:
    from tools.grading import sandbox, student, wire
except ImportError:  # in the sandbox, beside this file
    import sandbox
    import student
    import wire

LIMIT_TEXT = 4000  # characters of a repr or str sent back


class Server:
    """Answers the judge's requests on ``sock`` until it says goodbye or goes away."""

    def __init__(self, sock: socket.socket, shell=None) -> None:
        self.sock, self.shell = sock, shell
        self.codec = student.StudentCodec(self)
        self.attempts: list[str] = []
        self._rng = b""

    def loop(self) -> None:
        while True:
            try:
                request = wire.receive(self.sock, plain=False)
            except EOFError:
                return
            if request[0] == "bye":
                return
            wire.send(self.sock, self.handle(request))

    def handle(self, request) -> tuple:
        op, payload, changes, env, released = request
        codec = self.codec
        codec.forget(released.get("pairs", ()))
        for number in released.get("handles", ()):
            obj = codec.handles.pop(number, None)
            if obj is not None and codec.handle_of.get(id(obj)) == number:
                del codec.handle_of[id(obj)]
        if released.get("all"):
            codec.reset()
        seen_attempts, cpu = len(self.attempts), 0.0
        recorder = student.Recorder(codec, bool(env.get("record")), tuple(env.get("forbidden", ())))
        saved, outer = self._enter(env), codec.containers
        codec.containers = []
        status, result, back, made = "ok", None, [], ()
        try:
            codec.apply(changes)
            args = codec.decode(payload)
            containers, codec.containers = codec.containers, []
            student.time_limit(env.get("limit", 0))
            start = time.process_time()
            try:
                with recorder:
                    value = self.run(op, args)
            finally:
                student.time_limit(0)
                cpu = time.process_time() - start - recorder.coding
            first = codec._next
            result = codec.encode(value)
            back = [codec.encode(_contents(c)) for c in containers]
            made = range(first, codec._next, 2)
        except student.OpTimeout:
            status = "timeout"
        except wire.WireError as exc:
            status, result = "wire", str(exc)
        except BaseException as exc:  # noqa: BLE001 - the student's code raised: said in words
            status, result = "err", describe(exc)
            shortcut = imported_shortcut(exc, recorder.forbidden)
            if shortcut:  # a shortcut this torch lacks: the attempt is named all the same
                recorder.seen.append(IMPORTED + shortcut)
        finally:
            codec.containers = outer
        try:
            out = codec.changes()
        except Exception as exc:  # noqa: BLE001 - an object whose state cannot cross
            status, result, out = "wire", f"changes: {exc}", []
        extra = {"seen": recorder.seen, "attempts": self.attempts[seen_attempts:], "cpu": cpu}
        if env.get("record"):
            extra["record"] = recorder.calls
            extra["aliases"] = _aliases(codec, recorder.memo, made)
        return (status, result, out, self._leave(saved), back, extra)

    def run(self, op: str, args):
        if op == "cell":
            self.shell.run_cell(args[0], store_history=False, silent=True)
            return None
        if op == "names":
            ns = self.shell.user_ns
            return {n: ns[n] for n in args[0] if n in ns}
        if op == "import":  # the tests' way to name an object of a module (tests/judged.py)
            return wire.resolve(importlib.import_module(args[0]).__name__, args[1])
        if op == "backward":
            return self.backward(*args)
        target = args[0]
        if op == "call":
            return target(*args[1], **args[2])
        if op == "method":
            return getattr(target, args[1])(*args[2], **args[3])
        if op == "getattr":
            return getattr(target, args[1])
        if op == "setattr":
            return setattr(target, args[1], args[2])
        if op == "delattr":
            return delattr(target, args[1])
        if op == "getitem":
            return target[args[1]]
        if op == "setitem":
            target[args[1]] = args[2]
            return None
        if op == "delitem":
            del target[args[1]]
            return None
        simple = {
            "len": len,
            "iter": iter,
            "next": next,
            "dir": lambda t: [str(n) for n in dir(t)],
            "repr": lambda t: str(repr(t))[:LIMIT_TEXT],
            "str": lambda t: str(str(t))[:LIMIT_TEXT],
            "float": float,
            "int": int,
            "index": lambda t: int(t.__index__()),
            "enter": lambda t: t.__enter__(),
            "copy": copy.copy,
            "deepcopy": copy.deepcopy,
        }
        if op in simple:
            return simple[op](target)
        if op == "contains":
            return args[1] in target
        if op == "exit":
            return target.__exit__(*args[1])
        raise wire.WireError(f"no operation {op!r}")

    def backward(self, output: torch.Tensor, grad, pairs: list) -> list:
        """Gradients of ``output`` (with ``grad``) for the judge's pairs; the leaves it does not
        share get theirs accumulated here, as ``backward()`` would."""
        shared = [self.codec.get(p) for p in pairs]
        others = [
            t
            for t in student.graph_leaves(output)
            if t.requires_grad and all(t is not s for s in shared)
        ]
        leaves = [t for t in shared + others if isinstance(t, torch.Tensor) and t.requires_grad]
        found = torch.autograd.grad(output, leaves, grad, allow_unused=True, retain_graph=True)
        by_leaf = dict(zip(map(id, leaves), found))
        for leaf in others:
            g = by_leaf.get(id(leaf))
            if g is not None:
                leaf.grad = g if leaf.grad is None else leaf.grad + g
        return [by_leaf.get(id(t)) if isinstance(t, torch.Tensor) else None for t in shared]

    def callback(self, number: int, args, kwargs):
        """Call the judge's callable ``number``: ask, then answer its requests until it returns."""
        codec = self.codec
        wire.send(self.sock, ("cb", number, codec.encode((args, kwargs)), codec.changes()))
        while True:
            message = wire.receive(self.sock, plain=False)
            if message[0] == "cbret":
                _, status, value, changes = message
                codec.apply(changes)
                if status != "ok":
                    raise RuntimeError(f"the grader's function raised {value}")
                return codec.decode(value)
            wire.send(self.sock, self.handle(message))

    def _enter(self, env: dict):
        student.CURRENT["cell"], student.CURRENT["given"] = env.get("cell"), bool(env.get("given"))
        if env.get("rng") is not None:
            torch.set_rng_state(torch.frombuffer(bytearray(env["rng"]), dtype=torch.uint8).clone())
        self._rng = torch.get_rng_state().numpy().tobytes()
        saved = (torch.is_grad_enabled(), torch.get_default_dtype())
        torch.set_grad_enabled(bool(env.get("grad", True)))
        dtype = getattr(torch, str(env.get("dtype", "float32")), torch.float32)
        if isinstance(dtype, torch.dtype) and dtype.is_floating_point:
            torch.set_default_dtype(dtype)
        threads = env.get("threads")
        if isinstance(threads, int) and threads > 0 and threads != torch.get_num_threads():
            torch.set_num_threads(threads)
        return saved

    def _leave(self, saved) -> dict:
        rng = torch.get_rng_state().numpy().tobytes()
        torch.set_grad_enabled(saved[0])
        torch.set_default_dtype(saved[1])
        return {"rng": rng} if rng != self._rng else {}


def _aliases(codec, memo: dict, pairs) -> list:
    """(pair, record index) of the new pairs that are tensors the record holds (the same object)."""
    found = []
    for pair in pairs:
        t = codec.get(pair)
        if isinstance(t, torch.Tensor) and id(t) in memo and memo[id(t)][1] is t:
            found.append((pair, memo[id(t)][0]))
    return found


def _contents(container):
    return dict(container.items()) if isinstance(container, dict) else list(container)


# The module of a shortcut that an older supported torch lacks (FlexAttention came with 2.5):
# there a student's attempt dies in its import, before any call of it can be watched.
SHORTCUT_MODULES = {"torch.nn.attention.flex_attention": "flex_attention"}
IMPORTED = "import:"  # a seen shortcut's prefix when only its import was attempted


def imported_shortcut(exc: BaseException, forbidden) -> str | None:
    """The forbidden shortcut (its torch function's name) whose missing module the student's own
    import statement asked for, behind ``exc`` or its causes; None when there is none."""
    done = set()
    while exc is not None and id(exc) not in done:
        done.add(id(exc))
        function = SHORTCUT_MODULES.get(getattr(exc, "name", None) or "")
        if isinstance(exc, ImportError) and function in forbidden:
            tb, last = exc.__traceback__, None
            while tb is not None:  # the innermost frame that is not importlib's own
                if not tb.tb_frame.f_code.co_filename.startswith("<frozen"):
                    last = tb.tb_frame
                tb = tb.tb_next
            if last is not None and student.from_student(last):
                return function
        exc = exc.__cause__ or exc.__context__
    return None


def describe(exc: BaseException) -> tuple:
    """(the names of its classes, outermost first, its message): what the judge re-raises."""
    names = [k.__name__ for k in type(exc).__mro__]
    try:
        message = str(exc)[:LIMIT_TEXT]
    except Exception:  # noqa: BLE001 - a student's exception whose str() fails
        message = ""
    return (names, message)


# ----------------------------------------------------------------------------- the template
def preload():
    """What every notebook imports, loaded once (IPython's shell, torch, matplotlib, the course's
    core with stand-ins for its checks and explorers)."""
    import IPython.core.interactiveshell  # noqa: F401
    import matplotlib.pyplot as plt
    import torch.nn.attention.bias  # noqa: F401 - loads torch._dynamo, which wraps torch.manual_seed

    import course_utils
    import course_utils.plotting  # noqa: F401

    student.install_stand_ins()
    dir(course_utils)
    figure = plt.figure()  # a notebook's first figure loads matplotlib's fonts: done once, here
    figure.text(0, 0, "fonts")
    figure.canvas.draw()
    plt.close(figure)


def serve_template(control: socket.socket, work: str, inside: bool) -> int:
    """Fork one student process per request ({"op": "fork", "setup": ...} with the judge's end of
    a socket pair), reset on {"op": "reset"} (its reply lists the writes that were refused),
    until the control socket closes. ``inside``: in the sandbox, where a reset kills every other
    process and empties the scratch folders; outside (no sandbox): the fork's process group and
    ``work``."""
    sandbox.no_dumping()
    if os.getpid() == 1:  # the sandbox's process 1 (session.StudentTemplate): unstoppable
        sandbox.shield()
    last = 0
    writes_in, writes_out = os.pipe()
    os.set_blocking(writes_in, False)
    preload()
    sandbox.send_message(control, {"ready": True})
    while True:
        message, fds = sandbox.receive_message(control)
        if message is None:
            return 0
        if message.get("op") == "fork":
            pid = os.fork()
            if pid == 0:
                control.close()
                os.close(writes_in)
                _child(socket.socket(fileno=fds[0]), message["setup"], writes_out, work, inside)
            last = pid
            for fd in fds:
                os.close(fd)
            sandbox.send_message(control, {"pid": pid})
        elif message.get("op") == "reset":
            if inside:
                killed = sandbox.reset()
            else:
                killed = _stop_group(last)
                sandbox.empty(work)
            text = b""
            while True:
                try:
                    chunk = os.read(writes_in, 1 << 16)
                except BlockingIOError:
                    break
                if not chunk:
                    break
                text += chunk
            lines = [x for x in text.decode(errors="replace").split("\n") if x]
            sandbox.send_message(control, {"killed": killed, "writes": lines[:50]})


def _stop_group(pid: int) -> int:
    """Kill the process group of the last student process (no sandbox: nothing else is ours)."""
    if not pid:
        return 0
    try:
        os.killpg(pid, 9)
    except OSError:
        return 0
    sandbox._reap()
    return 1


def _child(sock: socket.socket, setup: dict, writes: int, work: str, inside: bool) -> None:
    """One notebook's student process: its folder, its chapters, then the judge's requests."""
    code = 1
    try:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2) if not os.environ.get("COURSE_GRADER_DEBUG") else (0, 1):
            os.dup2(null, fd)
        os.setsid()
        signal.signal(signal.SIGINT, signal.default_int_handler)  # the template ignores it
        os.chdir(work)
        for name, data in setup.get("files", {}).items():
            path = os.path.join(work, name)
            if os.path.abspath(path).startswith(work + os.sep):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as handle:
                    handle.write(bytes.fromhex(data))
        os.environ.update(setup.get("env", {}))
        student.watch_writes(
            lambda text: os.write(
                writes, f"cell {student.CURRENT['cell']}: {text.replace(chr(10), ' ')}\n".encode()
            )
        )
        from IPython.core.interactiveshell import InteractiveShell

        server = Server(sock, InteractiveShell.instance())
        if setup.get("real") and not inside:  # the tests' student process: the whole course
            for name in ("course_utils.checks", "course_utils.widgets"):
                sys.modules.pop(name, None)
                vars(sys.modules["course_utils"]).pop(name.rsplit(".", 1)[1], None)
        else:
            student.install_chapters(
                setup.get("sources", {}),
                setup.get("hidden", {}),
                server.attempts,
                setup.get("given"),
            )
        server.loop()
        code = 0
    finally:
        os._exit(code)


if __name__ == "__main__":
    fd, work, where = sys.argv[1:4]
    sys.exit(serve_template(socket.socket(fileno=int(fd)), work, where == "inside"))
