"""Self-checks for chapter 09: padding masks, sliding windows, the cache mask, RoPE, GQA's repeat_kv.

Each reference below is one small function whose keyword switches default to the right
computation; every other switch value reproduces a catalogued mistake (``mistakes.txt`` beside this file),
so a wrong answer is named by finding the switch that reproduces it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import torch

from course_utils.checks import _engine as E

# Shortcuts graded answers may call (tools/grading/honesty.py): all (its attention uses SDPA)
ALLOWED_SHORTCUTS = ("sdpa", "mha", "flex")


# --------------------------------------------------------------------------- references with switches
def band(
    n_q: int,
    n_k: int,
    window: int,
    *,
    extra: int = 0,
    align: str = "bottom",
    both_sides: bool = False,
    inverted: bool = False,
) -> torch.Tensor:
    """(n_q, n_k) bool, True = may attend: query i (the last n_q positions) sees 0 <= i - j < window."""
    first = n_k - n_q if align == "bottom" else 0
    distance = torch.arange(first, first + n_q)[:, None] - torch.arange(n_k)[None, :]  # (n_q, n_k)
    if both_sides:
        distance = distance.abs()
    allowed = (distance >= 0) & (distance < window + extra)
    return ~allowed if inverted else allowed


def masked_attention(q, k, v, allowed: torch.Tensor | None) -> torch.Tensor:
    """Softmax attention with a True = may-attend mask (NaN where a row has no allowed key)."""
    return E.attention(q, k, v, E.Recipe(mask="none"), mask=None if allowed is None else ~allowed)


def rope(
    x,
    positions,
    base=10_000.0,
    *,
    layout="half",
    sign=1.0,
    pair_step=2,
    ignore_positions=False,
    offset=0,
    linspace=False,
    mixed=False,
):
    """RoPE in float64; the switches reproduce the layout, direction, frequency and position slips
    (``mixed``: full-width cos and sin laid out for the other layout than the rotation's pairs)."""
    hd = x.shape[-1]
    pos = (torch.arange(x.shape[-2]) if ignore_positions else positions.cpu()) + offset
    exponents = torch.arange(0, hd // 2, dtype=torch.float64) * pair_step / hd  # (hd/2,)
    if linspace:
        exponents = torch.linspace(0, 1, hd // 2, dtype=torch.float64)
    angles = pos.double()[:, None] * base**-exponents  # (n, hd/2)
    x = x.double()
    if mixed:
        full = angles.repeat_interleave(2, -1) if layout == "half" else torch.cat([angles] * 2, -1)
        a, b = (x[..., 0::2], x[..., 1::2]) if layout == "interleaved" else x.chunk(2, dim=-1)
        turned = (
            torch.stack((-b, a), -1).flatten(-2)
            if layout == "interleaved"
            else torch.cat((-b, a), -1)
        )
        return x * full.cos() + turned * sign * full.sin()
    cos, sin = angles.cos(), sign * angles.sin()
    a, b = (x[..., 0::2], x[..., 1::2]) if layout == "interleaved" else x.chunk(2, dim=-1)
    pairs = (a * cos - b * sin, a * sin + b * cos)
    return torch.stack(pairs, -1).flatten(-2) if layout == "interleaved" else torch.cat(pairs, -1)


def _same_dtype(c: E.Check, got: torch.Tensor, given: torch.Tensor, what: str, arg: str) -> None:
    """The result keeps the input's dtype (a float64 result would meet float32 weights in the next layer)."""
    if got.dtype != given.dtype:
        raise c.bug("output_dtype_changed", what=what, got=got.dtype, expected=given.dtype, arg=arg)


class DeviceProbe(NamedTuple):
    """``call(*inputs)`` run again as if its inputs were on another device; ``where``: the case."""

    where: str
    inputs: tuple[torch.Tensor, ...]
    call: Callable


def _probe_devices(c: E.Check, probes: list[DeviceProbe]) -> None:
    """After every value check (a wrong value is named first): each case again as if on another device."""
    for probe in probes:
        E.probe_device(c, None, probe.inputs, probe.where, fn=probe.call)


# --------------------------------------------------------------------------- sliding_window_mask
class WindowCase(NamedTuple):
    """A mask for the last ``n_q`` of ``n_k`` positions, each query seeing ``window`` keys."""

    n_q: int
    n_k: int
    window: int


WINDOW_CASES = (
    WindowCase(6, 6, 3),
    WindowCase(5, 5, 1),
    WindowCase(7, 7, 10),  # a window longer than the text
    WindowCase(2, 8, 3),
    WindowCase(1, 9, 4),
    WindowCase(3, 9, 9),
)
WINDOW_BUGS = (
    ("window_inverted", {"inverted": True}),
    ("window_cut_short", {"extra": -1}),
    ("window_one_too_many", {"extra": 1}),
    ("window_not_causal", {"both_sides": True}),
    ("window_top_left", {"align": "top"}),
)


def check_sliding_window_mask(fn) -> None:
    """Check ``sliding_window_mask(n_queries, n_keys, window, device=None)``: an (n_q, n_k) bool mask,
    True = may attend, the queries being the last n_q positions, each seeing ``window`` keys."""
    __tracebackhide__ = True
    c = E.Check("check_sliding_window_mask")
    c.ensure_callable(fn, "a function sliding_window_mask(n_queries, n_keys, window, device=None)")
    with E.isolated():
        for case in WINDOW_CASES:
            n_q, n_k, window = case.n_q, case.n_k, case.window
            what = f"sliding_window_mask({n_q}, {n_k}, {window})"
            got = c.expect_tensor_output(c.call(fn, n_q, n_k, window, what=what), what, (n_q, n_k))
            if got.dtype != torch.bool:
                raise c.bug("window_not_bool", f"{what} returned dtype {got.dtype}.")
            candidates = [
                (bug, partial(band, n_q, n_k, window, **switch)) for bug, switch in WINDOW_BUGS
            ]
            c.compare(got, band(n_q, n_k, window), f"For {what}:", candidates, in_dtype_of_got=True)
        # as if on another device d: what is made with device=d or moved .to(d) counts as on d (E.Placement)
        what, mixed = "sliding_window_mask(4, 6, 2, device=d), d another device", False
        try:
            with E.Watch() as watch, E.Placement([]) as placement:
                got = c.call(fn, 4, 6, 2, device=torch.device("cpu"), what=what)
        except E.CheckFailure as exc:
            if not isinstance(exc.__cause__, E.DeviceMix):
                raise
            mixed = True  # a part made on the CPU met a part made on d
        if mixed or not placement.is_placed(c.expect_tensor_output(got, what, (4, 6))):
            made = (
                f"torch.{watch.without_device[0]}(...) is called without device=..."
                if watch.without_device
                else "the tensor you return is on the CPU (device='cpu' or .to('cpu'))"
            )
            raise c.bug("mask_device_ignored", f"In {what}:", made=made)
    c.passed(
        f"right on {len(WINDOW_CASES)} cases (windows 1 to 10, as many or fewer queries than keys) "
        "and made on the requested device",
    )


# --------------------------------------------------------------------------- attend_new_tokens
class CacheCase(NamedTuple):
    """q of the ``n_q`` newest tokens against k and v of all ``n_k``: (batch, heads, n, head_dim)."""

    batch: int
    heads: int
    n_q: int
    n_k: int
    head_dim: int
    seed: int


CACHE_CASES = (
    CacheCase(2, 2, 3, 7, 4, 901),
    CacheCase(1, 3, 2, 5, 8, 902),
    CacheCase(2, 1, 4, 4, 4, 903),  # as many new tokens as keys: the prompt
    CacheCase(1, 2, 1, 6, 4, 904),
)


def check_attend_new_tokens(fn) -> None:
    """Check ``attend_new_tokens(q, k, v)``: q (b, h, n_q, hd) of the newest tokens, k and v
    (b, h, n_k, hd) of all tokens; causal attention aligned to the bottom right."""
    __tracebackhide__ = True
    c = E.Check("check_attend_new_tokens")
    c.ensure_callable(fn, "a function attend_new_tokens(q, k, v)")
    with E.isolated():
        probes: list[DeviceProbe] = []
        for case in CACHE_CASES:
            b, h, n_q, n_k, hd = case.batch, case.heads, case.n_q, case.n_k, case.head_dim
            q = E.randn(b, h, n_q, hd, seed=case.seed)  # (b, h, n_q, hd): the newest tokens
            k = E.randn(b, h, n_k, hd, seed=case.seed + 10)  # (b, h, n_k, hd): all tokens
            v = E.randn(b, h, n_k, hd, seed=case.seed + 20)  # (b, h, n_k, hd)
            what = f"attend_new_tokens(q, k, v) with {n_q} new tokens and {n_k} keys"
            got = c.expect_tensor_output(
                c.call_pure(fn, (q, k, v), what=what), what, (b, h, n_q, hd)
            )
            top_left = band(n_q, n_k, n_k, align="top")
            candidates = [
                ("is_causal_top_left", lambda: masked_attention(q, k, v, top_left)),
                ("cache_mask_missing", lambda: masked_attention(q, k, v, None)),
            ]
            c.compare(
                got,
                masked_attention(q, k, v, band(n_q, n_k, n_k)),
                f"For {what}:",
                candidates,
                in_dtype_of_got=True,
            )
            _same_dtype(c, got, q, what, "q")
            where = f"For {what}, q, k and v on another device:"
            probes.append(DeviceProbe(where, (q, k, v), fn))
        _probe_devices(c, probes)
    c.passed(
        f"equals full causal attention on {len(CACHE_CASES)} cases (1 to 4 new tokens, 4 to 7 keys)",
    )


# --------------------------------------------------------------------------- padded_causal_attention
class PaddingCase(NamedTuple):
    """A batch of texts of ``lengths`` real tokens, padded on ``side`` to the longest."""

    lengths: tuple[int, ...]
    side: str
    seed: int


PADDING_CASES = (
    PaddingCase((5, 2, 3), "left", 911),
    PaddingCase((3, 5, 1), "right", 912),
    PaddingCase((4, 1), "left", 913),
)


def check_padded_causal_attention(fn) -> None:
    """Check ``padded_causal_attention(q, k, v, real)``: causal attention hiding padded keys;
    compared at real query positions; every output must be finite."""
    __tracebackhide__ = True
    c = E.Check("check_padded_causal_attention")
    c.ensure_callable(fn, "a function padded_causal_attention(q, k, v, real)")
    with E.isolated():
        probes: list[DeviceProbe] = []
        for case in PADDING_CASES:
            lengths, side = case.lengths, case.side
            b, n = len(lengths), max(lengths)
            real = E.chapters().padding_mask(lengths, n, side)  # (b, n)
            q, k, v = (E.randn(b, 2, n, 4, seed=case.seed + i) for i in range(3))
            causal = torch.ones(n, n, dtype=torch.bool).tril()
            keep = causal & real[:, None, None, :]  # (b, 1, n, n)
            what = f"padded_causal_attention(q, k, v, real) with {side} padding, lengths {list(lengths)}"
            got = c.call_pure(fn, (q, k, v, real), what=what)
            got = c.expect_tensor_output(got, what, (b, 2, n, 4))
            rows = real[:, None, :, None].expand(b, 2, n, 4)  # the real query positions

            def at_real(allowed, zero=False):  # zero: NaN rows as a kernel's zeros
                out = masked_attention(q, k, v, allowed)
                return (out.nan_to_num(0.0) if zero else out)[rows]

            variants = (
                ("padding_mask_inverted", ~keep),
                ("padding_ignored", causal),
                ("padding_not_causal", real[:, None, None, :].expand(b, 1, n, n)),
            )
            candidates = [
                (bug, partial(at_real, m, zero)) for bug, m in variants for zero in (False, True)
            ]
            c.compare(
                got.cpu()[rows],
                at_real(keep),
                f"For {what}, at the real tokens:",
                candidates,
                in_dtype_of_got=True,
            )
            if not torch.isfinite(got).all():
                raise c.bug("padding_nan_rows", f"For {what}:")
            _same_dtype(c, got, q, what, "q")
            where = f"For {what}, every input on another device:"
            probes.append(DeviceProbe(where, (q, k, v, real), fn))
        _probe_devices(c, probes)
    c.passed(
        f"right at every real token on {len(PADDING_CASES)} padded batches (left and right), "
        "finite everywhere",
    )


# --------------------------------------------------------------------------- apply_rope
class RopeCase(NamedTuple):
    """x of ``shape`` (..., n, hd) at ``positions`` (None: 0 .. n - 1), with ``base`` (None: not
    passed, the default 10,000)."""

    shape: tuple[int, ...]
    positions: tuple[int, ...] | None
    base: float | None
    seed: int


ROPE_CASES = (
    RopeCase((2, 3, 5, 8), None, None, 921),
    RopeCase((4, 6), (3, 10, 11, 50), None, 922),
    RopeCase((1, 2, 3, 16), (100, 7, 0), 500_000.0, 923),
)
ROPE_BUGS = (
    ("rope_layout_mixed", {"layout": "interleaved"}),
    ("rope_rotation_reversed", {"sign": -1.0}),
    ("rope_frequency_exponent", {"pair_step": 1}),
    ("rope_frequency_exponent", {"pair_step": 4}),
    ("rope_positions_ignored", {"ignore_positions": True}),
    ("rope_base_ignored", {"base": 10_000.0}),
    ("rope_frequencies_mismatched", {"mixed": True}),
    ("rope_frequencies_mismatched", {"mixed": True, "layout": "interleaved"}),
    ("rope_frequencies_linspace", {"linspace": True}),
    ("rope_positions_shifted", {"offset": 1}),
    ("rope_positions_shifted", {"offset": -1}),
    ("rope_positions_ignored", {"ignore_positions": True, "offset": 1}),
)


def check_apply_rope(fn) -> None:
    """Check ``apply_rope(x, positions, base=10_000.0)``: split-halves RoPE on x (..., n, hd)."""
    __tracebackhide__ = True
    c = E.Check("check_apply_rope")
    c.ensure_callable(fn, "a function apply_rope(x, positions, base=10_000.0)")
    with E.isolated():
        probes: list[DeviceProbe] = []
        for case in ROPE_CASES:
            shape = case.shape
            x = E.randn(*shape, seed=case.seed)
            pos = (
                torch.arange(shape[-2]) if case.positions is None else torch.tensor(case.positions)
            )
            kwargs = {} if case.base is None else {"base": case.base}
            base = case.base or 10_000.0
            what = (
                f"apply_rope(x, positions={pos.tolist()}{f', base={base:,.0f}' if kwargs else ''}) "
                f"on x of shape {shape}"
            )
            try:
                got = c.call_pure(fn, (x, pos), **kwargs, what=what)
            except (
                E.CheckFailure
            ) as failure:  # cos and sin of hd/2 met the hd-wide rotate-half form
                error, hd = str(failure.__cause__), shape[-1]
                if f"({hd})" in error and f"({hd // 2})" in error and "must match" in error:
                    raise c.bug("rope_half_width", f"{what} raised: {error}") from None
                raise
            got = c.expect_tensor_output(got, what, shape)
            candidates = [
                (bug, partial(rope, x, pos, **{"base": base, **switch}))
                for bug, switch in ROPE_BUGS
            ]
            c.compare(
                got, rope(x, pos, base), f"For {what}:", candidates, atol=1e-4, in_dtype_of_got=True
            )
            _same_dtype(c, got, x, what, "x")
            where = f"For {what}, x and positions on another device:"
            probes.append(
                DeviceProbe(where, (x, pos), lambda *inputs, kw=kwargs: fn(*inputs, **kw))
            )
        _probe_devices(c, probes)
    c.passed(
        f"split-halves rotation right on {len(ROPE_CASES)} cases (given positions, another base)",
    )


# --------------------------------------------------------------------------- repeat_kv
class RepeatCase(NamedTuple):
    """kv of shape (batch, groups, n, head_dim), each group shared by ``n_rep`` query heads."""

    batch: int
    groups: int
    n: int
    head_dim: int
    n_rep: int
    seed: int


REPEAT_CASES = (
    RepeatCase(2, 2, 3, 4, 3, 931),
    RepeatCase(1, 3, 2, 2, 2, 932),
    RepeatCase(1, 1, 5, 4, 4, 933),  # one group for every head: MQA
    RepeatCase(2, 4, 1, 3, 1, 934),  # n_rep 1: MHA, nothing to repeat
)


def check_repeat_kv(fn) -> None:
    """Check ``repeat_kv(kv, n_rep)``: (b, g, n, hd) -> (b, g * n_rep, n, hd), head j = group j // n_rep."""
    __tracebackhide__ = True
    c = E.Check("check_repeat_kv")
    c.ensure_callable(fn, "a function repeat_kv(kv, n_rep)")
    with E.isolated():
        probes: list[DeviceProbe] = []
        for case in REPEAT_CASES:
            b, g, n, hd, rep = case.batch, case.groups, case.n, case.head_dim, case.n_rep
            kv = E.randn(b, g, n, hd, seed=case.seed)
            what = f"repeat_kv(kv, n_rep={rep}) on kv of shape {(b, g, n, hd)}"
            got = c.call_pure(fn, (kv,), rep, what=what)
            wrong_axis = ((b, g, n * rep, hd), (b * rep, g, n, hd))
            if isinstance(got, torch.Tensor) and tuple(got.shape) in wrong_axis and rep > 1:
                raise c.bug("gqa_repeat_wrong_axis", f"{what} returned shape {tuple(got.shape)}.")
            got = c.expect_tensor_output(got, what, (b, g * rep, n, hd))
            candidates = [("gqa_repeat_not_interleave", lambda: kv.repeat(1, rep, 1, 1))]
            c.compare(
                got,
                kv.repeat_interleave(rep, dim=1),
                f"For {what}:",
                candidates,
                in_dtype_of_got=True,
            )
            where = f"For {what}, kv on another device:"
            probes.append(DeviceProbe(where, (kv,), lambda kv, rep=rep: fn(kv, rep)))
        _probe_devices(c, probes)
    c.passed(f"every query head reads its own group on {len(REPEAT_CASES)} cases (MQA to MHA)")


__all__ = [
    "check_apply_rope",
    "check_attend_new_tokens",
    "check_padded_causal_attention",
    "check_repeat_kv",
    "check_sliding_window_mask",
]
