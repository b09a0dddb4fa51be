"""The sandbox a student's code runs in while a class is graded: bubblewrap (``bwrap``).

Why bubblewrap: it is the sandbox Flatpak runs every application in, packaged by Debian, Ubuntu
and Fedora (``apt-get install bubblewrap``), a single small setuid-free program built on Linux's
own namespaces, so it needs no daemon, no root and no image to build; a process starts in it in
milliseconds. A container runtime (Docker, Podman) would isolate as well but needs a daemon or
an image and does not start a process that fast; the grader only needs what bwrap gives.

What a sandboxed process sees (:func:`command`): a new mount namespace holding only read-only
binds of the system's programs and libraries, the Python it runs and its packages, and the
folders the caller names; a private ``/tmp``, ``/home/student`` (its scratch folder) and ``/dev/shm``;
no network (its own empty network namespace), its own process and IPC namespaces (it sees and
signals no process outside), no capabilities, and no way to make a user namespace of its own
(``--disable-userns``), so no mount it was given can be undone. The course repository, its
``solutions/``, the nbgrader course (other students' submissions, the gradebook) and the home
folder are simply not in its view.

A sandbox is reused by the fork server running in it (``student_server.py``, ``warm_kernel.py``):
before each notebook, :func:`reset` kills every other process in it and empties its scratch
folders, and the server is not dumpable (:func:`no_dumping`), so no student's code can write into
the memory that the next student's process is forked from.

Standard library only: the sandboxed servers load this file too.
"""

from __future__ import annotations

import array
import ctypes
import ctypes.util
import functools
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import sysconfig
import time

ENV_OFF = "COURSE_UNSANDBOXED"  # =1: the instructor chose to grade without a sandbox
WORK = "/home/student"  # the scratch folder and working folder inside
SCRATCH = (WORK, "/tmp", "/dev/shm")  # writable inside, emptied by reset()
GRADER = "/grader"  # where the grader's own files are bound inside
COURSE = "/course"  # where the course's package is bound inside
REFUSAL = (
    "No sandbox is available ({why}), so students' code would run with your permissions and "
    "could change the course, the gradebook or classmates' work: {remedy}, or run again with "
    "UNSANDBOXED=1 (make grade) or --no-sandbox (tools/grading/grade.py) to grade without one."
)


def wanted() -> bool:
    """Whether grading should use the sandbox (it does unless the instructor switched it off)."""
    return os.environ.get(ENV_OFF, "").strip() not in ("1", "yes", "true")


@functools.cache
def problem() -> str | None:
    """Why no sandbox can be made here (a phrase), or None when bwrap works."""
    if not sys.platform.startswith("linux"):
        return f"bubblewrap needs Linux, this is {sys.platform}"
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bwrap is not installed"
    try:
        done = subprocess.run(
            [bwrap, *_ISOLATION, "--ro-bind", "/", "/", "true"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap did not run: {exc}"
    if done.returncode != 0:
        return f"bwrap cannot make a sandbox here: {done.stderr.strip()[:200]}"
    return scratch_clash()


INSTALL = "install bubblewrap (apt-get install bubblewrap) on Linux with user namespaces enabled"
MOVE = "move the course and its Python environment out of that folder"


def scratch_clash(places: dict[str, str] | None = None) -> str | None:
    """Why the files a sandbox must see cannot be bound into it (a phrase), or None: each sandbox
    puts scratch folders of its own over /tmp, /dev/shm and its working folder, so a course, a venv
    or a Python under one of them would vanish inside (a fresh clone under /tmp failed every
    sandboxed test with a traceback)."""
    if places is None:
        course = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        places = {"the course": course, "its Python environment": sys.prefix,
                  "the Python it was made from": sys.base_prefix}  # fmt: skip
    for what, path in places.items():
        real = os.path.realpath(path)
        folder = next((f for f in SCRATCH if real == f or real.startswith(f + "/")), None)
        if folder:
            return f"{what} lies under {folder} ({real}), which each sandbox covers with its own"
    return None


def active() -> bool:
    """Sandboxing is wanted and possible (callers that need it refuse when wanted but impossible)."""
    return wanted() and problem() is None


def refusal() -> str | None:
    """The one sentence ``make grade`` says when it must refuse; None when it may go on."""
    if not wanted():
        return None
    why = problem()
    if why is None:
        return None
    return REFUSAL.format(why=why, remedy=MOVE if scratch_clash() else INSTALL)


_ISOLATION = (
    "--unshare-all",  # pid, ipc, net, uts, cgroup namespaces
    "--unshare-user",
    "--disable-userns",
    "--uid",
    "1000",
    "--gid",
    "1000",
    "--die-with-parent",
    "--new-session",
    "--cap-drop",
    "ALL",
)


def _system_paths() -> list[str]:
    """The read-only part of every view: programs, libraries, Python and its packages."""
    paths = ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc"]
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        paths.append(sysconfig.get_path(key))
    paths += [sys.prefix, sys.base_prefix, sys.exec_prefix]
    paths += [os.path.dirname(os.path.realpath(sys.executable))]
    venv = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))
    if os.path.exists(os.path.join(venv, "pyvenv.cfg")):  # the venv, even from `python -S`
        paths.append(venv)
    found = []
    for path in paths:
        for candidate in {path, os.path.realpath(path)}:
            if candidate and os.path.exists(candidate) and candidate not in found:
                found.append(candidate)
    return found


