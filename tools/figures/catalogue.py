"""Every diagram of the course, drawn from code into ``figures/`` (``make figures``).

Usage::

    python -m tools.figures.catalogue                  # (re)write every figures/*.png (make figures)
    python -m tools.figures.catalogue --check          # exit 1 if a committed figure would change
    python -m tools.figures.catalogue --out /tmp/f causal_mask   # one figure, elsewhere

The output is byte-for-byte deterministic on a given matplotlib version (fixed size,
dpi, fonts and style; no "Software" or date metadata), so ``tests/test_figures.py`` can
regenerate the figures and compare bytes with the committed files.

:data:`FIGURES` maps each figure's name to its chapter, its alt text and its drawing
function, collected from each chapter's ``tools/figures/diagrams/chNN.py`` (its ``FIGURES``: name ->
(alt text, drawing function)), the one home of every alt text (:func:`alt_text`). Notebooks embed a figure as
``![<alt text>](attachment:<name>.png)`` (the generator writes it) or
``![<alt text>](../figures/<name>.png)`` (:func:`markdown`); the tests check both forms.
Instructor machinery: students never import this module.
"""

from __future__ import annotations

import argparse
import base64
import importlib
import io
import json
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import matplotlib
import matplotlib.style
from matplotlib.figure import Figure

from course_utils.validation import CourseInputError

ROOT = Path(__file__).resolve().parents[2]
FIGURES_DIR = ROOT / "figures"
DPI = 150

STYLE = {
    "font.family": "DejaVu Sans",
    "mathtext.fontset": "dejavusans",
    "font.size": 10,
    "axes.titlesize": 11,
    "figure.facecolor": "white",
    "savefig.facecolor": "white",
    "image.interpolation": "nearest",
    "path.simplify": True,
}
"""The rcParams every figure is drawn with, on top of matplotlib's defaults."""

DISPLAY_WIDTH = 821
"""CSS pixels a markdown image gets at most in JupyterLab 4.6 in a 1280-pixel-wide window with the
file browser open (its layout on first start): the image fills its cell's 846 px less 25 px of
padding (``max-width: 100%``) and shows at its natural size when narrower. Measured in headless
Chromium; ``make test-browser`` checks every figure of the course is shown at this width."""
FRAME_WIDTH = 844
"""CSS pixels an explorer's frame gets at most there (an HTML widget's ``<img style="max-width:100%">``
in an output area 848 px wide); checked by ``make test-browser`` like :data:`DISPLAY_WIDTH`."""
MIN_TEXT_PX = 9
"""The smallest text allowed at display size: its font size (the em, as CSS's ``font-size``) in CSS px."""


# ----------------------------------------------------------------------------- the catalogue
class FigureSpec(NamedTuple):
    """One figure: the chapter that shows it, its alt text, and the function drawing it."""

    chapter: str
    alt: str
    draw: Callable[[], Figure]


def _catalogue() -> dict[str, FigureSpec]:
    """Every chapter's ``FIGURES`` (tools/figures/diagrams/chNN.py), found by scanning, in chapter order."""
    figures: dict[str, FigureSpec] = {}
    for path in sorted((Path(__file__).parent / "diagrams").glob("ch[0-9][0-9].py")):
        module = importlib.import_module(f"tools.figures.diagrams.{path.stem}")
        for name, (alt, draw) in module.FIGURES.items():
            if name in figures:
                raise ValueError(
                    f"{path.name}: figure {name!r} is already drawn by chapter "
                    f"{figures[name].chapter}"
                )
            figures[name] = FigureSpec(path.stem[2:], alt, draw)
    return figures


FIGURES: dict[str, FigureSpec] = _catalogue()
"""Every figure of the course by name (the file is ``figures/<name>.png``)."""


def _check_name(name: str) -> FigureSpec:
    if name not in FIGURES:
        raise CourseInputError(
            f"name must be one of the course's figures {sorted(FIGURES)}, but got {name!r}."
        )
    return FIGURES[name]


def path(name: str, folder: Path | str = FIGURES_DIR) -> Path:
    """Where figure ``name`` lives: ``figures/<name>.png``."""
    _check_name(name)
    return Path(folder) / f"{name}.png"


def alt_text(name: str) -> str:
    """The alt text of figure ``name``: its one home, used by the notebook generator and the tests."""
    return _check_name(name).alt


def markdown(name: str, prefix: str = "../figures") -> str:
    """The markdown a notebook uses to show figure ``name``: ``![<alt>](../figures/<name>.png)``."""
    spec = _check_name(name)
    return f"![{spec.alt}]({prefix}/{name}.png)"


def render(name: str) -> Figure:
    """Draw figure ``name`` with the course style and return it (nothing is written)."""
    spec = _check_name(name)
    with matplotlib.style.context("default"), matplotlib.rc_context(STYLE):
        return spec.draw()


