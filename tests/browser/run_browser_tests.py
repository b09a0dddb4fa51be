"""Open every course notebook in JupyterLab in headless Chromium, run it, and check what a student sees.

Usage (``make test-browser`` installs Chromium and Playwright first, then runs the pytest wrappers)::

    .venv/bin/python tests/browser/run_browser_tests.py                 # every notebook of the course
    .venv/bin/python tests/browser/run_browser_tests.py solutions/03_*.ipynb notebooks/03_*.ipynb

Two notebooks are checked at once (``--workers``), each worker with its own Chromium and one
JupyterLab page that stays loaded: a notebook is opened with *File > Open from Path*, gets a
fresh kernel (started ahead through the sessions API), *Run > Run All Cells*, *File > Save*, and
*Close All Tabs*; the kernel is then shut down. After any failure the worker loads a new page.
For each notebook it asserts:

* **No error output.** Read from the saved notebook (exact ``output_type``/``ename``), and nothing
  written to stderr; every code cell ran. In an exercise notebook (``notebooks/``) JupyterLab's
  Run All stops at the first error, and the exercise stubs raise on purpose, so the rule there is:
  every code cell up to the first error ran cleanly, and that first (and only) error comes from an
  exercise stub: either a ``NotImplementedError`` whose traceback shows the stub line
  ``raise NotImplementedError()``, or an error reporting a ``NotImplementedError`` (a self-check
  calling the stubbed function says "raised NotImplementedError: the exercise stub is still in
  place") with a stub in that cell or an earlier one. Cells after it are not run in the exercise;
  the solution notebook, which must run completely, covers them.
* **Every figure loaded.** Every ``<img>`` of the rendered markdown that is served by the lab
  itself (``../figures/x.png`` and any other local picture) or embedded in the notebook (an inline
  ``![alt](data:image/png;base64,...)``, what the generator writes, or a cell attachment) has
  ``naturalWidth > 0``, and the number of rendered figures equals the number of ``figures/``,
  ``data:`` and ``attachment:`` references in the notebook's markdown. External pictures (the Colab
  badge) are skipped: the browser is offline. The first figure is photographed
  (``results/browser/<notebook>__figure.png``).
* **Every widget rendered.** No output shows a widget's text fallback (``VBox(children=(...``:
  the ipywidgets lab extension did not load), no "Error displaying widget", no view stuck on
  "Loading widget...", and every executed explorer cell (tag ``explorer`` or a call to
  ``*_explorer(``) shows a widget view.
* **Every explorer is live.** An explorer is a widget view with a picture in it (an ``HTML``
  widget's ``<img>``: the course's frames; or an ``Image`` or an ``Output``); each of its sliders,
  dropdowns, checkboxes, toggle buttons and radio buttons is moved once, and the plot (those pictures) must be redrawn to a different, fully loaded picture. Text boxes
  are left alone (no generic value to type) and reported as skipped. The time from each move to
  the new picture loaded on screen (browser -> kernel -> compute, draw, PNG -> browser), timed in
  the page itself (from the key press, click or change event to the new ``<img>``'s load), is
  reported per explorer, not asserted: it depends on the machine and its load.

One screenshot per notebook goes to ``results/browser/`` (the first explorer after its controls
were moved, else the top of the notebook). The server runs on a copy of the course in a
temporary folder with its own Jupyter config, settings (no news, no autosave, no windowing)
and a random token on a free port; it is killed by its PID (process group) even on failure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

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

STUB_LINE = re.compile(r"raise\s+NotImplementedError\(\)")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
MARKDOWN_IMAGE = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)")
HTML_IMAGE = re.compile(r"<img\b[^>]*\bsrc\s*=\s*[\"']([^\"']+)", re.IGNORECASE)
EXPLORER_CALL = re.compile(r"\b\w+_explorer\s*\(")
WIDGET_AS_TEXT = re.compile(r"\b[A-Z]\w*\(children=\(")
EXPLORER_TAG = "explorer"


# ----------------------------------------------------------------------------- reports
@dataclass
class NotebookReport:
    path: str
    exercise: bool
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    screenshot: str | None = None
    figures: int = 0
    explorers: int = 0
    controls_moved: int = 0
    saved: object | None = field(default=None, repr=False)  # the notebook as saved after the run
    timings: dict[str, float] = field(default_factory=dict)  # seconds per phase
    latencies: dict[str, list[float]] = field(
        default_factory=dict
    )  # explorer -> ms from a move to its picture

    def lap(self, phase: str, since: list[float]) -> None:
        now = time.monotonic()
        self.timings[phase] = round(now - since[0], 1)
        since[0] = now

    @property
    def ok(self) -> bool:
        return not self.problems

    def format(self) -> str:
        head = (
            f"{'PASS' if self.ok else 'FAIL'} {self.path} ({self.seconds:.1f} s; {self.figures} figures, "
            f"{self.explorers} explorers, {self.controls_moved} controls moved)"
        )
        lines = (
            [head]
            + [f"    problem: {p}" for p in self.problems]
            + [f"    note: {n}" for n in self.notes]
        )
        if self.screenshot:
            lines.append(f"    screenshot: {self.screenshot}")
        if self.timings:
            lines.append("    seconds: " + ", ".join(f"{k} {v}" for k, v in self.timings.items()))
        lines += [f"    latency: {line}" for line in self.latency_lines()]
        return "\n".join(lines)

    def latency_lines(self) -> list[str]:
        """One line per explorer: the median and each move's time from the control to the new picture."""
        return [
            f"{name}: median {statistics.median(ms):.0f} ms over {len(ms)} moves "
            f"({', '.join(f'{m:.0f}' for m in ms)})"
            for name, ms in self.latencies.items()
            if ms
        ]


