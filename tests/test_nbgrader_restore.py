"""tools/grading/restore.py: a tampered notebook's nbgrader cells put back as released, each
change named (no nbgrader needed; `make test-grade` runs it inside nbgrader on a class)."""

import copy

import nbformat
import pytest

from tools.build import nbtools
from tools.grading import feedback
from tools.grading import meta as nbgrader_meta
from tools.grading.restore import Released, restore

CHAPTER = "01_toy_attention.ipynb"


@pytest.fixture(scope="module")
def release_nb():
    """Chapter 01's solution, which carries the nbgrader metadata the release has."""
    nb = nbtools.read(nbtools.SOLUTIONS / CHAPTER)
    assert not nbgrader_meta.is_stale(nb, CHAPTER)
    return nb


def _released(nb) -> list[Released]:
    out = []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader")
        if meta:
            out.append(
                Released(
                    meta["grade_id"],
                    cell.cell_type,
                    cell.source,
                    meta["locked"],
                    meta["grade"],
                    meta["solution"],
                    meta.get("points"),
                )
            )
    return out


def _index(nb, grade_id):
    (index,) = [
        i
        for i, c in enumerate(nb.cells)
        if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id
    ]
    return index


@pytest.fixture
def handed_in(release_nb):
    return copy.deepcopy(release_nb)


def _restored(nb, release_nb):
    said = restore(nb, _released(release_nb))
    assert restore(copy.deepcopy(nb), _released(release_nb)) == []  # a second pass: nothing left
    ids = [c.metadata["nbgrader"]["grade_id"] for c in nb.cells if "nbgrader" in c.metadata]
    assert ids == [r.grade_id for r in _released(release_nb)]  # each id once, in release order
    return said


def test_an_untouched_notebook_is_left_as_it_is(handed_in, release_nb):
    assert restore(handed_in, _released(release_nb)) == []
    shape = lambda nb: [(c.cell_type, c.source, c.metadata.get("nbgrader")) for c in nb.cells]  # noqa: E731
    assert shape(handed_in) == shape(release_nb)


def test_an_edited_locked_check_is_put_back_and_named(handed_in, release_nb):
    i = _index(handed_in, "ch01_check_softmax")
    handed_in.cells[i].source = "pass  # always passes"
    (said,) = _restored(handed_in, release_nb)
    assert handed_in.cells[i].source == release_nb.cells[i].source
    assert f"cell {i} (`ch01_check_softmax`) had its locked text changed" in said


def test_a_copied_check_keeps_one_id_and_the_copy_runs_as_an_ordinary_cell(handed_in, release_nb):
    i = _index(handed_in, "ch01_check_softmax")
    handed_in.cells.insert(i + 1, copy.deepcopy(handed_in.cells[i]))
    (said,) = _restored(handed_in, release_nb)
    assert "nbgrader" not in handed_in.cells[i].metadata
    assert handed_in.cells[i].source == handed_in.cells[i + 1].source  # still there, still runs
    assert f"cells {i} and {i + 1} both carried the id `ch01_check_softmax`" in said


def test_of_two_answer_cells_the_one_written_in_is_graded(handed_in, release_nb):
    i = _index(handed_in, "ch01_softmax_stable")
    written = copy.deepcopy(handed_in.cells[i])
    written.source = "def softmax_stable(x):\n    return x.softmax(-1)"
    handed_in.cells.insert(i, written)  # the student's version first, the stub after it
    _restored(handed_in, release_nb)
    assert handed_in.cells[i].metadata["nbgrader"]["grade_id"] == "ch01_softmax_stable"
    assert "nbgrader" not in handed_in.cells[i + 1].metadata


def test_a_deleted_check_is_put_back_after_its_answer(handed_in, release_nb):
    i = _index(handed_in, "ch01_check_softmax")
    del handed_in.cells[i]
    (said,) = _restored(handed_in, release_nb)
    assert handed_in.cells[i].source == release_nb.cells[i].source
    assert handed_in.cells[i - 1].metadata["nbgrader"]["grade_id"] == "ch01_softmax_stable"
    assert "the cell `ch01_check_softmax` was missing; the release's was put back" in said


