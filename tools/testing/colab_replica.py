"""`make test-colab`: every notebook run as a Colab learner runs it, in a copy of Colab's runtime.

Usage::

    python -m tools.testing.colab_replica                     # every solution and exercise notebook
    python -m tools.testing.colab_replica solutions/03_causal_masking.ipynb

What it does, and how close it is to Colab:

* **Colab's package versions** (:data:`PINS`, from googlecolab/backend-info's ``pip-freeze.txt``,
  snapshot of :data:`PINS_DATE`) in a throwaway venv, ``.venv-colab`` (never the students'
  ``.venv``), on Colab's Python minor version from pyenv. PyTorch is the one knowing difference:
  Colab has 2.11.0; here ``torch==`` :data:`TORCH` from the package index (on Linux that is a CUDA
  build, run on the CPU), because no CPU wheel of 2.11.0 for Python 3.13 can be had here.
  ``COLAB_TORCH=2.11.0`` picks Colab's own version (a download of a few GB).
* **The badge's clone, served locally**: a bare repository holding the working tree as it is now
  (``git stash create``: tracked files, committed or not) under the branch or tag each notebook's
  setup cell names, and a git config in the kernel's own ``HOME`` that sends the repository's
  GitHub address there (``url.<bare>.insteadOf``). Nothing else of this machine leaks in: the
  kernel runs with an empty environment (``env -i``), that ``HOME``, the venv first on ``PATH``.
* **Each notebook alone** in an empty folder (like Colab's ``/content``) where ``course_utils``
  cannot be imported, run top to bottom through its real setup cell by nbclient. A solution must
  run with no error; an exercise runs, as Run All does, up to its first error, which must be an
  exercise stub's ``NotImplementedError`` (later cells are the solution's to prove). The setup cell must install
  nothing (Colab has every package) and print nothing.
* **Every explorer control moved** (sliders, drop-downs, check boxes, toggle and radio buttons), as
  a front end does: a ``comm_msg`` ``update`` with the new value; the kernel must answer with a new
  frame (an inline PNG) for each move.
* **Colab's rendering rules**: no markdown attachment or relative image path
  (:func:`tools.build.attachments.unresolved_images`), and no binary buffer in any widget message or
  widget state of the run (Colab's widget display handles them poorly).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-colab"
PINS_DATE = "2026-08-19"
PINS_SOURCE = "https://github.com/googlecolab/backend-info (pip-freeze.txt, os-info.txt)"
PYTHON = "3.13"
TORCH = os.environ.get("COLAB_TORCH", "2.13.0")
PINS = {
    "ipywidgets": "7.7.1",
    "widgetsnbextension": "3.6.10",
    "ipython": "7.34.0",
    "ipykernel": "6.17.1",
    "jupyter_client": "7.4.9",
    "traitlets": "5.7.1",
    "matplotlib": "3.10.0",
    "numpy": "2.1.3",
    "pillow": "11.3.0",
    "tiktoken": "0.14.0",
    "tqdm": "4.67.3",
}
"""Colab's CPU runtime, from :data:`PINS_SOURCE` at :data:`PINS_DATE` (torch apart: :data:`TORCH`)."""
RUNNER = [
    "nbclient",
    "nbformat",
]  # drives the kernel, as Colab's front end does (not in the kernel's way)
FRAME = '<img class="course-frame"'
CONTROLS = {  # widget model -> the synced key a front end changes
    "IntSliderModel": "value",
    "FloatSliderModel": "value",
    "FloatLogSliderModel": "value",
    "SelectionSliderModel": "index",
    "DropdownModel": "index",
    "ToggleButtonsModel": "index",
    "RadioButtonsModel": "index",
    "CheckboxModel": "value",
    "ToggleButtonModel": "value",
    "TextModel": "value",
}