def strip_ansi(text: str) -> str:
    return ANSI.sub("", text)


def _first_line(text: str, limit: int = 160) -> str:
    line = next((s for s in strip_ansi(text).splitlines() if s.strip()), "")
    return line[:limit]


def execution_problems(nb, exercise: bool) -> tuple[list[str], list[str]]:
    """Problems and notes about errors in an executed notebook (a pure function of the outputs).

    A solution must run every code cell without error output or stderr. An exercise may stop at
    its first exercise stub: a NotImplementedError whose traceback shows ``raise NotImplementedError()``.
    """
    problems: list[str] = []
    notes: list[str] = []
    code = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    first_error = None
    for index, cell in code:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                if first_error is None:
                    first_error = (index, out)
                else:
                    problems.append(
                        f"cell {index}: another error: {out.get('ename')}: {out.get('evalue')}"
                    )
            elif out.get("output_type") == "stream" and out.get("name") == "stderr":
                problems.append(
                    f"cell {index}: wrote to stderr: {_first_line(out.get('text', ''))!r}"
                )
    stop = len(nb.cells)
    if first_error is not None:
        index, out = first_error
        stop = index
        traceback = strip_ansi("\n".join(out.get("traceback", [])))
        ename, evalue = out.get("ename", "?"), out.get("evalue", "")
        stub_above = any(STUB_LINE.search(c.source) for i, c in code if i <= index)
        raised = ename == "NotImplementedError" and STUB_LINE.search(traceback)
        reported = "NotImplementedError" in f"{evalue}\n{traceback}" and stub_above
        if exercise and (raised or reported):
            later = sum(1 for i, c in code if i > index and c.source.strip())
            notes.append(
                f"Run All stopped at the exercise stub's NotImplementedError in cell {index} "
                f"(expected); {later} later code cells not run"
            )
        elif exercise:
            problems.append(
                f"cell {index}: {ename}: {evalue} (the only error allowed in an exercise is "
                f"the NotImplementedError raised by an exercise stub)"
            )
        else:
            problems.append(f"cell {index}: {ename}: {evalue}")
    never_ran = [
        i for i, c in code if i < stop and c.source.strip() and c.get("execution_count") is None
    ]
    if never_ran:
        problems.append(f"code cells never ran: {never_ran}")
    return problems, notes


def figure_references(nb) -> list[str]:
    """Picture references of the notebook's markdown: into figures/, inline data: or a cell attachment."""
    refs = []
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for ref in MARKDOWN_IMAGE.findall(cell.source) + HTML_IMAGE.findall(cell.source):
            if ref.startswith(("attachment:", "data:image/")) or (
                "figures/" in ref and not re.match(r"^[a-z]+:", ref)
            ):
                refs.append(ref)
    return refs


def explorer_cells(nb) -> list[int]:
    return [
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code"
        and (EXPLORER_TAG in c.metadata.get("tags", []) or EXPLORER_CALL.search(c.source))
    ]


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


