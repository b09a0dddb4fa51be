"""Self-checks for chapter 07 (efficient attention: the online softmax, block by block)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from course_utils.checks import _engine as E

# Shortcuts graded answers may call (tools/grading/honesty.py): none: the exercise is attention,
# block by block (the check names SDPA itself; FlexAttention and nn.MultiheadAttention are refused)
ALLOWED_SHORTCUTS: tuple[str, ...] = ()

# (n tokens, key width d, value width, block_size): block sizes that divide n, that do not,
# of 1 and larger than n; a value width unlike d catches outputs sized by q instead of v.
_CASES = (
    (16, 8, 5, 4),
    (7, 4, 4, 3),
    (10, 5, 5, 16),
    (12, 6, 6, 1),
    (9, 3, 2, 9),
    (13, 6, 3, 5),
    (10, 4, 4, 3),
)


# The last case shifts every score of a row by about -200 (q's last column is 1, k's is -400):
# the softmax does not change, but a running maximum started at 0 instead of -inf underflows to 0 / 0.
SHIFTED = len(_CASES) - 1


def _inputs(case: int, n: int, d: int, dv: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q, k = E.randn(n, d, seed=700 + case), E.randn(n, d, seed=800 + case)
    if case == SHIFTED:
        q[:, -1], k[:, -1] = 1.0, k[:, -1] - 400.0
    return q, k, E.randn(n, dv, seed=900 + case)


def _streamed(
    q, k, v, block: int, *, rescale=True, normalise=True, start=-math.inf
) -> torch.Tensor:
    """The online-softmax loop, with the rescaling or the final division left out on demand, or the
    running maximum started at ``start``."""
    n = q.shape[0]
    top, total, out = torch.full((n, 1), start), torch.zeros(n, 1), torch.zeros(n, v.shape[1])
    rows = torch.arange(n).unsqueeze(1)
    for lo in range(0, n, block):
        kb, vb = k[lo : lo + block], v[lo : lo + block]
        s = (q @ kb.T) / math.sqrt(q.shape[1])
        s = s.masked_fill(torch.arange(lo, lo + kb.shape[0]) > rows, float("-inf"))
        new_top = torch.maximum(top, s.amax(dim=1, keepdim=True))
        factor = torch.exp(top - new_top) if rescale else torch.ones_like(top)
        weights = torch.exp(s - new_top)
        total = total * factor + weights.sum(dim=1, keepdim=True)
        out = out * factor + weights @ vb
        top = new_top
    return out / total if normalise else out


def _candidates(q, k, v, block: int) -> list[tuple[str, Callable[[], torch.Tensor]]]:
    n = q.shape[0]
    local = torch.arange(n) % block > torch.arange(n).unsqueeze(
        1
    )  # key position taken within its block
    return [
        ("mask_missing", lambda: E.attention(q, k, v, E.Recipe(mask="none"))),
        ("mask_past", lambda: E.attention(q, k, v, E.Recipe(mask="past"))),
        ("mask_diagonal", lambda: E.attention(q, k, v, E.Recipe(mask="diagonal"))),
        ("block_local_positions", lambda: E.attention(q, k, v, mask=local)),
        ("no_scaling", lambda: E.attention(q, k, v, E.Recipe(scale="none"))),
        ("scale_d_k", lambda: E.attention(q, k, v, E.Recipe(scale="d_k"))),
        ("online_no_rescale", lambda: _streamed(q, k, v, block, rescale=False, normalise=True)),
        (
            "online_no_final_division",
            lambda: _streamed(q, k, v, block, rescale=True, normalise=False),
        ),
        ("online_max_from_zero", lambda: _streamed(q, k, v, block, start=0.0)),
        ("scale_multiplied", lambda: E.attention(q, k, v, E.Recipe(scale="times_sqrt_d_k"))),
    ]


def check_blockwise_attention(
    fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, int], torch.Tensor],
) -> None:
    """Check ``fn(q, k, v, block_size)``: causal single-head attention over (n, d) inputs,
    computed one key block at a time with an online softmax, never building an (n, n) tensor."""
    __tracebackhide__ = True
    c = E.Check("check_blockwise_attention")
    c.ensure_callable(fn, "a function fn(q, k, v, block_size)")
    for case, (n, d, dv, block) in enumerate(_CASES):
        q, k, v = _inputs(case, n, d, dv)
        expected = E.attention(q, k, v)
        what = f"fn(q, k, v, block_size={block}) with n={n}, d={d} and v of width {dv}"
        watch = E.Watch()
        with watch:
            got = c.call_pure(fn, [q, k, v], block, what=what)
        got = c.expect_tensor_output(got, what)
        c.compare(
            got,
            expected,
            f"With {what}:",
            _candidates(q, k, v, block),
            hint="compare with F.scaled_dot_product_attention(q, k, v, is_causal=True).",
        )
        if any(call[0] == "scaled_dot_product_attention" for call in watch.calls):
            raise c.bug("blockwise_uses_sdpa", what=what, function="F.scaled_dot_product_attention")
        if block < n:
            if any(len(s) >= 2 and s[-2:] == (n, n) for s in watch.shapes):
                raise c.bug("blockwise_full_scores", what=what, n=n)
            if any(
                call[0] in ("softmax", "_softmax")
                and call[2]
                and isinstance(call[2][0], torch.Tensor)
                and call[2][0].shape[-1] == n
                for call in watch.calls
            ):
                raise c.bug("blockwise_full_row_softmax", what=what, n=n)
    E.probe_device(
        c,
        None,
        _inputs(0, 8, 4, 4),
        "With q, k and v on another device:",
        fn=lambda q, k, v: fn(q, k, v, 3),
    )
    c.passed(f"causal, scaled and block by block on {len(_CASES)} cases, never an (n, n) tensor")


__all__ = ["check_blockwise_attention"]
