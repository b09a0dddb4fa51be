"""The browser end-to-end test of the course (``make test-browser``) and proof that it can fail.

Tests that need Chromium run only when ``COURSE_BROWSER_TESTS=1`` (set by ``make test-browser``);
under ``make test`` they are skipped and only the pure-Python checks of the harness run.
"""

from __future__ import annotations

import base64
import os
import struct
import time
import zlib
from pathlib import Path

import nbformat
import pytest

from tests.browser import run_browser_tests as harness

BROWSER = os.environ.get("COURSE_BROWSER_TESTS") == "1"
browser_only = pytest.mark.skipif(not BROWSER, reason="needs Chromium: run `make test-browser`")


# ----------------------------------------------------------------------------- a tiny course
def tiny_png(path: Path, size: int = 8) -> Path:
    """A small valid grey PNG, written without any imaging library."""
    raw = b"".join(b"\x00" + b"\x80" * size for _ in range(size))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", size, size, 8, 0, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )
    return path


SELFTEST_CELLS = [
    (
        "markdown",
        [],
        "# 00 · Browser self-test\n\n![a good figure](../figures/selftest_ok.png)\n\n"
        "![a broken figure](../figures/selftest_missing.png)\n\n"
        "![an embedded figure](attachment:selftest_embedded.png)\n\n"
        '![a broken inline figure](data:image/png;base64,AAAA "figures/selftest_gone.png")\n\n'
        "![an inline figure](INLINE)",
    ),
    (
        "code",
        [],
        "import ipywidgets as widgets\nimport matplotlib.pyplot as plt\n\n\n"
        "def draw(scale, kind):\n    fig, ax = plt.subplots(figsize=(3, 2))\n    xs = list(range(6))\n"
        "    (ax.plot if kind == 'line' else ax.bar)(xs, [scale * x for x in xs])\n    plt.show()",
    ),
    (
        "code",
        ["explorer"],
        "scale = widgets.IntSlider(value=2, min=1, max=5, description='scale')\n"
        "kind = widgets.Dropdown(options=['line', 'bar'], description='kind')\n"
        "widgets.VBox([scale, kind, widgets.interactive_output(draw, {'scale': scale, 'kind': kind})])",
    ),
    (
        "code",
        ["explorer"],
        "frozen = widgets.IntSlider(value=1, min=1, max=3, description='frozen')\n"
        "out = widgets.Output()\nwith out:\n    draw(1, 'line')\nwidgets.VBox([frozen, out])",
    ),
    (
        "code",
        [],
        "def answer():\n    # YOUR CODE HERE\n    raise NotImplementedError()\n\n\nanswer()",
    ),
    ("code", [], "print('never reached')"),
]
SELFTEST_NOTEBOOK = "notebooks/00_selftest.ipynb"


def make_tiny_course(root: Path) -> Path:
    """One exercise notebook with a good and a broken figure, a live and a dead explorer, a stub."""
    (root / "figures").mkdir(parents=True)
    (root / "notebooks").mkdir()
    tiny_png(root / "figures" / "selftest_ok.png")
    embedded = base64.b64encode(tiny_png(root / "embedded.png").read_bytes()).decode()
    (root / "embedded.png").unlink()  # only the notebook holds it
    nb = nbformat.v4.new_notebook()
    for kind, tags, source in SELFTEST_CELLS:
        new = nbformat.v4.new_markdown_cell if kind == "markdown" else nbformat.v4.new_code_cell
        nb.cells.append(new(source, metadata={"tags": tags} if tags else {}))
    nb.cells[0].attachments = {"selftest_embedded.png": {"image/png": embedded}}
    nb.cells[0].source = nb.cells[0].source.replace(
        "INLINE", f'data:image/png;base64,{embedded} "figures/selftest_inline.png"'
    )
    nb.metadata["kernelspec"] = {
        "display_name": "Python 3",
        "language": "python",
        "name": "python3",
    }
    nbformat.write(nb, str(root / SELFTEST_NOTEBOOK))
    return root


# ----------------------------------------------------------------------------- pure-Python checks
def _executed(*cells):
    nb = nbformat.v4.new_notebook()
    for count, outputs, *source in cells:
        cell = nbformat.v4.new_code_cell(source[0] if source else "x = 1", execution_count=count)
        cell.outputs = [nbformat.from_dict(o) for o in outputs]
        nb.cells.append(cell)
    return nb


STUB_ERROR = {
    "output_type": "error",
    "ename": "NotImplementedError",
    "evalue": "",
    "traceback": [
        "\x1b[31m---> 3\x1b[39m     \x1b[38;5;28;01mraise\x1b[39;00m "
        "\x1b[38;5;167;01mNotImplementedError\x1b[39;00m()",
        "NotImplementedError: ",
    ],
}
OTHER_ERROR = {
    "output_type": "error",
    "ename": "NameError",
    "evalue": "name 'q' is not defined",
    "traceback": ["NameError: name 'q' is not defined"],
}