# ----------------------------------------------------------------------------- the environment
def find_python(version: str = PYTHON) -> str:
    """A Python ``version`` interpreter that runs: on PATH, else pyenv's newest ``version.*``.

    A pyenv shim for ``python3.13`` is on PATH even when that version is not selected, and then
    exits with 127; so each candidate is tried before it is used."""
    candidates = [shutil.which(f"python{version}")]
    try:
        root = subprocess.run(["pyenv", "root"], capture_output=True, text=True, check=True)
        versions = Path(root.stdout.strip(), "versions")
        candidates += [str(p) for p in sorted(versions.glob(f"{version}.*/bin/python"))[::-1]]
    except (OSError, subprocess.CalledProcessError):
        pass
    for candidate in filter(None, candidates):
        runs = subprocess.run([candidate, "-c", "import sys"], capture_output=True)
        if runs.returncode == 0:
            return candidate
    raise SystemExit(
        f"Python {version} (Colab's version) was not found: install it (e.g. `pyenv install "
        f"{version}`) or put python{version} on PATH, then run `make test-colab` again."
    )


def build_venv(venv: Path = VENV) -> Path:
    """The replica venv with Colab's pins (made once; a changed pin list makes it again)."""
    python = venv / "bin" / "python"
    wanted = json.dumps({"python": PYTHON, "torch": TORCH, **PINS, "runner": RUNNER})
    stamp = venv / ".installed"
    if stamp.is_file() and stamp.read_text() == wanted:
        return python
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([find_python(), "-m", "venv", str(venv)], check=True)
    packages = [f"torch=={TORCH}", *(f"{name}=={v}" for name, v in PINS.items()), *RUNNER]
    print(f"Creating {venv.name}: Python {PYTHON}, " + ", ".join(packages), flush=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *packages],
        check=True,
    )
    stamp.write_text(wanted)
    return python


