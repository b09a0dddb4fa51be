"""Every line of the instructors' guide's "A course, step by step" block, run as written (`make test-nbgrader`).

The block is read from docs/instructors.md. Its first line (`make test-nbgrader`) is the command running this
test, so it is skipped; `~` is a temporary home; one student hands in the release untouched where
the comment says students' work goes; `jupyter lab` is started without a browser on a free port
and must serve the formgrader page.
"""

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tools.build.notebooks import ROOT
from tools.grading import roundtrip as rt

pytestmark = pytest.mark.skipif(
    os.environ.get("COURSE_NBGRADER_TESTS") != "1",
    reason="needs nbgrader in .venv-nbgrader: run `make test-nbgrader`",
)


def readme_steps() -> list[str]:
    text = (ROOT / "docs" / "instructors.md").read_text(encoding="utf-8")
    block = text.split("### A course, step by step", 1)[1].split("```bash\n", 1)[1]
    return [line for line in block.split("```", 1)[0].splitlines() if line.strip()]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bash(line: str, cwd: Path, env: dict) -> Path:
    """Run one guide line in bash from ``cwd``; return the directory it leaves the shell in. The
    line's own exit status counts (``set -e``: a failing line is not hidden by the ``pwd``)."""
    done = subprocess.run(
        ["bash", "-c", f"set -e\n{line}\npwd"], cwd=cwd, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, f"guide step failed: {line}\n{done.stdout}\n{done.stderr}"
    warnings = [w for w in done.stderr.splitlines() if "db_assignments" in w or "db_students" in w]
    assert not warnings, f"{line}: nbgrader warns about options it does not know: {warnings}"
    return Path(done.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def jupyter(cwd: Path, env: dict, command: list[str]):
    """``command`` (``jupyter lab`` or ``jupyter server``) serving ``cwd`` without a browser on a
    free port; yields a function that GETs a path of it (with the server's token)."""
    port = _free_port()
    server = subprocess.Popen(
        [*command, "--no-browser", f"--port={port}", "--ServerApp.token=readme-test"]
        + ["--ip=127.0.0.1"]
        + (["--allow-root"] if os.geteuid() == 0 else []),
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def get(path: str):
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}{path}", headers={"Authorization": "token readme-test"}
        )
        for _ in range(120):
            try:
                with urllib.request.urlopen(request, timeout=10) as reply:
                    return reply.status, reply.read()
            except OSError:
                time.sleep(1)
        raise AssertionError(f"{command}: no answer on {path} after 120 s")

    try:
        yield get
    finally:
        server.terminate()
        server.wait(timeout=30)


def formgrader_json(course: Path, env: dict, path: str):
    """What nbgrader's formgrader API answers on ``path``, served from ``course``."""
    with jupyter(course, env, ["jupyter", "server"]) as get:
        status, body = get(path)
    assert status == 200, body
    return json.loads(body)


def _formgrader(cwd: Path, env: dict, line: str) -> int:
    with jupyter(cwd, env, line.split("#")[0].split()) as get:
        status, body = get("/formgrader")
    assert b"formgrader" in body.lower(), body[:200]
    return status


def test_every_readme_grading_step_runs_as_written(tmp_path):
    steps = readme_steps()
    assert steps[0].startswith("make test-nbgrader")
    env = dict(rt.nbgrader_env(), HOME=str(tmp_path))
    env["PATH"] = f"{rt.VENV / 'bin'}{os.pathsep}{env['PATH']}"
    cwd, assignment, ran = ROOT, None, []
    for line in steps[1:]:
        if line.startswith("#"):  # students' work goes to submitted/<student>/<assignment>/
            assert "submitted/<student>/" in line and assignment
            handed_in = cwd / "submitted" / "alice" / assignment
            shutil.copytree(cwd / "release" / assignment, handed_in)
            first = sorted(handed_in.glob("*.ipynb"))[0]  # renamed by the student
            renamed = first.rename(first.with_name(first.stem + "-Copy1.ipynb"))
            continue
        if "submissions" in line:
            done = subprocess.run(
                ["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True
            )
            assert f"{renamed.name} renamed to {first.name}" in done.stdout, (
                done.stdout + done.stderr
            )
            assert first.exists() and not renamed.exists()
            continue
        if line.startswith("jupyter lab"):
            assert _formgrader(cwd, env, line) == 200
        else:
            cwd = _bash(line.split("  #")[0], cwd, env)
        if match := re.search(r"--assignment (\w+)", line):
            assignment = match.group(1)
        ran.append(line.split()[0:2])
    assert (cwd / "gradebook.db").exists()
    feedback = sorted((cwd / "feedback" / "alice" / assignment).glob("*.html"))
    assert [p.stem for p in feedback] == sorted(
        p.stem for p in (cwd / "source" / assignment).glob("*.ipynb")
    )
    assert ["nbgrader", "autograde"] in ran and ["nbgrader", "generate_feedback"] in ran
    assert ["python", "-m"] in ran and (cwd / ".grade" / f"last-run-{assignment}.json").exists()
    report = (cwd / "report" / "report.md").read_text(encoding="utf-8")
    assert re.search(r"^\| `stub` \| [1-9]\d* \|$", report, re.MULTILINE)  # alice's untouched stubs
