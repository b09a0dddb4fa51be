"""Every picture of every notebook shows wherever the notebook is read (issues 14 and 26).

The generator (tools/build/attachments.py, run by `make exercises`) writes each course figure as an
inline ``data:`` PNG in the markdown, the form Colab itself writes: Colab renders neither cell
attachments (googlecolab/colabtools#3836) nor relative paths (the notebook is opened alone).
The rule test reads the committed notebooks; the generator tests run on copies.
"""

from __future__ import annotations

import base64
import copy
import shutil

import nbformat
import pytest

from tools.build import attachments, nbtools

SOLUTIONS = nbtools.chapter_files(nbtools.SOLUTIONS)
COMMITTED = SOLUTIONS + nbtools.chapter_files(nbtools.EXERCISES)


def _embedded_solution(path):
    nb = nbtools.read(path)
    attachments.embed(nb, nbtools.FIGURES, path.name)
    return nb


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_committed_notebooks_follow_colabs_rendering_rules(path):
    """No cell attachment, no relative image path: every figure is an inline PNG equal to figures/."""
    nb = nbtools.read(path)
    assert attachments.unresolved_images(nb) == []
    assert not any(c.get("attachments") for c in nb.cells)
    inline = attachments.inline_figures(nb)
    for name, data in inline.items():
        assert data == (nbtools.FIGURES / f"{name}.png").read_bytes(), name


def test_a_planted_attachment_or_relative_path_fails_the_rule():
    nb = nbtools.read(SOLUTIONS[2])
    png = base64.b64encode((nbtools.FIGURES / "dropout.png").read_bytes()).decode()
    nb.cells.append(nbformat.v4.new_markdown_cell("![x](attachment:dropout.png)"))
    nb.cells[-1]["attachments"] = {"dropout.png": {"image/png": png}}
    nb.cells.append(nbformat.v4.new_markdown_cell('<img src="../figures/dropout.png" alt="x">'))
    problems = attachments.unresolved_images(nb)
    n = len(nb.cells)
    assert problems == [
        f"cell {n - 2}: 'attachment:dropout.png' is a cell attachment, which Colab does not show "
        "(run `make exercises` to inline it)",
        f"cell {n - 1}: '../figures/dropout.png' is a path, not an inline image",
    ]


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
@pytest.mark.parametrize("kind", ["solution", "exercise"])
def test_every_image_resolves_when_the_notebook_is_alone(path, kind, tmp_path):
    nb = (
        _embedded_solution(path)
        if kind == "solution"
        else nbtools.make_exercise(nbtools.read(path), path.name)
    )
    folder = tmp_path / "alone"
    folder.mkdir()
    nbtools.write(nb, folder / path.name)
    assert [p.name for p in folder.iterdir()] == [path.name]
    nb = nbtools.read(folder / path.name)
    assert attachments.unresolved_images(nb) == []
    for name, data in attachments.inline_figures(nb).items():
        assert data == (nbtools.FIGURES / f"{name}.png").read_bytes(), name


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_embedding_changes_only_image_references_and_attachments(path):
    before = nbtools.read(path)
    after = _embedded_solution(path)
    assert len(before.cells) == len(after.cells) and before.metadata == after.metadata
    for old, new in zip(before.cells, after.cells):
        if old.cell_type != "markdown":
            assert old == new
            continue
        strip = {k: v for k, v in old.items() if k not in ("source", "attachments")}
        assert strip == {k: v for k, v in new.items() if k not in ("source", "attachments")}
        without_images = attachments._IMAGE.sub("IMG", old.source)
        assert without_images == attachments._IMAGE.sub("IMG", new.source)


