"""tools/class_report.py: a failure's message is matched to the mistake the check named.

The grading run and the report on a real class are tested in tests/nbgrader/test_grade.py.
"""

import pytest
import torch

import course_utils as cu
from course_utils.checks._engine.core import CheckFailure
from tools import class_report


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
