"""tools/grading/warm_kernel.py: kernels forked from a preloaded server, in the grader's sandbox, behave as
plain kernels do, and nothing of one reaches the next.

One server for the module (its preload takes a few seconds); the kernels are started the way
nbgrader starts them, by jupyter_client through the ``course-warm`` kernelspec (with the
``SandboxKernelManager`` the course's config names: ZeroMQ over ipc sockets)."""

import glob
import os
import signal
import sys
import tempfile
import time
import types

import nbformat
import pytest
from nbclient import NotebookClient

from tools.build.notebooks import ROOT
from tools.grading import kernels, sandbox, warm_kernel

pytestmark = pytest.mark.skipif(
    sandbox.wanted() and sandbox.problem() is not None,
    reason=f"no sandbox here ({sandbox.problem()}): install bubblewrap",
)
SANDBOXED = sandbox.wanted()
CELLS = [
    "import os, sys\n"
    "print('to stdout')\n"
    "print('to stderr', file=sys.stderr)\n"
    "print(sorted(os.listdir('.')))\n"
    "print(os.environ['NBGRADER_TEST_VALUE'])\n"
    "print('' in sys.path, __name__, type(get_ipython()).__name__)",
    "import torch, course_utils as cu\ntorch.manual_seed(0)\ntorch.rand(3)",
    "import matplotlib.pyplot as plt\nplt.plot([0, 1, 2], [2, 0, 1])\nplt.title('a figure');",
    "1 / 0",
    "print('after the error')",
]


@pytest.fixture(scope="module")
def warm():
    saved = {k: os.environ.get(k) for k in (warm_kernel.ENV_VAR, "JUPYTER_PATH")}
    os.environ.pop(warm_kernel.ENV_VAR, None)
    server = kernels.Server()
    try:
        server.wait_ready()
        os.environ[warm_kernel.ENV_VAR] = server.path
        kernels.install_kernelspec(server.folder)
        yield server
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run(cells, kernel_name, folder, **options):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    manager = kernels.manager_class(kernel_name)
    client = NotebookClient(
        nb,
        kernel_name=kernel_name,
        kernel_manager_class=manager,
        resources={"metadata": {"path": str(folder)}},
        **options,
    )
    client.execute()
    return nb


def outputs(nb):
    return [[{k: v for k, v in o.items()} for o in cell.outputs] for cell in nb.cells]


def test_a_warm_kernel_gives_a_plain_kernels_outputs(warm, tmp_path, monkeypatch):
    monkeypatch.setenv("NBGRADER_TEST_VALUE", "from the grader's environment")
    (tmp_path / "data.txt").write_text("the notebook's folder")
    opts = dict(timeout=120, allow_errors=True)
    ours = run(CELLS, warm_kernel.KERNEL_NAME, tmp_path, **opts)
    theirs = run(CELLS, "python3", tmp_path, **opts)
    assert outputs(ours) == outputs(theirs)
    first = "".join(o.get("text", "") for o in ours.cells[0].outputs)
    assert "'data.txt'" in first and "from the grader's environment" in first
    assert "True __main__ ZMQInteractiveShell" in first
    assert {o.name for o in ours.cells[0].outputs} == {"stdout", "stderr"}
    assert "image/png" in ours.cells[2].outputs[-1]["data"]
    assert ours.cells[3].outputs[0]["ename"] == "ZeroDivisionError"


def kernel(env=None, cwd=None, timeout=120):
    km = kernels.manager()
    km.start_kernel(**({"env": env} if env else {}), **({"cwd": str(cwd)} if cwd else {}))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=timeout)
    except RuntimeError:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
        raise
    return km, kc


def evaluate(kc, expression: str):
    """The value of ``expression`` in the kernel (printed there, read back)."""
    printed = []

    def hook(msg):
        if msg["header"]["msg_type"] == "stream":
            printed.append(msg["content"]["text"])

    kc.execute_interactive(f"print(repr({expression}))", output_hook=hook, timeout=60)
    return eval("".join(printed))