# ----------------------------------------------------------------------------- browser
JS_PROMPTS = """() => [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputArea-prompt')]
    .map(e => e.textContent.trim())"""
JS_KERNEL_STATUS = """() => [...document.querySelectorAll('.jp-StatusBar-TextItem')].map(e => e.textContent.trim())
    .filter(t => / \\| \\w+$/.test(t))"""
JS_IMAGES = """() => [...document.querySelectorAll('.jp-Notebook .jp-MarkdownOutput img')].map(img => {
    const src = img.getAttribute('src') || '', url = new URL(img.src, location.href);
    const embedded = ['data:', 'blob:', 'attachment:'].includes(url.protocol);
    return {src: src, local: embedded || url.origin === location.origin, embedded: embedded,
            complete: img.complete, width: img.naturalWidth};
})"""
JS_CELLS = """() => [...document.querySelectorAll('.jp-Notebook .jp-Cell')].map(cell => {
    const outs = [...cell.querySelectorAll('.jp-Cell-outputArea > .jp-OutputArea-child > .jp-OutputArea-output')];
    return {code: cell.classList.contains('jp-CodeCell'), outputs: outs.map(o => ({
        text: (o.innerText || '').slice(0, 300),
        widget: !!o.querySelector('.jupyter-widgets')}))};
})"""
JS_PLOT = """el => {
    const imgs = [...el.querySelectorAll('.widget-output img, img.widget-image, .widget-html img')];
    let h = 2166136261 >>> 0;
    const s = imgs.map(i => i.getAttribute('src') || '').join('|');
    for (let i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619) >>> 0; }
    return {key: imgs.length + ':' + s.length + ':' + h, n: imgs.length,
            loaded: imgs.every(i => i.complete && i.naturalWidth > 0)};
}"""
CONTROLS = (
    # (kind, selector inside an explorer)
    ("slider", ".widget-slider:not(.widget-vslider), .widget-hslider"),
    ("vertical slider", ".widget-vslider"),
    ("dropdown", ".widget-dropdown select"),
    ("checkbox", ".widget-checkbox input[type=checkbox]"),
    ("toggle buttons", ".widget-toggle-buttons"),
    ("radio buttons", ".widget-radio-box"),
)
SKIPPED_CONTROLS = ".widget-text input, .widget-textarea textarea, .widget-combobox input"
PLOT_WIDGETS = ".jupyter-widgets .widget-output, .jupyter-widgets img.widget-image, .jupyter-widgets .widget-html img"
JS_ARM_CLOCK = """el => {
    // In-page clock: the first key press, click or change in the explorer, to the first new picture
    // of its plot that has loaded (no polling from the test in between).
    el.__actedAt = null; el.__frameAt = null;
    if (!el.__clockArmed) {
        el.__clockArmed = true;
        for (const kind of ['keydown', 'mousedown', 'change', 'input']) {
            el.addEventListener(kind, () => { if (el.__actedAt === null) el.__actedAt = performance.now(); }, true);
        }
        const seen = img => {
            const done = () => { if (el.__actedAt !== null && el.__frameAt === null) el.__frameAt = performance.now(); };
            if (img.complete && img.naturalWidth > 0) done(); else img.addEventListener('load', done, {once: true});
        };
        new MutationObserver(records => { for (const r of records) {
            if (r.type === 'attributes' && r.target.tagName === 'IMG') seen(r.target);
            for (const n of r.addedNodes || []) {
                if (n.tagName === 'IMG') seen(n);
                else if (n.querySelectorAll) n.querySelectorAll('img').forEach(seen);
            }
        } }).observe(el, {subtree: true, childList: true, attributes: true, attributeFilter: ['src']});
    }
}"""
JS_READ_CLOCK = """el => (el.__actedAt !== null && el.__frameAt !== null) ? el.__frameAt - el.__actedAt : null"""
JS_EXPLORER_NAME = """e => { const cell = e.closest('.jp-Cell'); const code = cell && cell.querySelector('.jp-InputArea');
    const m = code ? (code.innerText || '').match(/(\\w+_explorer)\\s*\\(/) : null; return m ? m[1] : ''; }"""


class Timeout(Exception):
    pass