def test_a_deleted_answer_comes_back_as_its_stub(handed_in, release_nb):
    del handed_in.cells[_index(handed_in, "ch01_attention_scores")]
    (said,) = _restored(handed_in, release_nb)
    assert "answer cell `ch01_attention_scores` was missing" in said and "unanswered" in said


def test_stripped_metadata_is_put_back_on_the_same_cell(handed_in, release_nb):
    i = _index(handed_in, "ch01_check_softmax")
    del handed_in.cells[i].metadata["nbgrader"]
    (said,) = _restored(handed_in, release_nb)
    assert len(handed_in.cells) == len(release_nb.cells)
    assert handed_in.cells[i].metadata["nbgrader"]["grade_id"] == "ch01_check_softmax"
    assert f"cell {i} had lost its nbgrader metadata (`ch01_check_softmax`)" in said


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda m, c: m.update(points=100), "its points (100 instead of 1)"),
        (lambda m, c: m.update(grade=False), "its `grade` flag"),
        (lambda m, c: m.update(locked=False), "its `locked` flag"),
        (
            lambda m, c: (
                c.update(cell_type="markdown"),
                c.pop("outputs"),
                c.pop("execution_count"),
            ),
            "its type (markdown instead of code)",
        ),
    ],
)
def test_changed_flags_points_and_type_are_put_back(handed_in, release_nb, change, words):
    i = _index(handed_in, "ch01_check_softmax")
    change(handed_in.cells[i].metadata["nbgrader"], handed_in.cells[i])
    (said,) = _restored(handed_in, release_nb)
    assert words in said
    assert handed_in.cells[i].cell_type == "code"
    assert handed_in.cells[i].metadata["nbgrader"]["points"] == 1


def test_unknown_ids_and_malformed_metadata_become_ordinary_cells(handed_in, release_nb):
    bonus = copy.deepcopy(handed_in.cells[_index(handed_in, "ch01_check_softmax")])
    bonus.metadata["nbgrader"]["grade_id"] = "ch01_bonus"
    odd = copy.deepcopy(handed_in.cells[0])
    odd.metadata["nbgrader"] = "yes"
    handed_in.cells += [bonus, odd]
    n = len(handed_in.cells)
    said = _restored(handed_in, release_nb)
    assert said == [
        f"cell {n - 2} carried the id `ch01_bonus`, which the release does not have; it ran as "
        "an ordinary cell",
        f"cell {n - 1} carried malformed nbgrader metadata; it was removed",
    ]


def test_a_forged_grader_note_is_removed_and_the_real_one_lists_each_change(handed_in, release_nb):
    feedback.note(handed_in, "restored", "Nothing was changed.")  # written by the student
    handed_in.cells[5].metadata[feedback.EVENTS] = {"stopped": "kernel-died"}  # skip me, guard
    said = _restored(handed_in, release_nb)
    assert said == ["a cell presenting itself as the grader's note was removed"]
    assert feedback.events(handed_in) == []
    assert all(feedback.EVENTS not in c.metadata for c in handed_in.cells)
    assert not any(feedback.NOTE_MARKER in c.source for c in handed_in.cells)
    for sentence in said:
        feedback.note(handed_in, "restored", sentence)
    feedback.note(handed_in, "kernel-died", "The kernel died.")
    assert feedback.NOTE_MARKER in handed_in.cells[0].source
    assert "- The kernel died." in handed_in.cells[0].source
    assert [e["kind"] for e in feedback.events(handed_in)] == ["restored", "kernel-died"]


def test_the_graders_note_shows_what_a_student_wrote_as_text():
    """The note cell is markdown, rendered as HTML in the feedback page: a file name a student
    chose must not become a tag there, nor a backtick end a code span early."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    feedback.note(nb, "sandbox", "tried to write /course/<script>alert(1)</script>` <b>x</b>")
    source = nb.cells[0].source
    assert "<script>" not in source and "<b>" not in source and "`" not in source
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in source
    assert feedback.events(nb)[0]["text"].endswith("<b>x</b>")  # the record keeps the words
