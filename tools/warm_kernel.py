"""Warm kernels for grading: each notebook's kernel is forked from a process that has already
imported torch and the course, so a kernel start costs a fork instead of an interpreter start
and ``import torch, course_utils`` (about 0.2 s instead of 1.7 s here).

Three parts, all in this file:

* the **server** (``python -m tools.warm_kernel --serve SOCKET``): listens on a Unix socket,
  imports what every course notebook imports (:func:`preload`; it runs no torch operation and
  starts no thread), then forks one kernel per request. The child takes the client's standard
  streams (passed over the socket), working folder and environment, reseeds ``random`` (and
  numpy's global generator) and runs ``IPKernelApp`` on the client's connection file. The server
  exits when its standard input closes (the nbgrader process that started it is gone);
* the **client**: what the kernelspec runs (``python -S tools/warm_kernel.py -f CONNECTION``,
  standard library only, so it starts in milliseconds). It asks the server named by
  ``$COURSE_WARM_KERNEL`` for a kernel, forwards SIGINT/SIGTERM/SIGQUIT to it (nbclient
  interrupts a cell past its time limit with SIGINT), and exits when the kernel exits. A client
  killed outright takes its kernel with it: the kernel watches the connection. Without a server
  it becomes a plain kernel (``python -m ipykernel_launcher``);
* :func:`configure`, called by the course's ``nbgrader_config.py``: in ``nbgrader autograde``,
  it starts the server (or uses the one ``$COURSE_WARM_KERNEL`` names, e.g. ``make grade``'s,
  shared by its workers), writes the kernelspec ``course-warm`` into a private folder put first
  on ``JUPYTER_PATH``, and sets ``c.Execute.kernel_name`` (nbclient then ignores the notebook's
  own kernelspec; the autograded notebook keeps its metadata).

Without ``os.fork`` (Windows), or with ``COURSE_WARM_KERNEL=0``, kernels start as before.
What a forked kernel shares with the server: modules imported by :func:`preload` (imported
before the notebook's environment was known: course_utils and torch read theirs when called)
and Python's hash seed.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import sys

ENV_VAR = "COURSE_WARM_KERNEL"
KERNEL_NAME = "course-warm"
HERE = os.path.abspath(__file__)
ROOT = os.path.dirname(os.path.dirname(HERE))
HISTORY = ["--HistoryManager.hist_file=:memory:"]
FORWARDED = ("SIGINT", "SIGTERM", "SIGQUIT")
_HEADER = struct.Struct("!I")  # the request's length, sent with the client's fds
_STARTED_IN = os.getcwd()
READY = ".ready"  # the server creates SOCKET.ready once it has preloaded


def available() -> bool:
    """True where kernels can be forked (POSIX with fd passing) and COURSE_WARM_KERNEL is not 0."""
    return (
        hasattr(os, "fork")
        and hasattr(socket, "send_fds")
        and os.environ.get(ENV_VAR, "").strip() != "0"
    )


# ----------------------------------------------------------------------------- the client
def client(argv: list[str]) -> int:
    """Be a kernel: a warm one from the server, else a plain one (``argv``: ``-f CONNECTION ...``)."""
    path = os.environ.get(ENV_VAR, "")
    try:
        if not available() or not path:
            raise OSError("no warm kernel server")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        body = json.dumps({"cwd": os.getcwd(), "env": dict(os.environ), "argv": argv}).encode()
        socket.send_fds(sock, [_HEADER.pack(len(body))], [0, 1, 2])
        sock.sendall(body)
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = sock.recv(64)
            if not chunk:
                raise OSError("the warm kernel server closed the connection")
            reply += chunk
        pid = int(reply)
    except (OSError, ValueError):
        plain(argv)  # does not return
    for name in FORWARDED:
        signal.signal(getattr(signal, name), lambda signum, frame: _forward(pid, signum))
    manager = os.getppid()
    while True:
        if select.select([sock], [], [], 1.0)[0]:
            if not sock.recv(4096):  # the kernel exited (its end of the connection closed)
                return 0
        elif os.getppid() != manager:  # the kernel manager died: leaving ends the kernel too
            return 1


def _forward(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def plain(argv: list[str]) -> None:
    """Replace this process with a plain ipykernel (with site-packages: no ``-S``)."""
    os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", *argv])


# ----------------------------------------------------------------------------- the server
def preload() -> None:
    """What every course notebook imports, loaded once (runs no torch operation, starts no
    thread, creates no zmq context). matplotlib's inline backend is named but not imported: it
    hooks into the kernel's shell when first imported, which must happen in the kernel."""
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # debugpy: no frozen-modules note
    import ipykernel.debugger  # noqa: F401 - debugpy's modules, which a kernel loads as it starts
    import ipykernel.ipkernel  # noqa: F401
    import ipykernel.kernelapp  # noqa: F401
    import ipykernel.zmqshell  # noqa: F401
    import IPython.core.debugger  # noqa: F401
    import matplotlib.pyplot  # noqa: F401
    import torch  # noqa: F401
    import torch.nn.attention.bias  # noqa: F401 - loads torch._dynamo, as a first optimizer would (~1 s)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    import course_utils
    import course_utils.chapters  # noqa: F401
    import course_utils.checks as checks
    import course_utils.plotting  # noqa: F401
    import course_utils.widgets as widgets

    dir(course_utils), dir(checks), dir(widgets)  # every chapter's checks and explorers collected
    figure = Figure()  # a notebook's first figure loads matplotlib's fonts: done once, here
    figure.text(0, 0, "fonts")
    FigureCanvasAgg(figure).draw()