def descendants(pid: int) -> set[int]:
    """The processes (host ids) started under ``pid``: the sandbox's, for bwrap's."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def settles(server, count: int, within: float = 20.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if len(descendants(server.process.pid)) <= count:
            return True
        time.sleep(0.2)
    return False


def test_a_kernel_is_warm_and_the_next_one_starts_from_nothing_it_left(warm):
    """One kernel at a time: the next kernel's start kills what the last one left running and
    empties the scratch folders; each kernel has its own random state."""
    km, kc = kernel()
    try:
        preloaded = evaluate(kc, "'torch' in __import__('sys').modules")
        first = evaluate(kc, "(__import__('random').random(), __import__('numpy').random.rand())")
        evaluate(kc, "open('left-behind.txt', 'w').write('x')")
        evaluate(kc, "__import__('subprocess').Popen(['sleep', '600']).pid")
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    km, kc = kernel()
    try:
        files = evaluate(kc, "sorted(__import__('os').listdir('.'))")
        others = evaluate(kc, "[p for p in __import__('os').listdir('/proc') if p.isdigit()]")
        second = evaluate(kc, "(__import__('random').random(), __import__('numpy').random.rand())")
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert preloaded  # torch was there before the kernel ran anything: forked
    assert first[0] != second[0] and first[1] != second[1]
    if SANDBOXED:
        assert "left-behind.txt" not in files
        assert len(others) <= 4  # bwrap, the server, this kernel (no sleep left over)


def test_killing_the_client_kills_its_kernel(warm):
    km, kc = kernel()
    try:
        assert evaluate(kc, "1 + 1") == 2
        before = len(descendants(warm.process.pid))
        os.kill(km.provisioner.process.pid, signal.SIGKILL)  # the client, killed outright
        assert settles(warm, before - 1), "the forked kernel outlived its client"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


STOPS = [  # a notebook's last cell, to the process that forked its kernel (s09 of issue 39)
    "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)",
    "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
    "import os, signal\nos.kill(os.getppid(), signal.SIGINT)",
]


@pytest.mark.skipif(not SANDBOXED, reason="the sandbox is switched off (COURSE_UNSANDBOXED=1)")
def test_a_kernel_cannot_stop_or_kill_the_server_the_next_notebook_needs(warm):
    """Issue 39: a kernel that stopped its server (SIGSTOP) made the next student's kernel wait
    60 s and score 0; one that killed it left the rest of the class cold. The server is its
    sandbox's process 1: the signals do not arrive, and the next kernel starts warm at once."""
    for cell in STOPS:
        km, kc = kernel()
        try:
            evaluate(kc, f"exec({cell!r})")
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
        start = time.monotonic()
        km, kc = kernel(timeout=20)  # before: "Kernel didn't respond", as nbgrader saw it
        try:
            assert evaluate(kc, "'torch' in __import__('sys').modules"), "a cold kernel"
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
        assert time.monotonic() - start < 15 and warm.process.poll() is None, cell
        assert pid_state(server_pid(warm)) not in ("T", "t", "Z", ""), cell


@pytest.mark.skipif(not SANDBOXED, reason="the sandbox is switched off (COURSE_UNSANDBOXED=1)")
@pytest.mark.parametrize("signum", [signal.SIGSTOP, signal.SIGKILL])
def test_a_server_stopped_or_killed_all_the_same_is_started_afresh_before_the_next_kernel(
    signum, monkeypatch
):
    """Belt and braces: a server stopped or killed from outside (the machine, an instructor) is
    found before the next kernel starts, killed with its sandbox and replaced."""
    for key in (warm_kernel.ENV_VAR, "JUPYTER_PATH"):
        monkeypatch.setenv(key, os.environ.get(key, ""))
    monkeypatch.setattr(kernels, "_started", None)
    kernels.start(ready=True)
    first = kernels._started
    try:
        pid = server_pid(first)
        os.kill(pid, signum)
        deadline = time.monotonic() + 10  # a killed process takes some ms to be gone
        while pid_state(pid) not in ("T", "t", "Z", "") and time.monotonic() < deadline:
            time.sleep(0.05)
        km, kc = kernel(timeout=90)  # the fresh server preloads first
        try:
            assert evaluate(kc, "1 + 1") == 2
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
        assert kernels._started is not first and first.process.poll() is not None
    finally:
        if first.process.poll() is None:
            first.process.kill()
        if kernels._started is not first:
            kernels._started.stop()


def server_pid(server) -> int:
    """The server's own process (host id): the first under bwrap that is not bwrap."""
    pid = server.process.pid
    while open(f"/proc/{pid}/comm").read().strip() == "bwrap":
        pid = int(open(f"/proc/{pid}/task/{pid}/children").read().split()[0])
    return pid


def pid_state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


