"""Build the course website (`make site`): the solution notebooks with their stored outputs (nothing
re-executed), the guides of ``docs/``, and every explorer working in the page without a kernel.

Steps: render the explorers' frames (``tools.site.explorers``, cached), stage a Sphinx source folder
(``build/site/src``: the chapters with their explorer outputs replaced by the static explorer,
figures as files, "Open in Colab" and "download the exercise" links; the guides; the exercise
notebooks to download), then run Sphinx with myst-nb from the site's own venv (``.venv-site``,
pinned in ``tools/site/requirements.txt``). The site lands in ``build/site/html``; its size,
frame counts and build time go to ``docs/results/site.json``.

    python -m tools.site.build [--sphinx .venv-site/bin/sphinx-build] [--jobs 2]
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat

from tools.build import config
from tools.build.headers import notebook_ref
from tools.site import explorers as X

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build" / "site"
HTML = BUILD / "html"
FRAMES = BUILD / "frames"  # explorers/<key>/: Sphinx copies it into _static/
SRC = BUILD / "src"
SIZE_LIMIT = 100 * 2**20
GUIDES = ("students", "instructors", "results", "site")
"""The pages of docs/ in the sidebar's order (docs/index.md is the site's front page)."""

_FIGURE = re.compile(
    r"\(data:image/png;base64,[A-Za-z0-9+/=]+ \"(?P<path>figures/[\w.-]+\.png)\"\)"
)
_BADGE = re.compile(r"^\[!\[Open In Colab\]\(.*\)\]\(.*\)\s*$", re.MULTILINE)


def write_if_changed(path: Path, data: bytes | str) -> None:
    """Write ``path`` only when its content changes (Sphinx then rebuilds only what changed)."""
    data = data.encode("utf-8") if isinstance(data, str) else data
    if not path.exists() or path.read_bytes() != data:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def links_html(filename: str, ref: str) -> str:
    """The links under a chapter's title: the exercise in Colab and as a download, the solution in Colab."""
    return (
        '<div class="course-links">\n'
        f'<a class="colab-exercise" href="{config.colab_url("notebooks", filename, ref)}">'
        "Open the exercise in Colab</a>\n"
        f'<a class="download-exercise" href="../exercises/{filename}" download>'
        "Download the exercise (.ipynb)</a>\n"
        f'<a class="colab-solution" href="{config.colab_url("solutions", filename, ref)}">'
        "Open this solution in Colab</a>\n</div>"
    )


def explorer_html(manifest: dict) -> str:
    """The static explorer: the notebook's controls and labels, the first frame, the manifest."""
    base = f"../_static/explorers/{manifest['key']}/"
    rows = []
    for c, control in enumerate(manifest["controls"]):
        label = html.escape(control["label"])
        if control["kind"] == "text":
            rows.append(
                f'<label><span>{label}</span><input type="text" disabled '
                f'value="{html.escape(control["labels"][0])}"></label>'
            )
        elif control["kind"] == "dropdown":
            options = "".join(
                f'<option value="{k}"{" selected" if k == control["start"] else ""}>'
                f"{html.escape(text)}</option>"
                for k, text in enumerate(control["labels"])
            )
            rows.append(
                f'<label><span>{label}</span><select data-control="{c}">{options}</select></label>'
            )
        else:
            rows.append(
                f'<label><span>{label}</span><input type="range" data-control="{c}" min="0" '
                f'max="{len(control["labels"]) - 1}" step="1" value="{control["start"]}">'
                f'<output data-for="{c}">{html.escape(control["labels"][control["start"]])}</output></label>'
            )
    notes = [
        "Every picture was drawn by the course's code when this site was built: no kernel runs."
    ]
    if manifest["coarse"]:
        notes.append(f"Coarser steps than in the notebook: {html.escape(manifest['coarse'])}.")
    if any(c["kind"] == "text" for c in manifest["controls"]):
        notes.append(
            "The text is the notebook's; typing another needs a kernel (open the chapter in Colab)."
        )
    if manifest["name"] in ("training_explorer", "layer_explorer"):
        notes.append(
            "Its snapshots come from running the chapter's earlier cells again at build time, so trained "
            "values may differ slightly from the printed outputs above."
        )
    start = sum(c["start"] * s for c, s in zip(manifest["controls"], manifest["strides"]))
    first = manifest["frames"][start]
    data = {"base": base, **{k: manifest[k] for k in ("controls", "strides", "frames")}}
    return (
        f'<div class="course-explorer" data-explorer="{manifest["name"]}">\n'
        f'<div class="ce-controls">{"".join(rows)}</div>\n'
        f'<div class="ce-note">{" ".join(notes)}</div>\n'
        f'<img class="ce-frame" src="{base}{first}" width="{manifest["width"]}" '
        f'height="{manifest["height"]}" alt="{html.escape(manifest["name"])} for the controls above">\n'
        '<div class="ce-message" role="status"></div>\n'
        f'<script type="application/json" class="ce-manifest">{json.dumps(data)}</script>\n</div>'
    )


