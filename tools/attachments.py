"""Figures that travel with the notebook: ``figures/NAME.png`` -> markdown cell attachments.

A notebook opened alone (Colab, a download, GitHub's viewer) cannot follow ``../figures/x.png``.
`make exercises` therefore rewrites every markdown image that points to a course figure into

    ![<alt text from the figure registry>](attachment:NAME.png)

and stores the PNG's bytes (base64) in the cell's ``attachments``, in the solutions and in the
generated exercises. ``figures/`` stays the one source of the pictures and ``tools/figures.py``
the one source of their alt text: running the generator again re-embeds the current PNGs, and
``python -m tools.nbtools check`` reports a notebook whose pictures differ from ``figures/``.
Only image references and attachments of markdown cells are touched, nothing else.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path

ATTACHMENT = "attachment:"
# ![alt](src) or ![alt](<src> "title"); src of a course figure: ../figures/x.png, figures/x.png,
# or an already embedded attachment:x.png
_IMAGE = re.compile(r"!\[(?P<alt>[^\]]*)\]\(\s*<?(?P<src>[^)\s>]+)>?(?:\s+[\"'][^)]*[\"'])?\s*\)")
_FIGURE_SRC = re.compile(r"^(?:(?:\.\./)*figures/|attachment:)(?P<name>[A-Za-z0-9_-]+)\.png$")


class FigureError(ValueError):
    """A markdown cell points to a course figure that figures/ does not have."""


def _alt_text(name: str) -> str | None:
    """The registry's alt text for figure ``name`` (None for a picture the builder does not draw)."""
    try:
        from tools import figures
    except Exception:  # noqa: BLE001  (no matplotlib, or a builder being edited): keep the alt as written
        return None
    if hasattr(figures, "alt_text"):
        try:
            return figures.alt_text(name)
        except (KeyError, ValueError):
            return None
    spec = getattr(figures, "FIGURES", {}).get(name)
    return spec.alt if spec is not None else None


def png_base64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode("ascii")


def embed(nb, figures_dir: Path, where: str = "notebook") -> list[str]:
    """Embed every course figure of ``nb``'s markdown as an attachment, in place.

    Returns the names embedded. Attachments a cell no longer references are dropped; a reference
    to a figure missing from ``figures_dir`` raises :class:`FigureError`.
    """
    embedded = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        old = dict(cell.get("attachments") or {})
        wanted: dict[str, dict] = {}

        def replace(match: re.Match, index=index, old=old, wanted=wanted) -> str:
            figure = _FIGURE_SRC.match(match["src"])
            if figure is None:
                return match.group()
            name = figure["name"]
            path = figures_dir / f"{name}.png"
            if not path.is_file():
                if match["src"].startswith(ATTACHMENT) and f"{name}.png" in old:
                    wanted[f"{name}.png"] = old[
                        f"{name}.png"
                    ]  # a picture that is not a course figure
                    return match.group()
                raise FigureError(
                    f"{where}, cell {index}: the image {match['src']!r} is not in "
                    f"{figures_dir.name}/ (`make figures` draws the course's figures)"
                )
            wanted[f"{name}.png"] = {"image/png": png_base64(path)}
            embedded.append(name)
            alt = _alt_text(name)
            return f"![{match['alt'] if alt is None else alt}]({ATTACHMENT}{name}.png)"

        source = _IMAGE.sub(replace, cell.source)
        for key, value in old.items():  # keep attachments the cell references some other way
            if key not in wanted and f"{ATTACHMENT}{key}" in source:
                wanted[key] = value
        cell.source = source
        if wanted:
            cell["attachments"] = wanted
        else:
            cell.pop("attachments", None)
    return embedded


def unresolved_images(nb) -> list[str]:
    """Every image of ``nb``'s markdown that would not show when the notebook is alone in a folder.

    Web addresses (the Colab badge) resolve anywhere; ``attachment:x.png`` must be attached with
    PNG bytes; any other path (``../figures/x.png``, ``x.png``) is reported.
    """
    problems = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        sources = [m["src"] for m in _IMAGE.finditer(cell.source)]
        sources += re.findall(r"<img\b[^>]*\bsrc\s*=\s*[\"']([^\"']+)", cell.source, re.IGNORECASE)
        attachments = cell.get("attachments") or {}
        for src in sources:
            if re.match(r"^(https?:)?//", src) or src.startswith("data:image/"):
                continue
            if not src.startswith(ATTACHMENT):
                problems.append(f"cell {index}: {src!r} is a path, not an attachment")
                continue
            data = attachments.get(src[len(ATTACHMENT) :], {}).get("image/png")
            try:
                ok = data is not None and base64.b64decode(data).startswith(b"\x89PNG\r\n\x1a\n")
            except ValueError:
                ok = False
            if not ok:
                problems.append(f"cell {index}: {src!r} has no PNG attachment")
    return problems