def serve(path: str) -> int:
    """Listen on ``path`` (first, so clients can connect at once), preload, fork kernels."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    server = os.getpid()
    try:
        preload()
        open(path + READY, "w").close()
        while True:
            ready = select.select([listener, sys.stdin.fileno()], [], [], 1.0)[0]
            _reap()
            if sys.stdin.fileno() in ready and not os.read(sys.stdin.fileno(), 4096):
                return 0  # whoever started us is gone
            if listener in ready:
                _accept(listener)
    finally:
        if os.getpid() == server:  # (a forked kernel never gets here; belt and braces)
            listener.close()
            for name in (path, path + READY):
                try:
                    os.unlink(name)
                except OSError:
                    pass


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _accept(listener: socket.socket) -> None:
    conn, _ = listener.accept()
    fds: list[int] = []
    try:
        conn.settimeout(10)
        head, fds, _flags, _addr = socket.recv_fds(conn, _HEADER.size, 3)
        head += _receive(conn, _HEADER.size - len(head))
        request = json.loads(_receive(conn, _HEADER.unpack(head)[0]))
        if len(fds) != 3:
            raise ValueError(f"expected the client's 3 standard streams, got {len(fds)} fds")
    except (OSError, ValueError, struct.error):
        for fd in fds:
            os.close(fd)
        conn.close()
        return
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        listener.close()
        _kernel(conn, fds, request)  # never returns
    for fd in fds:
        os.close(fd)
    try:
        conn.sendall(f"{pid}\n".encode())
    except OSError:
        pass  # the client is gone; the kernel's watcher notices
    conn.close()


def _receive(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise OSError("the client closed the connection mid-request")
        data += chunk
    return data


def _kernel(conn: socket.socket, fds: list[int], request: dict) -> None:
    """In the forked child: become the client's kernel; exit when it shuts down."""
    code = 1
    try:
        os.setsid()  # like a plain kernel: its own session, out of the terminal's reach
        for fd, target in zip(fds, (0, 1, 2)):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        _set_path(request)
        _reseed()
        conn.settimeout(None)
        import threading

        threading.Thread(target=_die_with_client, args=(conn,), daemon=True).start()
        import ipykernel_launcher
        from ipykernel.kernelapp import IPKernelApp

        parent = os.environ.get("JPY_PARENT_PID") or "0"  # read by the trait at import: set it
        argv = [*request["argv"], f"--IPKernelApp.parent_handle={int(parent)}"]
        sys.argv = [ipykernel_launcher.__file__, *request["argv"]]
        IPKernelApp.launch_instance(argv=argv)
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    # The kernel has answered its shutdown request and closed its sockets: leave at once. The
    # interpreter's teardown (atexit handlers, module finalization) would cost this fork 0.2-0.9 s
    # per notebook here and frees nothing the grader reads.
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    os._exit(code)


def _set_path(request: dict) -> None:
    """sys.path as ``python -m ipykernel_launcher`` has it: without the folder the server was
    started in (IPython puts the kernel's folder back, as ``''``), with $PYTHONPATH's entries."""
    if sys.path and sys.path[0] in ("", _STARTED_IN):
        del sys.path[0]
    extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    for entry in reversed(extra):
        if entry not in sys.path:
            sys.path.insert(0, entry)


def _reseed() -> None:
    """Give this kernel its own random state: Python's ``random`` reseeds itself in a forked
    child (``os.register_at_fork``), numpy's global generator, if the server loaded it, does not."""
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()