def poll(condition, timeout: float, interval: float = 0.25, what: str = "condition"):
    """Call ``condition`` until it returns something truthy; return that, or raise Timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise Timeout(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


class BrowserLab:
    """A JupyterLab server on a copy of a course, driven by headless Chromium (one per thread).

    Playwright's sync API belongs to the thread that started it, so each thread that calls
    ``check`` gets its own browser; a worker thread calls ``release_browser`` when done.
    """

    def __init__(
        self,
        course: Path = ROOT,
        results: Path = RESULTS,
        run_timeout: float = 300,
        wait: float = 180,
        redraw_timeout: float = 60,
    ):
        """``run_timeout``: seconds for one notebook's Run All; ``wait``: for any other step of the
        page (loading, kernel start, saving, pictures); ``redraw_timeout``: for an explorer's plot
        to change after a control moved. Generous: a loaded machine is slow, not broken."""
        self.course = Path(course).resolve()
        self.results = Path(results)
        self.run_timeout = run_timeout
        self.wait = wait
        self.redraw_timeout = redraw_timeout
        self._tmp: Path | None = None
        self.server: LabServer | None = None
        self._local = threading.local()
        self._lock = threading.Lock()
        self._started: set[str] = set()

    # -- lifecycle
    def __enter__(self) -> BrowserLab:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> None:
        if not Path(CHROMIUM).exists():
            raise RuntimeError(
                f"no Chromium at {CHROMIUM}: run `make test-browser` (it installs it) "
                f"or set CHROMIUM=/path/to/chromium"
            )
        self._tmp = Path(tempfile.mkdtemp(prefix="course-browser-"))
        served = self._tmp / "course"
        copy_course(self.course, served)
        self.results.mkdir(parents=True, exist_ok=True)
        self.server = LabServer(served, self._tmp / "jupyter", self.results / "jupyterlab.log")
        self.server.start()

    def add_course(self, source: Path, name: str) -> str:
        """Serve another (small) course as the folder ``name`` next to this one; returns ``name``."""
        copy_course(Path(source), self.served / name)
        return name

    def close(self) -> None:
        self.release_browser()
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    @property
    def served(self) -> Path:
        assert self.server is not None
        return self.server.root

    # -- this thread's browser
    def _browser(self):
        local = self._local
        if getattr(local, "browser", None) is None:
            from playwright.sync_api import sync_playwright

            local.contexts, local.pages = {}, {}
            local.playwright = sync_playwright().start()
            local.browser = local.playwright.chromium.launch(
                executable_path=CHROMIUM, args=CHROMIUM_ARGS
            )
        return local.browser

    def release_browser(self) -> None:
        """Close the calling thread's browser (a no-op when it has none)."""
        local = self._local
        local.contexts, local.pages = {}, {}
        for name in ("browser", "playwright"):
            thing = getattr(local, name, None)
            setattr(local, name, None)
            if thing is not None:
                with contextlib.suppress(Exception):
                    thing.close() if name == "browser" else thing.stop()

    def _context(self, block_widgets: bool):
        """One browser context per setting, kept across notebooks so JupyterLab's files stay cached."""
        browser = self._browser()
        contexts = self._local.contexts
        if block_widgets not in contexts:
            context = browser.new_context(viewport=VIEWPORT, device_scale_factor=1)
            if block_widgets:  # simulates a JupyterLab without the ipywidgets lab extension
                context.route(WIDGETS_EXTENSION, lambda route: route.abort())
            contexts[block_widgets] = context
        return contexts[block_widgets]

    def _page(self, block_widgets: bool):
        """The JupyterLab page of this thread, kept open between notebooks."""
        context = self._context(block_widgets)
        pages = self._local.pages
        if block_widgets not in pages:
            page = context.new_page()
            page.set_default_timeout(self.wait * 1000)
            pages[block_widgets] = page
        return pages[block_widgets]

    def _drop_page(self, block_widgets: bool) -> None:
        page = self._local.pages.pop(block_widgets, None)
        if page is not None:
            with contextlib.suppress(Exception):
                page.close()

    def prestart(self, relpath: str, background: bool = False) -> None:
        """Start a notebook's kernel ahead of time; in the background it overlaps with other work."""
        relpath = Path(relpath).as_posix()
        with self._lock:
            if relpath in self._started:
                return
            self._started.add(relpath)
        server = self.server

        def start():
            with contextlib.suppress(Exception):
                server.start_kernel(relpath)

        if background:
            threading.Thread(target=start, daemon=True).start()
        else:
            start()

    # -- one notebook
    def check(
        self,
        relpath: str,
        exercise: bool | None = None,
        block_widgets: bool = False,
        screenshot_name: str | None = None,
        redraw_timeout: float | None = None,
    ) -> NotebookReport:
        """Run one notebook (path relative to the served course) and report what went wrong.

        ``exercise`` defaults to "the notebook sits in a folder named notebooks/"; ``block_widgets``
        loads JupyterLab without the ipywidgets extension (for the harness's own test)."""
        relpath = Path(relpath).as_posix()
        if exercise is None:
            exercise = Path(relpath).parent.name == EXERCISE_FOLDER
        report = NotebookReport(relpath, exercise)
        started = time.monotonic()
        self.prestart(relpath)
        page = self._page(block_widgets)
        shot = self.results / (
            screenshot_name or relpath.replace("/", "__").removesuffix(".ipynb") + ".png"
        )
        healthy = False
        try:
            self._check(
                page,
                relpath,
                report,
                self.redraw_timeout if redraw_timeout is None else redraw_timeout,
            )
            healthy = True
        except Exception as exc:  # a timeout or a vanished element: report it, keep going
            report.problems.append(
                f"{type(exc).__name__}: {strip_ansi(str(exc)).splitlines()[0][:300]}"
            )
        finally:
            with contextlib.suppress(Exception):
                page.screenshot(path=str(shot))
                report.screenshot = str(
                    shot.relative_to(ROOT) if shot.is_relative_to(ROOT) else shot
                )
            try:
                if not healthy:
                    raise RuntimeError("start the next notebook on a fresh page")
                self._close_tabs(page)
            except Exception:
                self._drop_page(block_widgets)
            self.server.shutdown_kernels(relpath)
            with self._lock:
                self._started.discard(relpath)
            report.seconds = time.monotonic() - started
        return report

    def _check(self, page, relpath: str, report: NotebookReport, redraw_timeout: float) -> None:
        server = self.server
        file = self.served / relpath
        source_nb = nbformat.read(str(file), as_version=4)
        tree = f"/lab/tree/{urllib.parse.quote(relpath)}"
        clock = [time.monotonic()]
        if page.url.startswith(server.base + "/lab"):
            # JupyterLab is loaded: open the file as a user would, without reloading the app (less CPU).
            self._menu(page, "File", "Open from Path.*")
            page.locator(".jp-Dialog input").fill(relpath)
            page.locator(".jp-Dialog input").press("Enter")
        else:
            page.goto(f"{server.base}{tree}?reset&token={server.token}")
        page.locator(
            ".lm-DockPanel-tabBar .lm-mod-current .lm-TabBar-tabLabel",
            has_text=re.compile(f"^{re.escape(Path(relpath).name)}$"),
        ).wait_for()
        page.locator(".jp-Notebook .jp-Cell").first.wait_for()
        report.lap("open", clock)
        # A Run All clicked before the kernel exists is silently dropped: wait for "| Idle".
        poll(
            lambda: any(t.endswith("| Idle") for t in page.evaluate(JS_KERNEL_STATUS)),
            self.wait,
            what="the kernel to be idle",
        )
        report.lap("kernel", clock)
        self._menu(page, "Run", "Run All Cells")
        self._wait_run_finished(page)
        report.lap("run", clock)
        mtime = file.stat().st_mtime_ns
        self._menu(page, "File", r"Save Notebook|Save")
        poll(lambda: file.stat().st_mtime_ns != mtime, self.wait, what="the notebook to be saved")
        saved = poll(lambda: _read_complete(file), self.wait, what="a readable saved notebook")
        report.saved = saved
        report.lap("save", clock)

        problems, notes = execution_problems(saved, report.exercise)
        report.problems += problems
        report.notes += notes
        self._check_figures(page, source_nb, report)
        self._photograph_figure(page, relpath)
        report.lap("figures", clock)
        self._check_widgets(page, saved, report)
        report.lap("widgets", clock)
        self._check_explorers(page, report, redraw_timeout)
        report.lap("explorers", clock)

    def _close_tabs(self, page) -> None:
        self._menu(page, "File", "Close All Tabs")
        dialog = page.locator(".jp-Dialog")
        with contextlib.suppress(Timeout):
            poll(
                lambda: dialog.count() > 0 or page.locator(".jp-Notebook").count() == 0,
                self.wait,
                what="the notebook to close",
            )
        if (
            dialog.count()
        ):  # "Save your work?": the notebook was saved; what changed since is the test's
            dialog.locator("button", has_text=re.compile("Discard|Don.t Save")).first.click()
        poll(
            lambda: page.locator(".jp-Notebook").count() == 0,
            self.wait,
            what="the notebook to close",
        )

    def _menu(self, page, menu: str, item: str) -> None:
        page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{menu}$")).click()
        page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^(?:{item})$")).first.click()

    def _wait_run_finished(self, page) -> None:
        last: list = [None]

        def finished():
            prompts = page.evaluate(JS_PROMPTS)
            idle = any(t.endswith("| Idle") for t in page.evaluate(JS_KERNEL_STATUS))
            done = (
                idle
                and not any("*" in p for p in prompts)
                and any(re.search(r"\d", p) for p in prompts)
            )
            state = (done, tuple(prompts))
            stable = done and last[0] == state
            last[0] = state
            return stable

        poll(finished, self.run_timeout, interval=0.5, what="Run All to finish")

    def _check_figures(self, page, nb, report: NotebookReport) -> None:
        def images():
            found = page.evaluate(JS_IMAGES)
            return found if all(i["complete"] for i in found if i["local"]) else None

        try:
            found = poll(images, self.wait, what="the pictures to load")
        except Timeout:
            found = page.evaluate(JS_IMAGES)
        local = [i for i in found if i["local"]]
        for img in local:
            if not img["complete"] or img["width"] == 0:
                report.problems.append(f"picture did not load: {_short_src(img['src'])}")
        rendered = [i for i in local if "/figures/" in i["src"] or i["embedded"]]
        refs = figure_references(nb)
        report.figures = len(rendered)
        if len(rendered) != len(refs):
            report.problems.append(
                f"{len(refs)} figures referenced in the markdown but {len(rendered)} rendered"
            )
        skipped = len(found) - len(local)
        if skipped:
            report.notes.append(f"{skipped} external pictures not checked (offline browser)")

    def _photograph_figure(self, page, relpath: str) -> None:
        """A screenshot of the first markdown cell showing an embedded figure (proof it renders)."""
        cell = page.locator(".jp-Notebook .jp-MarkdownCell").filter(
            has=page.locator("img[src^='data:image/']")
        )
        if not cell.count():
            return
        with contextlib.suppress(Exception):
            cell.first.scroll_into_view_if_needed()
            name = relpath.replace("/", "__").removesuffix(".ipynb") + "__figure.png"
            cell.first.screenshot(path=str(self.results / name))

    def _check_widgets(self, page, saved, report: NotebookReport) -> None:
        def settled():
            cells = page.evaluate(JS_CELLS)
            texts = [o["text"] for c in cells for o in c["outputs"]]
            return None if any("Loading widget" in t for t in texts) else cells

        try:
            cells = poll(settled, self.wait, what="the widgets to render")
        except Timeout:
            cells = page.evaluate(JS_CELLS)
        if len(cells) != len(saved.cells):
            report.problems.append(
                f"the page shows {len(cells)} cells, the notebook has {len(saved.cells)}"
            )
            return
        for index, cell in enumerate(cells):
            for out in cell["outputs"]:
                text = out["text"]
                if not out["widget"] and WIDGET_AS_TEXT.search(text):
                    report.problems.append(
                        f"cell {index}: a widget is shown as text ({_first_line(text, 60)!r}): "
                        f"the ipywidgets lab extension did not load"
                    )
                elif "Error displaying widget" in text:
                    report.problems.append(f"cell {index}: {_first_line(text)}")
                elif "Loading widget" in text:
                    report.problems.append(f"cell {index}: a widget never finished loading")
        for index in explorer_cells(saved):
            nb_cell = saved.cells[index]
            ran_clean = nb_cell.get("execution_count") is not None and not any(
                o.get("output_type") == "error" for o in nb_cell.get("outputs", [])
            )
            if ran_clean and not any(o["widget"] for o in cells[index]["outputs"]):
                report.problems.append(f"cell {index}: explorer cell shows no widget")

    def _check_explorers(self, page, report: NotebookReport, redraw_timeout: float) -> None:
        explorers = page.locator(
            ".jp-Notebook .jp-Cell-outputArea > .jp-OutputArea-child > .jp-OutputArea-output"
        ).filter(has=page.locator(PLOT_WIDGETS))
        first = None
        for number in range(explorers.count()):
            explorer = explorers.nth(number)
            report.explorers += 1
            first = first or explorer
            where = f"explorer {number + 1}"
            name = ""
            with contextlib.suppress(Exception):
                name = explorer.evaluate(JS_EXPLORER_NAME)
            latencies = report.latencies.setdefault(f"{where} {name}".strip(), [])
            explorer.scroll_into_view_if_needed()
            try:
                before = poll(
                    lambda e=explorer: _plot_ready(e), self.wait, what=f"{where}'s first plot"
                )
            except Timeout:
                report.problems.append(f"{where}: shows no plot (no loaded picture in its Output)")
                continue
            moved_any = False
            for kind, selector in CONTROLS:
                controls = explorer.locator(selector)
                for i in range(controls.count()):
                    control = controls.nth(i)
                    label = _control_label(control) or f"{kind} {i + 1}"
                    explorer.evaluate(JS_ARM_CLOCK)
                    moved_at = _move(page, kind, control)
                    if moved_at is None:
                        report.notes.append(
                            f"{where}: {kind} {label!r} has a single value; not moved"
                        )
                        continue
                    moved_any = True
                    report.controls_moved += 1
                    try:
                        poll(
                            lambda e=explorer, b=before: _plot_changed(e, b["key"]),
                            redraw_timeout,
                            interval=0.02,
                            what=f"{where}'s plot to change",
                        )
                        in_page = explorer.evaluate(JS_READ_CLOCK)
                        latencies.append(
                            in_page if in_page else (time.monotonic() - moved_at) * 1000
                        )
                        before = poll(
                            lambda e=explorer, b=before: _plot_ready(e, b["key"]),
                            redraw_timeout,
                            what=f"{where}'s plot to settle",
                        )
                    except Timeout:
                        report.problems.append(
                            f"{where}: moving {kind} {label!r} did not change the plot"
                        )
            if not moved_any:
                report.problems.append(f"{where}: has no control that could be moved")
            skipped = explorer.locator(SKIPPED_CONTROLS).count()
            if skipped:
                report.notes.append(f"{where}: {skipped} text inputs not exercised")
        # The screenshot shows the first explorer's cell (code, controls, plot), else the title.
        target = first if first is not None else page.locator(".jp-Notebook .jp-Cell").first
        with contextlib.suppress(Exception):
            target.evaluate("e => (e.closest('.jp-Cell') || e).scrollIntoView({block: 'start'})")
            time.sleep(0.3)


