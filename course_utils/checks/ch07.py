"""Self-checks for chapter 07 (efficient attention: the online softmax, block by block)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from ._core import (
    Bug,
    call,
    describe_difference,
    ensure_callable,
    fail,
    fail_with_bug,
    match_bug,
    passed,
    randn,
    same,
)

# (n tokens, key width d, value width, block_size): block sizes that divide n, that do not,
# of 1 and larger than n; a value width unlike d catches outputs sized by q instead of v.
_CASES = ((16, 8, 5, 4), (7, 4, 4, 3), (10, 5, 5, 16), (12, 6, 6, 1), (9, 3, 2, 9), (13, 6, 3, 5))


def _inputs(case: int, n: int, d: int, dv: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return randn(n, d, seed=700 + case), randn(n, d, seed=800 + case), randn(n, dv, seed=900 + case)


def _plain(q, k, v, *, scale, visible) -> torch.Tensor:
    """Attention with an explicit score matrix: what each known mistake computes."""
    n = q.shape[0]
    rows, cols = torch.arange(n).unsqueeze(1), torch.arange(n)
    scores = (q @ k.T) * scale
    scores = scores.masked_fill(~visible(rows, cols), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def _streamed(q, k, v, block: int, *, rescale: bool, normalise: bool) -> torch.Tensor:
    """The online-softmax loop, with the rescaling or the final division left out on demand."""
    n = q.shape[0]
    top = torch.full((n, 1), float("-inf"))
    total = torch.zeros(n, 1)
    out = torch.zeros(n, v.shape[1])
    rows = torch.arange(n).unsqueeze(1)
    for lo in range(0, n, block):
        kb, vb = k[lo:lo + block], v[lo:lo + block]
        s = (q @ kb.T) / math.sqrt(q.shape[1])
        s = s.masked_fill(torch.arange(lo, lo + kb.shape[0]) > rows, float("-inf"))
        new_top = torch.maximum(top, s.amax(dim=1, keepdim=True))
        factor = torch.exp(top - new_top) if rescale else torch.ones_like(top)
        weights = torch.exp(s - new_top)
        total = total * factor + weights.sum(dim=1, keepdim=True)
        out = out * factor + weights @ vb
        top = new_top
    return out / total if normalise else out


_BUGS = {
    "no_mask": Bug(
        "no_mask",
        "Every query attends to every key, future included: the causal mask is missing.",
        "inside each block, set the score to -inf where the key's position is greater than "
        "the query's (compare torch.arange positions; the block starts at `start`).",
    ),
    "future_only": Bug(
        "future_only",
        "Your mask points the wrong way: each query sees itself and the keys *after* it, "
        "instead of the keys before it.",
        "mask where key position > query position, not where it is smaller.",
    ),
    "diagonal_masked": Bug(
        "diagonal_masked",
        "Your mask also hides the diagonal, so a token cannot attend to itself and the first "
        "token sees nothing at all (its row comes out as NaN).",
        "mask only keys strictly after the query: key position > query position.",
    ),
    "block_local_positions": Bug(
        "block_local_positions",
        "Your mask compares positions *within* the block (0 .. block_size - 1) with the "
        "query's position in the whole sequence: key positions must include the block's start.",
        "use torch.arange(start, start + block_length) for the keys of the block.",
    ),
    "no_scale": Bug(
        "no_scale",
        "The scores are not scaled: multiply them by 1 / sqrt(d) before the softmax.",
        "divide q @ k_block.T by math.sqrt(d), d being the last dimension of q.",
    ),
    "scale_by_d": Bug(
        "scale_by_d",
        "You divided the scores by d instead of by sqrt(d).",
        "the scale is 1 / sqrt(d): use math.sqrt(d) or d ** 0.5.",
    ),
    "no_rescale": Bug(
        "no_rescale",
        "When a block raises a query's running maximum, the sums gathered so far must shrink "
        "by exp(old_max - new_max); your running sum and output are not rescaled.",
        "multiply the running sum AND the running output by torch.exp(running_max - new_max) "
        "before adding the new block's terms.",
    ),
    "no_normalise": Bug(
        "no_normalise",
        "You returned the running output without dividing by the running sum: the weights of "
        "each row do not add up to 1.",
        "return running_output / running_sum at the end.",
    ),
}


class _ShapeWatch(TorchFunctionMode):
    """Records the shapes of every tensor that torch functions and tensor methods return."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        for item in result if isinstance(result, (tuple, list)) else (result,):
            if isinstance(item, torch.Tensor):
                self.shapes.append(tuple(item.shape))
        return result


def check_blockwise_attention(fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, int], torch.Tensor]) -> None:
    """Check ``fn(q, k, v, block_size)``: causal single-head attention over (n, d) inputs,
    computed one key block at a time with an online softmax, never building an (n, n) tensor."""
    __tracebackhide__ = True
    name = "check_blockwise_attention"
    ensure_callable(name, fn, "a function fn(q, k, v, block_size)")
    for case, (n, d, dv, block) in enumerate(_CASES):
        q, k, v = _inputs(case, n, d, dv)
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        what = f"fn(q, k, v, block_size={block}) with n={n}, d={d} and v of width {dv}"
        watch = _ShapeWatch()
        with watch:
            got = call(name, fn, q.clone(), k.clone(), v.clone(), block, what=what)
        if not isinstance(got, torch.Tensor):
            raise fail(name, f"{what} returned {type(got).__name__}, not a tensor.")
        if same(got, expected):
            if block < n and any(len(s) >= 2 and s[-2:] == (n, n) for s in watch.shapes):
                raise fail(
                    name,
                    f"{what} gives the right numbers, but it builds an ({n}, {n}) tensor: the "
                    "full score matrix that blockwise attention exists to avoid.",
                    f"only ever compute q @ k_block.T, of shape ({n}, block_size).",
                )
            continue
        scale = 1 / math.sqrt(d)
        bug = match_bug(got, [
            (_BUGS["no_mask"], lambda: _plain(q, k, v, scale=scale, visible=lambda i, j: j >= 0)),
            (_BUGS["future_only"], lambda: _plain(q, k, v, scale=scale, visible=lambda i, j: j >= i)),
            (_BUGS["diagonal_masked"], lambda: _plain(q, k, v, scale=scale, visible=lambda i, j: j < i)),
            (_BUGS["block_local_positions"],
             lambda: _plain(q, k, v, scale=scale, visible=lambda i, j: j % block <= i)),
            (_BUGS["no_scale"], lambda: _plain(q, k, v, scale=1.0, visible=lambda i, j: j <= i)),
            (_BUGS["scale_by_d"], lambda: _plain(q, k, v, scale=1 / d, visible=lambda i, j: j <= i)),
            (_BUGS["no_rescale"], lambda: _streamed(q, k, v, block, rescale=False, normalise=True)),
            (_BUGS["no_normalise"], lambda: _streamed(q, k, v, block, rescale=True, normalise=False)),
        ])
        where = f"With {what}:"
        if bug:
            raise fail_with_bug(name, bug, where)
        raise fail(name, f"{where} {describe_difference(expected, got)}.",
                   "compare with F.scaled_dot_product_attention(q, k, v, is_causal=True).")
    passed(name, f"causal, scaled and block by block on {len(_CASES)} cases, never an (n, n) tensor")
