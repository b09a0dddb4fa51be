"""tools/grading/report.py: a failure's message is matched to the mistake the check named.

The grading run and the report on a real class are tested in tests/nbgrader/test_grade.py.
"""

import pytest
import torch

import course_utils as cu
from course_utils.checks._engine.core import CheckFailure
from tools.grading import report as class_report


def _scores_without_sum(query, inputs):
    return inputs * query


def _softmax_overflow(x):
    exps = torch.exp(x)
    return exps / exps.sum(dim=-1, keepdim=True)


def _mask_zero_fill(scores, d_k):
    hidden = torch.ones(scores.shape[-1], scores.shape[-1]).triu(1).bool()
    return torch.softmax(scores.masked_fill(hidden, 0.0) / d_k**0.5, dim=-1)


def _stub(*args):
    raise NotImplementedError()


@pytest.mark.parametrize(
    "check, answer",
    [
        ("check_attention_scores", _scores_without_sum),
        ("check_softmax", _softmax_overflow),
        ("check_mask_before_softmax", _mask_zero_fill),
    ],
)
def test_the_named_mistake_is_found_from_the_message(check, answer):
    with pytest.raises(CheckFailure) as failure:
        getattr(cu.checks, check)(answer)
    assert failure.value.bug  # a catalogued mistake, filled with this answer's values
    assert (
        class_report.name_mistake(str(failure.value), class_report._catalogue())
        == failure.value.bug
    )


def test_stub_and_unknown_failures():
    catalogue = class_report._catalogue()
    with pytest.raises(CheckFailure) as failure:
        cu.checks.check_softmax(_stub)
    assert class_report.name_mistake(str(failure.value), catalogue) == class_report.STUB
    assert class_report.name_mistake("something else went wrong", catalogue) == class_report.OTHER


def _solution_cells(name):
    from tools.build import nbtools

    return nbtools.read(nbtools.SOLUTIONS / name).cells


def test_checks_are_listed_in_notebook_order_not_alphabetically():
    order = class_report.check_order(_solution_cells("01_toy_attention.ipynb"))
    assert order == [
        "ch01_check_attention_scores",
        "ch01_check_softmax",
        "ch01_check_attention_weights",
        "ch01_check_context_vectors",
    ]
    assert order != sorted(order)


def test_a_check_builds_on_the_checks_of_the_exercises_it_calls():
    """context_vectors calls attention_weights; chapter 03's two masks call causal_mask."""
    ch01 = class_report.upstream_checks(_solution_cells("01_toy_attention.ipynb"))
    assert ch01["ch01_check_context_vectors"] == ["ch01_check_attention_weights"]
    assert ch01["ch01_check_attention_weights"] == [] and ch01["ch01_check_softmax"] == []
    ch03 = class_report.upstream_checks(_solution_cells("03_causal_masking.ipynb"))
    assert ch03["ch03_check_mask_after_softmax"] == ["ch03_check_causal_mask"]
    assert ch03["ch03_check_mask_before_softmax"] == ["ch03_check_causal_mask"]


def test_a_student_whose_exercise_calls_nothing_earlier_has_no_cascade():
    cells = [c for c in _solution_cells("01_toy_attention.ipynb")]
    answer = next(
        c for c in cells if c.metadata.get("nbgrader", {}).get("grade_id") == "ch01_context_vectors"
    )
    answer.source = (
        "def context_vectors(inputs):\n    return torch.softmax(inputs @ inputs.T, -1) @ inputs"
    )
    assert class_report.upstream_checks(cells)["ch01_check_context_vectors"] == []


def test_the_report_names_students_and_keeps_cascades_cheats_and_refusals_apart():
    row = class_report.CheckRow("01_toy_attention", "ch01_check_context_vectors")
    row.passed, row.restored, row.withdrawn = ["ada"], ["tam"], ["eve"]
    row.mistakes = {"context_transposed_weights": ["bob"]}
    row.cascades = {"ch01_check_attention_weights": ["cy", "al"]}
    row.not_graded = {class_report.REFUSED: ["zed"]}
    first = class_report.CheckRow("01_toy_attention", "ch01_check_softmax", passed=["ada"])
    report = class_report.Report(
        "week1", 7, [first, row], 0, {}, {},
        [("tam", "01_toy_attention", "restored", "Cell 27 had its locked text changed.")],
    )  # fmt: skip
    text = class_report.markdown(report, plot=None)
    assert "| 01_toy_attention | check_context_vectors | 1 | 1 | 1 | 2 | 1 | 1 |" in text
    assert text.index("check_softmax |") < text.index("check_context_vectors |")
    assert "| `context_transposed_weights` | bob |" in text
    assert "| check_context_vectors | check_attention_weights | al, cy |" in text
    assert "| withdrawn by the guard | eve |" in text and "| refused by nbgrader | zed |" in text
    assert "| tam | 01_toy_attention | restored | Cell 27 had its locked text changed. |" in text
    assert report.totals() == {"context_transposed_weights": 1}  # cascades are not mistakes


def test_what_students_wrote_is_text_in_the_html_report(tmp_path):
    """A stranger's student named files `<img src=x onerror=alert(1)>.txt` and
    `<script>...</script>`: the grader's note quoted them, and report.html ran them."""
    note = "tried to write /course/<img src=x onerror=alert(1)>.txt | <script>alert(2)</script>"
    report = class_report.Report(
        "week1", 1, [], 0, {}, {}, [("eve", "01_toy_attention", "sandbox", note)]
    )
    page = (class_report.write(report, tmp_path).with_suffix(".html")).read_text()
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in page  # shown, as text
    assert "| 01_toy_attention | sandbox |" in class_report.markdown(report, plot=None)
