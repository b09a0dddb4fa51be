"""pytest plugin: each solution notebook executed once per run, in nbval's own kernel.

Strict nbval (``--nbval``, with the course's rules in ``tools/nbval_plugin.py``) runs every code
cell of a solution in one kernel and compares its outputs with the stored ones. Three other tests
need a solution executed from its first cell to its last: its shape comments
(``tests/shape_comments.py``), the text size of its inline figures (``tests/test_legibility.py``)
and, for the chapters in ``RERUN_CHAPTERS``, its exercises, checks and proofs run again after the
last cell (``tests/test_rerun_cells.py``). Run on their own, each of them executes the notebook
again in a kernel of its own. When nbval collects a solution, this plugin lets that one run serve
them all:

- before the first cell, the kernel gets the shape ledger and the figure measure (the tests'
  own preludes); each cell runs with its shape comments instrumented (``shape_comments.instrument``:
  the same statements, each commented value passed through the ledger, which returns it unchanged;
  a cell ending in ``;`` keeps its ``;``), and nbval compares its outputs as always;
- after the last cell, items of the same notebook read what the run found:
  ``solutions/NN.ipynb::shape comments``, ``::inline figures`` and ``::rerun`` (its chapters only).
  They assert what the tests above assert, with the same helpers;
- those tests' per-solution cases are then deselected (pytest lists them as deselected): the
  notebook's items ran the same assertions on the same kind of run. Run without nbval
  (``pytest tests``), or alone, they execute the notebook themselves as before.

The inline figures are measured in the full run (the stored outputs' figures), not the light
(``NBGRADER_EXECUTION=validate``) run the legibility test makes alone: the same figures, with
their trained values.
"""

from __future__ import annotations

import json
from pathlib import Path
from queue import Empty

import pytest

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 600  # seconds for one extra step (a rerun cell, a report)

# The per-solution test each item replaces: (test file, function, how its id names the notebook).
REPLACED = {
    "shape comments": (
        "tests/test_shape_comments.py",
        "test_every_shape_comment_matches_the_running_code",
        "name",
    ),
    "inline figures": (
        "tests/test_legibility.py",
        "test_inline_figure_text_is_at_least_9_px_on_screen",
        "name",
    ),
    "rerun": (
        "tests/test_rerun_cells.py",
        "test_exercises_checks_and_proofs_run_again_after_the_last_cell",
        "stem",
    ),
}


def execute(kernel, source: str, timeout: float = TIMEOUT) -> list:
    """Run ``source`` in nbval's kernel; return its outputs as nbval collects them (stream,
    display_data, execute_result, error), streams coalesced."""
    from nbformat import NotebookNode
    from nbval.plugin import coalesce_streams

    msg_id = kernel.execute_cell_input(source, allow_stdin=False)
    kernel.await_reply(msg_id, timeout=timeout)
    outs = []
    while True:
        try:
            msg = kernel.get_message("iopub", timeout=timeout)
        except Empty as exc:
            raise RuntimeError(f"no output from the kernel within {timeout} s") from exc
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "status" and content["execution_state"] == "idle":
            break
        if kind == "stream":
            outs.append(NotebookNode(output_type=kind, name=content["name"], text=content["text"]))
        elif kind in ("display_data", "execute_result"):
            outs.append(NotebookNode(output_type=kind, data=content["data"]))
        elif kind == "error":
            outs.append(
                NotebookNode(output_type=kind, ename=content["ename"], evalue=content["evalue"])
            )
    return coalesce_streams(outs)


def _printed(kernel, source: str) -> str:
    outs = execute(kernel, source)
    errors = [o for o in outs if o.output_type == "error"]
    if errors:
        raise RuntimeError(f"{errors[0].ename}: {errors[0].evalue}")
    return "".join(o.text for o in outs if o.output_type == "stream" and o.name == "stdout")


def _ends_quiet(source: str) -> bool:
    """True when IPython hides the cell's last value: its last code line ends in ``;``."""
    import io
    import tokenize

    try:
        tokens = [
            t
            for t in tokenize.generate_tokens(io.StringIO(source).readline)
            if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER)
            and t.string.strip()
        ]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return False
    return bool(tokens) and tokens[-1].string == ";"


def _last_is_expression(source: str) -> bool:
    import ast

    try:
        body = ast.parse(source).body
    except SyntaxError:
        return False
    return bool(body) and isinstance(body[-1], ast.Expr)


def _same_display(original: str, instrumented: str) -> str:
    """The instrumented cell shows what the original shows: IPython displays the value of a
    cell's last statement when it is an expression, so a cell ending in an assignment, whose
    instrumented form ends in the ``__shape_check__(...)`` call, gets a final ``pass``; a cell
    ending in ``;`` keeps it."""
    if not _last_is_expression(original) and _last_is_expression(instrumented):
        return instrumented + "\npass"
    if _ends_quiet(original):
        return instrumented + ";"
    return instrumented