def command(
    argv: list[str],
    *,
    read_only: list[tuple[str, str]] = (),
    writable: list[tuple[str, str]] = (),
    hidden: list[str] = (),
    env: dict[str, str] | None = None,
    cwd: str = WORK,
    server: bool = False,
) -> list[str]:
    """The bwrap command running ``argv`` in a sandbox with the system view, ``read_only`` and
    ``writable`` (source, inside) binds, the folders ``hidden`` emptied (read-only tmpfs over
    them), fresh scratch folders, and exactly the environment ``env``. ``server``: ``argv`` is a
    fork server and runs as the sandbox's process 1 (``--as-pid-1``), which Linux shields from
    the other processes of its namespace: a signal they send it arrives only if it has a handler
    for it, so SIGSTOP and SIGKILL never do (it must ignore the rest, :func:`shield`, and reap
    what is left to it)."""
    bwrap = shutil.which("bwrap") or "bwrap"
    args = [bwrap, *_ISOLATION, *(["--as-pid-1"] if server else [])]
    system = _system_paths()
    binds = [inside for _, inside in [*read_only, *writable]]
    for path, mounts, exact in [(p, (*SCRATCH, GRADER, COURSE), True) for p in system] + [
        (inside, SCRATCH, False) for inside in binds
    ]:
        # a bind may take a scratch folder's place (the cold kernel's copied folder), not sit in it
        clash = next((o for o in mounts if (exact and path == o) or path.startswith(o + "/")), None)
        if clash:
            raise RuntimeError(
                f"cannot make the sandbox: {path} is under {clash}, which the sandbox replaces"
            )
    for path in system:
        args += ["--ro-bind", path, path]
    args += ["--proc", "/proc", "--dev", "/dev"]
    for path in SCRATCH:
        if path not in binds:
            args += ["--tmpfs", path]
    for source, inside in read_only:
        args += ["--ro-bind", os.path.realpath(source), inside]
    for source, inside in writable:
        args += ["--bind", os.path.realpath(source), inside]
    for inside in hidden:
        args += ["--tmpfs", inside, "--remount-ro", inside]
    args += ["--clearenv"]
    for key, value in (env or {}).items():
        args += ["--setenv", key, value]
    args += ["--chdir", cwd, "--", *argv]
    return args


def inside_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a sandboxed process: nothing of the grader's but what it names."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",  # IPython's and matplotlib's folders: not in the working folder
        "TMPDIR": "/tmp",
        "MPLCONFIGDIR": "/tmp/matplotlib",
        "XDG_CACHE_HOME": "/tmp/cache",
        "TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPATH": f"{COURSE}:{GRADER}",
        "MPLBACKEND": "Agg",
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        # TorchScript runs compiled code that no torch function mode or profile hook sees: a
        # stranger's @torch.jit.script around F.scaled_dot_product_attention scored where the
        # chapter forbids it. With the JIT off, torch.jit.script gives back the Python function.
        "PYTORCH_JIT": "0",
    }
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "COURSE_GRADER_DEBUG"):
        if key in os.environ:
            env[key] = os.environ[key]
    env.update(extra or {})
    return env


OUTPUT_CAP = 1 << 20  # bytes of a sandboxed process's output kept (the rest is read and dropped)


def capped_output(target: int = 2, cap: int = OUTPUT_CAP) -> int:
    """The write end of a pipe for a sandboxed process's stdout and stderr: a forwarder process
    copies at most ``cap`` bytes of it to ``target`` and drains the rest. Without it the sandbox
    inherits the grader's own files (make grade's worker log): a stranger's kernel truncated it
    and wrote 20 MB of forged lines there. A pipe cannot be truncated, sought or grown past
    ``cap``. The caller gives it to the process and closes its own copy."""
    read, write = os.pipe()
    first = os.fork()
    if first == 0:  # a child that forks the forwarder and leaves: nothing to reap for the caller
        try:
            if os.fork() == 0:
                bounds = [-1, *sorted({read, target}), os.sysconf("SC_OPEN_MAX")]
                for low, high in zip(bounds, bounds[1:]):  # every other file closed
                    os.closerange(low + 1, high)
                left = cap
                while chunk := os.read(read, 1 << 16):
                    if left > 0:
                        os.write(target, chunk[:left])
                        left -= len(chunk[:left])
                        if left <= 0:
                            os.write(target, b"\n[the sandboxed process wrote more: dropped]\n")
        finally:
            os._exit(0)
    os.waitpid(first, 0)
    os.close(read)
    return write


