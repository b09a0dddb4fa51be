"""What a second stranger's attack on `make grade` found, each shown fixed (tools/grading/):

- the grader's log files reached the sandbox as the kernel's and the student process's stdout and
  stderr: a kernel truncated make grade's worker log and wrote 20 MB of forged lines into it
  (``sandbox.capped_output``: a pipe, forwarded up to a cap);
- files a kernel left in its worker's runtime folder (a symlink to /etc/passwd, a fifo, a note)
  reached the next notebook's kernel and outlived the run (``kernels.tidy_runtime`` after each
  kernel, ``kernels.folder_for_the_run`` around a run);
- SDPA inside ``@torch.jit.script`` scored where chapter 01 forbids it: TorchScript runs code no
  watch sees, and the sandbox turns the JIT off (tests/cheats.py plants it in the judged run);
- and one found by the lead's own fresh clone: a course under /tmp vanished inside every sandbox
  (each covers /tmp with its own), and every sandboxed test failed with a traceback.
"""

import os
import subprocess
import sys

import pytest

from tools.grading import kernels, sandbox

needs_bwrap = pytest.mark.skipif(sandbox.problem() is not None, reason="no usable bwrap here")


@needs_bwrap
def test_a_sandboxed_process_cannot_truncate_or_flood_the_graders_log(tmp_path):
    log = tmp_path / "worker0.log"
    log.write_text("the grader's own lines\n")
    code = (
        "import os, stat\n"
        "print('fifo', stat.S_ISFIFO(os.fstat(2).st_mode), flush=True)\n"
        "try:\n    os.ftruncate(2, 0)\nexcept OSError as e:\n    print('refused', e.errno, flush=True)\n"
        "os.write(2, b'FORGED ' * 600_000)\n"
    )
    with open(log, "a") as target:
        output = sandbox.capped_output(target.fileno(), cap=100_000)
        done = subprocess.run(
            sandbox.command([sys.executable, "-c", code], env=sandbox.inside_env()),
            stdout=output,
            stderr=output,
            timeout=60,
        )
        os.close(output)
    assert done.returncode == 0
    for _ in range(100):  # the forwarder writes what is left, then leaves
        text = log.read_text()
        if "dropped" in text:
            break
        __import__("time").sleep(0.05)
    assert text.startswith("the grader's own lines\nfifo True\nrefused")
    assert 100_000 < len(text) < 101_000 and text.rstrip().endswith("dropped]")


def test_what_a_kernel_leaves_in_the_runtime_folder_goes_when_it_ends(tmp_path, monkeypatch):
    folder = tmp_path / "cw-test"
    folder.mkdir()
    monkeypatch.setattr(kernels, "_runtime", (os.getpid(), str(folder)))
    monkeypatch.setattr(kernels, "_LIVE", {"kernel-0123456789abcdef"})
    for name in ("kernel-0123456789abcdef.json", "kernel-0123456789abcdef-ipc-1", "LEFT.txt"):
        (folder / name).write_text("x")
    (folder / "kernel-evil.json").symlink_to("/etc/passwd")
    (folder / "sub").mkdir()
    os.mkfifo(folder / "pipe")
    gone = kernels.tidy_runtime()
    assert sorted(gone) == ["LEFT.txt", "kernel-evil.json", "pipe", "sub"]
    assert sorted(p.name for p in folder.iterdir()) == [
        "kernel-0123456789abcdef-ipc-1",
        "kernel-0123456789abcdef.json",
    ]


def test_a_runs_folder_holds_its_workers_runtime_folders_and_goes(monkeypatch):
    monkeypatch.delenv(kernels.BASE_VAR, raising=False)
    code = "from tools.grading import kernels; print(kernels.runtime_folder())"
    with kernels.folder_for_the_run() as base:
        env = dict(os.environ)
        env.pop("JUPYTER_RUNTIME_DIR", None)
        worker = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        ).stdout.strip()
        assert os.path.dirname(worker) == base
    assert not os.path.exists(base) and kernels.BASE_VAR not in os.environ


@needs_bwrap
def test_torchscript_is_off_in_the_sandbox():
    code = "import torch\n@torch.jit.script\ndef f(x):\n    return x\nprint(type(f).__name__)\n"
    done = subprocess.run(
        sandbox.command([sys.executable, "-c", code], env=sandbox.inside_env()),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.strip() == "function", done.stderr[-2000:]


def test_a_course_under_a_scratch_folder_is_refused_with_its_place(monkeypatch, tmp_path):
    """A fresh clone under /tmp failed every sandboxed test with a traceback (2026-11-28): each
    sandbox covers /tmp with its own, so the course's files vanished inside. Now one sentence."""
    outside = {"the course": "/work/course", "its Python environment": "/work/course/.venv"}
    assert sandbox.scratch_clash(outside) is None
    for inside in ("/tmp/fresh", "/dev/shm/c", "/home/student/course", "/tmp"):
        said = sandbox.scratch_clash(
            {"the course": "/work/course", "its Python environment": inside}
        )
        assert said.startswith("its Python environment lies under ") and inside in said, said
    assert sandbox.scratch_clash({"the course": "/tmpfs/course"}) is None  # a prefix, not a folder
    link = tmp_path / "link"  # a link's target counts, not its name (tmp_path is under /tmp)
    link.symlink_to("/usr")
    assert sandbox.scratch_clash({"the course": str(link)}) is None
    monkeypatch.setattr(sandbox, "problem", lambda: "the course lies under /tmp (/tmp/fresh), ...")
    monkeypatch.setattr(sandbox, "scratch_clash", lambda: "the course lies under /tmp (/tmp/fresh)")
    monkeypatch.setenv(sandbox.ENV_OFF, "")
    text = sandbox.refusal()
    assert "move the course and its Python environment" in text and "bubblewrap" not in text