def serve_course(where: Path, refs: set[str]) -> Path:
    """A bare repository of the working tree (tracked files as they are now) at each of ``refs``."""
    snapshot = (
        subprocess.run(
            ["git", "stash", "create"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        or "HEAD"
    )
    bare = where / "course.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    for ref in sorted(refs):
        subprocess.run(
            ["git", "push", "-q", str(bare), f"{snapshot}:refs/heads/{ref}"],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
    return bare


def kernel_env(home: Path, venv: Path, bare: Path) -> dict[str, str]:
    """An empty environment but for a fresh HOME whose git sends GitHub's address to ``bare``."""
    from tools.build import config

    home.mkdir(parents=True, exist_ok=True)
    env = {
        "HOME": str(home),
        "PATH": f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
    }
    subprocess.run(
        ["git", "config", "--global", f"url.file://{bare}.insteadOf", f"{config.REPO_URL}.git"],
        env=env,
        check=True,
    )
    return env


# ----------------------------------------------------------------------------- in the replica
DRIVER = r'''
import asyncio, base64, json, sys, time
import nbformat
from nbclient import NotebookClient

path, exercise, frame, controls = sys.argv[1], sys.argv[2] == "1", sys.argv[3], json.loads(sys.argv[4])
nb = nbformat.read(path, as_version=4)
result = {"errors": [], "setup_output": [], "explorers": [], "buffers": [], "moves": []}


async def drain(kc, parent, buffers):
    """iopub messages answering ``parent`` until the kernel is idle again."""
    got = []
    while True:
        msg = await kc.get_iopub_msg(timeout=120)
        if msg["parent_header"].get("msg_id") != parent:
            continue
        if msg.get("buffers"):
            buffers.append(msg["header"]["msg_type"])
        got.append(msg)
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return got


async def main():
    client = NotebookClient(nb, timeout=900, kernel_name="python3", allow_errors=False,
                            resources={"metadata": {"path": "."}})
    before = await asyncio.create_subprocess_exec(sys.executable, "-c",
        "import importlib.util; print(importlib.util.find_spec('course_utils') is None)",
        stdout=asyncio.subprocess.PIPE)
    result["course_utils_absent_before"] = (await before.communicate())[0].decode().strip() == "True"
    try:
        await client.async_execute(cleanup_kc=False)
    except Exception as exc:  # a cell raised: the run stops there, as Run All does
        result["errors"].append(f"{type(exc).__name__}: {str(exc)[-600:]}")
    for index, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                result["errors"].append(f"cell {index}: {out['ename']}: {out['evalue'][:300]}")
    result["setup_output"] = [o.get("text", str(o.get("data", ""))) for o in nb.cells[1].get("outputs", [])]
    result["buffers"] += [m for m, b in client.widget_buffers.items() if b]
    state = client.widget_state
    kc = client.kc
    if kc is not None and not result["errors"][:1] or exercise:
        for model, s in list(state.items()):
            if s.get("_model_name") != "VBoxModel":
                continue
            kids = [c.replace("IPY_MODEL_", "") for c in s.get("children", [])]
            frames = [k for k in kids if str(state.get(k, {}).get("value", "")).startswith(frame)]
            if not frames:
                continue
            explorer = {"controls": 0, "moved": 0, "new_frames": 0}
            for kid in kids:
                ks = state.get(kid, {})
                key = controls.get(ks.get("_model_name"))
                if key is None:
                    continue
                explorer["controls"] += 1
                value = ks.get(key)
                if key == "index":
                    n = len(ks.get("_options_labels", []))
                    if n < 2:
                        continue
                    new = (value + 1) % n
                elif isinstance(value, bool):
                    new = not value
                elif isinstance(value, str):  # a text box: a learner types a few more words
                    new = value + " and the sea"
                else:
                    step = ks.get("step", 1)
                    new = value + step if value + step <= ks.get("max", value + step) else value - step
                    if isinstance(value, float):
                        new = round(new, 10)
                old_frame = state[frames[0]]["value"]
                msg = kc.session.msg("comm_msg", {"comm_id": kid, "data": {
                    "method": "update", "state": {key: new}, "buffer_paths": []}})
                started = time.perf_counter()
                kc.shell_channel.send(msg)
                replies = await drain(kc, msg["header"]["msg_id"], result["buffers"])
                explorer["moved"] += 1
                new_frame = None
                for r in replies:
                    c = r["content"]
                    if r["msg_type"] == "comm_msg" and c.get("comm_id") == frames[0]:
                        new_frame = c["data"].get("state", {}).get("value", new_frame)
                ms = (time.perf_counter() - started) * 1000
                ok = bool(new_frame) and new_frame != old_frame and new_frame.startswith(frame)
                if ok:
                    data = new_frame.split("base64,", 1)[1].split('"', 1)[0]
                    ok = base64.b64decode(data).startswith(b"\x89PNG\r\n\x1a\n")
                    state[frames[0]]["value"] = new_frame
                explorer["new_frames"] += ok
                result["moves"].append({"model": ks["_model_name"], "key": key, "to": new,
                                        "new_frame": ok, "ms": round(ms, 1)})
            result["explorers"].append(explorer)
    if client.km is not None:
        await client._async_cleanup_kernel()


asyncio.run(main())
print("RESULT " + json.dumps(result))
'''


def run_notebook(python: Path, env: dict, source: Path, workdir: Path, exercise: bool) -> dict:
    """Copy ``source`` alone into an empty folder and run it there with the replica's Python."""
    content = workdir / "content"
    content.mkdir(parents=True)
    shutil.copy(source, content / source.name)
    proc = subprocess.run(
        [
            str(python),
            "-c",
            DRIVER,
            source.name,
            "1" if exercise else "0",
            FRAME,
            json.dumps(CONTROLS),
        ],
        cwd=content,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        return {"crash": (proc.stderr or proc.stdout)[-2000:]}
    return json.loads(lines[-1][len("RESULT ") :])


def problems_of(result: dict, source: Path, exercise: bool) -> list[str]:
    """What a Colab learner would meet: errors, installs, dead explorers, Colab-unsafe content."""
    from tools.build import attachments, nbtools

    if "crash" in result:
        return [f"the runner crashed: {result['crash']}"]
    found = []
    if not result["course_utils_absent_before"]:
        found.append("course_utils was importable before the setup cell (not a faithful replica)")
    errors = result["errors"]
    if exercise:  # stopped at its first error, as Run All does: it must be an exercise stub
        first = errors[:1]
        if first and "NotImplementedError" not in first[0]:
            found.append(f"the first error is not an exercise stub: {first[0]}")
    else:
        found += errors
    if result["setup_output"]:
        found.append(
            f"the setup cell printed (installed?): {''.join(result['setup_output'])[:300]}"
        )
    for number, explorer in enumerate(result["explorers"], 1):
        if explorer["moved"] == 0:
            found.append(f"explorer {number}: no control could be moved")
        elif explorer["new_frames"] != explorer["moved"]:
            found.append(
                f"explorer {number}: {explorer['moved'] - explorer['new_frames']} of "
                f"{explorer['moved']} control moves brought no new frame"
            )
    if result["buffers"]:
        found.append(f"binary widget buffers sent: {sorted(set(result['buffers']))}")
    nb = nbtools.read(source)
    found += [f"Colab rendering rule: {p}" for p in attachments.unresolved_images(nb)]
    wanted = sum(
        "explorer" in c.metadata.get("tags", []) for c in nb.cells if c.cell_type == "code"
    )
    if not exercise and len(result["explorers"]) < wanted:
        found.append(f"{wanted} explorer cells but {len(result['explorers'])} live explorers")
    return found


def main(argv: list[str] | None = None) -> int:
    from tools.build import nbtools

    parser = argparse.ArgumentParser(
        prog="python -m tools.testing.colab_replica",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--venv", type=Path, default=VENV)
    args = parser.parse_args(argv)
    notebooks = [p.resolve() for p in args.notebooks] or (
        nbtools.chapter_files(nbtools.SOLUTIONS) + nbtools.chapter_files(nbtools.EXERCISES)
    )
    started = time.monotonic()
    python = build_venv(args.venv)
    versions = subprocess.run(
        [
            str(python),
            "-c",
            "import sys, torch, ipywidgets, IPython, numpy, matplotlib; print("
            "'Python', sys.version.split()[0], 'torch', torch.__version__, 'ipywidgets', "
            "ipywidgets.__version__, 'IPython', IPython.__version__, 'numpy', numpy.__version__, "
            "'matplotlib', matplotlib.__version__)",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    print(f"Colab replica ({PINS_SOURCE}, {PINS_DATE}): {versions}", flush=True)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="colab-replica-") as tmp:
        tmp = Path(tmp)
        refs = {nbtools.notebook_ref(nbtools.read(p)) for p in notebooks}
        env = kernel_env(tmp / "home", args.venv.resolve(), serve_course(tmp, refs))
        for number, source in enumerate(notebooks):
            exercise = source.parent.name == "notebooks"
            clock = time.monotonic()
            result = run_notebook(python, env, source, tmp / f"run{number}", exercise)
            found = problems_of(result, source, exercise)
            moves = result.get("moves", [])
            ms = sorted(m["ms"] for m in moves)
            speed = f", kernel answer median {ms[len(ms) // 2]:.0f} ms" if ms else ""
            name = f"{source.parent.name}/{source.name}"
            print(
                f"{'ok  ' if not found else 'FAIL'} {name}: {time.monotonic() - clock:.0f} s, "
                f"{len(result.get('explorers', []))} explorers, {len(moves)} controls moved, "
                f"{sum(m['new_frame'] for m in moves)} new frames{speed}",
                flush=True,
            )
            for problem in found:
                print(f"     {problem}", flush=True)
            failed += bool(found)
    total = time.monotonic() - started
    print(f"{len(notebooks) - failed} of {len(notebooks)} notebooks passed in {total:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