class Run:
    """What one solution's run needs: its cells' items, sources, and what the preludes set up."""

    def __init__(self, collector, cells):
        from tests import shape_comments as shapes

        self.collector, self.cells = collector, cells
        self.path = Path(str(collector.fspath))
        self.comments: list[tuple[str, str, bool]] = []  # (cell:line, comment, checkable)
        self.instrumented: list[str] = []
        self.source_index: dict[str, int] = {}  # instrumented source -> index in nb.cells
        self.ready = False
        nb_index = [i for i, c in enumerate(collector.nb.cells) if c.cell_type == "code"]
        for item in cells:
            index = nb_index[item.cell_num]
            original = item.cell.source
            item.course_source, item.course_index = original, index
            source, checked, comments = shapes.instrument(original, index)
            if source != original:
                source = _same_display(original, source)
            for line, comment in comments.items():
                self.comments.append((f"{index}:{line}", comment, line in checked))
            self.instrumented.extend(f"{index}:{line}" for line in checked)
            item.cell = type(item.cell)(item.cell)  # a copy: the stored outputs stay for nbval
            item.cell.source = source
            self.source_index[source] = index

    def setup(self):
        """After nbval has started the kernel: the preludes, each once."""
        from tests import shape_comments as shapes
        from tests import test_legibility as legibility
        from tools.figures import catalogue as F

        kernel = self.collector.kernel
        _printed(kernel, f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n{shapes.PRELUDE}")
        measure = legibility.MEASURE.format(
            root=str(ROOT), shown=legibility.FRAME_WIDTH, minimum=F.MIN_TEXT_PX
        )
        _printed(kernel, measure)
        self.ready = True

    def failed_cells(self) -> list[str]:
        return [
            f"{item.name}: {o.ename}: {o.evalue}"
            for item in self.cells
            for o in (item.test_outputs or [])
            if o.output_type == "error" and not item.options.get("check_exception")
        ] + [
            item.name
            for item in self.cells
            if item.test_outputs is None and not item.options["skip"]
        ]


class RunItem(pytest.Item):
    """One check read off the notebook's single run, after its last cell."""

    def __init__(self, *, run: Run, kind: str, **kwargs):
        super().__init__(**kwargs)
        self.run, self.kind = run, kind

    def runtest(self):
        kernel = self.run.collector.kernel
        if kernel is None or not kernel.is_alive() or not self.run.ready:
            raise RuntimeError("the notebook's kernel is not running: see its cells' failures")
        failed = self.run.failed_cells()
        if failed and self.kind != "shape comments":  # the shapes seen so far still count
            raise AssertionError(f"{self.run.path.name}: cells failed or never ran: {failed}")
        getattr(self, "_" + self.kind.replace(" ", "_"))(kernel)

    def _shape_comments(self, kernel):
        from tests import shape_comments as shapes

        result = json.loads(_printed(kernel, "print(__shape_ledger__.report())"))
        report = shapes.summary(self.run.comments, self.run.instrumented, result)
        shapes.assert_clean(report)

    def _inline_figures(self, kernel):
        from tests import test_legibility as legibility

        measured = json.loads(_printed(kernel, "print(__json.dumps(__measured))"))
        cells = self.run.collector.nb.cells
        for figure in measured:
            figure["cell"] = self.run.source_index.get(figure["cell"])
        # An explorer draws its static frame here (the light run alone draws none): frames have
        # their own test (test_explorer_frame_text_is_at_least_9_px_on_screen).
        measured = [
            f
            for f in measured
            if f["cell"] is None or "explorer" not in cells[f["cell"]].metadata.get("tags", [])
        ]
        legibility.assert_readable(self.run.path, measured)

    def _rerun(self, kernel):
        from tests import test_rerun_cells as rerun

        nb = self.run.collector.nb
        by_index = {item.course_index: item for item in self.run.cells}
        indices = rerun.rerun_cells(nb)
        assert len(indices) >= 10, "the chapter's exercises and proofs were not found"
        problems = []
        for index in indices:
            item = by_index[index]
            outs = execute(kernel, item.course_source)
            error = next((o for o in outs if o.output_type == "error"), None)
            first = rerun._shown(NotebookCell(item.test_outputs))
            if error is not None:
                problems.append(
                    f"cell {index} fails when run again after the last cell: "
                    f"{error.ename}: {error.evalue}"
                )
            elif (
                not item.course_source.startswith(rerun.IGNORED)
                and rerun._shown(NotebookCell(outs)) != first
            ):
                problems.append(
                    f"cell {index} shows something else when run again: {first!r} -> "
                    f"{rerun._shown(NotebookCell(outs))!r}"
                )
        assert problems == [], "\n".join(problems)

    def reportinfo(self):
        return self.run.path, None, f"{self.run.path.name}::{self.kind}"


class NotebookCell(dict):
    """The shape ``test_rerun_cells._shown`` reads: a cell with ``outputs``."""

    def __init__(self, outputs):
        super().__init__(outputs=list(outputs or []))


def _chapter_solution(collector) -> bool:
    path = Path(str(collector.fspath))
    return path.parent.name == "solutions" and path.name[:2].isdigit()


def pytest_collection_modifyitems(session, config, items):
    try:
        from nbval.plugin import IPyNbCell
    except ImportError:
        return
    from tests import test_rerun_cells as rerun

    groups: dict = {}
    for item in items:
        if isinstance(item, IPyNbCell) and _chapter_solution(item.parent):
            groups.setdefault(item.parent, []).append(item)
    if not groups:
        return
    covered: set[str] = set()
    for collector, cells in groups.items():
        run = Run(collector, cells)
        nbval_setup = collector.setup

        def setup(nbval_setup=nbval_setup, run=run):
            nbval_setup()
            run.setup()

        collector.setup = setup
        kinds = ["shape comments", "inline figures"]
        if run.path.stem in rerun.RERUN_CHAPTERS:
            kinds.append("rerun")
        extra = [RunItem.from_parent(collector, name=k, run=run, kind=k) for k in kinds]
        where = items.index(cells[-1]) + 1
        items[where:where] = extra
        for kind in kinds:
            file, function, naming = REPLACED[kind]
            label = run.path.name if naming == "name" else run.path.stem
            covered.add(f"{file}::{function}[{label}]")
    deselected = [item for item in items if item.nodeid in covered]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item.nodeid not in covered]