def _read_complete(path: Path):
    try:
        return nbformat.read(str(path), as_version=4)
    except Exception:
        return None


def _short_src(src: str) -> str:
    return urllib.parse.unquote(src.split("?")[0].split("/files/", 1)[-1])


def _plot_changed(explorer, old_key: str) -> bool:
    """True as soon as the plot shows a different picture and every picture has loaded."""
    now = explorer.evaluate(JS_PLOT)
    return bool(now["n"] and now["loaded"] and now["key"] != old_key)


def _plot_ready(explorer, old_key: str | None = None):
    """The plot's state once every picture is loaded and (if given) differs from ``old_key``; stable twice."""
    first = explorer.evaluate(JS_PLOT)
    if not first["n"] or not first["loaded"] or first["key"] == old_key:
        return None
    time.sleep(0.3)
    second = explorer.evaluate(JS_PLOT)
    return second if second["loaded"] and second["key"] == first["key"] else None


def _control_label(control) -> str:
    with contextlib.suppress(Exception):
        return control.evaluate("""e => { const box = e.closest('.widget-inline-hbox') || e;
            const l = box.querySelector('.widget-label'); return l ? l.textContent.trim() : ''; }""")
    return ""


def _move(page, kind: str, control) -> float | None:
    """Change a control's value once, as a user would: the monotonic time of the action that changed
    it (a slider at its end first tries the other way), or None when it has a single value."""
    control.scroll_into_view_if_needed()
    if kind.endswith("slider"):
        readout = control.locator(".widget-readout")
        value = lambda: readout.first.inner_text() if readout.count() else None
        handle = control.locator(".noUi-handle").first
        before = value()
        for key in ("ArrowRight", "ArrowLeft", "ArrowLeft"):
            handle.focus()
            pressed = time.monotonic()
            handle.press(key)
            with contextlib.suppress(Timeout):
                poll(lambda: value() != before, 5, interval=0.1, what="the readout")
                return pressed
            if before is None:
                return pressed  # no readout to compare: trust the plot check
        return None
    acted = time.monotonic()
    if kind == "dropdown":
        options = control.evaluate("s => [s.options.length, s.selectedIndex]")
        if options[0] < 2:
            return None
        acted = time.monotonic()
        control.select_option(index=(options[1] + 1) % options[0])
        return acted
    if kind == "checkbox":
        control.click()
        return acted
    buttons = control.locator("button" if kind == "toggle buttons" else "input[type=radio]")
    for i in range(buttons.count()):
        button = buttons.nth(i)
        chosen = button.evaluate("b => b.classList.contains('mod-active') || b.checked === true")
        if not chosen:
            acted = time.monotonic()
            button.click()
            return acted
    return None


