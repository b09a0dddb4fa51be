"""The JupyterLab server the browser test drives, and where things are. Part of run_browser_tests."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results" / "browser"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
]
VIEWPORT = {"width": 1280, "height": 900}
COURSE_FOLDERS = ("solutions", "notebooks")
EXERCISE_FOLDER = "notebooks"
STATIC_ENV_VAR = "COURSE_STATIC_WIDGETS"
WIDGETS_EXTENSION = re.compile(r"/lab/extensions/@jupyter-widgets/jupyterlab-manager/")
COPY_IGNORE = shutil.ignore_patterns(
    ".git",
    ".venv*",
    "venv",
    "results",
    "tests",
    "__pycache__",
    ".pytest_cache",
    ".ruff_cache",
    ".ipynb_checkpoints",
    "node_modules",
    "*.egg-info",
)
LAB_SETTINGS = {
    # No pop-ups, no writes behind our back, every cell in the DOM (the notebook is not virtualised).
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
}


# ----------------------------------------------------------------------------- server
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """In the server's process (Linux): get SIGTERM if the harness dies without cleaning up."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def copy_course(source: Path, dest: Path) -> None:
    """The served copy: JupyterLab writes to what it serves (saves, checkpoints)."""
    shutil.copytree(source, dest, ignore=COPY_IGNORE, symlinks=True)


class LabServer:
    """``jupyter lab`` on a free port with a random token, isolated from the user's Jupyter setup."""

    def __init__(self, root: Path, workdir: Path, log_path: Path):
        self.root, self.workdir, self.log_path = root, workdir, log_path
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.token = secrets.token_hex(24)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop(STATIC_ENV_VAR, None)  # the explorers must be live widgets here
        for name in (
            "JUPYTER_CONFIG_DIR",
            "JUPYTER_DATA_DIR",
            "JUPYTER_RUNTIME_DIR",
            "JUPYTERLAB_SETTINGS_DIR",
            "JUPYTERLAB_WORKSPACES_DIR",
            "IPYTHONDIR",
        ):
            path = self.workdir / name.lower()
            path.mkdir(parents=True, exist_ok=True)
            env[name] = str(path)
        for plugin, values in LAB_SETTINGS.items():
            package, name = plugin.rsplit("/", 1)
            target = (
                self.workdir / "jupyterlab_settings_dir" / package / f"{name}.jupyterlab-settings"
            )
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(values))
        return env

    def start(self, timeout: float = 120) -> None:
        env = self._env()
        for _attempt in range(3):
            self.port = free_port()
            cmd = [
                sys.executable,
                "-m",
                "jupyterlab",
                "--no-browser",
                "--ServerApp.ip=127.0.0.1",
                f"--ServerApp.port={self.port}",
                "--ServerApp.port_retries=0",
                f"--IdentityProvider.token={self.token}",
                f"--ServerApp.root_dir={self.root}",
                "--LabApp.news_url=None",
            ]
            if hasattr(os, "geteuid") and os.geteuid() == 0:
                cmd.append("--allow-root")
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log_path, "ab") as log:
                # Own process group: stop() ends the server and the kernels it started, by its PID.
                self.proc = subprocess.Popen(
                    cmd,
                    env=env,
                    cwd=self.workdir,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=_die_with_parent if sys.platform == "linux" else None,
                )
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    self.api("GET", "/api/status")
                    return
                except (urllib.error.URLError, ConnectionError, OSError):
                    time.sleep(0.3)
            self.stop()  # exited (port taken?) or too slow: try again on another port
        raise RuntimeError(f"JupyterLab did not start; see {self.log_path}")

    def api(self, method: str, path: str):
        request = urllib.request.Request(
            self.base + path, method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def start_kernel(self, relpath: str) -> None:
        """Start the notebook's kernel now (JupyterLab joins this session when it opens the file)."""
        body = json.dumps(
            {
                "path": relpath,
                "type": "notebook",
                "name": Path(relpath).name,
                "kernel": {"name": "python3"},
            }
        ).encode()
        request = urllib.request.Request(
            self.base + "/api/sessions",
            data=body,
            method="POST",
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60):
            pass

    def shutdown_kernels(self, relpath: str | None = None) -> None:
        """Shut down the kernel of ``relpath`` (of every session when None)."""
        with contextlib.suppress(Exception):
            for session in self.api("GET", "/api/sessions"):
                if relpath is None or session.get("path") == relpath:
                    with contextlib.suppress(Exception):
                        self.api("DELETE", f"/api/sessions/{session['id']}")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)
        with contextlib.suppress(ProcessLookupError):  # kernels left in the group
            os.killpg(proc.pid, signal.SIGKILL)
