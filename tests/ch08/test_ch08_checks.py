"""Chapter 08's self-checks accept right (and unusual) answers and name each wrong one."""

import pytest
import torch

from course_utils.chapters.ch08 import checks
from course_utils.checks import CheckFailure
from tests.ch08 import buggy as b
from tests.ch08 import buggy_cache
from tests.ch08 import correct as c
from tests.check_helpers import assert_names_bug, assert_passes


def assert_bug(check, answer, bug):
    """The check fails with the catalogued mistake ``bug`` (its id, not only its words)."""
    return assert_names_bug(check, answer, bug=bug)


# Each check: (its right and unusual right answers, (wrong answer, the mistake it must name) pairs).
CASES = {
    checks.check_train_step: (
        [
            b.step_right,
            c.step_zero_grad_last,
            c.step_model_zero_grad,
            c.step_nll,
            c.step_masked_mean,
            c.step_numpy_loss,
        ],
        [
            (b.step_no_zero_grad, "grad_not_zeroed"),
            (b.step_zero_grad_between, "step_zero_grad_before_step"),
            (b.step_no_step, "step_no_optimizer_step"),
            (b.step_no_backward, "step_no_backward"),
            (b.step_softmax_first, "loss_on_probabilities"),
            (b.step_sum, "loss_summed"),
            (b.step_shift_again, "loss_shifted_again"),
            (b.step_returns_nothing, "step_loss_not_returned"),
            (b.step_eval_mode, "step_eval_mode"),
            (b.step_new_optimizer, "step_optimizer_replaced"),
            (b.step_returns_graph, "step_returns_graph"),
        ],
    ),
    checks.check_sample_next_token: (
        [b.sample_right, c.sample_gumbel, c.sample_exp_weights, c.sample_inverse_cdf],
        [
            (b.sample_divides_by_zero, "greedy_divides_by_zero"),
            (b.sample_temperature_after_softmax, "temperature_after_softmax"),
            (b.sample_from_logits, "sampled_from_logits"),
            (b.sample_from_log_probs, "sampled_from_logits"),
            (b.sample_multiplied, "temperature_multiplied"),
            (b.sample_global_rng, "generator_ignored"),
            (b.sample_always_greedy, "always_greedy"),
            (b.sample_softmax_dim0, "sample_softmax_over_batch"),
            (b.sample_keeps_dim, "wrong_shape"),
            (b.sample_float_ids, "sample_not_ids"),
            (b.sample_greedy_min, "greedy_not_argmax"),
            (b.sample_reseeds_global, "sample_global_rng_changed"),
            (b.sample_fresh_generator, "sample_generator_replaced"),
            (b.sample_top_k_50, "sample_filtered_top_tokens"),
            (b.sample_top_k_200, "sample_filtered_top_tokens"),  # seen in the 1,000-token probe
            (b.sample_ignores_temperature, "temperature_after_softmax"),
            (b.sample_top_p_099, "sample_filtered_top_tokens"),
            (b.sample_divides_in_place, "input_modified"),
            (b.sample_float_ids_when_sampling, "sample_not_ids"),
            (b.sample_greedy_below_threshold, "greedy_at_low_temperature"),
        ],
    ),
    checks.check_attend_with_cache: (
        [
            buggy_cache.cache_right,
            c.cache_dict,
            c.cache_einsum_preallocated,
            c.cache_list,
            c.cache_flinear,
            c.cache_fused_qkv,
            c.cache_projects_new_keys_twice,
        ],
        [
            (buggy_cache.cache_attend_then_append, "cache_attend_before_append"),
            (buggy_cache.cache_only_new, "cache_not_accumulated"),
            (buggy_cache.cache_mask_top_left, "cache_mask_top_left"),
            (buggy_cache.cache_mask_square, "cache_mask_wrong_shape"),
            (buggy_cache.cache_mask_one_late, "cache_mask_offset"),
            (buggy_cache.cache_no_mask, "cache_chunk_unmasked"),
            (buggy_cache.cache_no_scale, "cache_not_scaled"),
            (buggy_cache.cache_values_from_keys, "cache_values_from_keys"),
            (buggy_cache.cache_interleaved, "cache_heads_interleaved"),
            (buggy_cache.cache_no_out_proj, "cache_no_out_proj"),
            (buggy_cache.cache_of_inputs, "cache_recomputes_keys"),
            (buggy_cache.cache_values_of_inputs, "cache_recomputes_keys"),
            (buggy_cache.cache_returns_output_only, "cache_not_returned"),
            (buggy_cache.cache_mask_times_inf, "cache_mask_times_inf"),
            (buggy_cache.cache_half, "cache_dtype_changed"),
            (buggy_cache.cache_on_layer, "cache_kept_outside"),
            (buggy_cache.cache_cpu_mask, "cpu_tensor_in_forward"),
            (buggy_cache.cache_no_qkv_bias, "cache_qkv_bias_dropped"),
        ],
    ),
}
RIGHT = [(check, answer) for check, (rights, _) in CASES.items() for answer in rights]
WRONG = [(check, answer, bug) for check, (_, bugs) in CASES.items() for answer, bug in bugs]


