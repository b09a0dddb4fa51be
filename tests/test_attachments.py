"""Every picture of every notebook shows when the notebook is opened alone (issue 14).

The generator (tools/attachments.py, run by `make exercises`) embeds each course figure as a
markdown cell attachment. These tests run it on copies: the committed notebooks are rewritten
only when the instructor runs `make exercises`.
"""

from __future__ import annotations

import base64
import copy
import shutil

import nbformat
import pytest

from tools import attachments, nbtools

SOLUTIONS = nbtools.chapter_files(nbtools.SOLUTIONS)


def _embedded_solution(path):
    nb = nbtools.read(path)
    attachments.embed(nb, nbtools.FIGURES, path.name)
    return nb


def _alone(nb, tmp_path, name):
    """Write the notebook into an empty folder and read it back from there."""
    folder = tmp_path / "alone"
    folder.mkdir()
    nbtools.write(nb, folder / name)
    assert [p.name for p in folder.iterdir()] == [name]
    return nbtools.read(folder / name)


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
@pytest.mark.parametrize("kind", ["solution", "exercise"])
def test_every_image_resolves_when_the_notebook_is_alone(path, kind, tmp_path):
    nb = (
        _embedded_solution(path)
        if kind == "solution"
        else nbtools.make_exercise(nbtools.read(path), path.name)
    )
    nb = _alone(nb, tmp_path, path.name)
    assert attachments.unresolved_images(nb) == []
    for cell in nb.cells:
        for name, data in (cell.get("attachments") or {}).items():
            assert base64.b64decode(data["image/png"]) == (nbtools.FIGURES / name).read_bytes(), (
                name
            )


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
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("Look:\n\n![old alt](../figures/causal_mask.png)\n\nDone."),
        nbformat.v4.new_markdown_cell("![badge](https://example.org/b.svg) and ![x](picture.png)"),
    ]
    assert attachments.embed(nb, figures) == ["causal_mask"]
    cell = nb.cells[0]
    assert cell.source.startswith("Look:\n\n![") and cell.source.endswith(
        "](attachment:causal_mask.png)\n\nDone."
    )
    assert "old alt" not in cell.source  # the alt text comes from the figure registry
    once = nbtools.dumps(nb)
    attachments.embed(nb, figures)
    assert nbtools.dumps(nb) == once
    assert attachments.unresolved_images(nb) == [
        "cell 1: 'picture.png' is a path, not an attachment"
    ]

    # figures/ is the source: a redrawn PNG is re-embedded, and the stale copy is detectable
    (figures / "causal_mask.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"new")
    fresh = copy.deepcopy(nb)
    attachments.embed(fresh, figures)
    assert nbtools.dumps(fresh) != once
    assert base64.b64decode(fresh.cells[0].attachments["causal_mask.png"]["image/png"]).endswith(
        b"new"
    )


def test_a_missing_figure_or_a_broken_attachment_is_reported(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("![a](../figures/not_drawn.png)")]
    with pytest.raises(
        attachments.FigureError, match=r"x.ipynb, cell 0: the image '../figures/not_drawn.png'"
    ):
        attachments.embed(nb, tmp_path, "x.ipynb")
    nb.cells[0].source = "![a](attachment:gone.png)"
    nb.cells[0]["attachments"] = {"gone.png": {"image/png": base64.b64encode(b"GIF89a").decode()}}
    assert attachments.unresolved_images(nb) == [
        "cell 0: 'attachment:gone.png' has no PNG attachment"
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
    assert "attachment:dropout.png" in exercise.cells[2].source  # exercises always travel
    assert exercise.cells[2].attachments["dropout.png"]["image/png"]
    figures = [p for p in nbtools.stale_files(sol, ex) if "figures" in p]
    assert figures == [
        "solutions/99_test.ipynb (figures not embedded or differ from figures/: run `make exercises`)"
    ]
    attachments.embed(nb, nbtools.FIGURES)
    nbtools.write(nb, sol / "99_test.ipynb")
    assert [p for p in nbtools.stale_files(sol, ex) if "figures" in p or "notebooks/" in p] == []
