"""What the browser test runs in the page: JavaScript probes, control selectors, waiting, and moving
a control as a user would. Part of run_browser_tests."""

from __future__ import annotations

import contextlib
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import nbformat

# ----------------------------------------------------------------------------- browser
JS_PROMPTS = """() => [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputArea-prompt')]
    .map(e => e.textContent.trim())"""
JS_KERNEL_STATUS = """() => [...document.querySelectorAll('.jp-StatusBar-TextItem')].map(e => e.textContent.trim())
    .filter(t => / \\| \\w+$/.test(t))"""
JS_IMAGES = """() => [...document.querySelectorAll('.jp-Notebook .jp-MarkdownOutput img')].map(img => {
    const src = img.getAttribute('src') || '', url = new URL(img.src, location.href);
    const embedded = ['data:', 'blob:', 'attachment:'].includes(url.protocol);
    return {src: src, local: embedded || url.origin === location.origin, embedded: embedded,
            complete: img.complete, width: img.naturalWidth, shown: img.getBoundingClientRect().width};
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
JS_FRAMES = """el => [...el.querySelectorAll('.widget-html img.course-frame')].filter(i => i.naturalWidth > 0)
    .map(i => ({natural: i.naturalWidth, shown: i.getBoundingClientRect().width}))"""
JS_RESTART_CLOCK = """e => { let x = e; while (x && !x.__clockArmed) x = x.parentElement;
    if (x) { x.__actedAt = null; x.__frameAt = null; } }"""
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
            # A key that changed nothing (a slider at its end) must not start the clock.
            handle.evaluate(JS_RESTART_CLOCK)
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


def _width_problems(what: str, images: list[dict], limit: float, name: str) -> list[str]:
    """Pictures not shown at min(natural width, ``limit``) CSS px: the widths the legibility test
    (tests/test_legibility.py) assumes, in this harness's 1280-px window with the file browser open."""
    return [
        f"{what}: a picture {i['natural']} px wide is shown {i['shown']:.0f} px wide, not "
        f"{min(i['natural'], limit)}: JupyterLab's layout changed; re-measure tools.figures.catalogue.{name}"
        for i in images
        if i.get("natural", i.get("width", 0))
        and abs(i["shown"] - min(i.get("natural", i.get("width")), limit)) > 2
    ]
