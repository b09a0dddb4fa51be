"""Run in .venv-authoring by tests/test_percent.py (jupytext is not in the students' .venv):
every solution to percent format and back through tools.build.percent, as ``to-percent`` and
``from-percent`` do, and an authored text as CONTRIBUTING tells authors to write one. Prints
``{notebook: [what differs]}`` as JSON. ``python tests/percent_check.py PLANT`` first plants one
wrong option (:data:`PLANTS`), which the same comparison must report."""

from __future__ import annotations

import json
import sys

import nbformat

from tools.build import percent
from tools.build.headers import set_headers
from tools.build.nbtools import clean_solution_metadata
from tools.build.notebooks import chapter_files, dumps

AUTHORED = """# %% [markdown]
# # 99 · Title
#
# Text, then a code cell.

# %%
import torch


def double(x):
    return 2 * x  # (n,)

# %% tags=["exercise"]
#| export
def triple(x):
    ### BEGIN SOLUTION
    return 3 * x  # (n,)
    ### END SOLUTION

# %% tags=["self-check"]
print(triple(torch.ones(2)))  # (2,)
"""
"""A percent text as CONTRIBUTING says to write one: a definition followed by one blank line
(jupytext records ``lines_to_next_cell`` for it), no header."""
AUTHORED_CELLS = [
    ("markdown", "# 99 · Title\n\nText, then a code cell.", {}),
    ("code", "import torch\n\n\ndef double(x):\n    return 2 * x  # (n,)", {}),
    (
        "code",
        "#| export\ndef triple(x):\n    ### BEGIN SOLUTION\n    return 3 * x  # (n,)\n"
        "    ### END SOLUTION",
        {"tags": ["exercise"]},
    ),
    ("code", "print(triple(torch.ones(2)))  # (2,)", {"tags": ["self-check"]}),
]


def _no_update():
    convert = percent.from_percent
    percent.from_percent = lambda text, existing=None: convert(text)


PLANTS = {
    "jupytext-defaults": lambda: setattr(percent, "OPTIONS", {}),
    "no-update": _no_update,
    "jupytext-metadata-kept": lambda: setattr(percent, "JUPYTEXT_CELL_METADATA", ()),
    "headerless-default": lambda: setattr(percent, "HEADERLESS_FILTER", "-all"),
}


def _finished(nb, name: str):
    set_headers(nb, "solutions", name)  # what `from-percent` does after the conversion
    clean_solution_metadata(nb)
    return nb


def _cells(nb) -> list[tuple]:
    return [
        (c.cell_type, c.source, {k: v for k, v in c.metadata.items() if k != "nbgrader"})
        for c in nb.cells
    ]


def solution_problems(path) -> list[str]:
    raw = path.read_text(encoding="utf-8")
    nb = nbformat.reads(raw, as_version=4)
    text = percent.to_percent(nb)
    problems = []
    if any(line.startswith("# %%") and "nbgrader=" in line for line in text.splitlines()):
        problems.append("the text shows the generated nbgrader metadata")
    if "jupytext_version" in text:
        problems.append("the text carries jupytext's version")
    back = _finished(percent.from_percent(text, nbformat.reads(raw, as_version=4)), path.name)
    if dumps(back) != raw:
        problems.append("from-percent onto the notebook is not byte-identical")
    headerless = text.split("# ---\n", 2)[2].lstrip("\n")  # as an author may write it
    back = _finished(percent.from_percent(headerless, nbformat.reads(raw, 4)), path.name)
    if dumps(back) != raw:
        problems.append("from-percent of the text without its header is not byte-identical")
    fresh = _finished(percent.from_percent(text), path.name)
    differing = sum(a != b for a, b in zip(_cells(nb), _cells(fresh)))
    if differing or len(nb.cells) != len(fresh.cells):
        problems.append(f"a new notebook: {differing} cells differ (type, text or tags)")
    for key in ("course", "kernelspec"):
        if fresh.metadata.get(key) != nb.metadata[key]:
            problems.append(f"a new notebook: the {key} metadata differs")
    return problems


def authored_problems() -> list[str]:
    nb = percent.from_percent(AUTHORED)
    problems = []
    if [(c.cell_type, c.source, dict(c.metadata)) for c in nb.cells] != AUTHORED_CELLS:
        problems.append("cells differ from what the text says: " + repr(_cells(nb)))
    if [c.id for c in nb.cells] != [f"c{i:03d}" for i in range(len(nb.cells))]:
        problems.append("cell ids are not c000, c001, ...")
    if "jupytext" in nb.metadata:
        problems.append("the notebook carries jupytext's metadata")
    return problems


def main(plant: str = "") -> dict[str, list[str]]:
    if plant:
        PLANTS[plant]()
    report = {path.name: solution_problems(path) for path in chapter_files()}
    report["authored text"] = authored_problems()
    return {name: problems for name, problems in report.items() if problems}


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:]), indent=1))
