"""The kernels that autograde: each in the grader's sandbox (``tools/grading/sandbox.py``), and
warm: forked from a process that has already imported torch and the course, so a kernel start
costs a fork instead of an interpreter start and ``import torch, course_utils``.

Three parts, all in this file:

* the **server** (``python tools/grading/warm_kernel.py --serve FD SANDBOXED``), one per nbgrader process,
  in a bubblewrap sandbox: it sees the system, Python and its packages, the course's package
  (read-only) and the folder of the kernels' ZeroMQ sockets; not the course repository, its
  ``solutions/``, the nbgrader course (other students' submissions, the gradebook) or the network.
  It accepts requests on a Unix socket made outside the sandbox and passed in as ``FD`` (no
  kernel can touch its file), imports what every course notebook imports (:func:`preload`; no
  torch operation, no thread), then forks one kernel per request. Before each kernel, and as soon
  as one exits, it resets the sandbox: every other process killed, the scratch folders emptied,
  so nothing of one notebook reaches the next; the notebook's folder is copied into the scratch
  folder, which is the kernel's working folder. The server is not dumpable: no kernel can write
  into the memory the next one is forked from. It is the sandbox's process 1, so no kernel can
  stop or kill it (``sandbox.command(server=True)``); should it stop or die all the same, the
  grader starts a fresh one before the next kernel (``kernels.ensure``). It exits when its
  standard input closes;
* the **client**: what the kernelspec runs (``python -S tools/grading/warm_kernel.py -f CONNECTION``,
  standard library only, so it starts in milliseconds). It asks the server named by
  ``$COURSE_WARM_KERNEL`` for a kernel (passing its standard streams and its working folder),
  forwards SIGINT/SIGTERM/SIGQUIT to it through the connection (nbclient interrupts a cell past
  its time limit with SIGINT), and exits when the kernel exits; a client killed outright takes its
  kernel with it. Without a server (``COURSE_WARM_KERNEL=0``) it runs a plain kernel, in a
  sandbox of its own;
* nbgrader's side, in ``kernels.py`` (it imports this file; this file never imports it): its
  ``configure``, called by the course's nbgrader settings: in ``nbgrader autograde`` it starts
  the server, writes the kernelspec ``course-warm`` into a private folder put first on
  ``JUPYTER_PATH``, sets ``c.Execute.kernel_name`` (nbclient then ignores the notebook's own
  kernelspec; the autograded notebook keeps its metadata) and, sandboxed, ZeroMQ's ``ipc``
  transport: sockets in a folder bound into the sandbox (a sandbox has no network to reach TCP).

Without a sandbox (``COURSE_UNSANDBOXED=1``, the instructor's explicit choice) kernels run as
plain processes, warm or not, over TCP. What a forked kernel shares with the server: modules
imported by :func:`preload` and Python's hash seed.
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
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
HISTORY = ["--HistoryManager.hist_file=:memory:"]
FORWARDED = {"SIGINT": b"I", "SIGTERM": b"T", "SIGQUIT": b"Q"}
_HEADER = struct.Struct("!I")  # the request's length, sent with the client's fds
KEPT_ENV = ("NBGRADER_", "JPY_", "JUPYTER_", "COURSE_", "PYDEVD_", "OMP_", "MKL_", "KMP_")
# sandbox.py (standard library only) sits beside this file, here and in the sandbox's /grader
sys.path.insert(0, os.path.dirname(HERE))
import sandbox  # noqa: E402

del sys.path[0]


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
    if sandbox.wanted():  # the kernel's output through a capped pipe, not the grader's files
        output = sandbox.capped_output(2)
        os.dup2(output, 1)
        os.dup2(output, 2)
        os.close(output)
    try:
        if not available() or not path:
            raise OSError("no warm kernel server")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        here = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
        body = json.dumps({"cwd": os.getcwd(), "env": dict(os.environ), "argv": argv}).encode()
        socket.send_fds(sock, [_HEADER.pack(len(body))], [0, 1, 2, here])
        os.close(here)
        sock.sendall(body)
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = sock.recv(64)
            if not chunk:
                raise OSError("the warm kernel server closed the connection")
            reply += chunk
        int(reply)
    except (OSError, ValueError):
        plain(argv)  # does not return
    for name, code in FORWARDED.items():
        signal.signal(getattr(signal, name), lambda signum, frame, code=code: _forward(sock, code))
    manager = os.getppid()
    while True:
        if select.select([sock], [], [], 1.0)[0]:
            if not sock.recv(4096):  # the kernel exited (its end of the connection closed)
                return 0
        elif os.getppid() != manager:  # the kernel manager died: leaving ends the kernel too
            return 1


def _forward(sock: socket.socket, code: bytes) -> None:
    try:
        sock.send(code)
    except OSError:
        pass


def plain(argv: list[str]) -> None:
    """Replace this process with a plain ipykernel (with site-packages: no ``-S``); sandboxed, in
    a sandbox of its own with a copy of this folder as its working folder."""
    command = [sys.executable, "-m", "ipykernel_launcher", *argv]
    if sandbox.wanted():
        import tempfile

        scratch = tempfile.mkdtemp(prefix="course-kernel-")
        here = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
        _copy_folder(here, scratch)  # as the warm server copies: at most 200 MB, no links
        os.close(here)
        _remove_when_done(scratch)
        env = kernel_env(dict(os.environ))
        env.pop("JPY_PARENT_PID", None)  # bwrap is its parent in there: --die-with-parent instead
        command = sandbox.command(
            command,
            read_only=kernel_view(),
            writable=[(scratch, sandbox.WORK), *runtime_binds(argv)],
            env=env,
        )
    os.execv(command[0], command)


def _remove_when_done(folder: str) -> None:
    """Remove ``folder`` once this process and what it becomes (bwrap, the kernel) have exited: a
    process of its own session (a kernel manager's kill of our group spares it) waits for the end
    of a pipe that only they hold open."""
    import shutil

    read, write = os.pipe()
    if os.fork() == 0:
        os.setsid()
        os.close(write)
        try:
            os.read(read, 1)  # end of file: every holder of the writing end has exited
        finally:
            shutil.rmtree(folder, ignore_errors=True)
            os._exit(0)
    os.close(read)
    os.set_inheritable(write, True)  # kept open across exec, by bwrap until the sandbox ends


def runtime_binds(argv: list[str]) -> list[tuple[str, str]]:
    """The folder of the kernel's connection file (and ipc sockets), bound where it is."""
    connection = argv[argv.index("-f") + 1] if "-f" in argv else ""
    folder = os.path.dirname(os.path.abspath(connection)) if connection else ""
    return [(folder, folder)] if folder else []


def kernel_view() -> list[tuple[str, str]]:
    """What a sandboxed kernel reads besides the system: the course's package and this file."""
    grading = os.path.join(ROOT, "tools", "grading", "sandbox.py")
    return [
        (os.path.join(ROOT, "course_utils"), f"{sandbox.COURSE}/course_utils"),
        (HERE, f"{sandbox.GRADER}/warm_kernel.py"),
        (grading, f"{sandbox.GRADER}/sandbox.py"),
    ]


def kernel_env(env: dict[str, str]) -> dict[str, str]:
    """A sandboxed kernel's environment: the sandbox's, and the client's Jupyter and nbgrader keys."""
    kept = {k: v for k, v in env.items() if k.startswith(KEPT_ENV) and k != ENV_VAR}
    kept["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    kept["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    return sandbox.inside_env(kept)


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


def serve(fd: int, sandboxed: bool) -> int:
    """Accept on the listening socket ``fd`` (made by :class:`Server`), preload, fork kernels."""
    listener = socket.socket(fileno=fd)
    server, kernels = os.getpid(), set()
    if sandboxed:
        sandbox.no_dumping()
    if os.getpid() == 1:  # the sandbox's process 1 (kernels.Server): no kernel can stop or kill it
        sandbox.shield()
    preload()
    print("ready", flush=True)
    while True:
        ready = select.select([listener, sys.stdin.fileno()], [], [], 1.0)[0]
        ended = _reap(kernels)
        if ended and sandboxed and not kernels:  # the notebook is done: nothing of it stays
            sandbox.reset()
        if sys.stdin.fileno() in ready and not os.read(sys.stdin.fileno(), 4096):
            return 0  # whoever started us is gone
        if listener in ready:
            pid = _accept(listener, sandboxed)
            if pid:
                kernels.add(pid)
        if os.getpid() != server:  # (a forked kernel never gets here; belt and braces)
            os._exit(1)


def _reap(kernels: set[int]) -> bool:
    ended = False
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ended
        if pid == 0:
            return ended
        ended = ended or pid in kernels
        kernels.discard(pid)


def _accept(listener: socket.socket, sandboxed: bool) -> int:
    conn, _ = listener.accept()
    fds: list[int] = []
    try:
        conn.settimeout(10)
        head, fds, _flags, _addr = socket.recv_fds(conn, _HEADER.size, 4)
        head += _receive(conn, _HEADER.size - len(head))
        request = json.loads(_receive(conn, _HEADER.unpack(head)[0]))
        if len(fds) != 4:
            raise ValueError(f"expected the client's 3 standard streams and folder, got {len(fds)}")
    except (OSError, ValueError, struct.error):
        for fd in fds:
            os.close(fd)
        conn.close()
        return 0
    if sandboxed:  # one kernel at a time: whatever an earlier one left is killed, its files gone
        sandbox.reset()
        _copy_folder(fds[3], sandbox.WORK)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        listener.close()
        _kernel(conn, fds, request, sandboxed)  # never returns
    for fd in fds:
        os.close(fd)
    try:
        conn.sendall(f"{pid}\n".encode())
    except OSError:
        pass  # the client is gone; the kernel's watcher notices
    conn.close()
    return pid


def _copy_folder(folder_fd: int, target: str, depth: int = 0, limit: list | None = None) -> None:
    """Copy the files of the folder open as ``folder_fd`` into ``target`` (at most 200 MB), without
    following links: the notebook's folder, as the kernel's working folder."""
    limit = [200 << 20] if limit is None else limit
    for entry in os.scandir(folder_fd):
        if entry.is_symlink() or entry.name in (".", "..") or depth > 8:
            continue
        if entry.is_dir(follow_symlinks=False):
            sub = os.open(
                entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=folder_fd
            )
            os.makedirs(os.path.join(target, entry.name), exist_ok=True)
            _copy_folder(sub, os.path.join(target, entry.name), depth + 1, limit)
            os.close(sub)
        elif entry.is_file(follow_symlinks=False) and entry.stat().st_size <= limit[0]:
            limit[0] -= entry.stat().st_size
            source = os.open(entry.name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=folder_fd)
            with (
                os.fdopen(source, "rb") as src,
                open(os.path.join(target, entry.name), "wb") as dst,
            ):
                dst.write(src.read())


def _receive(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise OSError("the client closed the connection mid-request")
        data += chunk
    return data


def _kernel(conn: socket.socket, fds: list[int], request: dict, sandboxed: bool) -> None:
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
        env = kernel_env(request["env"]) if sandboxed else request["env"]
        os.chdir(sandbox.WORK if sandboxed else request["cwd"])
        os.environ.clear()
        os.environ.update(env)
        _set_path(env)
        _reseed()
        conn.settimeout(None)
        import threading

        threading.Thread(target=_serve_client, args=(conn,), daemon=True).start()
        import ipykernel_launcher
        from ipykernel.kernelapp import IPKernelApp

        parent = os.environ.get("JPY_PARENT_PID") or "0"  # read by the trait at import: set it
        if os.getppid() == 1:  # forked by the sandbox's process 1: ipykernel's poller would take
            parent = "0"  # that for an orphan's reparenting and exit; the client ends us instead
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


def _set_path(env: dict) -> None:
    """sys.path as ``python -m ipykernel_launcher`` has it: without the folder the server was
    started in (IPython puts the kernel's folder back, as ``''``), with $PYTHONPATH's entries."""
    if sys.path and sys.path[0] in ("", os.path.dirname(HERE)):
        del sys.path[0]
    for entry in reversed([p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]):
        if entry not in sys.path:
            sys.path.insert(0, entry)


def _reseed() -> None:
    """Give this kernel its own random state: Python's ``random`` reseeds itself in a forked
    child (``os.register_at_fork``), numpy's global generator, if the server loaded it, does not."""
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()


def _serve_client(conn: socket.socket) -> None:
    """The client's signals, forwarded as bytes; its end closed: this kernel ends too."""
    codes = {code: getattr(signal, name) for name, code in FORWARDED.items()}
    try:
        while True:
            data = conn.recv(64)
            if not data:
                break
            for byte in data:
                signum = codes.get(bytes([byte]))
                if signum is not None:
                    os.kill(os.getpid(), signum)
    except OSError:
        pass
    os._exit(1)  # the client is gone (killed by the kernel manager): so is this kernel


def main(argv: list[str]) -> int:
    if argv[:1] == ["--serve"] and len(argv) == 3:
        code = serve(int(argv[1]), argv[2] == "1")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # torch's teardown would hold up the nbgrader process waiting for us
    return client(argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
