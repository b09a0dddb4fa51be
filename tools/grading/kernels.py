"""nbgrader's side of the course's kernels (``tools/grading/warm_kernel.py`` says what they are): the
handle of the sandboxed server a grading process starts (:class:`Server`), the ``course-warm``
kernelspec, the KernelManager that reaches a sandboxed kernel over ZeroMQ's ipc transport
(``SandboxKernelManager``) and :func:`configure`, which the course's ``nbgrader_config.py`` calls."""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import sys

from tools.grading.warm_kernel import (
    HERE,
    HISTORY,
    KERNEL_NAME,
    ROOT,
    available,
    kernel_env,
    kernel_view,
    sandbox,
)

ENV_VAR = "COURSE_WARM_KERNEL"


class Server:
    """A running server (in the sandbox, unless the instructor chose none): its socket's path,
    its process (stopped by closing its standard input) and the folder of the kernels' sockets."""

    def __init__(self) -> None:
        import atexit
        import subprocess
        import tempfile

        self.folder = tempfile.mkdtemp(prefix="course-warm-")
        self.path = os.path.join(self.folder, "kernel.sock")
        self.runtime = runtime_folder()
        self.sandboxed = sandbox.wanted()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(self.path)
        listener.listen(64)
        fd = listener.fileno()
        argv = [sys.executable, "-s", HERE, "--serve", str(fd), str(int(self.sandboxed))]
        env = dict(os.environ)
        if self.sandboxed:
            argv[2] = f"{sandbox.GRADER}/warm_kernel.py"
            writable = [(self.runtime, self.runtime)]
            env = kernel_env(env)
            argv = sandbox.command(
                argv, read_only=kernel_view(), writable=writable, env=env, server=True
            )
        errors = sandbox.capped_output(2) if self.sandboxed else None  # not our log file itself
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            pass_fds=[fd],
            cwd=ROOT,
            env=env,
            start_new_session=True,  # a Ctrl-C in the terminal reaches nbgrader, not the server
        )
        if errors is not None:
            os.close(errors)
        listener.close()
        self.pid: int | None = None  # the server's own process, once seen (bwrap's child)
        atexit.register(self.stop)

    def wait_ready(self, timeout: float = 300.0) -> None:
        """Block until the server has preloaded (before timing anything beside it)."""
        ready = select.select([self.process.stdout], [], [], timeout)[0]
        if not ready or not self.process.stdout.readline().startswith(b"ready"):
            raise RuntimeError("the warm kernel server did not start")
        self.trouble()

    def wait_listening(self, timeout: float = 30.0) -> None:
        """The socket exists from the start (made here): nothing to wait for."""

    def trouble(self) -> str | None:
        """Why this server cannot start a kernel now ("it was stopped", "it died", "it exited"),
        or None."""
        self.pid = self.pid or sandbox.inner(self.process, self.sandboxed)
        return sandbox.trouble(self.process, self.pid)

    def kill(self) -> None:
        """Kill the server and its whole sandbox at once (a stopped one reads no stdin)."""
        import shutil

        sandbox.kill(self.process, self.sandboxed)
        shutil.rmtree(self.folder, ignore_errors=True)

    def stop(self) -> None:
        import shutil
        import subprocess

        if self.process.stdin and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


_runtime: tuple[int, str] | None = None  # (the process that made it, the folder)


def runtime_folder() -> str:
    """Where this process's kernels put their connection files and ipc sockets
    ($JUPYTER_RUNTIME_DIR): a folder with a short path (a Unix socket's path has 107 bytes at
    most), bound into the sandbox, made for this process alone and removed when it exits. Never
    one it inherited: make grade's workers run side by side, and a kernel that could see another
    worker's connection files (their keys) could run code in a classmate's kernel."""
    global _runtime
    if _runtime is None or _runtime[0] != os.getpid() or not os.path.isdir(_runtime[1]):
        import atexit
        import tempfile

        _runtime = (os.getpid(), tempfile.mkdtemp(prefix="cw-", dir=runtime_base()))
        atexit.register(_remove_runtime, *_runtime)
    os.environ["JUPYTER_RUNTIME_DIR"] = _runtime[1]
    return _runtime[1]


