"""tools/grading/: the sandbox a student's notebook runs in, and the wire between the judge (which
runs the checks) and the student process.

The sandbox: no view of the repository, no network, nothing written outside its scratch folders,
nothing left from one notebook to the next; `make grade` refuses in one sentence without it. The
wire: only plain data and tensors come back (never a student's class or subclass), the judge's
references never go out, a student's object cannot answer "equal", autograd and torch function
modes cross. Each private torch name has a fallback, tested here with the name taken away.
"""

import os
import pickle
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from tests.judged_plugin import _remote, _session
from tools.build.notebooks import ROOT
from tools.grading import sandbox, session, student, wire
from tools.grading.judge import JudgeCodec, Remote, StudentError

needs_bwrap = pytest.mark.skipif(
    sandbox.problem() is not None, reason=f"no sandbox here: {sandbox.problem()}"
)


# ----------------------------------------------------------------------------- the sandbox
def _inside(code: str, **binds) -> subprocess.CompletedProcess:
    command = sandbox.command([sys.executable, "-c", code], env=sandbox.inside_env(), **binds)
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


@needs_bwrap
def test_a_sandboxed_process_sees_no_repository_and_writes_only_its_scratch():
    code = (
        "import os, socket\n"
        f"print(os.path.exists({str(ROOT / 'solutions')!r}), os.path.exists({str(ROOT / 'README.md')!r}))\n"
        "open('mine.txt', 'w').write('x'); print(os.getcwd(), os.listdir('.'))\n"
        "for path in ('/etc/passwd-x', '/course/course_utils/x', '/usr/x'):\n"
        "    try:\n"
        "        open(path, 'w')\n"
        "        print('wrote', path)\n"
        "    except OSError as e:\n"
        "        print('refused', type(e).__name__)\n"
        "print(socket.socket().connect_ex(('1.1.1.1', 53)) != 0)\n"
        "print(sorted(p for p in os.listdir('/proc') if p.isdigit()))\n"
    )
    done = _inside(code, read_only=[(str(ROOT / "course_utils"), "/course/course_utils")])
    lines = done.stdout.splitlines()
    assert lines[0] == "False False", done.stderr
    assert lines[1] == f"{sandbox.WORK} ['mine.txt']"
    assert lines[2:5] == ["refused OSError"] * 3
    assert lines[5] == "True"  # no network
    assert lines[6] == "['1', '2']"  # bwrap and this process: no other process is visible


def test_a_view_may_not_bind_over_the_sandboxs_own_folders():
    with pytest.raises(RuntimeError, match="under /tmp"):
        sandbox.command(["true"], read_only=[("/etc", "/tmp/etc")], writable=[("/tmp", "/x")])
    # a folder bound in a scratch folder's place replaces it (a cold kernel's copied folder)
    argv = sandbox.command(["true"], writable=[("/tmp", sandbox.WORK)])
    mounts = list(zip(argv, argv[1:]))
    assert ("--tmpfs", sandbox.WORK) not in mounts and ("--tmpfs", "/tmp") in mounts


def test_without_bubblewrap_make_grade_refuses_in_one_sentence(monkeypatch):
    monkeypatch.setattr(sandbox, "problem", lambda: "bwrap is not installed")
    monkeypatch.setenv(sandbox.ENV_OFF, "")  # put back as it was when the test ends
    text = sandbox.refusal()
    assert text.startswith("No sandbox is available (bwrap is not installed)")
    assert text.count(". ") == 0 and "UNSANDBOXED=1" in text and "--no-sandbox" in text
    from tools.grading.grade import no_sandbox

    assert no_sandbox(False) == text
    assert no_sandbox(True) is None and not sandbox.wanted()  # the instructor's explicit choice
    assert "install bubblewrap" in text