def test_embedding_is_idempotent_and_follows_the_png(tmp_path):
    figures = tmp_path / "figures"
    figures.mkdir()
    shutil.copy(nbtools.FIGURES / "causal_mask.png", figures / "causal_mask.png")
    png = base64.b64encode((figures / "causal_mask.png").read_bytes()).decode()
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("Look:\n\n![old alt](../figures/causal_mask.png)\n\nDone."),
        nbformat.v4.new_markdown_cell("![badge](https://example.org/b.svg) and ![x](picture.png)"),
        nbformat.v4.new_markdown_cell("Once attached: ![x](attachment:causal_mask.png)"),
    ]
    nb.cells[2]["attachments"] = {"causal_mask.png": {"image/png": png}}
    assert attachments.embed(nb, figures) == ["causal_mask", "causal_mask"]
    cell = nb.cells[0]
    assert cell.source.startswith("Look:\n\n![") and cell.source.endswith(
        f'](data:image/png;base64,{png} "figures/causal_mask.png")\n\nDone.'
    )
    assert "old alt" not in cell.source  # the alt text comes from the figure registry
    assert "attachments" not in nb.cells[2] and "attachment:" not in nb.cells[2].source
    once = nbtools.dumps(nb)
    attachments.embed(nb, figures)
    assert nbtools.dumps(nb) == once
    assert attachments.unresolved_images(nb) == [
        "cell 1: 'picture.png' is a path, not an inline image"
    ]

    # figures/ is the source: a redrawn PNG is re-embedded, and the stale copy is detectable
    (figures / "causal_mask.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"new")
    fresh = copy.deepcopy(nb)
    attachments.embed(fresh, figures)
    assert nbtools.dumps(fresh) != once
    assert attachments.inline_figures(fresh)["causal_mask"].endswith(b"new")


def test_a_missing_figure_or_a_broken_inline_image_is_reported(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("![a](../figures/not_drawn.png)")]
    with pytest.raises(
        attachments.FigureError, match=r"x.ipynb, cell 0: the image '../figures/not_drawn.png'"
    ):
        attachments.embed(nb, tmp_path, "x.ipynb")
    gif = base64.b64encode(b"GIF89a").decode()
    nb.cells[0].source = f'![a](data:image/png;base64,{gif} "figures/gone.png")'
    assert attachments.unresolved_images(nb) == [
        f"cell 0: 'data:image/png;base64,{gif}' is not a PNG"
    ]


def test_stale_check_reports_unembedded_figures(tmp_path):
    sol, ex = tmp_path / "solutions", tmp_path / "notebooks"
    sol.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# 99 · Test"),
        nbformat.v4.new_markdown_cell("![a](../figures/dropout.png)"),
    ]
    nbtools.set_headers(nb, "solutions", "99_test.ipynb")
    nbtools.write(nb, sol / "99_test.ipynb")
    ex.mkdir()
    nbtools.write(nbtools.make_exercise(nb, "99_test.ipynb"), ex / "99_test.ipynb")
    exercise = nbtools.read(ex / "99_test.ipynb")
    assert "data:image/png;base64," in exercise.cells[2].source  # exercises always travel
    assert (
        attachments.inline_figures(exercise)["dropout"]
        == (nbtools.FIGURES / "dropout.png").read_bytes()
    )
    figures = [p for p in nbtools.stale_files(sol, ex) if "figures" in p]
    assert figures == [
        "solutions/99_test.ipynb (figures not embedded or differ from figures/: run `make exercises`)"
    ]
    attachments.embed(nb, nbtools.FIGURES)
    nbtools.write(nb, sol / "99_test.ipynb")
    assert [p for p in nbtools.stale_files(sol, ex) if "figures" in p or "notebooks/" in p] == []


def test_nbconvert_html_shows_every_figure_inline():
    """nbconvert's HTML (what nbgrader's feedback is made of) keeps each figure as an inline PNG."""
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="lab")
    for path in nbtools.chapter_files(nbtools.EXERCISES):
        nb = nbtools.read(path)
        page, _ = exporter.from_notebook_node(nb)
        for name, data in attachments.inline_figures(nb).items():
            src = "data:image/png;base64," + base64.b64encode(data).decode()
            assert f'src="{src}"' in page, f"{path.name}: {name} is not shown by nbconvert"
        assert "attachment:" not in page and "figures/" not in page.replace('title="figures/', "")
