"""Chapter 11's checks against a second, fresh collection (collected by a reviewer who had not seen
the checks): every right-but-unusual answer passes; each wrong one from other projects' code and issue
threads (buggy_fresh.py, buggy_fresh_sparse_sharing.py) is rejected with the id of its true cause, at
least 90% of them named; each grader's probe (probes_fresh.py) is rejected with its id, or accepted
where it is right. A wrong answer's check stays under 2 s of CPU on one thread."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import course_utils as cu
from course_utils.checks import CheckFailure
from tests.ch11 import buggy_fresh, buggy_fresh_sparse_sharing, correct_fresh, probes_fresh
from tests.check_helpers import cpu_seconds_on_one_thread

WRONG = buggy_fresh.FRESH + buggy_fresh_sparse_sharing.FRESH

# The id that names each fixture's true cause (its comment in the fixture files).
NAMED_BY = {
    "kv_vllm_fit_heads_squared": "kv_heads_squared",  # its second slip (bytes) said beside it
    "kv_hf_mem_drops_windowed_layers": "kv_windowed_dropped",
    "kv_aiconfigurator_per_token_times_context": "kv_window_ignored",
    "kv_lmcache_latent_twice": "kv_latent_twice",
    "kv_trtllm_mha_formula_for_mla": "kv_latent_ignored",
    "kv_pollard_counts_reuse_layers": "kv_sharing_ignored",
    "kv_lmdeploy_window_on_every_layer": "kv_window_everywhere",
    "mla_executorch_upper_left_causal": "mla_cache_mask_top_left",
    "mla_shainet_rerotates_cached_keys": "mla_rope_keys_rotated_twice",
    "mla_tpa_rope_over_heads": "mla_rope_over_heads",
    "mla_mlx_lm_query_offset_after_append": "mla_query_positions_shifted",
    "mla_absorbed_ollama_latent_scale": "mla_scale_latent_width",
    "mla_absorbed_mlxcel_no_causal_fallback": "mla_not_causal",
    "la_performer_missing_reciprocal": "linear_normaliser_multiplied",
    "la_performer_divides_state_by_z": "linear_normaliser_per_feature",
    "la_fla_normaliser_forgets_earlier_keys": "linear_normaliser_restarts",
    "la_lm_engine_read_before_write": "linear_reads_before_write",
    "chunked_tileops_drops_partial_chunk": "chunk_last_partial",
    "chunked_lm_engine_strict_mask": "chunk_diagonal_dropped",
    "gdr_fla_885_error_before_decay": "delta_erase_ungated",
    "gdr_hf_qwen3_next_scaled_query": "delta_query_scaled",
    "gdr_dl_techniques_no_erase": "delta_no_erase",
    "sparse_doge_topk_before_causal": "sparse_topk_over_future",
    "sparse_vmlx_skip_selection_without_mask": "sparse_sees_future",
    "sparse_lattice_finite_sentinel": "sparse_topk_takes_future",
    "sparse_nsa_topk_out_of_range": "sparse_topk_over_length",
    "sparse_mlx_lm_square_mask": "sparse_mask_square",
    "shared_mlx_lm_only_with_cache": "share_ignored",  # true of a pass without a cache
    "shared_lalamo_projects_and_appends": "share_sharer_appends",
    "shared_ascend_overwrites_producer": "share_sharer_overwrites",
    "shared_sdpa_is_causal_with_cache": "is_causal_top_left",
}
# What each probe must give: the id named, or None where the answer is right (accepted).
PROBE_IDS = {
    "kv_returns_float": "kv_not_an_int",
    "kv_numpy_int32": "kv_int32_overflow",
    "kv_returns_none": "kv_not_a_count",
    "mla_positions_without_device": "cpu_tensor_in_forward",
    "mla_latent_under_no_grad": "gradient_missing",
    "mla_absorbed_returns_list_cache": None,  # a list is a pair
    "la_mutates_caller_state": "recurrence_state_modified",
    "la_keeps_state_between_calls": "recurrence_state_not_reset",
    "la_elu_inplace_on_inputs": "input_modified",
    "chunked_detached_state": "gradient_differs",
    "chunked_pad_after_feature_map": "gradient_not_finite",
    "gdr_zeros_without_device": "cpu_tensor_in_forward",
    "gdr_writes_caller_state": "recurrence_state_modified",
    "gdr_detached_each_step": "gradient_differs",
    "la_eps_in_denominator": None,  # 1e-6 beside sums of elu + 1 > 0 changes nothing
    "la_float32_inside": "dtype_not_kept",
    "mla_float32_inside": "dtype_not_kept",
    "mla_softmax_without_max": "softmax_overflow",
    "mla_rope_key_detached": None,  # the output and its gradients are right; the cache is data
    "shared_source_detached": "gradient_differs",
    "sparse_float32_inside": "dtype_not_kept",
    "mla_ignores_handed_cache": "cache_kept_between_calls",
    "shared_ignores_handed_cache": "cache_kept_between_calls",
    "gdr_float32_state": "dtype_not_kept",
    "sparse_masks_caller_scores": "input_modified",
    "sparse_seeds_the_rng": "global_rng_changed",
    "sparse_mask_without_device": "cpu_tensor_in_forward",
    "shared_mutates_caller_cache": "share_cache_modified",
    "shared_residual_in_place": "input_modified",
    "shared_returns_only_output": "share_cache_form",
}


def _verdict(check: str, answer) -> str | None:
    """The id the check names ('' for a rejection naming none), None when it accepts the answer; a
    crash inside a check fails the test."""
    try:
        getattr(cu.checks, check)(answer)
    except CheckFailure as failure:
        return failure.bug or ""
    return None


@pytest.mark.parametrize(
    ("check", "answer"), correct_fresh.RIGHT, ids=[a.__name__ for _, a in correct_fresh.RIGHT]
)
def test_each_right_but_unusual_answer_passes(check, answer, capsys):
    getattr(cu.checks, check)(answer)
    assert "✓" in capsys.readouterr().out


@pytest.mark.parametrize(("check", "answer", "cause"), WRONG, ids=[a.__name__ for _, a, _ in WRONG])
def test_each_wrong_answer_is_rejected_with_the_id_of_its_cause(check, answer, cause):
    assert _verdict(check, answer) == NAMED_BY[answer.__name__], cause


def test_at_least_90_percent_of_the_wrong_answers_are_named_by_cause():
    assert set(NAMED_BY) == {a.__name__ for _, a, _ in WRONG}
    named = [a.__name__ for c, a, _ in WRONG if _verdict(c, a) == NAMED_BY[a.__name__]]
    assert len(named) / len(WRONG) >= 0.9, sorted(set(NAMED_BY) - set(named))


@pytest.mark.filterwarnings("ignore:overflow encountered")  # kv_numpy_int32 wraps, as meant
@pytest.mark.parametrize(
    ("check", "answer", "wanted"),
    probes_fresh.PROBES,
    ids=[a.__name__ for _, a, _ in probes_fresh.PROBES],
)
def test_each_graders_probe_is_named_or_accepted(check, answer, wanted, capsys):
    assert _verdict(check, answer) == PROBE_IDS[answer.__name__], wanted


def test_the_two_slips_of_vllm_fit_are_both_said():
    with pytest.raises(CheckFailure) as info:
        cu.checks.check_kv_cache_bytes(buggy_fresh.kv_vllm_fit_heads_squared)
    assert "square of the key/value heads" in str(info.value)
    assert "bytes_per_value is not used" in str(info.value)


@pytest.mark.filterwarnings("ignore:overflow encountered")
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), 1e308 * 10, 2.5])
def test_a_count_that_is_no_whole_number_is_named_not_crashed_on(value):
    bug = "kv_in_gib" if value == 2.5 else "kv_not_finite"
    assert _verdict("check_kv_cache_bytes", lambda *args, **kwargs: value) == bug


def test_a_whole_numpy_count_passes_and_an_unexplained_count_shows_its_factors(capsys):
    import numpy as np

    exact = correct_fresh.kv_loop_over_caches
    assert _verdict("check_kv_cache_bytes", lambda *a, **k: np.int64(exact(*a, **k))) is None
    off = lambda layout, *a, **k: exact(layout, *a, **k) + (layout.window is not None)
    with pytest.raises(CheckFailure, match=r"expected 131,072 = 1 x \(32 windowed caches x 1 tok"):
        cu.checks.check_kv_cache_bytes(off)


def chunked_zeros_float32(q, k, v, chunk):
    """Written for the course: the state made by torch.zeros without dtype=, float32 whatever q is;
    the first chunk reads it before any sum promotes it, so float64 inputs crash (cq @ S)."""
    b, h, n, dk = q.shape
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    S, z = (
        torch.zeros(b, h, dk, v.shape[-1], device=q.device),
        torch.zeros(b, h, dk, device=q.device),
    )
    outs = []
    for lo in range(0, n, chunk):
        cq, ck, cv = fq[:, :, lo : lo + chunk], fk[:, :, lo : lo + chunk], v[:, :, lo : lo + chunk]
        a = (cq @ ck.mT).tril()
        outs.append((a @ cv + cq @ S) / (a.sum(-1, keepdim=True) + cq @ z[..., None]))
        S, z = S + ck.mT @ cv, z + ck.sum(2)
    return torch.cat(outs, dim=2)


def test_a_crash_in_float64_only_is_named_as_the_dtype():
    with pytest.raises(
        CheckFailure, match="in float64:\nGiven inputs in float64, your function cras"
    ):
        cu.checks.check_linear_attention_chunked(chunked_zeros_float32)
    assert _verdict("check_linear_attention_chunked", chunked_zeros_float32) == "dtype_not_kept"


@pytest.mark.parametrize(
    ("check", "answer"),
    [(c, a) for c, a, _ in WRONG[::4]] + [(c, a) for c, a, _ in probes_fresh.PROBES[9:15]],
    ids=lambda a: getattr(a, "__name__", a),
)
def test_a_wrong_answers_check_stays_under_2_cpu_seconds(check, answer):
    seconds, _ = cpu_seconds_on_one_thread(_verdict, check, answer)
    assert seconds < 2.0, seconds