@pytest.mark.parametrize(("check", "answer"), RIGHT, ids=[a.__name__ for _, a in RIGHT])
def test_right_answers_pass(check, answer, capsys):
    assert_passes(check, answer, capsys=capsys)


@pytest.mark.parametrize(("check", "answer", "bug"), WRONG, ids=[a.__name__ for _, a, _ in WRONG])
def test_each_bug_is_named(check, answer, bug):
    assert_bug(check, answer, bug)


def test_train_step_under_no_grad_gets_a_hint():
    with pytest.raises(CheckFailure, match="needs a graph"):
        checks.check_train_step(b.step_no_grad_forward)


def test_train_step_stub_is_reported():
    with pytest.raises(CheckFailure, match="NotImplementedError: the exercise stub"):
        checks.check_train_step(b.step_stub)


def test_top_k_filtering_is_seen_only_in_the_wide_vocabulary():
    failure = assert_bug(
        checks.check_sample_next_token, b.sample_top_k_50, "sample_filtered_top_tokens"
    )
    assert "Only the 50 most likely of the 200 tokens" in str(failure)


def test_right_draws_sit_far_inside_the_tolerance_and_filtered_ones_far_outside():
    """The statistical test's margins, over many generator seeds (the check itself uses one)."""

    def distance(sample, row, temperature, seed):
        batch = torch.tensor(row).repeat(checks.DRAWS, 1)
        ids = sample(batch, temperature, torch.Generator().manual_seed(seed))
        freq = torch.bincount(ids, minlength=len(row)).double() / checks.DRAWS
        probs = torch.softmax(torch.tensor(row, dtype=torch.float64) / temperature, dim=-1)
        order = probs.argsort(descending=True)
        return float(checks._distance(freq[order].cumsum(-1), probs[order]))

    right = max(
        distance(b.sample_right, row, t, seed)
        for seed in range(8)
        for row, t in [(r, t) for r in checks.SAMPLE_LOGITS for t in checks.TEMPERATURES]
        + [(checks.WIDE, 1)]
    )
    assert right < checks.Z / 1.5
    assert (
        min(distance(b.sample_top_p_099, checks.WIDE, 1.0, seed) for seed in range(8))
        > 1.5 * checks.Z
    )


def test_a_small_difference_is_reported_at_its_first_token_without_crashing():
    with pytest.raises(CheckFailure, match="differ from the full layer's, first at token"):
        checks.check_attend_with_cache(buggy_cache.cache_softmax_eps)


def test_recomputed_keys_are_found_by_giving_the_projections_new_weights():
    failure = assert_bug(
        checks.check_attend_with_cache, buggy_cache.cache_of_inputs, "cache_recomputes_keys"
    )
    assert "with W_key and W_value given new weights before each call" in str(failure)


# --------------------------------------------------------------------------- non-answers
NON_ANSWERS = [
    None,
    3,
    "train_step",
    [1, 2],
    lambda *a: None,
    lambda *a: [1, 2],
    lambda *a: (None, None),
    lambda *a: 1 / 0,
    type("Broken", (), {"__call__": lambda self, *a: {}.missing})(),
]


@pytest.mark.parametrize(
    "check",
    [checks.check_train_step, checks.check_sample_next_token, checks.check_attend_with_cache],
)
@pytest.mark.parametrize("answer", NON_ANSWERS)
def test_non_answers_never_crash_a_check(check, answer):
    with pytest.raises(CheckFailure):
        check(answer)


def test_the_vast_probe_keeps_right_draws_inside_and_top_k_200_far_outside():
    """The 1,000-token probe's margins with its 2,000 draws, over several generator seeds."""

    def distance(sample, seed):
        batch = torch.tensor(checks.VAST).repeat(checks.VAST_DRAWS, 1)
        ids = sample(batch, 1.0, torch.Generator().manual_seed(seed))
        freq = torch.bincount(ids, minlength=len(checks.VAST)).double() / checks.VAST_DRAWS
        probs = torch.softmax(torch.tensor(checks.VAST, dtype=torch.float64), dim=-1)
        order = probs.argsort(descending=True)
        return float(checks._distance(freq[order].cumsum(-1), probs[order], checks.VAST_DRAWS))

    assert max(distance(b.sample_right, seed) for seed in range(8)) < checks.Z / 1.5
    assert min(distance(b.sample_top_k_200, seed) for seed in range(4)) > 2 * checks.Z
