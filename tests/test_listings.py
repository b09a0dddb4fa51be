"""The README's chapter table is generated from the solution notebooks, never written by hand."""

from __future__ import annotations

import nbformat
import pytest

from tools.build import listings, nbtools


def test_the_readme_table_is_the_generated_one_with_a_row_per_solution():
    text = listings.README.read_text(encoding="utf-8")
    block = listings.GENERATED.search(text[text.index("## Chapters") :])
    assert block["name"] == "chapters"
    assert block["body"] == listings.chapters_table()
    rows = [line for line in block["body"].splitlines() if line[:4].strip("| ").isdigit()]
    assert [r.split(" | ")[0].strip("| ") for r in rows] == [
        p.name[:2] for p in nbtools.chapter_files()
    ]


def _notebook(title: str, course: dict | None) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(title)])
    if course is not None:
        nb.metadata["course"] = course
    return nb


def test_a_row_takes_the_title_from_the_first_cell_and_the_rest_from_metadata():
    nb = _notebook("# 12 · Linear attention: kernels and features\n\ntext", {"builds": "a kernel"})
    assert listings.chapter_row(nb, "12_linear.ipynb") == (
        "| 12 | [Linear attention](notebooks/12_linear.ipynb) | a kernel | – |"
    )


@pytest.mark.parametrize(
    "title, course", [("# 12 · Linear", None), ("# Linear", {"builds": "x"}), ("# 12 · L", {})]
)
def test_a_notebook_without_title_or_summary_is_named(title, course):
    with pytest.raises(ValueError, match=r"solutions/12_linear\.ipynb: expected a first cell"):
        listings.chapter_row(_notebook(title, course), "12_linear.ipynb")


def test_the_readme_is_a_front_page_without_a_log():
    """The README opens with the two commands, stays a front page (measurements live on the results
    page, generated from docs/results/*.json) and carries no dated log."""
    import re

    text = listings.README.read_text(encoding="utf-8")
    assert text.split("```bash\n", 1)[1].startswith("make lab ")
    assert len(text.splitlines()) <= 150, "the README is a front page: move detail to docs/"
    dated = re.findall(r"\b20\d\d-\d\d-\d\d\b|\bcommit [0-9a-f]{7}\b", text)
    assert not dated, f"dated log entries in the README (they belong on docs/results.md): {dated}"
