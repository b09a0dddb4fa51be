"""Figures that travel with the notebook: ``figures/NAME.png`` -> inline ``data:`` images.

A notebook opened alone (Colab, a download, GitHub's viewer, nbgrader's release) cannot follow
``../figures/x.png``, and Colab does not render markdown cell attachments
(googlecolab/colabtools#3836). `make exercises` therefore rewrites every markdown image that
points to a course figure into the form Colab itself writes for a pasted picture::

    ![<alt text from the figure registry>](data:image/png;base64,iVBOR... "figures/NAME.png")

in the solutions and in the generated exercises. The title (a tooltip) names the figure, so the
generator can find it again. ``figures/`` stays the one source of the pictures and
``tools/figures/catalogue.py`` the one source of their alt text: running the generator again re-embeds the
current PNGs, and ``python -m tools.build.nbtools check`` reports a notebook whose pictures differ from
``figures/``. Older ``attachment:NAME.png`` references to a course figure are converted (and the
cell attachment dropped). Only image references and attachments of markdown cells are touched.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path

ATTACHMENT = "attachment:"
DATA_PNG = "data:image/png;base64,"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# ![alt](src) or ![alt](<src> "title")
_IMAGE = re.compile(
    r"!\[(?P<alt>[^\]]*)\]\(\s*<?(?P<src>[^)\s>]+)>?(?:\s+[\"'](?P<title>[^)]*)[\"'])?\s*\)"
)
_HTML_SRC = re.compile(r"<img\b[^>]*\bsrc\s*=\s*[\"']([^\"']+)", re.IGNORECASE)
_FIGURE_PATH = re.compile(r"^(?:(?:\.\./)*figures/|attachment:)(?P<name>[A-Za-z0-9_-]+)\.png$")
_FIGURE_TITLE = re.compile(r"^figures/(?P<name>[A-Za-z0-9_-]+)\.png$")


class FigureError(ValueError):
    """A markdown cell points to a course figure that figures/ does not have."""


def _alt_text(name: str) -> str | None:
    """The registry's alt text for figure ``name`` (None for a picture the builder does not draw)."""
    try:
        from tools.figures import catalogue as figures
    except Exception:  # noqa: BLE001  (no matplotlib, or a builder being edited): keep the alt as written
        return None
    try:
        return figures.alt_text(name)
    except (KeyError, ValueError):
        return None


def png_base64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode("ascii")


def figure_name(match: re.Match) -> str | None:
    """The course figure an image reference shows (a path, an old attachment or a titled data URI)."""
    found = _FIGURE_PATH.match(match["src"])
    if found is None and match["src"].startswith(DATA_PNG) and match["title"]:
        found = _FIGURE_TITLE.match(match["title"])
    return found["name"] if found else None


def figure_markdown(name: str, alt: str, data: str) -> str:
    """How a notebook shows course figure ``name``: an inline PNG titled with its source file."""
    return f'![{alt}]({DATA_PNG}{data} "figures/{name}.png")'


def embed(nb, figures_dir: Path, where: str = "notebook") -> list[str]:
    """Embed every course figure of ``nb``'s markdown as an inline ``data:`` PNG, in place.

    Returns the names embedded. Cell attachments that held course figures are dropped; a
    reference to a figure missing from ``figures_dir`` raises :class:`FigureError`.
    """
    embedded = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        old = dict(cell.get("attachments") or {})

        def replace(match: re.Match, index=index) -> str:
            name = figure_name(match)
            if name is None:
                return match.group()
            path = figures_dir / f"{name}.png"
            if not path.is_file():
                raise FigureError(
                    f"{where}, cell {index}: the image {match['src'][:60]!r} is not in "
                    f"{figures_dir.name}/ (`make figures` draws the course's figures)"
                )
            embedded.append(name)
            alt = _alt_text(name)
            return figure_markdown(name, match["alt"] if alt is None else alt, png_base64(path))

        source = _IMAGE.sub(replace, cell.source)
        kept = {k: v for k, v in old.items() if f"{ATTACHMENT}{k}" in source}
        cell.source = source
        if kept:
            cell["attachments"] = kept
        else:
            cell.pop("attachments", None)
    return embedded


def unresolved_images(nb) -> list[str]:
    """Every image of ``nb``'s markdown that would not show everywhere the notebook is read.

    Web addresses (the Colab badge) resolve anywhere; an inline ``data:`` image must hold a PNG;
    ``attachment:x.png`` is reported (Colab and GitHub's viewer do not render attachments), and
    so is any other path (``../figures/x.png``, ``x.png``): the notebook may be alone.
    """
    problems = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        sources = [m["src"] for m in _IMAGE.finditer(cell.source)]
        sources += _HTML_SRC.findall(cell.source)
        for src in sources:
            shown = src if len(src) < 60 else src[:40] + "..."
            if re.match(r"^(https?:)?//", src):
                continue
            if src.startswith("data:image/"):
                if not _is_png(src) and src.startswith(DATA_PNG):
                    problems.append(f"cell {index}: {shown!r} is not a PNG")
                continue
            if src.startswith(ATTACHMENT):
                problems.append(
                    f"cell {index}: {shown!r} is a cell attachment, which Colab does not show "
                    "(run `make exercises` to inline it)"
                )
            else:
                problems.append(f"cell {index}: {shown!r} is a path, not an inline image")
    return problems


def _is_png(src: str) -> bool:
    try:
        return base64.b64decode(src[len(DATA_PNG) :], validate=True).startswith(PNG_MAGIC)
    except ValueError:
        return False


def inline_figures(nb) -> dict[str, bytes]:
    """The PNG bytes of every course figure ``nb`` shows inline, by figure name."""
    found = {}
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for match in _IMAGE.finditer(cell.source):
                name = figure_name(match)
                if name and match["src"].startswith(DATA_PNG):
                    found[name] = base64.b64decode(match["src"][len(DATA_PNG) :])
    return found