ATTEMPT = (
    "def attempt(path):\n"
    "    try:\n"
    "        open(path, 'a').write('x')\n"
    "        return 'wrote'\n"
    "    except OSError:\n"
    "        return 'OSError'"
)
INSIDE = "/course/course_utils/chapters/ch01/checks.py"  # the kernel's read-only view of it


@pytest.mark.skipif(not SANDBOXED, reason="the sandbox is switched off (COURSE_UNSANDBOXED=1)")
def test_a_kernel_writes_nothing_outside_and_sees_neither_the_course_nor_the_network(warm):
    target = ROOT / "course_utils" / f".probe-{os.getpid()}.py"  # nothing real at stake
    target.write_text("PROBE = 1\n")
    before = target.read_bytes()
    km, kc = kernel()
    try:
        seen = evaluate(
            kc,
            "[__import__('os').path.exists(p) for p in "
            f"({str(ROOT / 'solutions')!r}, {str(ROOT / 'tools')!r}, {str(ROOT / 'README.md')!r})]",
        )
        kc.execute_interactive(ATTEMPT, timeout=60)
        wrote = evaluate(kc, f"[attempt(p) for p in ({str(target)!r}, {INSIDE!r}, '/etc/x')]")
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    km, kc = kernel()
    try:
        network = evaluate(
            kc,
            "(lambda s: s.connect_ex(('1.1.1.1', 53)))(__import__('socket').socket())",
        )
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert seen == [False, False, False]
    assert wrote == ["OSError"] * 3
    assert target.read_bytes() == before
    target.unlink()
    assert network != 0


def test_a_forked_kernel_reseeds_numpys_global_generator():
    """The server does not load numpy.random today; were it to, each fork must reseed it."""
    import numpy.random

    draws = []
    for _ in range(2):
        read, write = os.pipe()
        if os.fork() == 0:  # what the server's child does before it becomes a kernel
            try:
                warm_kernel._reseed()
                os.write(write, repr(numpy.random.rand()).encode())
            finally:
                os._exit(0)
        os.close(write)
        draws.append(os.read(read, 100))
        os.close(read)
        os.wait()
    assert draws[0] != draws[1]


def test_a_cell_past_its_time_limit_is_interrupted_and_the_next_runs(warm, tmp_path):
    start = time.monotonic()
    nb = run(
        ["import time\ntime.sleep(120)", "print('next cell')"],
        warm_kernel.KERNEL_NAME,
        tmp_path,
        timeout=5,
        interrupt_on_timeout=True,
        allow_errors=True,
    )
    assert time.monotonic() - start < 90
    assert any(o.get("ename") == "KeyboardInterrupt" for o in nb.cells[0].outputs)
    assert nb.cells[1].outputs[0]["text"] == "next cell\n"


def test_without_a_server_the_kernel_is_a_plain_one_in_a_sandbox_of_its_own(warm, tmp_path):
    env = dict(os.environ, **{warm_kernel.ENV_VAR: str(tmp_path / "no-such.sock")})
    folder = tmp_path / "notebook"
    folder.mkdir()
    (folder / "data.txt").write_text("given")
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "course-kernel-*")))
    km, kc = kernel(env, cwd=folder)
    try:
        preloaded, home, data = evaluate(
            kc,
            "('torch' in __import__('sys').modules, __import__('os').getcwd(), "
            "open('data.txt').read())",
        )
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert not preloaded and data == "given"
    assert home == (sandbox.WORK if SANDBOXED else str(folder))
    deadline = time.monotonic() + 30  # its copy of the folder goes when the kernel has gone
    while set(glob.glob(os.path.join(tempfile.gettempdir(), "course-kernel-*"))) - before:
        assert time.monotonic() < deadline, "the cold kernel's copy of its folder was left behind"
        time.sleep(0.2)


def test_the_server_leaves_when_its_stdin_closes():
    server = kernels.Server()
    try:
        server.wait_ready()
        server.process.stdin.close()
        assert server.process.wait(timeout=30) == 0
    finally:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait()


