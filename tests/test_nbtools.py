"""The exercise generator: stubs, answer removal, metadata hygiene, and sync with solutions/."""

import nbformat
import pytest

from tools.build import config, nbtools


def _solution():
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# 99 · Test chapter\n\nIntro."),
        nbformat.v4.new_code_cell(
            "def f(x):\n    y = x + 1\n    ### BEGIN SOLUTION\n    secret_value = y * 42\n"
            "    return secret_value\n    ### END SOLUTION\n",
            metadata={
                "tags": ["exercise", "nbgrader-ish"],
                "scrolled": True,
                "execution": {"iopub.status.idle": "2026-01-01"},
            },
            execution_count=3,
            outputs=[nbformat.v4.new_output("stream", name="stdout", text="42\n")],
        ),
        nbformat.v4.new_markdown_cell(
            "**Q1.** Why?\n\n<!-- BEGIN ANSWER -->\nBecause of the hidden reason.\n<!-- END ANSWER -->\n\nAfter."
        ),
        nbformat.v4.new_code_cell(
            "print('only in the solution')", metadata={"tags": ["solution-only"]}
        ),
        nbformat.v4.new_code_cell("print(f(1))", execution_count=5),
    ]
    nb.metadata["widgets"] = {"state": {"answer": 42}}
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    return nb


def test_code_regions_become_stubs_at_their_indentation():
    ex = nbtools.make_exercise(_solution(), "99_test.ipynb")
    code = ex.cells[2].source  # cell 1 is the generated setup cell
    assert "    # YOUR CODE HERE\n    raise NotImplementedError()" in code
    assert "secret_value" not in code and "y = x + 1" in code and "### BEGIN" not in code


def test_markdown_answers_removed_and_solution_only_cells_dropped():
    ex = nbtools.make_exercise(_solution(), "99_test.ipynb")
    text = nbformat.writes(ex)
    assert "hidden reason" not in text and "*YOUR ANSWER HERE*" in text and "After." in text
    assert "only in the solution" not in text


def test_outputs_counts_and_answer_bearing_metadata_cleared():
    ex = nbtools.make_exercise(_solution(), "99_test.ipynb")
    for cell in ex.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
        assert set(cell.metadata) <= {"tags"}
        assert set(cell.metadata.get("tags", [])) <= nbtools.KEPT_TAGS
    assert "widgets" not in ex.metadata and set(ex.metadata) <= set(nbtools.NOTEBOOK_METADATA_KEPT)


def test_input_notebook_is_not_modified():
    sol = _solution()
    before = nbformat.writes(sol)
    nbtools.make_exercise(sol, "99_test.ipynb")
    assert nbformat.writes(sol) == before


def test_headers_badge_and_setup_cell():
    ex = nbtools.make_exercise(_solution(), "99_test.ipynb")
    title = ex.cells[0].source
    assert title.startswith("# 99 · Test chapter\n\n[![Open In Colab]")
    assert config.colab_url("notebooks", "99_test.ipynb") in title
    assert ex.cells[1].metadata["tags"] == ["setup"]
    again = nbtools.make_exercise(ex, "99_test.ipynb")
    assert nbformat.writes(again) == nbformat.writes(
        ex
    )  # idempotent: no second badge or setup cell


@pytest.mark.parametrize(
    "source",
    [
        "### BEGIN SOLUTION\nx = 1\n",
        "x = 1\n### END SOLUTION\n",
        "### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n",
    ],
)
def test_unbalanced_markers_are_reported_with_the_cell(source):
    nb = _solution()
    nb.cells[1].source = source
    with pytest.raises(nbtools.MarkerError, match="99_test.ipynb, cell 1"):
        nbtools.make_exercise(nb, "99_test.ipynb")


def test_first_cell_must_be_a_title():
    nb = _solution()
    nb.cells[0].source = "no title"
    with pytest.raises(nbtools.MarkerError, match="first cell must be a markdown title"):
        nbtools.make_exercise(nb, "99_test.ipynb")


def test_committed_exercises_are_in_sync_with_solutions():
    problems = nbtools.stale_files()
    assert problems == [], "run `make headers exercises`:\n" + "\n".join(problems)


def test_stale_exercise_is_detected(tmp_path):
    sol_dir, ex_dir = tmp_path / "solutions", tmp_path / "notebooks"
    sol_dir.mkdir()
    nb = _solution()
    nbtools.set_headers(nb, "solutions", "99_test.ipynb")
    nbtools.write(nb, sol_dir / "99_test.ipynb")
    nbtools.generate_exercises(sol_dir, ex_dir)
    assert nbtools.stale_files(sol_dir, ex_dir) == []
    (ex_dir / "99_test.ipynb").write_text(
        (ex_dir / "99_test.ipynb").read_text().replace("x + 1", "x + 2")
    )
    assert nbtools.stale_files(sol_dir, ex_dir) == [
        "notebooks/99_test.ipynb (stale: run `make exercises`)"
    ]
