"""Section 6 holds for any right answer: its exact FLOP counts run the chapter's own functions
(``cu.chapters.*``), so a student whose exercises are right but multiply differently reaches the end
of the notebook without an AssertionError.

The outside review of chapter 11 (2026-11-28) worked the exercises in JupyterLab with right answers
that pass every check and still stopped at section 6: exercise 3 written as in the DeepSeek-V2 paper
(W_uk folded into W_q at every call), exercise 4 with the read phi(q) S written elementwise, exercise 6
with the outer product as a matrix product. They are written again below, with the course's own
unusual right answers of exercises 2, 7 and 8 (tests/ch11/correct*.py). Planted fault: section 6 as it
was (counting the student's functions) fails this test; see the report of branch ch11text.
"""

from __future__ import annotations

import contextlib
import io
import math
import sys
import types

import pytest
import torch
import torch.nn.functional as F

import course_utils as cu
from course_utils.chapters import apply_rope, merge_heads, sliding_window_mask, split_heads
from tests.ch11 import correct, correct_sparse_sharing
from tests.ch11.test_ch11_asserts import TRAINING, _code_cells, run

SECTION_6 = "def counted_flops"  # the first code cell of section 6


def absorbed_folded_into_w_q(x, w, cache=None):
    """The DeepSeek-V2 paper's absorption: W_uk folded into W_q at every call, one (h, d, dc)
    matrix taking x straight to each head's query in the latent space."""
    b, n, d = x.shape
    h, hd, dr, dc = w.heads, w.head_dim, w.rope_dim, w.latent_dim
    start = 0 if cache is None else cache[0].shape[1]
    positions = torch.arange(start, start + n, device=x.device)
    latent, rope_keys = x @ w.w_dkv.T, apply_rope(x @ w.w_kr.T, positions)
    if cache is not None:
        latent = torch.cat([cache[0], latent], dim=1)
        rope_keys = torch.cat([cache[1], rope_keys], dim=1)
    N = latent.shape[1]
    w_q_latent = w.w_q.view(h, hd, d).mT @ w.w_uk.view(h, hd, dc)  # (h, d, dc)
    q_latent = x[:, None] @ w_q_latent  # (b, h, n, dc)
    q_rope = apply_rope(split_heads(x @ w.w_qr.T, h), positions)  # (b, h, n, dr)
    scores = q_latent @ latent[:, None].mT + q_rope @ rope_keys[:, None].mT
    scores = scores / math.sqrt(hd + dr)
    scores = scores.masked_fill(~sliding_window_mask(n, N, N, device=x.device), -torch.inf)
    mixed = torch.softmax(scores, dim=-1) @ latent[:, None]  # (b, h, n, dc)
    return merge_heads(mixed @ w.w_uv.view(h, hd, dc).mT) @ w.w_o.T, (latent, rope_keys)


def linear_read_elementwise(q, k, v, state=None):
    """The recurrence with the read phi(q_t) S written as a broadcast product and a sum."""
    b, h, n, dk = q.shape
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    S = q.new_zeros(b, h, dk, v.shape[-1]) if state is None else state[0]
    z = q.new_zeros(b, h, dk) if state is None else state[1]
    outs = []
    for t in range(n):
        S = S + fk[:, :, t, :, None] * v[:, :, t, None, :]
        z = z + fk[:, :, t]
        top = (fq[:, :, t, :, None] * S).sum(dim=-2)  # (b, h, dv), no matrix product
        outs.append(top / (fq[:, :, t] * z).sum(dim=-1, keepdim=True))
    return torch.stack(outs, dim=2), (S, z)


def delta_outer_as_matmul(q, k, v, alpha, beta, state=None):
    """The gated delta rule with its read and its outer product as (dv, 1) @ (1, dk) products."""
    b, h, n, dk = k.shape
    S = k.new_zeros(b, h, v.shape[-1], dk) if state is None else state
    outs = []
    for t in range(n):
        kt = k[:, :, t, :, None]  # (b, h, dk, 1)
        S = alpha[:, :, t, None, None] * S
        error = v[:, :, t, :, None] - S @ kt  # (b, h, dv, 1)
        S = S + beta[:, :, t, None, None] * (error @ kt.mT)
        outs.append((S @ q[:, :, t, :, None])[..., 0])
    return torch.stack(outs, dim=2), S