@pytest.mark.parametrize(
    "argv, env, expected",
    [
        (["/v/bin/nbgrader", "autograde", "a"], {}, True),
        (["/v/bin/nbgrader", "generate_feedback", "a"], {}, False),
        (["/v/bin/jupyter-lab"], {}, False),
        (["/v/bin/nbgrader", "autograde", "a"], {warm_kernel.ENV_VAR: "0"}, SANDBOXED),
    ],
)
def test_configure_sets_the_course_kernels_only_for_nbgrader_autograde(
    monkeypatch, argv, env, expected
):
    """Cold kernels (COURSE_WARM_KERNEL=0) are the course's too while a sandbox is wanted: they
    start sandboxed; without one, they are nbgrader's own."""
    started = []
    from tools.grading import kernels

    monkeypatch.setattr(kernels, "start", lambda: started.append(1) or "sock")
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.delenv(warm_kernel.ENV_VAR, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    c = types.SimpleNamespace(Execute=types.SimpleNamespace())
    assert kernels.configure(c) is expected
    assert bool(started) is expected
    assert getattr(c.Execute, "kernel_name", None) == (
        warm_kernel.KERNEL_NAME if expected else None
    )
    if expected and SANDBOXED:
        assert c.Execute.kernel_manager_class == "tools.grading.kernels.SandboxKernelManager"


def test_configure_refuses_when_a_sandbox_is_wanted_and_there_is_none(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["/v/bin/nbgrader", "autograde", "a"])
    monkeypatch.delenv(warm_kernel.sandbox.ENV_OFF, raising=False)
    monkeypatch.setattr(warm_kernel.sandbox, "problem", lambda: "bwrap is not installed")
    with pytest.raises(RuntimeError, match="No sandbox is available .bwrap is not installed"):
        kernels.configure(types.SimpleNamespace(Execute=types.SimpleNamespace()))


def test_a_sandboxed_kernel_start_costs_a_fork_not_an_interpreter(warm, tmp_path):
    """Measured, not asserted (the machine is shared): a plain kernel, a sandboxed cold one and
    a sandboxed warm one, each started and running `import torch, course_utils`."""
    cell = ["import torch, course_utils"]
    times = {}
    for name, kernel_name, server in (
        ("plain (python3)", "python3", warm.path),
        ("sandboxed, cold", warm_kernel.KERNEL_NAME, "0"),
        ("sandboxed, warm", warm_kernel.KERNEL_NAME, warm.path),
    ):
        os.environ[warm_kernel.ENV_VAR] = server
        before, start = cpu_seconds(warm), time.perf_counter()
        for _ in range(3):
            run(cell, kernel_name, tmp_path, timeout=300)
        times[name] = ((time.perf_counter() - start) / 3, (cpu_seconds(warm) - before) / 3)
    os.environ[warm_kernel.ENV_VAR] = warm.path
    print("\nkernel start + import torch, course_utils (mean of 3: wall s / CPU s):")
    for name, (wall, cpu) in times.items():
        print(f"  {name}: {wall:.2f} / {cpu:.2f}")
    assert all(wall > 0 for wall, _ in times.values())


def cpu_seconds(server) -> float:
    """CPU seconds of this process's finished children and of the server's processes (with the
    kernels it forked and reaped)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = usage.ru_utime + usage.ru_stime
    for pid in descendants(server.process.pid):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    return total


def test_kernel_sockets_are_not_put_where_the_sandbox_has_its_own_tmp(tmp_path, monkeypatch):
    """A home under /tmp (tests/nbgrader/test_readme_steps.py's HOME is pytest's tmp_path): the
    kernels' runtime folder goes elsewhere, and a sandbox can bind it (it refused, and make grade
    stopped before grading anyone)."""
    import os

    from tools.grading import kernels, sandbox

    home = tmp_path / "home"
    home.mkdir()
    assert str(home.resolve()).startswith("/tmp/")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.delenv("JUPYTER_RUNTIME_DIR", raising=False)
    folder = kernels.runtime_folder()
    try:
        assert not any(folder.startswith(s + "/") for s in sandbox.SCRATCH), folder
        sandbox.command(["true"], writable=[(folder, folder)])  # raised for a folder under /tmp
    finally:
        os.rmdir(folder)


def test_each_process_has_its_own_runtime_folder_and_removes_it(tmp_path):
    """make grade's workers run side by side: a worker's kernels must not see another's
    connection files (a stranger's kernel read them and ran code in classmates' kernels, which
    then scored 0), and the folder goes when its process exits (41 were left in ~)."""
    import subprocess

    from tools.grading import kernels

    parent = kernels.runtime_folder()
    code = "from tools.grading import kernels; print(kernels.runtime_folder())"
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=parent)
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    )
    child = done.stdout.strip()
    assert child != parent and os.path.basename(child).startswith("cw-")
    assert not os.path.exists(child)  # removed at exit
    assert os.path.isdir(parent) and kernels.runtime_folder() == parent  # kept in its own process