def save(name: str, folder: Path | str = FIGURES_DIR) -> Path:
    """Draw figure ``name`` and write ``<folder>/<name>.png`` deterministically; return the path."""
    spec = _check_name(name)
    target = path(name, folder)
    target.parent.mkdir(parents=True, exist_ok=True)
    with matplotlib.style.context("default"), matplotlib.rc_context(STYLE):
        fig = spec.draw()
        fig.savefig(target, format="png", dpi=DPI, metadata={"Software": None}, facecolor="white")
    return target


def generate(folder: Path | str = FIGURES_DIR, names: Iterable[str] | None = None) -> list[Path]:
    """Write every figure (or the named ones) into ``folder``; return their paths."""
    return [save(name, folder) for name in (FIGURES if names is None else names)]


# ----------------------------------------------------------------------------- legibility
def drawn_texts(fig: Figure, dpi: float) -> list[tuple[float, str]]:
    """(font size in pt, text) of every non-empty text ``fig`` draws when saved at ``dpi``.

    Recorded while saving, so only what is really drawn counts (saving draws animated artists
    too; tick labels outside the view are not drawn)."""
    from unittest import mock

    from matplotlib.text import Text

    drawn: list[tuple[float, str]] = []
    original = Text.draw

    def record(text, renderer, *args, **kwargs):
        if text.get_visible() and text.get_text().strip():
            drawn.append((text.get_fontsize(), text.get_text()))
        return original(text, renderer, *args, **kwargs)

    with mock.patch.object(Text, "draw", record):
        fig.savefig(io.BytesIO(), format="png", dpi=dpi)
    return drawn


def text_px(fig: Figure, dpi: float, shown_width: float) -> list[tuple[float, str]]:
    """(height in CSS px on screen, text) of every drawn text, smallest first, for a picture of
    ``fig`` at ``dpi`` shown at most ``shown_width`` CSS px wide (narrower ones at natural size)."""
    natural = fig.get_size_inches()[0] * dpi
    scale = min(1.0, shown_width / natural)
    return sorted((size * dpi / 72 * scale, text) for size, text in drawn_texts(fig, dpi))


def small_text(
    fig: Figure, dpi: float, shown_width: float, minimum: float = MIN_TEXT_PX
) -> list[str]:
    """One line per drawn text under ``minimum`` px at display size (empty when all are readable)."""
    return [
        f"{px:.1f} px: {text[:40]!r}" for px, text in text_px(fig, dpi, shown_width) if px < minimum
    ]


# ----------------------------------------------------------------------------- references in notebooks
_MARKDOWN_IMAGE = re.compile(
    r"!\[(?P<alt>[^\]]*)\]\(\s*<?(?P<src>[^)\s>]+)>?(?:\s+[\"'](?P<title>[^)]*)[\"'])?\s*\)"
)
_DATA_PNG = "data:image/png;base64,"
_HTML_IMAGE = re.compile(r"<img\b[^>]*>", re.IGNORECASE)
_HTML_ATTRIBUTE = re.compile(
    r"\b(?P<name>src|alt)\s*=\s*(?P<quote>[\"'])(?P<value>.*?)(?P=quote)", re.IGNORECASE | re.DOTALL
)


@dataclass(frozen=True)
class FigureReference:
    """One image a notebook's markdown shows from ``figures/`` or from the cell's attachments."""

    notebook: Path
    cell: int
    src: str  # as written, e.g. ../figures/causal_mask.png, attachment:causal_mask.png, or
    # figures/causal_mask.png for an inline data: PNG (the title names its source)
    alt: str | None
    target: Path | None  # a file: resolved against the notebook's folder; None when embedded
    attached: bytes | None = None  # embedded: its PNG bytes (None when an attachment is missing)

    @property
    def name(self) -> str:
        return Path(self.src.removeprefix("attachment:")).stem


