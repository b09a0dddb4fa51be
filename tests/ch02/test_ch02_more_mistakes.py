"""check_weight_transfer names transfer_outputs_differ by its id, and reports a copy whose outputs
can no longer be computed in plain words (it used to crash with PyTorch's own traceback)."""

import pytest

import course_utils as cu
from course_utils.checks import CheckFailure
from tests.ch02 import buggy as b
from tests.check_helpers import assert_names_bug


def test_right_weights_with_different_outputs_are_named():
    assert_names_bug(
        cu.checks.check_weight_transfer,
        b.transfer_rebuilds_v2_layers,
        bug="transfer_outputs_differ",
    )


def test_a_copy_that_breaks_the_forward_is_reported_not_raised():
    with pytest.raises(CheckFailure) as info:
        cu.checks.check_weight_transfer(b.transfer_to_float64)
    assert "v1(x) after the copy raised RuntimeError" in str(info.value)
    assert "same dtype" in str(info.value)
