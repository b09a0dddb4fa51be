"""Chapter 11's checks against a second, fresh collection (collected by a reviewer who had not seen
the checks): every right-but-unusual answer passes; the wrong ones from other projects' code and
issue threads (buggy_fresh.py, buggy_fresh_sparse_sharing.py) and the grader's probes
(probes_fresh.py) are run and their verdicts and named rate printed, not asserted (`pytest -s`)."""

from __future__ import annotations

import pytest

import course_utils as cu
from course_utils.checks import CheckFailure
from tests.ch11 import buggy_fresh, buggy_fresh_sparse_sharing, correct_fresh, probes_fresh

WRONG = buggy_fresh.FRESH + buggy_fresh_sparse_sharing.FRESH

# The reviewer's judgement, from each message as it read on 2026-11-29: the ids whose diagnosis
# names the fixture's true cause. A fixture missing here was rejected with an id that names another
# cause, or with no id (a bare difference or a relayed crash).
NAMED_BY = {
    "kv_vllm_fit_heads_squared": {"kv_bytes_per_value_ignored"},  # one of its two slips
    "kv_aiconfigurator_per_token_times_context": {"kv_window_ignored"},
    "kv_lmcache_latent_twice": {"kv_latent_twice"},
    "kv_trtllm_mha_formula_for_mla": {"kv_latent_ignored"},
    "kv_pollard_counts_reuse_layers": {"kv_sharing_ignored"},
    "kv_lmdeploy_window_on_every_layer": {"kv_window_everywhere"},
    "mla_executorch_upper_left_causal": {"mla_cache_mask_top_left"},
    "mla_absorbed_ollama_latent_scale": {"mla_scale_latent_width"},
    "mla_absorbed_mlxcel_no_causal_fallback": {"mla_not_causal"},
    "la_lm_engine_read_before_write": {"linear_reads_before_write"},
    "chunked_tileops_drops_partial_chunk": {"chunk_last_partial"},
    "chunked_lm_engine_strict_mask": {"chunk_diagonal_dropped"},
    "gdr_fla_885_error_before_decay": {"delta_erase_ungated"},
    "gdr_hf_qwen3_next_scaled_query": {"delta_query_scaled"},
    "gdr_dl_techniques_no_erase": {"delta_no_erase"},
    "sparse_doge_topk_before_causal": {"sparse_topk_over_future"},
    "sparse_vmlx_skip_selection_without_mask": {"sparse_sees_future"},
    "sparse_lattice_finite_sentinel": {"sparse_sees_future"},
    "sparse_nsa_topk_out_of_range": {"sparse_topk_over_length"},
    "shared_mlx_lm_only_with_cache": {"share_ignored"},  # true of a pass without a cache
    "shared_sdpa_is_causal_with_cache": {"is_causal_top_left"},
}


def _verdict(check: str, answer) -> tuple[str, str | None, str]:
    """('accepted' | 'rejected' | 'crash', the failure's id, its first line)."""
    try:
        getattr(cu.checks, check)(answer)
    except CheckFailure as failure:
        return "rejected", failure.bug, failure.diagnosis.strip().splitlines()[-1][:110]
    except Exception as exc:  # a check must never let one through: reported, not hidden
        return "crash", None, f"{type(exc).__name__}: {exc}"[:110]
    return "accepted", None, ""


@pytest.mark.parametrize(
    ("check", "answer"), correct_fresh.RIGHT, ids=[a.__name__ for _, a in correct_fresh.RIGHT]
)
def test_each_right_but_unusual_answer_passes(check, answer, capsys):
    getattr(cu.checks, check)(answer)
    assert "✓" in capsys.readouterr().out


def test_print_the_verdicts_and_the_named_rate_of_the_fresh_wrong_answers(capsys):
    rows, named = [], 0
    for check, answer, cause in WRONG:
        verdict, bug, line = _verdict(check, answer)
        hit = verdict == "rejected" and bug in NAMED_BY.get(answer.__name__, set())
        named += hit
        rows.append(f"{answer.__name__:45} {verdict:8} {bug or '-':28} {'named' if hit else '-':5}")
        rows.append(f"    true cause: {cause}; message: {line}")
    with capsys.disabled():
        print("\n" + "\n".join(rows))
        print(f"named by their true cause: {named} of {len(WRONG)} ({named / len(WRONG):.0%})")


def test_print_the_verdicts_on_the_graders_probes(capsys):
    rows = []
    for check, answer, wanted in probes_fresh.PROBES:
        verdict, bug, line = _verdict(check, answer)
        rows.append(f"{answer.__name__:36} {verdict:8} {bug or '-':26} wanted: {wanted}")
    with capsys.disabled():
        print("\n" + "\n".join(rows))