def state(pid: int) -> str:
    """The state letter of process ``pid`` (``R``, ``S``, ``T`` stopped, ``Z`` zombie ...); "" when
    it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def children(pid: int) -> list[int]:
    """The ids of the processes whose parent is ``pid``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8") as stat:
                    if int(stat.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return found


def trouble(process: subprocess.Popen, server: int | None = None) -> str | None:
    """Why a server cannot serve: ``process`` (bwrap, or the server itself) has exited, or the
    server (``server``: its host id, bwrap's child once started) was stopped or died; None when
    it runs."""
    if process.poll() is not None:
        return "it exited"
    for pid in (process.pid, server or process.pid):
        letter = state(pid)
        if letter in ("T", "t"):
            return "it was stopped"
        if letter in ("", "Z", "X", "x"):
            return "it died"
    return None


def inner(process: subprocess.Popen, sandboxed: bool) -> int | None:
    """The host id of the server started as ``process``: bwrap's child (its process 1), or the
    process itself; None while bwrap has not started it yet."""
    if not sandboxed:
        return process.pid
    found = children(process.pid)
    return found[0] if found else None


def kill(process: subprocess.Popen, sandboxed: bool) -> None:
    """Kill a server started as ``process`` and everything in its sandbox (bwrap's child is its
    process 1: the namespace dies with it), then reap bwrap."""
    if process.poll() is not None:  # reaped: its id may be another process's now
        return
    for pid in [*(children(process.pid) if sandboxed else []), process.pid]:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


# ----------------------------------------------------------------------------- inside the sandbox
PR_SET_DUMPABLE = 4


def shield() -> None:
    """In a server that is its sandbox's process 1: ignore SIGINT (Python's only handler, which
    would let a student's ``os.kill(1, SIGINT)`` raise KeyboardInterrupt here); the other
    signals have no handler, so a process of the sandbox cannot deliver them."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def no_dumping() -> bool:
    """Make this process (and the processes it forks) not dumpable: no other process of the same
    user may ptrace it or open its /proc/PID/mem (``prctl(PR_SET_DUMPABLE, 0)``). False where
    the call is not available."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    return libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0


def others(keep: set[int]) -> list[int]:
    """The ids of the processes this process can see, but itself, its ancestors and ``keep``."""
    mine = {os.getpid(), 1, *keep}
    pid = os.getppid()
    while pid > 1:
        mine.add(pid)
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
                pid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in mine]


def reset(keep: set[int] = frozenset(), scratch=SCRATCH, seconds: float = 5.0) -> int:
    """Kill every process of the sandbox but this one (and ``keep``), then empty the scratch
    folders. Returns how many processes were killed. Only ever called inside a sandbox, where
    /proc shows the sandbox's own processes only."""
    killed, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = others(keep)
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except OSError:
                pass
        _reap()
        time.sleep(0.01)
    for folder in scratch:
        empty(folder)
    return killed


def _reap() -> None:
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


def empty(folder: str) -> None:
    """Remove everything inside ``folder`` (the folder itself stays)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        path = os.path.join(folder, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass


# ----------------------------------------------------------------------------- messages with fds
_HEADER = struct.Struct("!I")


def send_message(sock: socket.socket, message: dict, fds: list[int] = ()) -> None:
    """One JSON message (and file descriptors) on a Unix socket."""
    body = json.dumps(message).encode()
    head = _HEADER.pack(len(body))
    if fds:
        sock.sendmsg([head], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        sock.sendall(head)
    sock.sendall(body)


def receive_message(sock: socket.socket) -> tuple[dict | None, list[int]]:
    """(message, fds) from :func:`send_message`; (None, []) when the other side has closed."""
    fds = array.array("i")
    head, ancillary, _flags, _addr = sock.recvmsg(
        _HEADER.size, socket.CMSG_SPACE(16 * fds.itemsize)
    )
    if not head:
        return None, []
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    while len(head) < _HEADER.size:
        more = sock.recv(_HEADER.size - len(head))
        if not more:
            return None, list(fds)
        head += more
    size = _HEADER.unpack(head)[0]
    body = b""
    while len(body) < size:
        more = sock.recv(size - len(body))
        if not more:
            return None, list(fds)
        body += more
    return json.loads(body), list(fds)