UNUSUAL = {  # the notebook's name -> an unusual right answer
    "mla_attention": correct.mla_with_sdpa,
    "mla_absorbed": absorbed_folded_into_w_q,
    "linear_attention_recurrent": linear_read_elementwise,
    "gated_delta_rule": delta_outer_as_matmul,
    "sparse_attention": correct_sparse_sharing.sparse_latest_ties_loop,
    "shared_kv_forward": correct_sparse_sharing.shared_by_handing_along,
}
CHECK_OF = {
    "mla_attention": cu.checks.check_mla_attention,
    "mla_absorbed": cu.checks.check_mla_absorbed,
    "linear_attention_recurrent": cu.checks.check_linear_attention_recurrent,
    "gated_delta_rule": cu.checks.check_gated_delta_rule,
    "sparse_attention": cu.checks.check_sparse_attention,
    "shared_kv_forward": cu.checks.check_shared_kv_forward,
}


def _section_6() -> list[str]:
    cells = [s for s in _code_cells() if 'once["softmax"]' not in s]
    start = next(i for i, s in enumerate(cells) if SECTION_6 in s)
    return cells[start:]


@pytest.fixture(scope="module")
def before_section_6() -> dict:
    """The namespace after every code cell before section 6 (the training cell left out)."""
    threads = torch.get_num_threads()
    module = types.ModuleType("chapter11_before_section_6")  # dataclasses look their module up
    sys.modules[module.__name__] = module
    ns = module.__dict__
    cells = [s for s in _code_cells() if TRAINING not in s and 'once["softmax"]' not in s]
    for source in cells[: next(i for i, s in enumerate(cells) if SECTION_6 in s)]:
        run(source, ns)
    torch.set_num_threads(threads)
    return ns


@pytest.mark.parametrize("name", list(UNUSUAL))
def test_each_unusual_answer_is_right(name, capsys):
    """Its check passes: a student with this answer sees a ✓."""
    CHECK_OF[name](UNUSUAL[name])
    assert capsys.readouterr().out.startswith(f"✓ {CHECK_OF[name].__name__}:")


def test_section_6_runs_to_its_end_with_unusual_right_answers(before_section_6):
    ns = dict(before_section_6, **UNUSUAL)
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown):
        for source in _section_6():
            exec(compile(source, "<chapter 11, section 6>", "exec"), ns)
    assert "yours" in shown.getvalue()  # the cell that counts the student's versions ran


def test_the_unusual_answers_count_other_flops_than_the_chapters(before_section_6):
    """The control: these answers do multiply differently, so an exact count of the student's own
    functions would have failed for them (and section 6 therefore counts the chapter's)."""
    ns = dict(before_section_6)
    for source in _section_6()[:1]:
        run(source, ns)  # counted_flops
    counted = ns["counted_flops"]
    w = cu.chapters.mla_weights(d=32, heads=4, head_dim=8, latent_dim=6, rope_dim=4, seed=2)
    x = torch.randn(1, 9, 32, generator=torch.Generator().manual_seed(16))
    cache = cu.chapters.mla_absorbed(x[:, :8], w)[1]
    theirs = counted(lambda: absorbed_folded_into_w_q(x[:, 8:], w, cache))
    assert theirs != counted(lambda: cu.chapters.mla_absorbed(x[:, 8:], w, cache))
    q, k, v = torch.randn(3, 1, 4, 1, 8, generator=torch.Generator().manual_seed(1))
    gates = torch.full((1, 4, 1), 0.9)
    pairs = [
        (linear_read_elementwise, cu.chapters.linear_attention_recurrent, (q, k, v)),
        (delta_outer_as_matmul, cu.chapters.gated_delta_rule, (q, k, v, gates, gates)),
    ]
    for unusual, chapters, args in pairs:
        assert counted(lambda: unusual(*args)) != counted(lambda: chapters(*args))