def stage_chapter(path: Path, manifests: dict[int, dict]) -> nbformat.NotebookNode:
    """A solution notebook as its page shows it (the file in ``solutions/`` is not changed)."""
    nb = nbformat.read(path, as_version=4)
    title = nb.cells[0]
    title.source = _BADGE.sub(links_html(path.name, notebook_ref(nb)), title.source, count=1)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            cell.source = _FIGURE.sub(
                lambda m: (
                    f'(../{m["path"]} "{m["path"]}")' if (ROOT / m["path"]).exists() else m[0]
                ),
                cell.source,
            )
        elif "setup" in cell.metadata.get("tags", []):
            cell.metadata["tags"] = [*cell.metadata["tags"], "hide-input"]
        if index in manifests:
            cell.outputs = [
                nbformat.v4.new_output(
                    "display_data", data={"text/html": explorer_html(manifests[index])}
                )
            ]
    return nb


def chapter_title(nb) -> str:
    return nb.cells[0].source.split("\n")[0].lstrip("# ").strip()


def chapter_table(notebooks: list) -> str:
    """The front page's table of chapters, from each solution's title and ``course`` metadata."""
    rows = ["| # | Chapter | You build | Explorer |", "|---|---|---|---|"]
    for path, nb in notebooks:
        number, _, title = chapter_title(nb).partition(" · ")
        course = nb.metadata.get("course", {})
        builds = course.get("builds", "").replace("|", "\\|")
        rows.append(f"| {number} | [{title.split(':')[0]}](chapters/{path.name}) | {builds} | "
                    f"{course.get('explorer') or '–'} |")  # fmt: skip
    return "\n".join(rows) + "\n"


def stage(manifests: list[dict], src: Path = SRC) -> list[str]:
    """Write the Sphinx source folder; return the chapter page names in order."""
    chapters, notebooks = [], []
    wanted = {"index.md"}
    for path in sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb")):
        mine = {m["cell"]: m for m in manifests if m["notebook"] == f"solutions/{path.name}"}
        nb = stage_chapter(path, mine)
        notebooks.append((path, nb))
        write_if_changed(src / "chapters" / path.name, nbformat.writes(nb))
        exercise = ROOT / "notebooks" / path.name
        write_if_changed(src / "_extra" / "exercises" / path.name, exercise.read_bytes())
        chapters.append(f"chapters/{path.stem}")
        wanted |= {f"chapters/{path.name}", f"_extra/exercises/{path.name}"}
    for figure in sorted((ROOT / "figures").rglob("*.png")):
        rel = figure.relative_to(ROOT).as_posix()
        write_if_changed(src / rel, figure.read_bytes())
        wanted.add(rel)
    for guide in GUIDES:
        text = (ROOT / "docs" / f"{guide}.md").read_text(encoding="utf-8")
        text = text.replace("](../figures/", "](figures/")  # docs/ on GitHub, the site's root here
        write_if_changed(src / f"{guide}.md", text)
        wanted.add(f"{guide}.md")
    front = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    toc = "\n".join(
        ["", "## Chapters", "", chapter_table(notebooks), "```{toctree}", ":hidden:", ":caption: Chapters", ":maxdepth: 2", "", *chapters, "```", "",
         "```{toctree}", ":hidden:", ":caption: Guides", ":maxdepth: 1", "", *GUIDES, "```", ""]
    )  # fmt: skip
    write_if_changed(src / "index.md", front + toc)
    for path in sorted(src.rglob("*")):  # files of chapters or figures that are gone
        if path.is_file() and str(path.relative_to(src)) not in wanted:
            path.unlink()
    return chapters


def folder_bytes(folder: Path) -> tuple[int, int]:
    files = [p for p in folder.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.site.build", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--sphinx", default=str(ROOT / ".venv-site" / "bin" / "sphinx-build"))
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("JOBS", "2")))
    parser.add_argument(
        "--no-record", action="store_true", help="leave docs/results/site.json alone"
    )
    args = parser.parse_args(argv)
    began, cpu = time.perf_counter(), os.times()
    load = os.getloadavg()[0]
    cached = {p.name for p in (FRAMES / "explorers").glob("*/manifest.json") for p in [p.parent]}
    manifests = X.render_all(FRAMES / "explorers", jobs=args.jobs)
    drawn = len({m["key"] for m in manifests} - cached)
    rendered = time.perf_counter() - began
    chapters = stage(manifests)
    print(f"staged {len(chapters)} chapters and {len(GUIDES) + 1} pages in {SRC.relative_to(ROOT)}")
    shutil.rmtree(
        HTML / "_static" / "explorers", ignore_errors=True
    )  # Sphinx never deletes a frame
    sphinx = [
        args.sphinx,
        "-b",
        "html",
        "-c",
        str(ROOT / "tools" / "site"),
        "-d",
        str(BUILD / "doctrees"),
    ]
    done = subprocess.run([*sphinx, "-q", "-W", "--keep-going", str(SRC), str(HTML)], check=False)
    if done.returncode:
        return done.returncode
    size, files = folder_bytes(HTML)
    seconds, used = time.perf_counter() - began, os.times()
    cpu_seconds = sum(used[:4]) - sum(cpu[:4])
    print(
        f"site: {HTML.relative_to(ROOT)}, {size / 2**20:.1f} MiB in {files} files; built in {seconds:.0f} s "
        f"(explorers {rendered:.0f} s), {cpu_seconds:.0f} s of CPU, load average {load:.1f} at the start"
    )
    if size > SIZE_LIMIT:
        print(f"the site is over {SIZE_LIMIT / 2**20:.0f} MiB", file=sys.stderr)
        return 1
    if not args.no_record:
        from tools.site import results

        results.record_site_build(manifests, size, files, seconds, cpu_seconds, load, drawn)
    return 0


if __name__ == "__main__":
    sys.exit(main())