BASE_VAR = "COURSE_RUNTIME_BASE"
_LIVE: set[str] = set()  # connection files' stems of this process's kernels still running


def tidy_runtime() -> list[str]:
    """Remove from this process's runtime folder all that no running kernel of it owns: the
    folder is bound writable into each kernel's sandbox, and a stranger's kernel left files,
    links and a fifo there for the next notebook (and after the run). Returns what went."""
    import shutil

    if _runtime is None or _runtime[0] != os.getpid():
        return []
    gone = []
    for entry in os.scandir(_runtime[1]):
        if not any(entry.name.startswith(stem) for stem in _LIVE):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)
            gone.append(entry.name)
    return gone


@contextlib.contextmanager
def folder_for_the_run():
    """make grade's folder holding every worker's runtime folder, removed when the run ends: a
    worker stopped at the end of a run does not remove its own (a stranger counted one folder
    left in ~ per worker per run)."""
    import shutil
    import tempfile

    base = tempfile.mkdtemp(prefix="cw-", dir=runtime_base())
    os.environ[BASE_VAR] = base
    try:
        yield base
    finally:
        os.environ.pop(BASE_VAR, None)
        shutil.rmtree(base, ignore_errors=True)


def _remove_runtime(pid: int, folder: str) -> None:
    import shutil

    if os.getpid() == pid:  # not in a fork that inherited the registration
        shutil.rmtree(folder, ignore_errors=True)


def runtime_base() -> str:
    """The first of $XDG_RUNTIME_DIR, ~ and /var/tmp that is writable, short (40 characters at
    most) and not where a sandbox has its own scratch folder (a home under /tmp: the sandbox's
    /tmp is a fresh one, and the connection file there would be out of the kernel's sight)."""
    given = os.environ.get(BASE_VAR, "")  # make grade's folder for the run (removed after it)
    if given and os.path.isdir(given) and len(given) <= 60:
        return given
    candidates = [os.environ.get("XDG_RUNTIME_DIR", ""), os.path.expanduser("~"), "/var/tmp"]
    for base in filter(None, candidates):
        real = os.path.realpath(base)
        inside = any(real == s or real.startswith(s + "/") for s in sandbox.SCRATCH)
        if os.access(base, os.W_OK) and len(real) <= 40 and not inside:
            return real
    raise RuntimeError(
        f"no folder for the kernels' sockets: $XDG_RUNTIME_DIR, ~ and /var/tmp ({candidates}) "
        "are all unwritable, longer than 40 characters or under /tmp, /dev/shm or /home/student"
    )


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
    paths = [folder, *[p for p in os.environ.get("JUPYTER_PATH", "").split(os.pathsep) if p]]
    os.environ["JUPYTER_PATH"] = os.pathsep.join(dict.fromkeys(paths))
    return spec_dir


_started: Server | None = None


def start(ready: bool = False) -> str:
    """This process's server (started once, and never shared with another process: a sandboxed
    one runs one kernel at a time), its path set in ``$COURSE_WARM_KERNEL`` and the kernelspec
    installed. ``ready``: also wait until it has preloaded. Returns the socket's path ("": no
    server; kernels then start plain, sandboxed unless the instructor chose otherwise)."""
    global _started
    if not available():
        os.environ[ENV_VAR] = "0"
        install_kernelspec(_spec_folder())
        if sandbox.wanted():
            runtime_folder()
        return ""
    if _started is not None and _started.trouble():
        _started.kill()
        _started = None
    if _started is None:
        _started = Server()
    if ready:
        _started.wait_ready()
    os.environ[ENV_VAR] = _started.path
    install_kernelspec(_started.folder)
    return _started.path