def test_solution_must_run_clean():
    assert harness.execution_problems(_executed((1, []), (2, [])), exercise=False) == ([], [])
    problems, _ = harness.execution_problems(
        _executed((1, []), (2, [STUB_ERROR]), (None, [])), exercise=False
    )
    assert problems == ["cell 1: NotImplementedError: "]
    stderr = {"output_type": "stream", "name": "stderr", "text": "UserWarning: careful\n"}
    problems, _ = harness.execution_problems(_executed((1, [stderr])), exercise=False)
    assert problems == ["cell 0: wrote to stderr: 'UserWarning: careful'"]
    problems, _ = harness.execution_problems(_executed((1, []), (None, [])), exercise=False)
    assert problems == ["code cells never ran: [1]"]


def test_exercise_may_stop_only_at_a_stub():
    problems, notes = harness.execution_problems(
        _executed((1, []), (2, [STUB_ERROR]), (None, [])), exercise=True
    )
    assert problems == [] and "stub" in notes[0] and "1 later code cells not run" in notes[0]
    problems, _ = harness.execution_problems(
        _executed((1, [OTHER_ERROR]), (None, [])), exercise=True
    )
    assert problems and "NameError" in problems[0]
    not_a_stub = dict(
        STUB_ERROR, traceback=["raise NotImplementedError('attention is on the GPU only')"]
    )
    problems, _ = harness.execution_problems(_executed((1, [not_a_stub])), exercise=True)
    assert problems and "exercise stub" in problems[0]
    problems, _ = harness.execution_problems(
        _executed((None, []), (2, [STUB_ERROR])), exercise=True
    )
    assert problems == ["code cells never ran: [0]"]


def test_exercise_may_stop_at_a_self_check_reporting_the_stub():
    stub = "def f(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()"
    reported = {
        "output_type": "error",
        "ename": "CheckFailure",
        "traceback": ["CheckFailure: ..."],
        "evalue": "check_f found a problem.\n\nf(x) raised NotImplementedError: the exercise stub "
        "is still in place.",
    }
    problems, notes = harness.execution_problems(
        _executed((1, [], stub), (2, [reported]), (None, [])), exercise=True
    )
    assert problems == [] and "cell 1" in notes[0]
    # Without a stub above it, the same error is a real failure.
    problems, _ = harness.execution_problems(_executed((1, []), (2, [reported])), exercise=True)
    assert problems and problems[0].startswith("cell 1: CheckFailure")


def test_figure_references_and_explorers_are_found(tmp_path):
    nb = nbformat.read(str(make_tiny_course(tmp_path) / SELFTEST_NOTEBOOK), as_version=4)
    refs = harness.figure_references(nb)
    assert refs[:4] == [
        "../figures/selftest_ok.png",
        "../figures/selftest_missing.png",
        "attachment:selftest_embedded.png",
        "data:image/png;base64,AAAA",
    ]
    assert len(refs) == 5 and refs[4].startswith("data:image/png;base64,iVBOR")
    nb.cells.append(
        nbformat.v4.new_markdown_cell(
            '<img src="../figures/a.png" width=300> ![badge](https://example.org/figures/b.svg)'
        )
    )
    nb.cells.append(nbformat.v4.new_code_cell("cu.widgets.mask_explorer()"))
    assert harness.figure_references(nb)[-1] == "../figures/a.png"
    assert harness.explorer_cells(nb) == [2, 3, len(nb.cells) - 1]


def test_command_line_fails_when_a_notebook_fails(monkeypatch, capsys):
    seen = {}

    def fake_run(notebooks, course, results, run_timeout, workers):
        seen["notebooks"] = notebooks
        return [
            harness.NotebookReport("solutions/01_a.ipynb", False),
            harness.NotebookReport(
                "notebooks/01_a.ipynb", True, problems=["picture did not load: x.png"]
            ),
        ]

    monkeypatch.setattr(harness, "run", fake_run)
    assert harness.main(["solutions/01_a.ipynb", "notebooks/01_a.ipynb"]) == 1
    assert seen["notebooks"] == ["solutions/01_a.ipynb", "notebooks/01_a.ipynb"]
    assert "1 of 2 notebooks passed" in capsys.readouterr().out
    monkeypatch.setattr(
        harness, "run", lambda *a: [harness.NotebookReport("solutions/01_a.ipynb", False)]
    )
    assert harness.main(["solutions/01_a.ipynb"]) == 0


def test_tiny_png_is_valid(tmp_path):
    import matplotlib.image

    tiny_png(tmp_path / "a.png")
    assert matplotlib.image.imread(str(tmp_path / "a.png")).shape[:2] == (8, 8)


# ----------------------------------------------------------------------------- the harness can fail
@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """One JupyterLab for everything below: the course, plus the tiny course served as _selftest/."""
    with harness.terminate_on_sigterm(), harness.BrowserLab(harness.ROOT, harness.RESULTS) as lab:
        lab.add_course(make_tiny_course(tmp_path_factory.mktemp("tiny-course")), SELFTEST)
        yield lab