def _die_with_client(conn: socket.socket) -> None:
    try:
        while conn.recv(4096):
            pass
    except OSError:
        pass
    os._exit(1)  # the client is gone (killed by the kernel manager): so is this kernel


# ----------------------------------------------------------------------------- nbgrader's side
class Server:
    """A running server: its socket path and process (stopped by closing its stdin)."""

    def __init__(self) -> None:
        import atexit
        import subprocess
        import tempfile

        self.folder = tempfile.mkdtemp(prefix="course-warm-")
        self.path = os.path.join(self.folder, "kernel.sock")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tools.warm_kernel", "--serve", self.path],
            stdin=subprocess.PIPE,
            cwd=ROOT,
            start_new_session=True,  # a Ctrl-C in the terminal reaches nbgrader, not the server
        )
        atexit.register(self.stop)

    def wait_listening(self, timeout: float = 30.0) -> None:
        """Block until the socket exists (the server creates it before preloading)."""
        _wait_for(self.path, self.process, timeout)

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Block until the server has preloaded (before timing anything beside it)."""
        self.wait_listening(timeout)
        _wait_for(self.path + READY, self.process, timeout)

    def stop(self) -> None:
        import shutil
        import subprocess

        if not os.path.exists(self.path + READY):  # still preloading: nothing to wait for
            self.process.kill()
        if self.process.stdin and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def _wait_for(path: str, process, timeout: float) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the warm kernel server did not get as far as {path}")
        time.sleep(0.01)


def install_kernelspec(folder: str) -> str:
    """Write the ``course-warm`` kernelspec under ``folder``/kernels and put ``folder`` first on
    JUPYTER_PATH (kernels and nbclient read it from this process's environment)."""
    spec_dir = os.path.join(folder, "kernels", KERNEL_NAME)
    os.makedirs(spec_dir, exist_ok=True)
    spec = {
        # nbclient keeps IPython's history in memory for the kernels it knows ("python3"): here too
        "argv": [sys.executable, "-S", HERE, "-f", "{connection_file}", *HISTORY],
        "display_name": "Python 3 (course, warm start for grading)",
        "language": "python",
        "interrupt_mode": "signal",
        "metadata": {"debugger": True, "supported_encryption": ["curve"]},
        "kernel_protocol_version": "5.5",
    }
    with open(os.path.join(spec_dir, "kernel.json"), "w", encoding="utf-8") as handle:
        json.dump(spec, handle, indent=1)
    _put_first_on_jupyter_path(folder)
    return spec_dir


def _put_first_on_jupyter_path(folder: str) -> None:
    paths = [folder, *[p for p in os.environ.get("JUPYTER_PATH", "").split(os.pathsep) if p]]
    os.environ["JUPYTER_PATH"] = os.pathsep.join(dict.fromkeys(paths))


_started: Server | None = None


def start(ready: bool = False) -> str:
    """This process's server (started once), its path set in ``$COURSE_WARM_KERNEL`` and the
    kernelspec installed: kernels started from here on (and by child processes) can be warm.
    ``ready``: also wait until it has preloaded. Returns the socket's path ("": not available)."""
    global _started
    if not available():
        return ""
    path = os.environ.get(ENV_VAR, "")
    if path and os.path.exists(path):  # a parent's server (make grade's), shared
        folder = os.path.dirname(path)
    else:
        if _started is None:
            _started = Server()
            _started.wait_listening()
        folder, path = _started.folder, _started.path
    if ready and _started is not None and _started.path == path:
        _started.wait_ready()
    os.environ[ENV_VAR] = path
    if not os.path.exists(os.path.join(folder, "kernels", KERNEL_NAME, "kernel.json")):
        install_kernelspec(folder)
    else:  # written by whoever started the server: only put it on the path
        _put_first_on_jupyter_path(folder)
    return path


def configure(c) -> bool:
    """For nbgrader_config.py: in ``nbgrader autograde``, run notebooks in warm kernels. True
    when it did; other nbgrader commands (and the formgrader's server) are left as they were."""
    command = sys.argv[1:2] == ["autograde"] and "nbgrader" in sys.argv[0]
    if not command or not available():
        return False
    start()
    c.Execute.kernel_name = KERNEL_NAME
    return True


def main(argv: list[str]) -> int:
    if argv[:1] == ["--serve"] and len(argv) == 2:
        code = serve(argv[1])
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # torch's teardown would hold up the nbgrader process waiting for us
    return client(argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