def ensure() -> str | None:
    """Before a kernel starts: this process's server, if it has one, can serve; one that was
    stopped or died (a kernel of the last notebook cannot do that to a sandboxed server, process
    1 of its sandbox; one without a sandbox it can) is killed with its sandbox and a fresh one
    started, so no notebook waits for, or fails by, what an earlier one did. Returns what was
    wrong, or None."""
    why = _started.trouble() if _started is not None else None
    if why:
        print(f"The kernel server had to be started again: {why}.", file=sys.stderr)
        start()
    return why


def _spec_folder() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="course-kernelspec-")


def manager_class(kernel_name: str = KERNEL_NAME, sync: bool = False):
    """The ``jupyter_client`` KernelManager class that reaches ``kernel_name``'s kernels (a
    sandboxed one talks over ipc sockets), for code that runs notebooks outside nbgrader:
    ``NotebookClient(nb, kernel_name=..., kernel_manager_class=manager_class(...))`` (asyncio's,
    as nbclient wants; ``sync``: the blocking one, to start a kernel by hand)."""
    sandboxed = kernel_name == KERNEL_NAME and sandbox.wanted()
    if sandboxed:
        return __getattr__("SyncSandboxKernelManager" if sync else "SandboxKernelManager")
    from jupyter_client import AsyncKernelManager, KernelManager

    return KernelManager if sync else AsyncKernelManager


def manager(kernel_name: str = KERNEL_NAME):
    """A blocking KernelManager for ``kernel_name`` (:func:`manager_class`)."""
    return manager_class(kernel_name, sync=True)(kernel_name=kernel_name)


def __getattr__(name: str):
    """``SandboxKernelManager`` (and ``SyncSandboxKernelManager``), made on first use (the client
    must start without jupyter_client): a KernelManager whose kernel talks over ZeroMQ's ipc
    transport (a sandbox has no network), its connection file and sockets in
    :func:`runtime_folder`, under a name of its own."""
    if name not in ("SandboxKernelManager", "SyncSandboxKernelManager"):
        raise AttributeError(name)
    import uuid

    from jupyter_client import AsyncKernelManager, KernelManager
    from traitlets import default

    class _Sandboxed:
        async def _async_pre_start_kernel(self, **kw):
            if ensure() and "env" in kw:  # a server an earlier notebook stopped or killed
                kw["env"] = {**kw["env"], ENV_VAR: os.environ[ENV_VAR]}  # is started afresh
            _LIVE.add(os.path.splitext(os.path.basename(self.connection_file))[0])
            return await super()._async_pre_start_kernel(**kw)

        async def _async_cleanup_resources(self, restart: bool = False) -> None:
            await super()._async_cleanup_resources(restart=restart)
            if not restart:
                _LIVE.discard(os.path.splitext(os.path.basename(self.connection_file))[0])
                tidy_runtime()

        @default("transport")
        def _transport_default(self):
            return "ipc"

        @default("connection_file")
        def _connection_file_default(self):
            return os.path.join(runtime_folder(), f"kernel-{uuid.uuid4().hex[:16]}.json")

    for made, base in (
        ("SandboxKernelManager", AsyncKernelManager),
        ("SyncSandboxKernelManager", KernelManager),
    ):
        globals()[made] = type(made, (_Sandboxed, base), {"__module__": __name__})
    return globals()[name]


def configure(c) -> bool:
    """For nbgrader_config.py: in ``nbgrader autograde``, run notebooks in the course's kernels
    (sandboxed, warm where possible). True when it did; other nbgrader commands (and the
    formgrader's server) are left as they were."""
    command = sys.argv[1:2] == ["autograde"] and "nbgrader" in sys.argv[0]
    if not command:
        return False
    refusal = sandbox.refusal()
    if refusal:  # grading without a sandbox is the instructor's explicit choice, never a default
        raise RuntimeError(refusal)
    if not available() and not sandbox.wanted():
        return False
    start()
    c.Execute.kernel_name = KERNEL_NAME
    if sandbox.wanted():  # the sandbox has no network: ZeroMQ over Unix sockets instead
        c.Execute.kernel_manager_class = "tools.grading.kernels.SandboxKernelManager"
    return True
