"""Rules every chapter notebook follows (solutions and generated exercises)."""

import re

import pytest

from tools.build import nbtools

SOLUTIONS = nbtools.chapter_files(nbtools.SOLUTIONS)
EXERCISES = nbtools.chapter_files(nbtools.EXERCISES)
NAMES = [p.name for p in SOLUTIONS]


def test_chapters_exist_with_the_same_names_in_both_folders():
    assert len(SOLUTIONS) >= 1
    assert NAMES == [p.name for p in EXERCISES]
    for name in NAMES:
        assert re.fullmatch(r"\d\d_[a-z0-9_]+\.ipynb", name), name


@pytest.mark.parametrize("path", SOLUTIONS, ids=NAMES)
def test_solution_is_fully_executed_without_errors_or_stderr(path):
    nb = nbtools.read(path)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        assert cell.execution_count is not None, (
            f"cell {index} was never executed: run `make solutions`"
        )
        for output in cell.outputs:
            assert output.output_type != "error", f"cell {index} stores an error"
            assert output.get("name") != "stderr", (
                f"cell {index} stores stderr: {output.text[:200]!r}"
            )
            text = output.get("text", "") + output.get("data", {}).get("text/plain", "")
            assert "device='cuda" not in text and " at 0x" not in text, (
                f"cell {index}: machine-specific output"
            )


@pytest.mark.parametrize("path", SOLUTIONS, ids=NAMES)
def test_solution_has_structure_and_marked_answers(path):
    nb = nbtools.read(path)
    sources = [c.source for c in nb.cells]
    assert nb.cells[0].source.startswith(f"# {path.name[:2]} · ")
    assert "setup" in nb.cells[1].metadata.get("tags", [])
    headings = [line for s in sources for line in s.split("\n") if line.startswith("## ")]
    assert "## Summary" in headings and "## Exercises" in headings
    assert headings.index("## Summary") < headings.index("## Exercises")
    assert nbtools.solution_regions(nb), (
        "a chapter needs at least one exercise with a marked answer"
    )
    imports = [
        line
        for s in sources
        for line in s.split("\n")
        if re.match(r"\s*(import|from)\s+course_utils", line)
    ]
    assert imports and all(line.strip() == "import course_utils as cu" for line in imports), imports


@pytest.mark.parametrize("path", SOLUTIONS, ids=NAMES)
def test_every_exercise_is_followed_by_a_self_check(path):
    cells = nbtools.read(path).cells
    for index, cell in enumerate(cells):
        if cell.cell_type == "code" and nbtools.BEGIN_CODE in cell.source:
            following = cells[index + 1] if index + 1 < len(cells) else None
            assert following is not None and "self-check" in following.metadata.get("tags", []), (
                f"cell {index} is an exercise; the next cell must be its self-check (tag self-check)"
            )
            assert "cu.checks.check_" in following.source


@pytest.mark.parametrize("path", SOLUTIONS, ids=NAMES)
def test_no_answer_line_leaks_into_the_exercise(path):
    solution = nbtools.read(path)
    exercise_text = "\n".join(c.source for c in nbtools.read(nbtools.EXERCISES / path.name).cells)
    exercise_lines = {line.strip() for line in exercise_text.split("\n")}
    visible = nbtools.visible_lines(solution)
    for region in nbtools.solution_regions(solution):
        for line in region:
            text = line.strip()
            if not text or text in visible or text in {"#", "# YOUR CODE HERE"}:
                continue
            assert text not in exercise_lines, (
                f"answer line leaks into notebooks/{path.name}: {text!r}"
            )


@pytest.mark.parametrize("path", EXERCISES, ids=[p.name for p in EXERCISES])
def test_exercise_carries_no_outputs_or_metadata(path):
    nb = nbtools.read(path)
    assert set(nb.metadata) <= set(nbtools.NOTEBOOK_METADATA_KEPT)
    for cell in nb.cells:
        assert set(cell.metadata) <= {"tags"}
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
    text = "\n".join(c.source for c in nb.cells)
    for marker in (nbtools.BEGIN_CODE, nbtools.END_CODE, nbtools.BEGIN_ANSWER, nbtools.END_ANSWER):
        assert marker not in text


@pytest.mark.parametrize("path", SOLUTIONS, ids=NAMES)
def test_every_chapter_has_an_explorer_and_a_code_made_figure(path):
    cells = nbtools.read(path).cells
    explorers = [
        c
        for c in cells
        if c.cell_type == "code"
        and "explorer" in c.metadata.get("tags", [])
        and re.search(r"cu\.widgets\.\w+_explorer\(", c.source)
    ]
    figures = [
        c
        for c in cells
        if c.cell_type == "markdown"  # a figures/ path, or inlined by `make exercises`
        and re.search(r"\]\((?:\.\./|data:image/png;base64,\S+ \")figures/\w+\.png", c.source)
    ]
    assert explorers, (
        f"{path.name} has no explorer cell (tag `explorer`, calling cu.widgets.*_explorer)"
    )
    assert figures, f"{path.name} shows no figure from figures/"