@needs_bwrap
def test_a_reset_kills_every_other_process_and_empties_the_scratch_folders():
    code = (
        "import os, subprocess, sys, time\n"
        f"sys.path.insert(0, {str(ROOT / 'tools' / 'grading')!r})\n"
        "import sandbox\n"
        "print(sandbox.no_dumping())\n"
        "sleeper = subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
        "open('left.txt', 'w').write('x'); open('/tmp/left.txt', 'w').write('x')\n"
        "killed = sandbox.reset()\n"
        "print(killed >= 1, os.listdir('.'), os.listdir('/tmp'), os.path.exists(f'/proc/{sleeper.pid}'))\n"
    )
    grading = str(ROOT / "tools" / "grading")
    done = _inside(code, read_only=[(grading, grading)])
    assert done.stdout.splitlines() == ["True", "True [] [] False"], done.stderr


def test_messages_carry_file_descriptors():
    a, b = socket.socketpair()
    read, write = os.pipe()
    sandbox.send_message(a, {"op": "fork", "n": [1, 2]}, [write])
    message, fds = sandbox.receive_message(b)
    assert message == {"op": "fork", "n": [1, 2]} and len(fds) == 1
    os.write(fds[0], b"through")
    assert os.read(read, 7) == b"through"
    a.close()
    assert sandbox.receive_message(b) == (None, [])


# ----------------------------------------------------------------------------- the wire
def test_the_judge_unpickles_nothing_but_plain_data():
    assert wire.loads_plain(pickle.dumps(("T", [1, 2.5, "x", b"y", None, True]))) == (
        "T",
        [1, 2.5, "x", b"y", None, True],
    )
    for evil in (pickle.dumps(os.system), pickle.dumps(torch.ones(2)), pickle.dumps(Exception())):
        with pytest.raises(wire.WireError, match="only plain data may cross"):
            wire.loads_plain(evil)


class _Liar(torch.Tensor):
    called = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        _Liar.called.append(getattr(func, "__name__", ""))
        if getattr(func, "__name__", "") in ("allclose", "equal"):
            return True
        return super().__torch_function__(func, types, args, kwargs)


@pytest.mark.parametrize(
    "t",
    [
        torch.randn(2, 3),
        torch.randn(4, dtype=torch.bfloat16),
        torch.tensor([True, False]),
        torch.empty(0, 3),
        torch.tensor(7, dtype=torch.int64),
        torch.randn(3, 2).T,  # not contiguous
        nn.Parameter(torch.randn(2)),
    ],
    ids=["float", "bfloat16", "bool", "empty", "0-d", "transposed", "parameter"],
)
def test_a_tensor_crosses_as_its_values(t):
    back = wire.tensor_from_state(wire.tensor_state(t))
    assert type(back) is type(t) and back.dtype == t.dtype and back.shape == t.shape
    assert torch.equal(back.detach(), t.detach())


def test_a_tensor_subclass_arrives_as_a_plain_tensor_and_never_runs_there():
    lying = torch.zeros(2, 2).as_subclass(_Liar)
    state = wire.tensor_state(lying)
    _Liar.called.clear()
    back = wire.tensor_from_state(state)
    assert type(back) is torch.Tensor and not torch.allclose(back, torch.ones(2, 2))
    assert _Liar.called == []


def test_the_version_counter_falls_back_to_the_values(monkeypatch):
    t = torch.zeros(3)
    before = wire.version(t)
    t.add_(1)
    assert wire.version(t) != before
    monkeypatch.setattr(wire, "VERSION", "_no_such_attribute")
    before = wire.version(t)
    t.add_(1)
    assert wire.version(t) != before and wire.version(t) == wire.version(t)


@pytest.mark.parametrize("private", [True, False])
def test_an_attribute_read_is_named_with_or_without_the_tensor_base(monkeypatch, private):
    if not private:
        monkeypatch.setattr(wire, "TENSOR_BASE", "NoSuchName")  # the fallback: Tensor's first base
    assert student.func_ref(torch.Tensor.shape.__get__) == ("get", "shape")
    assert student.func_ref(torch.Tensor.add)[0] == "meth"


