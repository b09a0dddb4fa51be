"""Every exercise notebook runs without error up to its first stub, and then says so clearly."""

import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from course_utils import nbtools

EXERCISES = nbtools.chapter_files(nbtools.EXERCISES)
STUB = nbtools.CODE_STUB[1]


def _error(client, cell, index):
    try:
        client.execute_cell(cell, index)
    except CellExecutionError as exc:
        return exc
    return None


@pytest.mark.parametrize("path", EXERCISES, ids=[p.name for p in EXERCISES])
def test_exercise_runs_to_its_first_stub(path, monkeypatch):
    monkeypatch.setenv("COURSE_STATIC_WIDGETS", "1")
    nb = nbtools.read(path)
    first_stub = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code" and STUB in c.source), None)
    assert first_stub is not None, f"{path.name} has no exercise stub"
    client = NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    with client.setup_kernel():
        for index in range(first_stub):
            cell = nb.cells[index]
            if cell.cell_type != "code":
                continue
            error = _error(client, cell, index)
            assert error is None, f"{path.name} cell {index} fails before any exercise:\n{error}"
        # The stub itself, or the self-check right after it, must stop with a clear message.
        error = _error(client, nb.cells[first_stub], first_stub)
        if error is None:
            check = nb.cells[first_stub + 1]
            assert "self-check" in check.metadata.get("tags", [])
            error = _error(client, check, first_stub + 1)
        assert error is not None, f"{path.name}: the first stub ran without complaint"
        message = str(error)
        assert "NotImplementedError" in message
