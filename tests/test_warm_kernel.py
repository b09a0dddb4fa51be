"""tools/warm_kernel.py: kernels forked from a preloaded server behave as plain kernels do.

One server for the module (its preload takes a few seconds); the kernels are started the way
nbgrader starts them, by jupyter_client through the ``course-warm`` kernelspec."""

import os
import signal
import subprocess
import sys
import time
import types

import nbformat
import pytest
from jupyter_client import KernelManager
from nbclient import NotebookClient

from tools import warm_kernel

CELLS = [
    "import os, sys\n"
    "print('to stdout')\n"
    "print('to stderr', file=sys.stderr)\n"
    "print(os.getcwd())\n"
    "print(os.environ['WARM_TEST_VALUE'])\n"
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
    server = warm_kernel.Server()
    try:
        server.wait_ready()
        os.environ[warm_kernel.ENV_VAR] = server.path
        warm_kernel.install_kernelspec(server.folder)
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
    client = NotebookClient(
        nb, kernel_name=kernel_name, resources={"metadata": {"path": str(folder)}}, **options
    )
    client.execute()
    return nb


def outputs(nb):
    return [[{k: v for k, v in o.items()} for o in cell.outputs] for cell in nb.cells]


def test_a_warm_kernel_gives_a_plain_kernels_outputs(warm, tmp_path, monkeypatch):
    monkeypatch.setenv("WARM_TEST_VALUE", "from the grader's environment")
    opts = dict(timeout=120, allow_errors=True)
    ours = run(CELLS, warm_kernel.KERNEL_NAME, tmp_path, **opts)
    theirs = run(CELLS, "python3", tmp_path, **opts)
    assert outputs(ours) == outputs(theirs)
    first = "".join(o.get("text", "") for o in ours.cells[0].outputs)
    assert str(tmp_path) in first and "from the grader's environment" in first
    assert "True __main__ ZMQInteractiveShell" in first
    assert {o.name for o in ours.cells[0].outputs} == {"stdout", "stderr"}
    assert "image/png" in ours.cells[2].outputs[-1]["data"]
    assert ours.cells[3].outputs[0]["ename"] == "ZeroDivisionError"


def kernel(env=None):
    km = KernelManager(kernel_name=warm_kernel.KERNEL_NAME)
    km.start_kernel(**({"env": env} if env else {}))
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)
    return km, kc


def evaluate(kc, expression: str):
    """The value of ``expression`` in the kernel (printed there, read back)."""
    printed = []

    def hook(msg):
        if msg["header"]["msg_type"] == "stream":
            printed.append(msg["content"]["text"])

    kc.execute_interactive(f"print(repr({expression}))", output_hook=hook, timeout=60)
    return eval("".join(printed))


def gone(pid: int, within: float = 15.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def test_two_kernels_at_once_are_warm_and_have_their_own_random_state(warm):
    started = [kernel(), kernel()]
    try:
        seen = [
            evaluate(kc, "(__import__('os').getpid(), 'torch' in __import__('sys').modules)")
            for _, kc in started
        ]
        draws = [
            evaluate(kc, "(__import__('random').random(), __import__('numpy').random.rand())")
            for _, kc in started
        ]
        clients = [km.provisioner.process.pid for km, _ in started]
    finally:
        for km, kc in started:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
    (pid_a, warm_a), (pid_b, warm_b) = seen
    assert warm_a and warm_b  # torch was there before the kernel ran anything: forked
    assert pid_a != pid_b and not {pid_a, pid_b} & set(clients)
    assert draws[0][0] != draws[1][0] and draws[0][1] != draws[1][1]


def test_killing_the_client_kills_its_kernel(warm):
    km, kc = kernel()
    try:
        pid = evaluate(kc, "__import__('os').getpid()")
        assert pid != km.provisioner.process.pid
        os.kill(km.provisioner.process.pid, signal.SIGKILL)  # the client, killed outright
        assert gone(pid), f"the forked kernel {pid} outlived its client"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


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
    assert time.monotonic() - start < 60
    assert any(o.get("ename") == "KeyboardInterrupt" for o in nb.cells[0].outputs)
    assert nb.cells[1].outputs[0]["text"] == "next cell\n"


def test_without_a_server_the_kernel_is_a_plain_one(warm, tmp_path):
    env = dict(os.environ, **{warm_kernel.ENV_VAR: str(tmp_path / "no-such.sock")})
    km, kc = kernel(env)
    try:
        pid, preloaded = evaluate(
            kc, "(__import__('os').getpid(), 'torch' in __import__('sys').modules)"
        )
        assert pid == km.provisioner.process.pid  # the client became the kernel (exec)
        assert not preloaded
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_the_server_leaves_when_its_stdin_closes(tmp_path):
    path = str(tmp_path / "s.sock")
    server = subprocess.Popen(
        [sys.executable, "-m", "tools.warm_kernel", "--serve", path],
        stdin=subprocess.PIPE,
        cwd=warm_kernel.ROOT,
    )
    try:
        warm_kernel._wait_for(path + warm_kernel.READY, server, 120)
        server.stdin.close()
        assert server.wait(timeout=15) == 0
        assert not os.path.exists(path)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


@pytest.mark.parametrize(
    "argv, env, expected",
    [
        (["/v/bin/nbgrader", "autograde", "a"], {}, True),
        (["/v/bin/nbgrader", "generate_feedback", "a"], {}, False),
        (["/v/bin/jupyter-lab"], {}, False),
        (["/v/bin/nbgrader", "autograde", "a"], {warm_kernel.ENV_VAR: "0"}, False),
    ],
)
def test_configure_warms_only_nbgrader_autograde(monkeypatch, argv, env, expected):
    started = []
    monkeypatch.setattr(warm_kernel, "start", lambda: started.append(1) or "sock")
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.delenv(warm_kernel.ENV_VAR, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    c = types.SimpleNamespace(Execute=types.SimpleNamespace())
    assert warm_kernel.configure(c) is expected
    assert bool(started) is expected
    assert getattr(c.Execute, "kernel_name", None) == (
        warm_kernel.KERNEL_NAME if expected else None
    )
