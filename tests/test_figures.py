"""tools/figures/catalogue.py: committed figures match the code, byte for byte; notebooks point at real figures."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import pytest
from PIL import Image

import course_utils as cu
from tools.figures import catalogue as F

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted([*ROOT.glob("solutions/*.ipynb"), *ROOT.glob("notebooks/*.ipynb")])


# ----------------------------------------------------------------------------- determinism
def _pinned(package: str) -> str | None:
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.split("==")[0].strip().lower() == package:
            return line.split("==")[1].strip()
    return None


PINNED_MATPLOTLIB = _pinned("matplotlib")
same_matplotlib = pytest.mark.skipif(
    matplotlib.__version__ != PINNED_MATPLOTLIB,
    reason=f"figures are byte-identical only with the pinned matplotlib {PINNED_MATPLOTLIB} "
    f"(constraints.txt); this is {matplotlib.__version__}",
)


@same_matplotlib
def test_committed_figures_match_the_code(tmp_path):
    """Redraw every figure (what `make figures` writes) and compare bytes with figures/ (the one slow test)."""
    F.generate(tmp_path)
    problems = F.figure_differences(F.FIGURES_DIR, tmp_path)
    assert not problems, "\n".join(problems) + "\nRun `make figures` and commit figures/."


def test_pngs_carry_no_software_or_date_metadata():
    for name in F.FIGURES:
        with Image.open(F.path(name)) as image:
            assert not {"Software", "Creation Time", "date:create"} & set(image.info), name
            assert round(image.info["dpi"][0]) == F.DPI


def test_figure_differences_catches_changed_missing_and_stray_files(tmp_path):
    committed, fresh = tmp_path / "committed", tmp_path / "fresh"
    committed.mkdir()
    fresh.mkdir()
    for name in F.FIGURES:
        (committed / f"{name}.png").write_bytes(name.encode())
        (fresh / f"{name}.png").write_bytes(name.encode())
    assert F.figure_differences(committed, fresh) == []
    (fresh / "causal_mask.png").write_bytes(b"redrawn")
    (committed / "dropout.png").unlink()
    (committed / "old_diagram.png").write_bytes(b"stray")
    problems = F.figure_differences(committed, fresh)
    assert len(problems) == 3
    assert "causal_mask: " in problems[0] and "differs from what the code draws" in problems[0]
    assert "dropout: " in problems[1] and "is missing" in problems[1]
    assert problems[2].startswith("old_diagram.png: not drawn by tools/figures/catalogue.py")


# ----------------------------------------------------------------------------- the catalogue
def test_catalogue_lists_every_diagram_with_chapter_and_alt_text():
    assert set(F.FIGURES) >= {  # chapters 01-07; later chapters add their own entries
        "attention_scores",
        "score_matrix",
        "qkv_projections",
        "causal_mask",
        "dropout",
        "single_vs_multihead",
        "weight_split",
        "text_to_logits",
        "attention_memory",
    }
    chapters = {path.name[:2] for path in (F.ROOT / "solutions").glob("[0-9][0-9]_*.ipynb")}
    for name, (chapter, alt, draw) in F.FIGURES.items():
        assert chapter in chapters, (
            f"{name}: chapter {chapter!r} has no solutions/{chapter}_*.ipynb"
        )
        assert 40 <= len(alt) <= 400 and alt.endswith("."), name
        assert not set("[]\n") & set(alt), f"{name}: alt text must be safe inside ![...](...)"
        assert callable(draw)


def test_markdown_and_path_use_the_catalogue():
    alt = F.FIGURES["causal_mask"].alt
    assert F.markdown("causal_mask") == f"![{alt}](../figures/causal_mask.png)"
    assert F.alt_text("causal_mask") == alt
    assert F.path("causal_mask") == F.FIGURES_DIR / "causal_mask.png"
    with pytest.raises(
        cu.CourseInputError, match="name must be one of the course's figures .* got 'nope'"
    ):
        F.markdown("nope")


@same_matplotlib
def test_cli_draws_the_named_figure_again_with_identical_bytes(tmp_path, capsys):
    assert F.main(["--out", str(tmp_path), "weight_split"]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["weight_split.png"]
    assert (tmp_path / "weight_split.png").read_bytes() == F.path("weight_split").read_bytes()
    assert "wrote" in capsys.readouterr().out


def test_cli_rejects_an_unknown_figure(capsys):
    with pytest.raises(SystemExit) as exit_info:
        F.main(["nope"])
    assert exit_info.value.code == 2
    assert "unknown figure 'nope'" in capsys.readouterr().err


# ----------------------------------------------------------------------------- references in notebooks
def test_notebooks_reference_only_existing_figures():
    problems = F.broken_figure_references(NOTEBOOKS)
    assert not problems, "\n".join(problems)


def test_notebooks_use_the_catalogue_alt_text():
    problems = F.alt_text_mismatches(NOTEBOOKS)
    assert not problems, "\n".join(problems)


def _fake_notebook(folder: Path, *markdown: str) -> Path:
    cells = [{"cell_type": "markdown", "metadata": {}, "source": text} for text in markdown]
    cells.insert(
        1,
        {
            "cell_type": "code",
            "metadata": {},
            "source": "# ![not markdown](../figures/x.png)",
            "outputs": [],
            "execution_count": None,
        },
    )
    notebook = folder / "solutions" / "99_fake.ipynb"
    notebook.parent.mkdir(parents=True)
    notebook.write_text(
        json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    )
    return notebook


def test_reference_check_catches_a_broken_figure_reference(tmp_path):
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "causal_mask.png").write_bytes(b"png")
    alt = F.FIGURES["causal_mask"].alt
    notebook = _fake_notebook(
        tmp_path,
        f"# Title\n\n![{alt}](../figures/causal_mask.png)\n\nSee ![typo](../figures/casual_mask.png).",
        '<img src="../figures/missing.png" alt="gone" width="500">\n![web](https://example.org/figures/a.png)',
    )
    refs = F.figure_references(notebook)
    assert [(r.cell, r.src) for r in refs] == [
        (0, "../figures/causal_mask.png"),
        (0, "../figures/casual_mask.png"),
        (2, "../figures/missing.png"),
    ]
    problems = F.broken_figure_references([notebook])
    assert len(problems) == 2
    assert (
        "cell 0: '../figures/casual_mask.png' points to" in problems[0]
        and "does not exist" in problems[0]
    )
    assert "cell 2: '../figures/missing.png'" in problems[1]
    mismatches = F.alt_text_mismatches([notebook])
    assert (
        mismatches == []
    )  # casual_mask and missing are not catalogue figures; causal_mask's alt is right


def test_alt_text_check_catches_a_hand_written_alt_text(tmp_path):
    notebook = _fake_notebook(tmp_path, "![the mask](../figures/causal_mask.png)")
    (problem,) = F.alt_text_mismatches([notebook])
    assert "figure 'causal_mask' has alt text 'the mask'" in problem
    assert "expected tools.figures.catalogue.alt_text('causal_mask')" in problem


def test_attachment_references_are_checked_for_presence_content_and_alt_text(tmp_path):
    import base64

    alt = F.alt_text("dropout")
    notebook = _fake_notebook(
        tmp_path,
        f"![{alt}](attachment:dropout.png)",
        "![x](attachment:causal_mask.png)",
        f"![{alt}](attachment:dropout.png)",
    )
    cells = json.loads(notebook.read_text())
    fresh = base64.b64encode(F.path("dropout").read_bytes()).decode()
    cells["cells"][0]["attachments"] = {"dropout.png": {"image/png": fresh}}
    cells["cells"][3]["attachments"] = {
        "dropout.png": {"image/png": base64.b64encode(b"old").decode()}
    }
    notebook.write_text(json.dumps(cells))
    refs = F.figure_references(notebook)
    assert [(r.cell, r.name, r.target) for r in refs] == [
        (0, "dropout", None),
        (2, "causal_mask", None),
        (3, "dropout", None),
    ]
    problems = F.broken_figure_references([notebook])
    assert len(problems) == 2
    assert "cell 2: 'attachment:causal_mask.png' is not among the cell's attachments" in problems[0]
    assert "cell 3: 'attachment:dropout.png' differs from figures/dropout.png" in problems[1]
    (mismatch,) = F.alt_text_mismatches([notebook])
    assert "figure 'causal_mask' has alt text 'x'" in mismatch