class _Always(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") == "allclose":
            return True
        return func(*args, **(kwargs or {}))


def test_no_mode_acts_where_the_torch_functions_are_turned_off(monkeypatch):
    a, b = torch.zeros(2), torch.ones(2)
    with _Always():
        assert torch.allclose(a, b)
        with wire.no_torch_function():
            assert not torch.allclose(a, b)
    monkeypatch.setattr(wire, "NO_FUNCTION", "NoSuchName")  # the fallback: a block doing nothing
    with _Always(), wire.no_torch_function():
        assert torch.allclose(a, b)


class _Names(TorchFunctionMode):
    def __init__(self, tag, seen):
        super().__init__()
        self.tag, self.seen = tag, seen

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen.append(self.tag)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("private", [True, False])
def test_a_mode_goes_under_the_modes_in_effect(monkeypatch, private):
    if not private:
        monkeypatch.setattr(wire, "STACK", "_no_such_function")
    seen, t = [], torch.zeros(1)
    with _Names("outer", seen):
        assert wire.modes_in_effect()
        with wire.mode_below(_Names("below", seen)):
            t.add(1)
    assert seen == (["outer", "below"] if private else ["below", "outer"])
    assert not wire.modes_in_effect() if private else True


# ----------------------------------------------------------------------------- the judge
@pytest.fixture(scope="module")
def judged():
    yield _session()


class Equalish:
    """A student's object that says it equals anything."""

    def __eq__(self, other):
        return True

    def __bool__(self):
        return True


def make_equalish():
    return Equalish()


def lying_weights(x):
    return torch.zeros(2, 2).as_subclass(_Liar)


def test_a_students_object_cannot_answer_equal_to_the_judge(judged):
    made = _remote(judged, make_equalish)()
    assert isinstance(made, Remote) and type(made).__name__ == "Equalish"
    assert made != 5 and not (made == 5) and made == made
    got = _remote(judged, lying_weights)(torch.ones(3))
    assert type(got) is torch.Tensor and not torch.allclose(got, torch.ones(2, 2))
    judged.end_check()


def cubic(x):
    return x + 0.044715 * x**3  # x ** 3: torch.Tensor.__pow__ wraps TensorBase.pow, under its name


def test_a_wrapped_operator_reaches_the_checks_modes(judged):
    """Chapter 10's tanh GELU: the judge's modes see `x ** 3` (a wrapper named TensorBase.pow), so
    the device probe's placed input stays placed through it (it was "a tensor made on the CPU")."""
    from course_utils.checks._engine.watch import Placement

    x = torch.randn(2, 3)
    with torch.no_grad(), Placement([x]) as placement:
        out = _remote(judged, cubic)(x)
    assert placement.is_placed(out) and torch.allclose(out, cubic(x))
    judged.end_check()


def draws(x):
    return x + torch.rand(())  # moves torch's random state: the judge takes the new one back


class _Calls(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.names.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


def test_the_checks_modes_see_the_students_calls_and_none_of_the_judges(judged):
    """The judge's own torch calls (reading and setting the random state around a call) are not
    shown to the check's modes: chapter 10's device probe counted the judge's
    `get_rng_state().numpy()` as the student's `.numpy()`, and failed a right answer
    (tests/ch10 flex_create_mask) as "result on the CPU"."""
    x = torch.ones(3)
    with _Calls() as here:
        draws(x)
    remote = _remote(judged, draws)
    with _Calls() as there:
        remote(x)
    assert there.names == here.names, (there.names, here.names)
    judged.end_check()


def int32_count(n):
    import numpy as np

    return np.int32(n) * np.int32(3)


def fills_and_returns(cache):
    cache["k"] = torch.ones(
        2
    )  # a new tensor, first sent in the result, then in the dict's contents
    return torch.zeros(1), cache


def test_a_numpy_number_and_a_callers_dict_given_new_tensors_cross_as_in_one_process(judged):
    """Chapter 11's probes: a 32-bit count (kv_numpy_int32) reached the check as a stand-in, not a
    number; a cache dict the student's code filled and returned (shared_mutates_caller_cache)
    failed with 'no tensor N' (the dict's contents were read before the result that brought the
    tensor's values)."""
    import numpy as np

    got = _remote(judged, int32_count)(7)
    assert type(got) is np.int32 and got == 21
    cache = {"old": (torch.zeros(1), torch.zeros(1))}
    out, back = _remote(judged, fills_and_returns)(cache)
    assert torch.equal(cache["k"], torch.ones(2)) and torch.equal(back["k"], torch.ones(2))
    assert set(cache) == {"old", "k"} and torch.equal(out, torch.zeros(1))
    judged.end_check()


def test_a_students_layer_is_a_module_to_the_checks_and_its_gradients_cross(judged):
    from tests.ch04 import correct

    layer = _remote(judged, correct.CausalBaddbmmWhere)(3, 2, 5, 0.0)
    assert isinstance(layer, nn.Module) and isinstance(layer.W_query, nn.Linear)
    x = torch.randn(1, 4, 3, requires_grad=True)
    params = list(layer.parameters())
    out = layer(x)
    assert out.requires_grad and out.shape == (1, 4, 2)
    grads = torch.autograd.grad(out.sum(), [x, *params])
    assert all(g is not None for g in grads) and grads[0].shape == x.shape
    judged.end_check()


def test_the_judge_builds_no_class_the_student_may_not_hand_it(judged):
    codec = JudgeCodec(session.Session(None, chapter=4))
    assert codec.find_class(("torch.nn.modules.linear", "Linear", [])) is nn.Linear
    from course_utils.chapters import SelfAttention_v1  # chapter 02's: usable in chapter 04

    assert (
        codec.find_class(("course_utils.chapters.ch02", "SelfAttention_v1", [])) is SelfAttention_v1
    )
    for ref in (
        ("course_utils.chapters.ch04", "CausalAttention", []),  # the chapter being graded
        ("course_utils.chapters.ch05", "MultiHeadAttention", []),  # a later one
        ("course_utils.checks._engine.pipeline", "Recipe", []),  # the checks' references
        ("__main__", "Anything", []),
        ("os", "PathLike", []),
    ):
        with pytest.raises(wire.WireError):
            codec.find_class(ref)


def test_a_remote_cannot_be_pickled(judged):
    made = _remote(judged, make_equalish)()
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(made)
    judged.end_check()


# ----------------------------------------------------------------------------- the student process
@pytest.fixture
def probe():
    """A file of the repository that a student's code will try to change (made for the test, so
    that nothing real is at stake should a sandbox ever fail)."""
    path = ROOT / "course_utils" / f".probe-{os.getpid()}.py"
    path.write_text("PROBE = 1\n")
    yield path
    path.unlink()


def test_a_hidden_chapter_raises_names_the_attempt_and_offers_given_cells_constructors_only():
    source = (ROOT / "course_utils" / "chapters" / "ch04" / "__init__.py").read_text()
    given = session.constructors_only(source)
    assert "def __init__" in given and "def forward" not in given
    saved = {k: v for k, v in sys.modules.items() if k.startswith("course_utils.chapters")}
    attempts = []
    try:
        student.install_chapters({}, {"ch04": ["CausalAttention"]}, attempts, {"ch04": given})
        import course_utils

        with pytest.raises(AttributeError, match="not available while it is graded"):
            _ = course_utils.chapters.CausalAttention
        student.CURRENT["given"] = True
        base = course_utils.chapters.CausalAttention
        assert "forward" not in vars(base) and base(3, 2, 4, 0.0).W_query.in_features == 3
    finally:
        student.CURRENT["given"] = False
        for name in [k for k in sys.modules if k.startswith("course_utils.chapters")]:
            del sys.modules[name]
        sys.modules.update(saved)
        import course_utils

        course_utils.chapters = saved["course_utils.chapters"]
    assert attempts == ["course_utils.chapters.CausalAttention"]


@needs_bwrap
def test_the_student_process_refuses_writes_names_them_and_leaves_nothing_behind(probe):
    template, target = session.StudentTemplate(sandboxed=True), probe
    before = target.read_bytes()
    try:
        run = session.Session(template.fork(session.setup_for(1, None, {})), 1)
        run.cell = 3
        run.run_cell(
            "import subprocess\n"
            f"try:\n    open({str(target)!r}, 'a').write('x')\nexcept OSError:\n    pass\n"
            "open('scratch.txt', 'w').write('mine')\n"
            "left = subprocess.Popen(['sleep', '600']).pid",
            60,
        )
        run.run_cell("import sys\nhidden = sys.modules['course_utils.checks']", 60)
        with pytest.raises(StudentError, match="named the module course_utils.checks"):
            run.names(["hidden"])  # a module crosses by its name: the judge's checks never
        run.close()
        writes = template.reset()
        run = session.Session(template.fork(session.setup_for(1, None, {})), 1)
        run.run_cell(
            "import os\nfound = sorted(os.listdir('.'))\nps = [p for p in os.listdir('/proc') if p.isdigit()]",
            60,
        )
        found, ps = run.names(["found", "ps"]).values()
        run.close()
    finally:
        template.stop()
    assert target.read_bytes() == before
    assert any(w.startswith("cell 3: open for writing: ") and str(target) in w for w in writes)
    assert "scratch.txt" not in found and len(ps) <= 4


@needs_bwrap
def test_a_student_process_cannot_stop_or_kill_the_template_the_next_notebook_needs():
    """Issue 39: a student's answer that stopped the template (SIGSTOP to its parent) made the
    next student's judged run wait until nbgrader gave up (0 points). The template is its
    sandbox's process 1: the signals do not arrive, and the next notebook forks at once."""
    template = session.StudentTemplate(sandboxed=True)
    try:
        template.start()
        first = template.process
        for signum in ("SIGSTOP", "SIGKILL", "SIGINT"):
            run = session.Session(template.fork(session.setup_for(1, None, {})), 1)
            run.run_cell(f"import os, signal\nos.kill(os.getppid(), signal.{signum})", 60)
            run.close()
            template.control.settimeout(20)  # before: 300 s for the reset's reply
            start = time.monotonic()
            template.reset()
            run = session.Session(template.fork(session.setup_for(1, None, {})), 1)
            run.run_cell("x = 1 + 1", 60)
            assert run.names(["x"]) == {"x": 2}
            run.close()
            template.reset()
            assert time.monotonic() - start < 10, signum
            assert template.process is first and template.trouble() is None, signum
    finally:
        template.stop()


@needs_bwrap
@pytest.mark.parametrize("signum", [signal.SIGSTOP, signal.SIGKILL])
def test_a_template_stopped_or_killed_all_the_same_is_started_afresh_before_the_next_fork(signum):
    template = session.StudentTemplate(sandboxed=True)
    try:
        template.start()
        first = template.process
        os.kill(_server_pid(first.pid), signum)  # from outside, where signals arrive
        time.sleep(0.5)  # a killed process takes some ms to be gone
        template.control.settimeout(20)
        start = time.monotonic()
        assert template.reset() == []  # found before asking: no wait for a stopped template
        assert time.monotonic() - start < 5
        run = session.Session(template.fork(session.setup_for(1, None, {})), 1)
        run.run_cell("x = 1 + 1", 60)
        assert run.names(["x"]) == {"x": 2}
        run.close()
        assert template.process is not first and first.poll() is not None
    finally:
        template.stop()


def _server_pid(pid: int) -> int:
    """The template's own process (host id): the first under bwrap that is not bwrap."""
    while open(f"/proc/{pid}/comm").read().strip() == "bwrap":
        pid = int(open(f"/proc/{pid}/task/{pid}/children").read().split()[0])
    return pid
