"""The website in headless Chromium: every page, link, image, formula and explorer control.

``check_site(folder)`` serves a built site on 127.0.0.1, opens every page and returns a
:class:`Report`: the problems found (a broken link or image, a request that failed or left the
machine, unrendered math, a picture shown too small to read, an explorer control that brought no
new picture) and, per explorer, the milliseconds from each input event to the new picture loaded,
decoded and painted (measured in the page). ``tests/site/test_site.py`` runs it on ``make site``'s
output and on a small broken site that it must fault.
"""

from __future__ import annotations

import functools
import http.server
import os
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]  # fmt: skip
MIN_SHOWN = {"figure": 821, "frame": 844}
"""A picture must be shown at least this wide (or at its natural width if narrower): the widths
``tests/test_legibility.py`` proves every text >= 9 px at (tools.figures.catalogue.DISPLAY_WIDTH, FRAME_WIDTH)."""
MOVE_TIMEOUT_MS = 5000


@dataclass
class Report:
    pages: int = 0
    links: int = 0
    external: set = field(default_factory=set)
    images: int = 0
    formulas: int = 0
    problems: list = field(default_factory=list)
    times: dict = field(default_factory=dict)  # explorer name -> [ms per move]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        """A request the browser dropped (a preload cut short by the next page) is no problem."""
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


