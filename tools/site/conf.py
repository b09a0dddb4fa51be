"""Sphinx configuration of the course website (run by ``tools.site.build`` from ``.venv-site``).

Offline by design: nothing is fetched while building or while reading the site. MathJax comes from
the ``sphinx-mathjax-offline`` wheel (its MathJax 3 files, of which only the TeX-to-HTML bundle
and its fonts are copied), the theme's fonts and icons ship with the theme, and the notebooks'
stored outputs are shown as they are (``nb_execution_mode = "off"``).
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

project = "Attention from Scratch"
author = "the course's authors"
copyright = "the course's authors"  # noqa: A001 - Sphinx's name
extensions = ["myst_nb"]
exclude_patterns = ["_extra/**"]
nb_execution_mode = "off"  # the stored outputs are the page: nothing is re-executed
nb_merge_streams = True
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3  # links to a guide's sections (results.md#grading)
suppress_warnings = ["mystnb.unknown_mime_type"]
html_theme = "sphinx_book_theme"
html_title = project
html_static_path = [str(HERE / "static"), str(ROOT / "build" / "site" / "frames")]
html_extra_path = [str(ROOT / "build" / "site" / "src" / "_extra")]  # the exercises to download
html_css_files = ["course-site.css"]
html_js_files = [("course-explorer.js", {"defer": "defer"})]
html_theme_options = {
    "repository_url": "https://github.com/attention-from-scratch/attention-from-scratch",
    "use_repository_button": True,
    "use_download_button": False,  # chapter pages link their exercise; sources are not copied
    "home_page_in_toc": True,
    "show_toc_level": 2,
    # No right-hand column: the article gets the width that keeps every figure and frame readable
    # (>= 821 and 844 px in a 1280 px window, tests/site); the left sidebar lists a chapter's sections.
    "secondary_sidebar_items": [],
}
html_show_sourcelink = False
html_copy_source = False
mathjax_path = "mathjax/tex-chtml.js"
MATHJAX_FILES = ("tex-chtml.js", "output/chtml/fonts/woff-v2")


def _copy_mathjax(app, error) -> None:
    """Copy MathJax's TeX-to-HTML bundle and its fonts from the offline wheel into ``_static``."""
    if error is not None:
        return
    spec = importlib.util.find_spec("sphinx-mathjax-offline")
    source = Path(spec.origin).parent / "static" / "mathjax"
    target = Path(app.outdir) / "_static" / "mathjax"
    for part in MATHJAX_FILES:
        if (source / part).is_dir():
            shutil.copytree(source / part, target / part, dirs_exist_ok=True)
        else:
            (target / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / part, target / part)


def setup(app) -> None:
    app.connect("build-finished", _copy_mathjax)
