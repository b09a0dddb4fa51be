"""tools/grading/stops.py: what stopped a cell, named in words with the limit that applied (no
nbgrader needed; `make test-grade` grades a class with hangs, a self-raised KeyboardInterrupt and
a dying kernel through it)."""

import nbformat
from nbformat.v4 import new_code_cell, new_notebook, new_output

from tools.grading import feedback, stops


def _error(ename):
    return new_output("error", ename=ename, evalue="", traceback=[f"{ename}: where it was"])


def _cell(*outputs):
    cell = new_code_cell("cu.checks.check_softmax(softmax_stable)")
    cell.outputs = [new_output("stream", name="stdout", text="before\n"), *outputs]
    return cell


def test_a_cell_past_its_limit_states_that_limit():
    """nbclient interrupts the kernel (KeyboardInterrupt) and nbgrader adds CellTimeoutError."""
    cell = _cell(_error("KeyboardInterrupt"), _error("CellTimeoutError"))
    assert stops.name_stops(cell, 20) == stops.TIMEOUT
    printed, stopped = cell.outputs
    assert printed.output_type == "stream"  # what the cell printed before it was stopped stays
    assert stopped.ename == "Timeout" and "stopped after 20 seconds" in stopped.evalue
    assert "300" not in stopped.evalue
    assert all(len(line) <= feedback.WIDTH for line in stopped.traceback)


def test_a_keyboard_interrupt_the_code_raised_is_not_called_a_timeout():
    cell = _cell(_error("KeyboardInterrupt"))
    assert stops.name_stops(cell, 20) == stops.RAISED
    (raised,) = [o for o in cell.outputs if o.output_type == "error"]
    assert raised.ename == "KeyboardInterrupt"
    assert "raised KeyboardInterrupt itself" in raised.evalue and "20 seconds" in raised.evalue
    assert "stopped after" not in raised.evalue
    assert "KeyboardInterrupt: where it was" in raised.traceback  # where it came from, kept


def test_other_errors_and_clean_cells_are_left_alone():
    failed = _cell(_error("CheckFailure"))
    before = nbformat.from_dict(failed)
    assert stops.name_stops(failed, 20) is None and failed == before
    assert stops.name_stops(_cell(), 20) is None


def test_the_cell_a_kernel_died_in_says_so_and_is_marked_for_the_fresh_run():
    nb = new_notebook(cells=[_cell(_error("RuntimeError"))])
    stops.mark_dead(nb.cells[0])
    (died,) = nb.cells[0].outputs
    assert died.ename == stops.DIED and "died while this cell ran" in died.evalue
    assert nb.cells[0].metadata["course_grading"] == {"stopped": "kernel-died"}
    feedback.note(nb, "kernel-died", "The kernel died.")
    assert feedback.cell_label(nb, 1) == "cell 0 (`cu.checks.check_softmax(softmax_stable)`)"


SLOW_TO_STOP = (  # answers the interrupt 10 s later, as a long call into C does (issue 39's s04)
    "import signal, time\n"
    "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})\n"
    "time.sleep(10)\n"
    "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})"
)


def test_a_cell_slow_to_stop_loses_only_itself_not_the_notebook(tmp_path):
    """Issue 39: a check whose answer walked the filesystem answered the interrupt after
    nbclient's 4 s wait for its outputs, and nbgrader refused the whole notebook
    (CellTimeoutError, every point lost). Now that cell is stopped and named, the rest runs."""
    import pytest

    pytest.importorskip("nbgrader")
    nb = new_notebook(cells=[new_code_cell(SLOW_TO_STOP), new_code_cell("print('after')")])
    execute = stops.StopsExecute(timeout=2, kernel_name="python3")
    nb, _ = execute.preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    slow, after = nb.cells
    assert [o.ename for o in slow.outputs if o.output_type == "error"] == [stops.TIMEOUT]
    assert "stopped after 2 seconds" in slow.outputs[-1].evalue
    assert [o.get("text") for o in after.outputs] == ["after\n"]