def figure_references(notebook: Path | str) -> list[FigureReference]:
    """Every ``![alt](.../figures/x.png)``, ``<img src=".../figures/x.png">``, ``![alt](attachment:x.png)``
    and inline ``![alt](data:image/png;base64,... "figures/x.png")``."""
    notebook = Path(notebook)
    cells = json.loads(notebook.read_text(encoding="utf-8")).get("cells", [])
    found = []
    for index, cell in enumerate(cells):
        if cell.get("cell_type") != "markdown":
            continue
        source = cell.get("source", "")
        text = "".join(source) if isinstance(source, list) else source
        candidates = []
        for m in _MARKDOWN_IMAGE.finditer(text):
            if m["src"].startswith(_DATA_PNG) and (m["title"] or "").startswith("figures/"):
                data = base64.b64decode(m["src"][len(_DATA_PNG) :])
                found.append(FigureReference(notebook, index, m["title"], m["alt"], None, data))
            else:
                candidates.append((m["src"], m["alt"]))
        for tag in _HTML_IMAGE.finditer(text):
            attributes = {
                m["name"].lower(): m["value"] for m in _HTML_ATTRIBUTE.finditer(tag.group())
            }
            if "src" in attributes:
                candidates.append((attributes["src"], attributes.get("alt")))
        for src, alt in candidates:
            if src.startswith("attachment:"):
                data = (
                    cell.get("attachments", {})
                    .get(src.removeprefix("attachment:"), {})
                    .get("image/png")
                )
                attached = (
                    base64.b64decode("".join(data) if isinstance(data, list) else data)
                    if data
                    else None
                )
                found.append(FigureReference(notebook, index, src, alt, None, attached))
                continue
            if "://" in src or src.startswith("data:") or "figures/" not in src:
                continue
            target = (notebook.parent / src.split("#")[0].split("?")[0]).resolve()
            found.append(FigureReference(notebook, index, src, alt, target))
    return found


def broken_figure_references(notebooks: Iterable[Path | str]) -> list[str]:
    """One message per reference whose file or attachment is missing or out of date (empty when all are fine)."""
    problems = []
    for notebook in notebooks:
        for ref in figure_references(notebook):
            where = f"{_show(ref.notebook)}, cell {ref.cell}: {ref.src!r}"
            if ref.target is None:
                if ref.attached is None:
                    problems.append(f"{where} is not among the cell's attachments.")
                elif (
                    ref.name in FIGURES
                    and path(ref.name).is_file()
                    and path(ref.name).read_bytes() != ref.attached
                ):
                    problems.append(
                        f"{where} differs from figures/{ref.name}.png: regenerate the notebook."
                    )
            elif not ref.target.is_file():
                hint = (
                    "`make figures` writes it"
                    if ref.name in FIGURES
                    else f"known figures: {', '.join(sorted(FIGURES))}"
                )
                problems.append(
                    f"{where} points to {_show(ref.target)}, which does not exist ({hint})."
                )
    return problems


def alt_text_mismatches(notebooks: Iterable[Path | str]) -> list[str]:
    """One message per reference to a course figure whose alt text differs from :data:`FIGURES`."""
    problems = []
    for notebook in notebooks:
        for ref in figure_references(notebook):
            spec = FIGURES.get(ref.name)
            if spec is not None and ref.alt != spec.alt:
                problems.append(
                    f"{_show(ref.notebook)}, cell {ref.cell}: figure {ref.name!r} has alt text "
                    f"{ref.alt!r}, expected tools.figures.catalogue.alt_text({ref.name!r})."
                )
    return problems


def _show(p: Path) -> str:
    try:
        return str(Path(p).resolve().relative_to(ROOT))
    except ValueError:
        return str(p)


# ----------------------------------------------------------------------------- command line
def figure_differences(committed: Path | str, fresh: Path | str) -> list[str]:
    """Compare the committed figures with freshly drawn ones, byte for byte; one message per problem."""
    committed, fresh = Path(committed), Path(fresh)
    problems = []
    for name in FIGURES:
        old, new = path(name, committed), path(name, fresh)
        if not new.is_file():
            problems.append(f"{name}: no fresh drawing at {_show(new)}")
        elif not old.is_file():
            problems.append(f"{name}: {_show(old)} is missing")
        elif old.read_bytes() != new.read_bytes():
            problems.append(f"{name}: {_show(old)} differs from what the code draws")
    for stray in sorted(committed.glob("*.png")):
        if stray.stem not in FIGURES:
            problems.append(
                f"{stray.name}: not drawn by tools/figures/catalogue.py (remove it or add it to a FIGURES of tools/figures/diagrams/chNN.py)"
            )
    return problems


def stale_figures(folder: Path | str = FIGURES_DIR) -> list[str]:
    """Draw every figure into a scratch folder and compare with ``folder`` (see :func:`figure_differences`)."""
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        generate(scratch)
        return figure_differences(folder, scratch)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.figures.catalogue", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "names", nargs="*", help=f"figures to draw (default: all of {', '.join(FIGURES)})"
    )
    parser.add_argument(
        "--out", default=str(FIGURES_DIR), help="folder to write into (default: figures/)"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if a committed figure is missing or would change",
    )
    args = parser.parse_args(argv)
    for name in args.names:
        if name not in FIGURES:
            parser.error(f"unknown figure {name!r}; choose from {', '.join(FIGURES)}")
    if args.check:
        problems = stale_figures(args.out)
        for problem in problems:
            print(problem)
        if problems:
            print("Run `make figures` and commit the result.")
            return 1
        print(f"all {len(FIGURES)} figures are up to date")
        return 0
    for written in generate(args.out, args.names or None):
        print(f"wrote {_show(written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
