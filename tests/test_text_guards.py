"""Guards for the text of the chapters: nothing the student must read is hidden in a code cell,
and every name a self-check reads is one the exercise asked for by name.

The shape comments are checked at run time by tests/test_shape_comments.py."""

import ast
import builtins
import re

import pytest

from tools.build import nbtools

SOLUTIONS = nbtools.chapter_files(nbtools.SOLUTIONS)
NAMES = [p.name for p in SOLUTIONS]

# ----------------------------------------------------------------------------- swallowed markdown
MARKERS = {"### BEGIN SOLUTION", "### END SOLUTION", "# YOUR CODE HERE"}
MARKDOWN_LINE = re.compile(r"^#{1,6} \S|^\*\*[^*]+\*\*|^[-*] \S|^\d+\. \S")


def trailing_comment_block(source: str) -> list[str]:
    """The full-line comments a code cell ends with (the text after '#'), top to bottom."""
    lines = source.rstrip().split("\n")
    while lines and lines[-1].strip() in MARKERS:
        lines.pop()
    block = []
    for line in reversed(lines):
        stripped = line.strip()
        if not stripped.startswith("#") or stripped in MARKERS:
            break
        block.append(stripped[1:].removeprefix(" "))
    return block[::-1]


def swallowed_markdown(source: str) -> str | None:
    """Why the end of a code cell looks like markdown pasted into comments, or None.

    A heading or a bold, bulleted or numbered paragraph start in the closing comments, or a
    closing block of 6 or more comment lines of prose, is text that JupyterLab would render
    only in a markdown cell (and nbgrader would lock inside a read-only test cell)."""
    block = trailing_comment_block(source)
    if not block or block[0].startswith("NBVAL_") or block == ["| export"]:
        return None
    marked = [line for line in block if MARKDOWN_LINE.match(line)]
    if marked:
        return f"it ends in commented markdown: {marked[0]!r}"
    if len(block) >= 6:
        return f"it ends in {len(block)} comment lines of prose, starting {block[0]!r}"
    return None


SWALLOWED_IN_05 = (  # chapter 05 before issue 25: the end of two code cells, as they were
    'print(f"with out_proj:  {count(gpt2_split):>9,}")\n#\n'
    "# **Speed.** Both layers do nearly the same arithmetic (the split layer even has `out_proj` on\n"
    "# top), but the wrapper cuts it into 12 heads.",
    "with torch.no_grad():\n    cu.checks.check_shape_prediction(predicted_lecture, lecture_layer, x_lecture)\n"
    "#\n# ### Exercise 4: spot the bug\n#\n"
    "# Another version of the split layer, built on the course's `MultiHeadAttention` (same weights\n"
    "# and mask), with its own `forward`. It runs and returns the right shape.",
)


@pytest.mark.parametrize("source", SWALLOWED_IN_05, ids=["speed", "exercise-4"])
def test_swallowed_markdown_is_recognised(source):
    assert swallowed_markdown(source)


@pytest.mark.parametrize(
    "source",
    [
        "x = 1  # (b, n)\n# a short note on the next step",
        "# NBVAL_IGNORE_OUTPUT\nprint(1)",
        "#| export\ndef f():\n    pass",
        "y = f(x)\n# (b, n, d)\n# the weights below",
    ],
)
def test_ordinary_comments_are_not_markdown(source):
    assert swallowed_markdown(source) is None


@pytest.mark.parametrize("path", SOLUTIONS, ids=NAMES)
def test_no_code_cell_ends_in_commented_markdown(path):
    nb = nbtools.read(path)
    problems = [
        f"cell {index}: {why}"
        for index, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and (why := swallowed_markdown(cell.source))
    ]
    assert not problems, "move this text into a markdown cell:\n" + "\n".join(problems)


# ----------------------------------------------------------------------------- named variables
KNOWN = {"cu", "torch", "nn", "F", "math", "device", "np", "plt"} | set(dir(builtins))


def names_read(source: str) -> set[str]:
    """Top-level names a self-check cell reads (not the ones it defines itself)."""
    tree = ast.parse(source)
    stored = {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)
    }
    loaded = {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
    }
    return loaded - stored - KNOWN


def visible_code(source: str) -> str:
    """What of an exercise cell the student sees: everything outside the solution markers."""
    kept, inside = [], False
    for line in source.split("\n"):
        if "### BEGIN SOLUTION" in line:
            inside = True
        elif "### END SOLUTION" in line:
            inside = False
        elif not inside:
            kept.append(line)
    return "\n".join(kept)


def unnamed_reads(cells) -> list[str]:
    """For every self-check: the names it reads that the text of its exercise never names.

    The exercise's text is every markdown cell since the previous self-check, plus the visible
    part of the exercise cells in between; a name counts as named when it appears as a word."""
    problems, text = [], []
    for index, cell in enumerate(cells):
        tags = cell.metadata.get("tags", [])
        if "self-check" in tags:
            words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", "\n".join(text)))
            for name in sorted(names_read(cell.source) - words):
                problems.append(f"cell {index} reads `{name}`, which its exercise never names")
            text = []
        elif cell.cell_type == "markdown":
            text.append(cell.source)
        elif "exercise" in tags:
            text.append(visible_code(cell.source))
    return problems


def test_an_unnamed_variable_is_found():
    """Chapter 05's exercise 3d before issue 25: the text asked for 'tuples', never by name."""
    cells = [
        nbtools.nbformat.v4.new_markdown_cell(
            "Predict the output shape of each of the three layers on `x_lecture`, and write "
            "your predictions as tuples."
        ),
        nbtools.nbformat.v4.new_code_cell(
            "### BEGIN SOLUTION\npredicted_book = (1, 2)\n### END SOLUTION"
        ),
        nbtools.nbformat.v4.new_code_cell(
            "cu.checks.check_shape_prediction(predicted_book, book_layer, x_lecture)"
        ),
    ]
    cells[1].metadata["tags"] = ["exercise"]
    cells[2].metadata["tags"] = ["self-check"]
    assert unnamed_reads(cells) == [
        "cell 2 reads `book_layer`, which its exercise never names",
        "cell 2 reads `predicted_book`, which its exercise never names",
    ]
    cells[0].source += " `predicted_book` for `book_layer`."
    assert unnamed_reads(cells) == []


@pytest.mark.parametrize("path", SOLUTIONS, ids=NAMES)
def test_every_name_a_self_check_reads_is_named_by_its_exercise(path):
    problems = unnamed_reads(nbtools.read(path).cells)
    assert not problems, "\n".join(problems)