def serve(folder: Path):
    """An HTTP server of ``folder`` on a free port of 127.0.0.1, in a thread; returns it."""
    handler = functools.partial(_Quiet, directory=str(folder))
    server = _Server(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


_PAGE_FACTS = """() => {
  const shown = [...document.querySelectorAll('article img, .bd-article img')].map(img => ({
    src: img.currentSrc || img.src, ok: img.complete && img.naturalWidth > 0,
    natural: img.naturalWidth, width: img.getBoundingClientRect().width,
    frame: img.classList.contains('ce-frame')}));
  const links = [...document.querySelectorAll('a[href]')].map(a => a.href);
  const ids = [...document.querySelectorAll('[id]')].map(e => e.id);
  const raw = [...document.querySelectorAll('.math')].filter(e => !e.querySelector('mjx-container'))
    .map(e => e.textContent.slice(0, 60));
  const errors = [...document.querySelectorAll('mjx-merror')].map(e => e.textContent.slice(0, 60));
  const prose = (e, drop) => { const c = e.cloneNode(true); c.querySelectorAll(drop).forEach(x => x.remove());
    return c.textContent; };  // the text without its inline code, where the guides quote $...$ as code
  const dollars = [...document.querySelectorAll('article p, article li')]
    .filter(e => !e.closest('.output, pre') && /\\$[^$\\s][^$]*\\$/.test(prose(e, 'code')))
    .map(e => prose(e, 'code').slice(0, 60));
  const text = prose(document.body, 'p code, li code, td code');
  return {shown, links, ids, raw, errors, dollars, formulas: document.querySelectorAll('mjx-container').length,
          vbox: /VBox\\(children=|static view: run in JupyterLab/.test(text)};
}"""

_WAIT_MATH = """async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  await Promise.all([...document.images].map(img => img.complete ? null :
    new Promise(r => { img.addEventListener('load', r); img.addEventListener('error', r); })));
}"""

_ARM = """([index]) => {
  const box = document.querySelectorAll('.course-explorer')[index];
  const img = box.querySelector('img.ce-frame');
  const mark = {start: null, before: img.src};
  window.__move = new Promise((resolve) => {
    const start = (e) => { if (mark.start === null) mark.start = e.timeStamp; };
    box.addEventListener('keydown', start, {capture: true, once: true});
    box.addEventListener('input', start, {capture: true, once: true});
    img.addEventListener('load', () => img.decode().then(() => requestAnimationFrame(() =>
      resolve({ms: performance.now() - mark.start, src: img.src}))), {once: true});
    setTimeout(() => resolve({ms: null, src: img.src}), TIMEOUT);
  });
}""".replace("TIMEOUT", str(MOVE_TIMEOUT_MS))

_STATE = """([index]) => {
  const box = document.querySelectorAll('.course-explorer')[index];
  const m = JSON.parse(box.querySelector('script.ce-manifest').textContent);
  const at = m.controls.map(() => 0);
  box.querySelectorAll('[data-control]').forEach(i => { at[Number(i.dataset.control)] = Number(i.value); });
  const file = m.frames[at.reduce((s, k, c) => s + k * m.strides[c], 0)];
  return {name: box.dataset.explorer, at, file, src: box.querySelector('img.ce-frame').src,
          message: box.querySelector('.ce-message').textContent, controls: m.controls, base: m.base};
}"""


def _check_links(report: Report, page_url: str, facts: dict, root: Path, base: str) -> None:
    for href in facts["links"]:
        report.links += 1
        url = urlparse(href)
        if not href.startswith(base):
            if url.scheme in ("http", "https"):
                report.external.add(url.netloc)
            continue
        path = root / unquote(url.path.lstrip("/"))
        if path.is_dir():
            path = path / "index.html"
        if not path.exists():
            report.problems.append(f"{page_url}: broken link {href}")
        elif url.fragment and path.suffix == ".html":
            if f'id="{url.fragment}"' not in path.read_text(encoding="utf-8", errors="replace"):
                report.problems.append(f"{page_url}: link to a missing anchor {href}")


def _check_page(report: Report, page, page_url: str, root: Path, base: str) -> None:
    page.evaluate(_WAIT_MATH)
    facts = page.evaluate(_PAGE_FACTS)
    report.pages += 1
    report.formulas += facts["formulas"]
    _check_links(report, page_url, facts, root, base)
    for img in facts["shown"]:
        report.images += 1
        if not img["ok"]:
            report.problems.append(f"{page_url}: image does not load: {img['src'][:120]}")
            continue
        least = min(img["natural"], MIN_SHOWN["frame" if img["frame"] else "figure"])
        if img["width"] + 0.5 < least:
            report.problems.append(
                f"{page_url}: {img['src'][-60:]} shown {img['width']:.0f} px wide, under {least} px: "
                "its smallest text would be under 9 px"
            )
    for what in ("raw", "errors", "dollars"):
        report.problems += [f"{page_url}: unrendered math ({what}): {t!r}" for t in facts[what]]
    if facts["vbox"]:
        report.problems.append(
            f"{page_url}: a widget's text or the static-view note is on the page"
        )


def _move(page, index: int, do) -> dict:
    page.evaluate(_ARM, [index])
    before = page.evaluate(_STATE, [index])
    do()
    state = page.evaluate(_STATE, [index])
    if (
        isinstance(state["file"], str)
        and state["base"] + state["file"] != before["base"] + before["file"]
    ):
        state["timing"] = page.evaluate("() => window.__move")
    return state


def check_explorers(report: Report, page, page_url: str) -> None:
    """Move every control of every explorer of the page through all its values and back."""
    count = page.locator(".course-explorer").count()
    for index in range(count):
        box = page.locator(".course-explorer").nth(index)
        state = page.evaluate(_STATE, [index])
        name, times = state["name"], report.times.setdefault(state["name"], [])
        for c, control in enumerate(state["controls"]):
            if control["kind"] == "text":
                continue
            element, last = box.locator(f'[data-control="{c}"]'), len(control["labels"]) - 1
            if control["kind"] == "dropdown":
                plan = [*range(last + 1), control["start"]]
                steps = [functools.partial(element.select_option, str(k)) for k in plan]
            else:
                element.focus()
                keys = ["ArrowLeft"] * control["start"] + ["ArrowRight"] * last
                keys += ["ArrowLeft"] * (last - control["start"])
                steps = [functools.partial(element.press, key) for key in keys]
            for step in steps:
                state = _move(page, index, step)
                where = f"{page_url}: {name}, {control['label']} at {control['labels'][state['at'][c]]!r}"
                if not isinstance(state["file"], str):
                    if state["message"] != state["file"]["error"]:
                        report.problems.append(
                            f"{where}: the rejected value's sentence is not shown"
                        )
                elif not state["src"].endswith(state["file"]):
                    report.problems.append(
                        f"{where}: shows {state['src'][-30:]}, not {state['file']}"
                    )
                elif "timing" in state:
                    if state["timing"]["ms"] is None:
                        report.problems.append(
                            f"{where}: no new picture within {MOVE_TIMEOUT_MS} ms"
                        )
                    else:
                        times.append(state["timing"]["ms"])
        for text in state["controls"]:
            if text["kind"] == "text" and not box.locator("input[type=text][disabled]").count():
                report.problems.append(f"{page_url}: {name}'s text box should be shown, fixed")
        if not times:
            report.problems.append(f"{page_url}: {name}: no move brought a new picture")


def check_site(folder: Path, search_word: str | None = "softmax") -> Report:
    """Open every page of the site in ``folder`` and move every explorer control (see the module)."""
    from playwright.sync_api import sync_playwright

    report, server = Report(), serve(folder)
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    pages = sorted(
        p.relative_to(folder).as_posix() for p in folder.rglob("*.html") if "_static" not in p.parts
    )
    try:
        with sync_playwright() as play:
            browser = play.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            failed = []
            page.on("requestfailed", lambda r: failed.append(f"{r.url} ({r.failure})"))
            page.on(
                "response",
                lambda r: failed.append(f"{r.url} ({r.status})") if r.status >= 400 else None,
            )
            page.route(
                "**/*",
                lambda route: (
                    route.continue_() if route.request.url.startswith(base) else route.abort()
                ),
            )
            for rel in pages:
                failed.clear()
                page.goto(base + rel, wait_until="load")
                _check_page(report, page, rel, folder, base)
                check_explorers(report, page, rel)
                report.problems += [
                    f"{rel}: request failed or left the machine: {f}" for f in failed
                ]
            if search_word:
                page.goto(f"{base}search.html?q={search_word}", wait_until="load")
                try:
                    page.wait_for_selector("#search-results ul li", timeout=10000)
                except Exception:  # noqa: BLE001 - the problem is said below
                    report.problems.append(f"search: no result for {search_word!r}")
            browser.close()
    finally:
        server.shutdown()
    return report
