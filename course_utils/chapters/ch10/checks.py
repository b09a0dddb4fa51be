"""Self-checks for chapter 10: the transformer block (pre- and post-norm) and the sinusoidal
position table. The block is recomputed from the student's own parts (attn, norm1, norm2, ff,
drop); a wrong output is named by the wiring that reproduces it."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from course_utils.checks import _engine as E

# Shortcuts graded answers may call (tools/nbgrader_honesty.py): all (the wiring is graded)
ALLOWED_SHORTCUTS = ("sdpa", "mha", "flex")


# --------------------------------------------------------------------------- the block
class BlockCase(NamedTuple):
    """A block built as (d_model, num_heads, d_ff, context_length), run on (batch, n, d_model);
    the decoder's ``m``: source tokens (its ``causal`` unused: the decoder is always causal)."""

    d_model: int
    num_heads: int
    d_ff: int
    context_length: int
    batch: int
    n: int
    causal: bool = True
    seed: int = 0
    m: int = 0


BLOCK_CASES = (
    BlockCase(8, 2, 16, 6, 2, 6, True, 1301),  # n == context_length, causal
    BlockCase(12, 3, 20, 9, 1, 5, False, 1302),  # batch 1, encoder
    BlockCase(8, 4, 32, 7, 3, 4, True, 1303),  # batch 3, 4 heads
)
_PARTS = ("attn", "norm1", "norm2", "ff", "drop")


def _parts(c: E.Check, module: nn.Module, owner: str) -> dict[str, nn.Module]:
    wanted = {
        "attn": "the Attention layer",
        "norm1": "nn.LayerNorm(d_model)",
        "norm2": "nn.LayerNorm(d_model)",
        "ff": "nn.Sequential(Linear, GELU, Linear)",
        "drop": "nn.Dropout(dropout)",
    }
    parts = {name: E.find_attribute(c, module, name, owner, wanted[name]) for name in _PARTS}
    for name, part in parts.items():
        if not callable(part):
            raise c.bug("not_a_module", what=f"{owner}.{name}", kind=type(part).__name__)
    return parts


def _wired(p: dict, x: torch.Tensor, norm_first: bool, bug: str | None = None) -> torch.Tensor:
    """The block computed from its parts; ``bug`` rewires it the way one known mistake does."""
    attn, ff, drop = p["attn"], p["ff"], p["drop"]
    n1, n2 = p["norm1"], p["norm1" if bug == "block_norm_reused" else "norm2"]
    if bug == "block_norms_exchanged":
        n1, n2 = p["norm2"], p["norm1"]
    if bug == "block_norm_placement":
        norm_first = not norm_first
    attn_res, ff_res = bug != "block_attn_no_residual", bug != "block_ffn_no_residual"
    if norm_first:
        if bug == "block_residual_after_norm":
            h = n1(x)
            h = h + drop(attn(h))
            h2 = n2(h)
            return h2 + drop(ff(h2))
        h = x + drop(attn(n1(x))) if attn_res else drop(attn(n1(x)))
        base = x if bug == "block_ffn_residual_from_input" else h
        return base + drop(ff(n2(h))) if ff_res else drop(ff(n2(h)))
    h = n1(x + drop(attn(x))) if attn_res else n1(drop(attn(x)))
    base = x if bug == "block_ffn_residual_from_input" else h
    return n2(base + drop(ff(h))) if ff_res else n2(drop(ff(h)))


_BLOCK_BUGS = (
    "block_norm_placement",
    "block_residual_after_norm",
    "block_ffn_no_residual",
    "block_attn_no_residual",
    "block_ffn_residual_from_input",
    "block_norm_reused",
    "block_norms_exchanged",
)


