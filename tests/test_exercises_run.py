"""Every exercise notebook runs without error up to its first stub, and then says so clearly.

One kernel serves all notebooks (its namespace is reset between them), so the suite pays
for starting Python and importing torch once rather than once per chapter.
"""

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from tools.build import nbtools

EXERCISES = nbtools.chapter_files(nbtools.EXERCISES)
STUB = nbtools.CODE_STUB[1]
RESET = (
    "get_ipython().run_line_magic('reset', '-f')\nimport matplotlib.pyplot as plt\nplt.close('all')"
)


@pytest.fixture(scope="module")
def kernel():
    import os

    os.environ["COURSE_STATIC_WIDGETS"] = "1"
    client = NotebookClient(
        nbformat.v4.new_notebook(),
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(nbtools.EXERCISES)}},
    )
    with client.setup_kernel():
        yield client


def _error(client, cell, index):
    try:
        client.execute_cell(cell, index)  # stores the outputs in client.nb.cells[index]
    except CellExecutionError as exc:
        return exc
    return None


@pytest.mark.parametrize("path", EXERCISES, ids=[p.name for p in EXERCISES])
def test_exercise_runs_to_its_first_stub(path, kernel):
    reset = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(RESET)])
    kernel.nb = reset
    assert _error(kernel, reset.cells[0], 0) is None
    nb = kernel.nb = nbtools.read(path)
    first_stub = next(
        (i for i, c in enumerate(nb.cells) if c.cell_type == "code" and STUB in c.source), None
    )
    assert first_stub is not None, f"{path.name} has no exercise stub"
    for index in range(first_stub):
        cell = nb.cells[index]
        if cell.cell_type != "code":
            continue
        error = _error(kernel, cell, index)
        assert error is None, f"{path.name} cell {index} fails before any exercise:\n{error}"
    # The stub itself, or the self-check right after it, must stop with a clear message.
    error = _error(kernel, nb.cells[first_stub], first_stub)
    if error is None:
        check = nb.cells[first_stub + 1]
        assert "self-check" in check.metadata.get("tags", [])
        error = _error(kernel, check, first_stub + 1)
    assert error is not None, f"{path.name}: the first stub ran without complaint"
    assert "NotImplementedError" in str(error)