# ----------------------------------------------------------------------------- course
def course_notebooks(course: Path = ROOT) -> list[str]:
    """Every chapter notebook of the course, solutions first, as paths relative to the course."""
    found = []
    for folder in COURSE_FOLDERS:
        found += [
            p.relative_to(course).as_posix()
            for p in sorted((course / folder).glob("[0-9][0-9]_*.ipynb"))
        ]
    return found


def run_notebooks(
    lab: BrowserLab, notebooks: Iterable[str], workers: int = 2, echo=print
) -> list[NotebookReport]:
    """Check notebooks with ``workers`` pages at once (the calling thread is one of them)."""
    queue = list(notebooks)
    reports: dict[str, NotebookReport] = {}
    lock = threading.Lock()

    def work(own_browser: bool) -> None:
        try:
            while True:
                with lock:
                    if not queue:
                        return
                    relpath = queue.pop(0)
                    following = queue[0] if queue else None
                lab.prestart(relpath)
                if following:  # its kernel starts while this notebook runs
                    lab.prestart(following, background=True)
                report = lab.check(relpath)
                report.saved = None
                with lock:
                    reports[relpath] = report
                    echo(report.format(), flush=True)
        finally:
            if own_browser:
                lab.release_browser()

    helpers = [
        threading.Thread(target=work, args=(True,), daemon=True) for _ in range(max(1, workers) - 1)
    ]
    for thread in helpers:
        thread.start()
    work(False)
    for thread in helpers:
        thread.join()
    return [reports[n] for n in notebooks if n in reports]