def _build(c: E.Check, cls: type, case: BlockCase, norm_first: bool, dropout: float = 0.0):
    d, h, d_ff, ctx = case.d_model, case.num_heads, case.d_ff, case.context_length
    what = (
        f"{cls.__name__}(d_model={d}, num_heads={h}, d_ff={d_ff}, context_length={ctx}, "
        f"dropout={dropout}, norm_first={norm_first}, causal={case.causal})"
    )
    with E.preserved_rng():
        torch.manual_seed(case.seed)
        module = c.call(
            cls, d, h, d_ff, ctx, dropout, norm_first=norm_first, causal=case.causal, what=what
        )
    if not isinstance(module, nn.Module):
        raise c.bug("not_a_module", what=what, kind=type(module).__name__)
    parts = _parts(c, module, what)
    with torch.no_grad():  # LayerNorm starts at scale 1, shift 0: give each norm its own numbers
        g = E.generator(case.seed + 7)
        for name in ("norm1", "norm2"):
            for param in parts[name].parameters():
                param.add_(0.5 * torch.randn(param.shape, generator=g))
    return module, parts, what


def _forward(c: E.Check, module: nn.Module, x: torch.Tensor, what: str) -> torch.Tensor:
    got = c.call_pure(module, [x], what=f"{what} on x of shape {tuple(x.shape)}")
    return c.expect_tensor_output(got, f"{what}'s forward", tuple(x.shape))


# what a mistake that rewires the norms names, for each norm_first
_NORMS = {
    True: {"wanted": "pre-norm", "got": "post-norm"},
    False: {"wanted": "post-norm", "got": "pre-norm"},
}


def _block_case(c: E.Check, cls: type, case: BlockCase, norm_first: bool) -> None:
    module, parts, what = _build(c, cls, case, norm_first)
    x = E.randn(case.batch, case.n, case.d_model, seed=case.seed + 1)
    with E.isolated():
        got = _forward(c, module, x, what)
        expected = _wired(parts, x, norm_first)
        c.compare(
            got,
            expected,
            f"With norm_first={norm_first}, {what}'s output differs:",
            [(bug, lambda bug=bug: _wired(parts, x, norm_first, bug)) for bug in _BLOCK_BUGS],
            context=f"With norm_first={norm_first}:",
            detail=_NORMS[norm_first],
        )
    # gradients: the same as those of the block computed from the same parts
    weights = [x.clone().requires_grad_(), *module.parameters()]
    with E.preserved_rng():
        grads = _grads(c, lambda t: module(t), weights, what)
        wanted = _grads(c, lambda t: _wired(parts, t, norm_first), weights, what)
    for got_g, want_g in zip(grads, wanted):
        if (got_g is None) != (want_g is None) or (got_g is not None and not E.same(got_g, want_g)):
            raise c.bug("block_gradient_differs", f"With norm_first={norm_first}:")


def _grads(c: E.Check, fn, weights: list[torch.Tensor], what: str) -> list:
    out = c.call(fn, weights[0], what=f"{what} in training")
    if not isinstance(out, torch.Tensor) or not out.requires_grad:
        raise c.bug("block_gradient_differs", f"{what}: the output does not require a gradient.")
    loss = (out * torch.linspace(-1, 1, out.numel()).view(out.shape)).sum()
    return list(torch.autograd.grad(loss, weights, allow_unused=True))


def check_transformer_block(cls: type) -> None:
    """Check a ``TransformerBlock(d_model, num_heads, d_ff, context_length, dropout, norm_first,
    causal)`` class: pre-norm ``x + f(norm(x))`` when norm_first, post-norm ``norm(x + f(x))``
    otherwise, for attention (norm1) then the FFN (norm2); outputs and gradients."""
    __tracebackhide__ = True
    c = E.Check("check_transformer_block")
    c.ensure_class(cls, "a class such as TransformerBlock")
    for case in BLOCK_CASES:
        for norm_first in (True, False):
            _block_case(c, cls, case, norm_first)
    # dropout: off in eval mode
    case = BLOCK_CASES[0]
    module, parts, what = _build(c, cls, case, True, dropout=0.5)
    module.eval()
    x = E.randn(case.batch, case.n, case.d_model, seed=case.seed + 2)
    with E.isolated():
        if not E.same(_forward(c, module, x, what), _wired(parts, x, True)):
            raise c.bug("block_dropout_in_eval")
    c.passed(
        f"pre-norm and post-norm match on {len(BLOCK_CASES)} configurations (causal and not, batch 1 "
        "to 3), gradients too; dropout off in eval mode",
    )


