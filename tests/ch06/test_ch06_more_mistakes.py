"""Chapter 06's copy into nn.MultiheadAttention and TinyGPT checks name the mistakes of
tests/ch06/buggy_more.py by their catalogue ids, each called as a student calls it."""

import pytest

import course_utils as cu
from tests.ch06 import buggy as b
from tests.ch06 import buggy_more as m
from tests.check_helpers import assert_names_bug


@pytest.mark.parametrize(
    ("copy", "mask", "bug"),
    [
        (m.copy_in_proj_side_by_side, b.mask_right, "in_proj_wrong_shape"),
        (m.copy_into_separate_projections, b.mask_right, "in_proj_not_copied"),
        (m.copy_in_bias_from_out_bias, b.mask_right, "in_bias_not_zero"),
        (b.copy_right, m.mask_for_context_length, "mask_wrong_shape"),
    ],
    ids=lambda v: v if isinstance(v, str) else v.__name__,
)
def test_each_copy_or_mask_mistake_is_named_by_id(copy, mask, bug):
    assert_names_bug(cu.checks.check_copy_into_torch_mha, copy, mask, bug=bug)


@pytest.mark.parametrize(
    ("cls", "bug"),
    [
        (m.TinyGPTTokenTableSwapped, "tiny_gpt_token_table_missing"),
        (m.TinyGPTHeadSwapped, "tiny_gpt_head_wrong"),
        (m.TinyGPTTorchAttention, "tiny_gpt_attn_wrong"),
    ],
    ids=lambda v: v if isinstance(v, str) else v.__name__,
)
def test_each_tiny_gpt_mistake_is_named_by_id(cls, bug):
    assert_names_bug(cu.checks.check_tiny_gpt, cls, bug=bug)