def run(
    notebooks: Iterable[str],
    course: Path = ROOT,
    results: Path = RESULTS,
    run_timeout: float = 300,
    workers: int = 2,
    echo=print,
) -> list[NotebookReport]:
    notebooks = list(notebooks)
    with BrowserLab(course, results, run_timeout=run_timeout) as lab:
        return run_notebooks(lab, notebooks, workers, echo)


@contextlib.contextmanager
def terminate_on_sigterm() -> Iterator[None]:
    """Turn SIGTERM into SystemExit so the ``finally`` blocks stop the server and the browser."""

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "notebooks", nargs="*", help="paths relative to the course (default: every chapter)"
    )
    parser.add_argument(
        "--course", type=Path, default=ROOT, help="course root (default: this repository)"
    )
    parser.add_argument("--results", type=Path, default=RESULTS, help="screenshot folder")
    parser.add_argument(
        "--run-timeout", type=float, default=300, help="seconds for one notebook's Run All"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=int(os.environ.get("COURSE_BROWSER_WORKERS", "2")),
        help="notebooks checked at once (default 2, or $COURSE_BROWSER_WORKERS)",
    )
    args = parser.parse_args(argv)
    course = args.course.resolve()
    notebooks = [
        Path(n).resolve().relative_to(course).as_posix() if Path(n).exists() else n
        for n in args.notebooks
    ] or course_notebooks(course)
    if not notebooks:
        print(
            f"no chapter notebooks found under {course}/{{{','.join(COURSE_FOLDERS)}}}",
            file=sys.stderr,
        )
        return 1
    started = time.monotonic()
    with terminate_on_sigterm():
        reports = run(notebooks, course, args.results, args.run_timeout, args.workers)
    failed = [r for r in reports if not r.ok]
    print(
        f"\n{len(reports) - len(failed)} of {len(reports)} notebooks passed in {time.monotonic() - started:.0f} s"
        f"; screenshots in {args.results}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