# --------------------------------------------------------------------------- the decoder block
# the first has n == m (target and source tokens), so that queries and keys swapped still run and
# can be named
DECODER_CASES = (
    BlockCase(8, 2, 16, 8, 2, 5, seed=1311, m=5),
    BlockCase(12, 3, 24, 9, 3, 4, seed=1312, m=7),
)
_DECODER_PARTS = ("self_attn", "cross_attn", "norm1", "norm2", "norm3", "ff", "drop")


def _decoder_wired(p: dict, x, memory, real, norm_first: bool, bug: str | None = None):
    """The decoder block from its parts; ``bug`` rewires it the way one known mistake does."""
    sa, ca, ff, drop = p["self_attn"], p["cross_attn"], p["ff"], p["drop"]
    n1, n2, n3 = p["norm1"], p["norm2"], p["norm3"]
    if bug == "block_norm_placement":
        norm_first = not norm_first

    def cross(h):
        if bug in ("decoder_cross_swapped", "swapped with the padding mask"):
            return ca(memory, h, real if bug == "swapped with the padding mask" else None)
        if bug == "decoder_memory_unused":
            return ca(h, None, None)
        return ca(h, memory, None if bug == "decoder_padding_ignored" else real)

    base = (lambda h: memory) if bug == "decoder_cross_residual_from_memory" else (lambda h: h)
    if norm_first:
        x = x + drop(sa(n1(x)))
        x = base(x) + drop(cross(n2(x)))
        return x + drop(ff(n3(x)))
    x = n1(x + drop(sa(x)))
    x = n2(base(x) + drop(cross(x)))
    return n3(x + drop(ff(x)))


_DECODER_BUGS = (
    "decoder_cross_swapped",
    "decoder_memory_unused",
    "decoder_padding_ignored",
    "decoder_cross_residual_from_memory",
    "block_norm_placement",
)


def _decoder_case(c: E.Check, cls: type, case: BlockCase, norm_first: bool) -> None:
    d, h, d_ff, ctx, b, n, _, seed, m = case
    what = (
        f"{cls.__name__}(d_model={d}, num_heads={h}, d_ff={d_ff}, context_length={ctx}, "
        f"dropout=0.0, norm_first={norm_first})"
    )
    with E.preserved_rng():
        torch.manual_seed(seed)
        module = c.call(cls, d, h, d_ff, ctx, 0.0, norm_first=norm_first, what=what)
    if not isinstance(module, nn.Module):
        raise c.bug("not_a_module", what=what, kind=type(module).__name__)
    parts = {
        name: E.find_attribute(c, module, name, what, "the given __init__'s part")
        for name in _DECODER_PARTS
    }
    with torch.no_grad():
        g = E.generator(seed + 7)
        for name in ("norm1", "norm2", "norm3"):
            for param in parts[name].parameters():
                param.add_(0.5 * torch.randn(param.shape, generator=g))
    x, memory = E.randn(b, n, d, seed=seed + 1), E.randn(b, m, d, seed=seed + 2)
    real = (
        torch.arange(m) < torch.tensor([m - i for i in range(b)])[:, None]
    )  # (b, m): text i has i pads
    call = f"{what}(x, memory, memory_real) with x {tuple(x.shape)}, memory {tuple(memory.shape)}"
    with E.isolated():
        got = c.call_pure(module, [x, memory], real, what=call)
        got = c.expect_tensor_output(got, call, (b, n, d))
        expected = _decoder_wired(parts, x, memory, real, norm_first)
        candidates = [
            (bug, lambda bug=bug: _decoder_wired(parts, x, memory, real, norm_first, bug))
            for bug in _DECODER_BUGS
        ]
        swapped = "swapped with the padding mask"
        candidates.append(
            (
                "decoder_cross_swapped",
                lambda: _decoder_wired(parts, x, memory, real, norm_first, swapped),
            )
        )
        c.compare(
            got,
            expected,
            f"With norm_first={norm_first}, {call}:",
            candidates,
            context=f"With norm_first={norm_first}:",
            detail=_NORMS[norm_first],
        )
    inputs = [x.clone().requires_grad_(), memory.clone().requires_grad_()]
    weights = [*inputs, *module.parameters()]
    with E.preserved_rng():
        grads = _grads(c, lambda t: module(t, inputs[1], real), weights, what)
        wanted = _grads(
            c, lambda t: _decoder_wired(parts, t, inputs[1], real, norm_first), weights, what
        )
    for got_g, want_g in zip(grads, wanted):
        if (got_g is None) != (want_g is None) or (got_g is not None and not E.same(got_g, want_g)):
            raise c.bug("block_gradient_differs", f"With norm_first={norm_first}:")


