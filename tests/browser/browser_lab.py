"""The headless browser on a served course: one notebook opened, run, saved and checked.
Part of run_browser_tests."""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import nbformat

from tests.browser.lab_server import (
    CHROMIUM,
    CHROMIUM_ARGS,
    EXERCISE_FOLDER,
    RESULTS,
    ROOT,
    VIEWPORT,
    WIDGETS_EXTENSION,
    LabServer,
    copy_course,
)
from tests.browser.notebook_report import (
    WIDGET_AS_TEXT,
    NotebookReport,
    _first_line,
    execution_problems,
    explorer_cells,
    figure_references,
    strip_ansi,
)
from tests.browser.page import (
    CONTROLS,
    JS_ARM_CLOCK,
    JS_CELLS,
    JS_EXPLORER_NAME,
    JS_FRAMES,
    JS_IMAGES,
    JS_KERNEL_STATUS,
    JS_PROMPTS,
    JS_READ_CLOCK,
    PLOT_WIDGETS,
    SKIPPED_CONTROLS,
    Timeout,
    _control_label,
    _move,
    _plot_changed,
    _plot_ready,
    _read_complete,
    _short_src,
    _width_problems,
    poll,
)
from tools.figures.catalogue import DISPLAY_WIDTH, FRAME_WIDTH


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
        passes: int = 1,
    ):
        """``run_timeout``: seconds for one notebook's Run All; ``wait``: for any other step of the
        page (loading, kernel start, saving, pictures); ``redraw_timeout``: for an explorer's plot
        to change after a control moved. Generous: a loaded machine is slow, not broken."""
        self.course = Path(course).resolve()
        self.results = Path(results)
        self.run_timeout = run_timeout
        self.wait = wait
        self.redraw_timeout = redraw_timeout
        self.passes = passes  # times every explorer control is moved (more timings per explorer)
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
        report.problems += _width_problems("figure", rendered, DISPLAY_WIDTH, "DISPLAY_WIDTH")
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
            frames = explorer.evaluate(JS_FRAMES)
            report.problems += _width_problems(where, frames, FRAME_WIDTH, "FRAME_WIDTH")
            moved_any = False
            for kind, selector in CONTROLS * self.passes:
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
