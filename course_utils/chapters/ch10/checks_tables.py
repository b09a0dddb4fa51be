"""Self-checks for chapter 10's sinusoidal position table and packed-document mask. A wrong table is
named by its structure: which positions its rows hold, and whether its columns are sines and
cosines of them at one frequency per pair (and which); a wrong mask by the switch of one reference
that reproduces it. Both are probed as a grader would: long inputs, another device, the caller's
tensors and torch's random state left alone."""

from __future__ import annotations

import torch

from course_utils.checks import _engine as E

from .probes import call_clean, on_device

# --------------------------------------------------------------------------- sinusoidal positions
LONG = (
    5001  # rows past the max_len a table is often built once for (512, 1024, the tutorial's 5000)
)
SINUSOID_CASES = ((7, 8), (50, 16), (12, 6), (1, 2), (LONG, 4))
_SINUSOID_BUGS = ("sinusoid_pair_index", "sinusoid_positions_from_one")


def _table(n: int, d: int, bug: str | None = None) -> torch.Tensor:
    start = 1 if bug == "sinusoid_positions_from_one" else 0
    p = torch.arange(start, start + n, dtype=torch.float64)[:, None]  # (n, 1)
    two = 1 if bug == "sinusoid_pair_index" else 2
    angle = p * 10_000.0 ** (-two * torch.arange(d // 2, dtype=torch.float64) / d)  # (n, d/2)
    return torch.stack([torch.sin(angle), torch.cos(angle)], dim=-1).flatten(1)  # sin, cos, ...


def _fit(t: torch.Tensor, shift: int, skip: int):
    """(w_sin, w_cos) when row r of ``t`` (from row ``skip`` on) holds position r + shift, with a
    sine of it at every even column and a cosine at every odd one; else None."""
    p = torch.arange(len(t), dtype=torch.float64)[:, None] + shift
    sin, cos = t[:, 0::2], t[:, 1::2]
    s1, s2 = sin[1 - shift], sin[2 - shift]  # positions 1 and 2: sin w and sin 2w = 2 sin w cos w
    w_sin = torch.atan2(s1, torch.where(s1.abs() > 1e-6, s2 / (2 * s1), 1.0))
    w_cos = torch.acos(cos[1 - shift].clamp(-1, 1))
    off = torch.cat([torch.sin(p * w_sin) - sin, torch.cos(p * w_cos) - cos], 1)[skip:]
    return (w_sin, w_cos) if off.abs().max() < 1e-3 else None


def _sinusoid_cause(got: torch.Tensor, n: int, d: int) -> tuple[str | None, dict]:
    """The mistake the table's structure shows (position 0 must read 0, 1, 0, 1, ...; pair i holds
    the sine and the cosine of the position at w_i), and in ``also`` the others it shows too."""
    t = got.detach().cpu().double()
    rows = {
        "sinusoid_phases_swapped": torch.tensor([1.0, 0.0]).repeat(d // 2),
        "sinusoid_halves": torch.tensor([0.0, 1.0]).repeat_interleave(d // 2),
    }
    for bug, row in rows.items():
        if d > 2 and torch.allclose(t[0], row.double(), atol=1e-4):
            return bug, {}
    zero = d > 2 and torch.allclose(t[0], torch.zeros(d, dtype=torch.float64), atol=1e-4)
    fit = None
    for shift, skip in ((0, 0), (1, 0), (0, 1))[: (2 + zero) * (n >= 3)]:
        if fit := _fit(t, shift, skip):
            break
    if fit is None:  # no sines and cosines of the positions: a zero row 0 is the cosines missing
        return ("sinusoid_cos_missing" if zero else None), {}
    (w_sin, w_cos), wanted = fit, 10_000.0 ** (-2 * torch.arange(d // 2, dtype=torch.float64) / d)
    show = lambda w: ", ".join(f"{v:.3g}" for v in w[:4].tolist())  # noqa: E731
    detail = {"yours": show(w_cos), "wanted": show(wanted)}
    found = {  # each mistake the structure shows, in the order they are named
        "sinusoid_padding_row": (skip, "row 0 is all zeros (a padding row)"),
        "sinusoid_frequency_per_feature": (
            not torch.allclose(w_sin.abs(), w_cos, atol=1e-3),
            "a sine and its cosine partner do not share one frequency",
        ),
        "sines": (  # not an id: the sines' own frequencies, beside a cosine at another one
            not torch.allclose(w_sin.abs(), w_cos, atol=1e-3)
            and not torch.allclose(w_sin.abs(), wanted, atol=1e-3),
            f"the sines' own frequencies are not 10000^(-2i/d) either (at position 1 they turn by"
            f" {show(w_sin.abs())} rad, not {detail['wanted']})",
        ),
        "sinusoid_wrong_frequencies": (
            torch.allclose(w_sin.abs(), w_cos, atol=1e-3)
            and not torch.allclose(w_cos, wanted, atol=1e-3),
            f"the frequencies are not 10000^(-2i/d) (at position 1 your first pairs turn by"
            f" {detail['yours']} rad, not {detail['wanted']})",
        ),
        "sinusoid_positions_from_one": (shift, "the positions start at 1, not 0"),
    }
    found = [(bug, words) for bug, (shown, words) in found.items() if shown]
    also = f" Also: {'; '.join(words for _, words in found[1:])}." if found[1:] else ""
    return (found[0][0] if found else None), {**detail, "also": also}


def check_sinusoidal_positions(fn: object) -> None:
    """Check ``sinusoidal_positions(n, d)``: the float32 (n, d) table with sin(p w_i) at feature 2i
    and cos(p w_i) at 2i + 1, w_i = 10000^(-2i/d), positions 0 .. n - 1; a ValueError for odd d."""
    __tracebackhide__ = True
    c = E.Check("check_sinusoidal_positions")
    c.ensure_callable(fn, "a function such as sinusoidal_positions")
    for n, d in SINUSOID_CASES:
        what = f"sinusoidal_positions({n}, {d})"
        with E.isolated():
            got = call_clean(c, fn, [], n, d, what=what)
        shape = tuple(got.shape) if isinstance(got, torch.Tensor) else None
        if n == LONG and shape is not None and len(shape) == 2 and 0 < shape[0] < n:
            raise c.bug("sinusoid_table_too_short", what=what, rows=shape[0])
        if shape not in (None, (n, d)) and got.numel() in (n * d, d):
            raise c.bug("sinusoid_layout", what=what, got=shape, n=n, d=d)
        got = c.expect_tensor_output(got, what, (n, d))
        if got.dtype != torch.float32:
            raise c.bug("sinusoid_not_float", what=what, dtype=got.dtype)
        expected, atol = _table(n, d).float(), max(1e-4, 2e-7 * n)  # float32 angles: ~n ulps
        cause, detail = (
            (None, {}) if E.same(got, expected, atol=atol) else _sinusoid_cause(got, n, d)
        )
        variants = [
            *((bug, lambda bug=bug: _table(n, d, bug)) for bug in _SINUSOID_BUGS),
            *([(cause, lambda: got)] if cause else []),
        ]
        where, detail = f"In {what}:", {"also": "", **detail}
        c.compare(got, expected, f"{what}:", variants, atol=atol, context=where, detail=detail)
    try:  # an odd width has no sine-cosine pairs: a ValueError that names d
        with E.isolated():
            got = f"no error: it returned {E.shown(fn(4, 7), 40)}"
    except ValueError as exc:
        got = None if "7" in str(exc) else f"a ValueError that does not say d=7 ({exc})"
    except Exception as exc:  # noqa: BLE001 - a crash where a clear refusal belongs is named
        got = f"{type(exc).__name__}: {exc}"
    if got:
        raise c.bug("sinusoid_odd_width", got=got)
    c.passed(
        f"right and float32 on {len(SINUSOID_CASES)} tables, from 1 x 2 to {LONG} x 4; d=7 refused"
    )


# --------------------------------------------------------------------------- packed documents
PACKED_CASES = (
    ((0, 0, 0, 1, 1, 2, 2, 2),),  # three documents
    ((0, 0, 1, 1, 1, 1), (0, 1, 1, 2, 2, 2)),  # two rows, different boundaries
    ((5, 5, 5, 5, 5),),  # one document: the plain causal mask
    ((0, 1, 2, 3),),  # every token alone
    ((7, 7, 3, 3, 3, 9),),  # ids that are neither sorted nor from 0
    ((4,), (9,)),  # two rows of one token
)


def _packed(ids: torch.Tensor, first=False, docs=True, tri="tril", invert=False) -> torch.Tensor:
    n = ids.shape[-1]
    ids = ids[:1].expand_as(ids) if first else ids
    same = ids[:, :, None] == ids[:, None, :] if docs else torch.ones(1, n, n, dtype=torch.bool)
    ones = torch.ones(n, n, dtype=torch.bool)
    mask = same & {"tril": ones.tril(), "triu": ones.triu(), "none": ones}[tri]  # (b, n, n)
    return ~mask.expand(len(ids), n, n) if invert else mask.expand(len(ids), n, n)


_PACKED_BUGS = [
    ("packed_leaks_across_documents", {"docs": False}),
    ("packed_not_causal", {"tri": "none"}),
    ("packed_inverted", {"invert": True}),
    ("packed_first_row_only", {"first": True}),
    ("packed_future_not_past", {"tri": "triu"}),
]
_WHY_BOOL = {  # why a mask of numbers is not the answer: additive (0 / -inf), or anything else
    True: "the additive form (0 where a query may attend, -inf where not), which SDPA accepts "
    "too; the exercise asks for the bool form, which the chapter combines with & and ~ and gives "
    "to masked_fill, and both refuse a float mask",
    False: "only a bool mask reads as 'may attend': SDPA adds a float attn_mask to the scores (a "
    "mask of 0s and 1s would hide nothing), and masked_fill, & and ~ need bool",
}


def check_packed_causal_mask(fn: object) -> None:
    """Check ``packed_causal_mask(doc_ids)``: (b, n) document ids -> the (b, n, n) bool mask on
    doc_ids's device, True where a query may attend: same document and not in the future."""
    __tracebackhide__ = True
    c = E.Check("check_packed_causal_mask")
    c.ensure_callable(fn, "a function such as packed_causal_mask")
    for rows in PACKED_CASES:
        doc_ids = torch.tensor(rows)  # (b, n)
        b, n = doc_ids.shape
        what = f"packed_causal_mask(torch.tensor({[list(r) for r in rows]}))"
        with E.isolated():
            got = call_clean(c, fn, [doc_ids], what=what)
        shape = tuple(got.shape) if isinstance(got, torch.Tensor) else None
        if shape not in (None, (b, n, n)) and got.numel() in (b * n * n, n * n, b * b * n):
            raise c.bug("packed_layout", what=what, got=shape, expected=(b, n, n))
        got = c.expect_tensor_output(got, what, (b, n, n))
        want = _packed(doc_ids)
        if got.dtype != torch.bool:
            additive = got.is_floating_point() and torch.equal(got == 0, want)
            why = _WHY_BOOL[bool(additive and (got[~want] == -torch.inf).all())]
            raise c.bug("packed_not_bool", what=what, dtype=got.dtype, why=why)
        band = torch.arange(n)[None, :] - torch.arange(n)[:, None]  # (n, n): key - query
        c.compare(
            got,
            want,
            f"{what} (1 = True):",
            [(bug, lambda sw=sw: _packed(doc_ids, **sw)) for bug, sw in _PACKED_BUGS]
            + [  # wrong only on the diagonal (tril(-1)) or on the next key (tril(1))
                (bug, lambda k=k: torch.where(band == k, got, want))
                for bug, k in (("packed_self_hidden", 0), ("packed_sees_next", 1))
            ],
            context=f"In {what}:",
        )
        on_device(c, fn, [doc_ids], f"For {what} on another device:")
    c.passed(
        f"right on {len(PACKED_CASES)} packings (one to four documents per row, two rows, "
        "unsorted ids, one token), each also run as if on a GPU: made on doc_ids's device",
    )


__all__ = ["check_packed_causal_mask", "check_sinusoidal_positions"]
