"""Chapter 11's checks accept right (and unusual but right) answers and name every known bug."""

from __future__ import annotations

import pytest
import torch

import course_utils as cu
from tests.ch11 import buggy, buggy_trial, correct
from tests.check_helpers import assert_names_bug

CHECKS = {
    "bytes": (
        cu.checks.check_kv_cache_bytes,
        correct.BYTES_CORRECT,
        buggy.BYTES_BUGS,
    ),
    "mla": (
        cu.checks.check_mla_attention,
        correct.MLA_CORRECT,
        buggy.MLA_BUGS + buggy_trial.MLA_BUGS,
    ),
    "absorbed": (
        cu.checks.check_mla_absorbed,
        correct.ABSORBED_CORRECT,
        buggy.MLA_BUGS + buggy_trial.MLA_BUGS + buggy_trial.ABSORBED_BUGS,
    ),
}
CHECKS.update(
    recurrent=(
        cu.checks.check_linear_attention_recurrent,
        correct.LINEAR_CORRECT,
        buggy.LINEAR_BUGS + buggy_trial.LINEAR_BUGS,
    ),
    chunked=(
        cu.checks.check_linear_attention_chunked,
        correct.CHUNK_CORRECT,
        buggy.CHUNK_BUGS + buggy_trial.CHUNK_BUGS,
    ),
    delta=(
        cu.checks.check_gated_delta_rule,
        correct.DELTA_CORRECT,
        buggy.DELTA_BUGS + buggy_trial.DELTA_BUGS,
    ),
)
RIGHT = [(check, fn) for check, rights, _ in CHECKS.values() for fn in rights]
WRONG = [(check, fn, bug) for check, _, bugs in CHECKS.values() for fn, bug in bugs]


@pytest.mark.parametrize(
    ("check", "fn"), RIGHT, ids=[f"{c.__name__}-{fn.__name__}" for c, fn in RIGHT]
)
def test_right_answers_pass_with_one_line(check, fn, capsys):
    check(fn)
    out = capsys.readouterr().out
    assert out.startswith(f"✓ {check.__name__}:") and out.count("\n") == 1, out


@pytest.mark.parametrize(
    ("check", "fn", "bug"), WRONG, ids=[f"{c.__name__}-{fn.__name__}" for c, fn, _ in WRONG]
)
def test_each_bug_is_named(check, fn, bug):
    assert_names_bug(check, fn, bug=bug)


def test_a_stub_and_a_crash_are_reported_not_raised():
    def stub(*args, **kwargs):
        raise NotImplementedError

    def crash(x, w, cache=None):
        return x @ w.w_uk  # wrong shapes: a RuntimeError inside the student's code

    for check in (cu.checks.check_kv_cache_bytes, cu.checks.check_mla_attention):
        assert_names_bug(check, stub)
    assert_names_bug(cu.checks.check_mla_absorbed, crash, diagnosis="raised RuntimeError")


def test_a_cpu_tensor_in_a_cached_step_is_named():
    def cpu_positions(x, w, cache=None):
        start = 0 if cache is None else cache[0].shape[1]
        positions = torch.arange(start, start + x.shape[1])  # no device=
        cu.chapters.apply_rope(x @ w.w_kr.T, positions)  # CPU angles meet x
        return cu.chapters.mla_attention(x, w, cache)

    assert_names_bug(cu.checks.check_mla_attention, cpu_positions, bug="cpu_tensor_in_forward")


def test_kv_layout_rejects_bad_input():
    with pytest.raises(ValueError, match="must divide"):
        cu.chapters.KVLayout(61, 1, 128, layers_per_cache=2)
    with pytest.raises(ValueError, match="window"):
        cu.chapters.KVLayout(4, 1, 8, window=16)
    with pytest.raises(ValueError, match="rope_dim"):
        cu.chapters.mla_weights(8, 2, 4, 4, 3)


def test_the_explorer_data_and_its_bad_input():
    view = cu.widgets.kv_wall_data("Llama 3 8B", "MHA", 131_072, 8)
    assert view.gib[1].item() == 512.0 and view.gib[0].item() == 128.0  # MHA, the published GQA-8
    assert torch.isnan(cu.widgets.kv_wall_data("DeepSeek-V3").gib[5])  # 61 layers cannot pair up
    with pytest.raises(cu.CourseInputError, match="batch"):
        cu.widgets.kv_wall_data(batch=3)
    with pytest.raises(cu.CourseInputError, match="model"):
        cu.widgets.kv_wall_data("GPT-5")


def test_an_unexplained_count_gets_the_general_diagnosis():
    def off_by_one(layout, context, batch=1, bytes_per_value=2):
        return cu.chapters.kv_cache_bytes(layout, context + 1, batch, bytes_per_value)

    assert_names_bug(cu.checks.check_kv_cache_bytes, off_by_one, bug="kv_count_wrong")
