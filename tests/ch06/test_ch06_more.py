"""Chapter 06's dataset and embedding checks name the mistakes of tests/ch06/buggy_more.py by id."""

import pytest

import course_utils as cu
from tests.ch06 import buggy_more as m
from tests.check_helpers import assert_names_bug


@pytest.mark.parametrize(
    "check, buggy, bug",
    [
        (cu.checks.check_sliding_window_dataset, m.DatasetNoLen, "dataset_missing_method"),
        (cu.checks.check_sliding_window_dataset, m.DatasetReturnsDict, "dataset_item_not_pair"),
        (cu.checks.check_sliding_window_dataset, m.DatasetFloatIds, "dataset_ids_not_integer"),
        (cu.checks.check_input_embedding, m.EmbeddingTablesTransposed, "embedding_table_shapes"),
        (cu.checks.check_input_embedding, m.EmbeddingPositionsOnly, "positions_only"),
    ],
    ids=lambda v: v if isinstance(v, str) else getattr(v, "__name__", "check"),
)
def test_each_bug_is_named_by_id(check, buggy, bug):
    assert_names_bug(check, buggy, bug=bug)
