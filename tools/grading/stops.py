"""A cell that did not finish, told apart and named: nbgrader's ``Execute``, as the course runs it.

:class:`StopsExecute` replaces nbgrader's ``Execute`` in the course's ``autograde_preprocessors``
(``nbgrader_config.py``). It runs the notebook as ``Execute`` does, then names each stop in the
student's words (tools/grading/feedback.py):

* **stopped at its limit**: nbclient interrupts a cell past its limit and nbgrader adds a
  ``CellTimeoutError`` output beside the ``KeyboardInterrupt`` the interrupt raised. Only that
  output means a limit struck; the cell then shows one error, ``Timeout``, stating *its own*
  limit (``Execute.timeout_func`` of the cell, as ``make grade`` sets it, else
  ``Execute.timeout``), not a fixed 300 s.
* **a KeyboardInterrupt the code raised itself** (no ``CellTimeoutError`` beside it): named as
  such, with the cell's limit, so no one reads it as a timeout.
* **a kernel that died** (``os._exit``, a crash in a library, memory): nbgrader gives up the whole
  notebook (no scores, no feedback page). Here the cell it died in gets a ``KernelDied`` error
  (``cell.metadata["course_grading"]["stopped"] = "kernel-died"`` too), a new kernel runs the
  notebook again with that cell replaced by a stand-in that raises, and the rest is graded; the
  death is named in the grader's note. After :data:`MAX_DEATHS` deaths every remaining cell
  is a stand-in, so the notebook always ends.

Re-running costs the cells before the dead one a second time, only for a notebook whose kernel
died. Every cell, stand-in or not, keeps its own limit.
"""

from __future__ import annotations

from tools.grading.feedback import (
    EVENTS,
    cell_label,
    kernel_died,
    note,
    raised_interrupt,
    timed_out,
    wrap,
)
from tools.grading.optional import optional_base

MAX_DEATHS = 3
GRACE = 30  # seconds an interrupted cell's kernel gets to stop before the notebook goes on
TIMEOUT, RAISED, DIED = "Timeout", "KeyboardInterrupt", "KernelDied"  # the enames left in outputs
STAND_IN = "raise RuntimeError('not run again: the kernel died in this cell')"
GIVEN_UP = "raise RuntimeError('not run: the kernel died {n} times in this notebook')"
STOPPED = EVENTS  # also a cell's metadata key: {"stopped": "kernel-died"} (the guard skips it)


def _error(ename: str, text: str, extra: list[str] = ()):
    from nbformat.v4 import new_output

    text = wrap(text)
    return new_output("error", ename=ename, evalue=text, traceback=[*text.split("\n"), *extra])


def name_stops(cell, limit: float | None) -> str | None:
    """Rewrite the error outputs of a code cell that was stopped; return what stopped it
    (:data:`TIMEOUT` or :data:`RAISED`) or None."""
    errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    names = {o.get("ename") for o in errors}
    if "CellTimeoutError" in names:
        kept = [o for o in cell.outputs if o.get("output_type") != "error"]
        cell.outputs = [*kept, _error(TIMEOUT, timed_out(limit or 0))]
        return TIMEOUT
    if "KeyboardInterrupt" in names:
        for index, output in enumerate(cell.outputs):
            if output.get("ename") == "KeyboardInterrupt":
                where = ["", *output.get("traceback", [])]
                cell.outputs[index] = _error(RAISED, raised_interrupt(limit or 0), where)
        return RAISED
    return None


def mark_dead(cell) -> None:
    """The cell during which the kernel died: its outputs say so (and its metadata)."""
    cell.outputs = [_error(DIED, kernel_died())]
    cell.execution_count = None
    cell.metadata[STOPPED] = {"stopped": "kernel-died"}


class StopsExecute(optional_base("nbgrader.preprocessors", "Execute")):
    """nbgrader's Execute, naming every stop and grading around a kernel that died (see above),
    and waiting for an interrupted cell to stop (see :meth:`_async_handle_timeout`)."""

    def preprocess_cell(self, cell, resources, index):
        self._running = index
        if not hasattr(self, "_iopub"):
            self._iopub = self.iopub_timeout
        self.iopub_timeout = self._iopub
        # outputs that come late (a loaded machine) are not a reason to refuse the notebook: a
        # cell whose reply says it failed gets that error from nbgrader all the same, and a
        # check that passed is confirmed by the judge (guard.py)
        self.raise_on_iopub_timeout = False
        try:
            return super().preprocess_cell(cell, resources, index)
        finally:
            self.iopub_timeout = self._iopub

    async def _async_handle_timeout(self, timeout, cell=None):
        """A cell past its limit is interrupted, and nbclient then waits ``iopub_timeout`` (4 s)
        for the kernel to stop; code that answers the interrupt later (a long call into C: a
        file read, a tensor operation; a loaded machine) made nbgrader (``raise_on_iopub_timeout``)
        refuse the whole notebook, every point lost (issue 39: an answer that walked the
        filesystem). Here the kernel gets :data:`GRACE` seconds, or the cell's limit if longer,
        to stop, and the cell is named as stopped; should the kernel still be busy after that,
        the notebook goes on all the same (the next cell queues behind it, with its own limit)."""
        reply = await super()._async_handle_timeout(timeout, cell)
        self.iopub_timeout = max(self._iopub, int(timeout or 0), GRACE)
        return reply

    def preprocess(self, nb, resources=None, km=None):
        from nbclient.exceptions import DeadKernelError

        died: list[int] = []
        while True:
            self._running = None
            last = len(died) >= MAX_DEATHS
            stand_ins = {
                i: nb.cells[i].source
                for i, c in enumerate(nb.cells)
                if c.cell_type == "code" and (i in died or (last and i >= died[-1]))
            }
            for i in stand_ins:
                nb.cells[i].source = STAND_IN if i in died else GIVEN_UP.format(n=len(died))
            try:
                nb, resources = super().preprocess(nb, resources, km)
            except DeadKernelError:
                if self._running is None or self._running in died or last:
                    raise
                self.log.warning(
                    "The kernel died in cell %d; running again without it", self._running
                )
                died.append(self._running)
                continue
            finally:
                for i, source in stand_ins.items():
                    nb.cells[i].source = source
            break
        for index, cell in enumerate(nb.cells):
            if cell.cell_type == "code" and index not in died:
                name_stops(cell, self._get_timeout(cell))
        labels = [cell_label(nb, index) for index in died]  # before a note cell shifts them
        for index in died:
            mark_dead(nb.cells[index])
        for label in labels:
            note(
                nb,
                "kernel-died",
                f"The kernel died while {label} ran; the notebook was run again without that "
                "cell, and the rest was graded.",
            )
        return nb, resources
