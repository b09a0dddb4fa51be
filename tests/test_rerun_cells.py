"""A chapter survives going back: run in order to its last cell, then every exercise, self-check
and asserting proof cell run again, each must give what it gave the first time.

A student returns to an exercise after later sections, an instructor re-runs one proof: if a later
cell rebound a name that such a cell reads (``x``, ``w``, ``cache``, ``layers``...), the re-run
fails or silently checks something else. Chapters opt in through ``RERUN_CHAPTERS`` (chapter 10's
engineer adds its notebook's name there); one kernel serves them all, reset between chapters.
"""

from __future__ import annotations

import re

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from tools.build import nbtools

RERUN_CHAPTERS = ("10_transformer", "11_past_the_kv_wall")
RESET = (
    "get_ipython().run_line_magic('reset', '-f')\nimport matplotlib.pyplot as plt\nplt.close('all')"
)
ASSERTS = re.compile(r"^\s*assert\b", re.MULTILINE)
IGNORED = "# NBVAL_IGNORE_OUTPUT"


@pytest.fixture(scope="module")
def kernel():
    import os

    os.environ["COURSE_STATIC_WIDGETS"] = "1"
    client = NotebookClient(
        nbformat.v4.new_notebook(),
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(nbtools.SOLUTIONS)}},
    )
    with client.setup_kernel():
        yield client


def rerun_cells(nb) -> list[int]:
    """Indices of the code cells to run again: exercises, self-checks and cells that assert."""
    return [
        i
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code"
        and (
            {"exercise", "self-check"} & set(cell.metadata.get("tags", []))
            or ASSERTS.search(cell.source)
        )
    ]


def _shown(cell) -> str:
    """What a cell printed or showed, as one text (however the kernel split its streams)."""
    shown = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            shown.append(out.text)
        elif out.output_type == "error":
            shown.append(f"{out.ename}: {out.evalue}\n")
        elif "text/plain" in out.get("data", {}):
            shown.append(out.data["text/plain"] + "\n")
    return "".join(shown)


def _run(client, cell, index) -> str | None:
    try:
        client.execute_cell(cell, index)
    except CellExecutionError as exc:
        return re.sub(r"\x1b\[[0-9;]*m", "", str(exc).strip().splitlines()[-1])  # no colours
    return None


def rerun_problems(client, nb) -> list[str]:
    """Run ``nb`` in a fresh namespace of ``client``'s kernel, in order, then run again each cell of
    :func:`rerun_cells`; return what went wrong, by cell."""
    reset = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(RESET)])
    client.nb = reset
    assert _run(client, reset.cells[0], 0) is None
    nb = client.nb = nbformat.from_dict(nb)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            error = _run(client, cell, index)
            if error:
                return [f"cell {index} fails on the first run: {error}"]
    first = {i: _shown(nb.cells[i]) for i in range(len(nb.cells))}
    problems = []
    for index in rerun_cells(nb):
        cell = nb.cells[index]
        error = _run(client, cell, index)
        if error:
            problems.append(f"cell {index} fails when run again after the last cell: {error}")
        elif not cell.source.startswith(IGNORED) and _shown(cell) != first[index]:
            problems.append(
                f"cell {index} shows something else when run again: {first[index]!r} -> {_shown(cell)!r}"
            )
    return problems


@pytest.mark.parametrize("name", RERUN_CHAPTERS)
def test_exercises_checks_and_proofs_run_again_after_the_last_cell(name, kernel):
    nb = nbtools.read(nbtools.SOLUTIONS / f"{name}.ipynb")
    assert len(rerun_cells(nb)) >= 10, "the chapter's exercises and proofs were not found"
    problems = rerun_problems(kernel, nb)
    assert problems == [], "\n".join(problems)


def test_a_name_rebound_by_a_later_cell_is_caught(kernel):
    """The harness itself: a proof reading ``x`` after a later section rebound ``x`` fails."""
    cells = [
        nbformat.v4.new_code_cell("x = [1, 2, 3]"),
        nbformat.v4.new_code_cell("assert sum(x) == 6\nprint('sum 6')"),
        nbformat.v4.new_code_cell("y = 2"),
        nbformat.v4.new_code_cell("assert y > 0\nprint(y)"),
        nbformat.v4.new_code_cell("x, y = 'a later section', 5"),
    ]
    problems = rerun_problems(kernel, nbformat.v4.new_notebook(cells=cells))
    assert len(problems) == 2, problems
    assert problems[0].startswith("cell 1 fails when run again") and "TypeError" in problems[0]
    assert problems[1].startswith("cell 3 shows something else")