SELFTEST = "_selftest"
SELFTEST_PATH = f"{SELFTEST}/{SELFTEST_NOTEBOOK}"


@browser_only
def test_harness_reports_a_broken_figure_and_a_dead_explorer(lab):
    report = lab.check(SELFTEST_PATH, screenshot_name="selftest.png", redraw_timeout=20)
    print(report.format())
    assert report.figures == 5 and report.explorers == 2
    gone = [
        p
        for p in report.problems
        if p.startswith("picture did not load") and "data:image/png;base64,AAAA" in p
    ]
    assert len(gone) == 1, report.format()  # an inline picture that is not a PNG
    assert sorted(set(report.problems) - set(gone)) == sorted(
        [
            f"picture did not load: {SELFTEST}/figures/selftest_missing.png",
            "explorer 2: moving slider 'frozen' did not change the plot",
        ]
    ), report.format()
    # The live explorer's redraws were timed (reported, never asserted against a bound).
    assert [len(ms) for ms in report.latencies.values()] == [2, 0], report.format()
    # The live explorer's slider and dropdown both redrew its plot; the frozen slider moved too.
    assert report.controls_moved == 3
    # The exercise stub's NotImplementedError is allowed in notebooks/, and stopped Run All there.
    assert any("stub" in note and "1 later code cells not run" in note for note in report.notes)
    # The same outputs would fail a solution notebook.
    problems, _ = harness.execution_problems(report.saved, exercise=False)
    assert problems == ["cell 4: NotImplementedError: "]


@browser_only
def test_harness_reports_widgets_that_do_not_render(lab):
    # The ipywidgets lab extension's files are blocked, as in a JupyterLab without jupyterlab_widgets.
    report = lab.check(SELFTEST_PATH, block_widgets=True, screenshot_name="selftest-no-widgets.png")
    print(report.format())
    assert report.explorers == 0
    for cell in (2, 3):
        assert any(
            p.startswith(f"cell {cell}: a widget is shown as text") and "VBox(children=(" in p
            for p in report.problems
        ), report.format()
        assert f"cell {cell}: explorer cell shows no widget" in report.problems, report.format()


# ----------------------------------------------------------------------------- the course
COURSE_NOTEBOOKS = harness.course_notebooks()


@pytest.fixture(scope="module")
def course_reports(lab):
    """Every course notebook checked once, two at a time (COURSE_BROWSER_WORKERS), reports printed live."""
    workers = int(os.environ.get("COURSE_BROWSER_WORKERS", "2"))
    started = time.monotonic()
    reports = harness.run_notebooks(lab, COURSE_NOTEBOOKS, workers)
    print(
        f"\n{len(reports)} notebooks checked in {time.monotonic() - started:.0f} s; "
        f"screenshots in {harness.RESULTS.relative_to(harness.ROOT)}/",
        flush=True,
    )
    return {report.path: report for report in reports}


@browser_only
def test_course_has_notebooks():
    assert COURSE_NOTEBOOKS, "no chapter notebooks in solutions/ or notebooks/"


@browser_only
@pytest.mark.parametrize("relpath", COURSE_NOTEBOOKS)
def test_notebook_in_jupyterlab(course_reports, relpath):
    report = course_reports[relpath]
    assert report.ok, report.format()


def test_served_copy_leaves_out_virtualenvs_and_results(tmp_path):
    """Throwaway venvs (.venv-compat-*, .venv-nbgrader: gigabytes) and results are never copied."""
    source = tmp_path / "course"
    for name in (
        "solutions/01_a.ipynb",
        ".venv/x",
        ".venv-compat-2.3.1-py3.11/x",
        ".venv-nbgrader/x",
        "results/x",
    ):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text("x")
    harness.copy_course(source, tmp_path / "served")
    assert sorted(p.name for p in (tmp_path / "served").iterdir()) == ["solutions"]


def test_width_rule_and_latency_table():
    """The displayed-width rule of the legibility test, and make bench-browser's table (no browser)."""
    from tests.browser import bench_browser
    from tests.browser.page import _width_problems

    shown = [{"natural": 1560, "shown": 821.0}, {"natural": 600, "shown": 600.0}]
    assert _width_problems("figure", shown, 821, "DISPLAY_WIDTH") == []
    (problem,) = _width_problems("figure", [{"natural": 1560, "shown": 1073.0}], 821, "X")
    assert (
        "shown 1073 px wide, not 821" in problem
        and "re-measure tools.figures.catalogue.X" in problem
    )
    rows = [
        {"chapter": "04", "explorer": "dropout_explorer", "ms": [300, 200, 250], "load": (2, 3)}
    ]
    assert bench_browser.table(rows).splitlines()[-1] == (
        "| 04 | dropout_explorer | 3 | 250 | 200-300 | 2.0 / 3.0 |"
    )
    assert len(bench_browser.explorer_notebooks()) >= 10  # every chapter with an explorer