def check_decoder_block(cls: type) -> None:
    """Check a ``DecoderBlock(d_model, num_heads, d_ff, context_length, dropout, norm_first)``
    class: causal self-attention (norm1), cross-attention with queries from x and keys/values from
    memory under memory_real (norm2), the FFN (norm3); pre- or post-norm; outputs and gradients."""
    __tracebackhide__ = True
    c = E.Check("check_decoder_block")
    c.ensure_class(cls, "a class such as DecoderBlock")
    for case in DECODER_CASES:
        for norm_first in (True, False):
            _decoder_case(c, cls, case, norm_first)
    c.passed(
        f"pre-norm and post-norm match on {len(DECODER_CASES)} configurations (source as long as "
        "the target and longer, padded), gradients to x and memory too",
    )


# --------------------------------------------------------------------------- sinusoidal positions
SINUSOID_CASES = ((7, 8), (50, 16), (12, 6), (1, 2))


def _table(n: int, d: int, bug: str | None = None) -> torch.Tensor:
    start = 1 if bug == "sinusoid_positions_from_one" else 0
    p = torch.arange(start, start + n, dtype=torch.float64)[:, None]  # (n, 1)
    if bug == "sinusoid_frequency_per_feature":
        angle = p * 10_000.0 ** (-2 * torch.arange(d, dtype=torch.float64) / d)  # (n, d)
        sin, cos = torch.sin(angle[:, 0::2]), torch.cos(angle[:, 1::2])
    else:
        exponent = torch.arange(d // 2, dtype=torch.float64) / d  # (d/2,)
        if bug != "sinusoid_pair_index":
            exponent = 2 * exponent
        angle = p * 10_000.0**-exponent  # (n, d/2)
        sin, cos = torch.sin(angle), torch.cos(angle)
    if bug == "sinusoid_phases_swapped":
        sin, cos = cos, sin
    if bug == "sinusoid_halves":
        return torch.cat([sin, cos], dim=1)
    return torch.stack([sin, cos], dim=-1).flatten(1)  # (n, d): sin, cos, sin, cos, ...


_SINUSOID_BUGS = (
    "sinusoid_phases_swapped",
    "sinusoid_halves",
    "sinusoid_frequency_per_feature",
    "sinusoid_pair_index",
    "sinusoid_positions_from_one",
)


def check_sinusoidal_positions(fn: object) -> None:
    """Check ``sinusoidal_positions(n, d)``: the (n, d) table with sin(p w_i) at feature 2i and
    cos(p w_i) at 2i + 1, w_i = 10000^(-2i/d), positions 0 .. n - 1."""
    __tracebackhide__ = True
    c = E.Check("check_sinusoidal_positions")
    c.ensure_callable(fn, "a function such as sinusoidal_positions")
    for n, d in SINUSOID_CASES:
        what = f"sinusoidal_positions({n}, {d})"
        with E.isolated():
            got = c.call(fn, n, d, what=what)
        got = c.expect_tensor_output(got, what, (n, d))
        if not got.is_floating_point():
            raise c.bug("sinusoid_not_float", what=what, dtype=got.dtype)
        expected = _table(n, d)
        c.compare(
            got,
            expected.float(),
            f"{what}:",
            [(bug, lambda bug=bug: _table(n, d, bug)) for bug in _SINUSOID_BUGS],
            atol=1e-4,
            context=f"In {what}:",
        )
    c.passed(f"right on {len(SINUSOID_CASES)} tables, from 1 x 2 to 50 x 16")


# --------------------------------------------------------------------------- packed documents
PACKED_CASES = (
    ((0, 0, 0, 1, 1, 2, 2, 2),),  # three documents
    ((0, 0, 1, 1, 1, 1), (0, 1, 1, 2, 2, 2)),  # two rows, different boundaries
    ((5, 5, 5, 5, 5),),  # one document: the plain causal mask
    ((0, 1, 2, 3),),  # every token alone
    ((7, 7, 3, 3, 3, 9),),  # ids that are neither sorted nor from 0
)


def _packed(doc_ids: torch.Tensor, bug: str | None = None) -> torch.Tensor:
    n = doc_ids.shape[-1]
    ids = doc_ids[:1].expand_as(doc_ids) if bug == "packed_first_row_only" else doc_ids
    same = ids[:, :, None] == ids[:, None, :]  # (b, n, n)
    causal = torch.ones(n, n, dtype=torch.bool).tril()  # (n, n)
    if bug == "packed_leaks_across_documents":
        return causal.expand_as(same)
    if bug == "packed_not_causal":
        return same
    mask = same & causal
    return ~mask if bug == "packed_inverted" else mask


_PACKED_BUGS = (
    "packed_leaks_across_documents",
    "packed_not_causal",
    "packed_inverted",
    "packed_first_row_only",
)


def check_packed_causal_mask(fn: object) -> None:
    """Check ``packed_causal_mask(doc_ids)``: (b, n) document ids -> the (b, n, n) bool mask,
    True where a query may attend: same document and not in the future."""
    __tracebackhide__ = True
    c = E.Check("check_packed_causal_mask")
    c.ensure_callable(fn, "a function such as packed_causal_mask")
    for rows in PACKED_CASES:
        doc_ids = torch.tensor(rows)  # (b, n)
        what = f"packed_causal_mask(torch.tensor({[list(r) for r in rows]}))"
        with E.isolated():
            got = c.call_pure(fn, [doc_ids], what=what)
        b, n = doc_ids.shape
        got = c.expect_tensor_output(got, what, (b, n, n))
        if got.dtype != torch.bool:
            raise c.bug("packed_not_bool", what=what, dtype=got.dtype)
        c.compare(
            got,
            _packed(doc_ids),
            f"{what} (1 = True):",
            [(bug, lambda bug=bug: _packed(doc_ids, bug)) for bug in _PACKED_BUGS],
            context=f"In {what}:",
        )
        E.probe_device(c, None, (doc_ids,), f"For {what} on another device:", fn=fn)
    c.passed(
        f"right on {len(PACKED_CASES)} packings (one to four documents per row, two rows, "
        "unsorted ids) and made on the input's device",
    )


__all__ = [
    "check_decoder_block",
    "check_packed_causal_mask",
    "check_sinusoidal_positions",
    "check_transformer_block",
]

from . import checks_norms  # noqa: E402  (chapter 10's norms, GELU, SwiGLU and ALiBi)
from .checks_norms import *  # noqa: E402, F403

__all__ += checks_norms.__all__
