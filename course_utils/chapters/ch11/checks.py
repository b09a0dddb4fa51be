"""Self-checks for chapter 11: the KV cache's bytes, MLA and its absorbed form, linear attention as a
recurrence and in chunks, the gated delta rule (sparse attention and KV sharing: sparse_shared.py).

Each reference is one function whose keyword switches default to the right computation; every other
switch reproduces a catalogued mistake (mistakes.txt beside this file), so a wrong answer is named by
the switch, or the two switches, that reproduce it on every case. Probes name what no comparison can:
a caller's tensor changed, keys built by the absorbed form, a state kept between calls."""

from __future__ import annotations

import math
from functools import partial
from itertools import combinations

import torch
import torch.nn.functional as F

from course_utils.checks import _engine as E

from .sparse_shared import (
    call_untouched,
    check_shared_kv_forward,
    check_sparse_attention,
    f64,
    variants,
)

# Shortcuts graded answers may call (tools/nbgrader_honesty.py): all; the exercises are the caches,
# MLA, the recurrences, the top-k choice and the cache map, not the weighting itself
ALLOWED_SHORTCUTS = ("sdpa", "mha", "flex")


def _pair(c: E.Check, got, bug: str):
    """``got`` when it is a pair (a tuple or list of two), else the mistake ``bug``."""
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise c.bug(bug, got=E.shown(got))
    return got


# --------------------------------------------------------------------------- kv_cache_bytes
def cache_bytes(layout, context: int, batch: int = 1, bytes_per_value: int = 2, **slip) -> int:
    """Bytes of ``batch`` caches of ``context`` tokens; a switch of BYTES_BUGS reproduces a slip."""
    on, lay = slip.get, layout
    caches = lay.layers // (1 if on("sharing_ignored") else lay.layers_per_cache)
    per_token = (1 if on("values_forgotten") else 2) * lay.kv_heads * lay.head_dim
    if lay.latent_dim and not on("latent_ignored"):
        per_token = lay.latent_dim + (0 if on("rope_key_forgotten") else lay.rope_dim)
        per_token *= (2 if on("latent_twice") else 1) * (
            lay.kv_heads if on("latent_per_head") else 1
        )
    windowed = caches if on("window_everywhere") else min(lay.windowed_caches, caches)
    held = context if (on("window_ignored") or not lay.window) else min(context, lay.window)
    return batch * (windowed * held + (caches - windowed) * context) * per_token * bytes_per_value


SLIPS = "values_forgotten window_ignored window_everywhere latent_ignored latent_per_head"
BYTES_BUGS = [
    (f"kv_{s}", {s: 1}) for s in f"{SLIPS} latent_twice rope_key_forgotten sharing_ignored".split()
]
# a factor the count leaves out: (mistake, argument changed) from (4 layers, 10 tokens, 1 text, 1 byte)
FACTORS = (("kv_layers_ignored", 0), ("kv_batch_ignored", 2), ("kv_bytes_per_value_ignored", 3))


def _byte_cases():
    """(layout name, layout, context, batch, bytes_per_value): every published layout, a shared
    and a shared-and-windowed one, contexts inside and beyond the windows."""
    chapter = E.chapters()
    layouts = dict(chapter.PUBLISHED)
    layouts["12 layers, pairs share"] = chapter.KVLayout(12, 4, 64, layers_per_cache=2)
    layouts["12 layers, pairs share, windows"] = chapter.KVLayout(
        12, 4, 64, window=256, windowed_caches=4, layers_per_cache=2
    )
    layouts["MLA, 4 kv heads, shared"] = chapter.KVLayout(
        8, 4, 32, latent_dim=48, rope_dim=16, layers_per_cache=4
    )
    contexts = ((1, 1, 2), (300, 3, 2), (5_000, 2, 1), (131_072, 4, 4))
    return [(name, lay, *c) for name, lay in layouts.items() for c in contexts]


def _count(c: E.Check, fn, label, layout, context, batch, size):
    """(the call in words, fn's count as an int); a count that is not a whole number is kv_not_a_count."""
    what = f"kv_cache_bytes(<{label}>, {context}, batch={batch}, bytes_per_value={size})"
    got = c.call(fn, layout, context, batch=batch, bytes_per_value=size, what=what)
    number = got.item() if isinstance(got, torch.Tensor) and got.numel() == 1 else got
    if isinstance(number, (int, float)) and not isinstance(number, bool):
        if float(number).is_integer():
            return what, int(number)
    raise c.bug("kv_not_a_count", what=what, got=E.shown(got))


def check_kv_cache_bytes(fn) -> None:
    """Check ``kv_cache_bytes(layout, context, batch=1, bytes_per_value=2)``: the cache's bytes."""
    __tracebackhide__ = True
    c = E.Check("check_kv_cache_bytes")
    c.ensure_callable(fn, "a function kv_cache_bytes(layout, context, batch=1, bytes_per_value=2)")
    with E.isolated():
        answers = [(*_count(c, fn, *case), case[1:]) for case in _byte_cases()]
        wrong = [
            (what, number, case) for what, number, case in answers if number != cache_bytes(*case)
        ]
        if wrong:  # first a factor the count ignores, then the slips that reproduce every answer
            KV = E.chapters().KVLayout
            base, other = (KV(4, 2, 8), 10, 1, 1), (KV(12, 2, 8), 10, 3, 4)
            for bug, i in FACTORS:
                counts = [
                    _count(c, fn, "4 or 12 layers, 2 kv heads of 8", *base[:i], arg, *base[i + 1 :])
                    for arg in (base[i], other[i])
                ]
                if counts[0][1] == counts[1][1]:
                    raise c.bug(
                        bug, f"{counts[0][0]} and {counts[1][0]} both gave {counts[0][1]:,}."
                    )
            merged = lambda combo: {k: v for _, s in combo for k, v in s.items()}  # noqa: E731
            combos = (co for r in (1, 2, 3) for co in combinations(BYTES_BUGS, r))
            fits = (
                co[0][0]
                for co in combos
                if all(n == cache_bytes(*a, **merged(co)) for _, n, a in answers)
            )
            what, number, case = wrong[0]
            expected = f"For {what}: got {number:,}, expected {cache_bytes(*case):,}."
            raise c.bug(next(fits, "kv_count_wrong"), expected)
    c.passed(
        f"right on {len(answers)} cases: the six published layouts, sharing, "
        "windows and a latent, at contexts from 1 to 131,072 tokens",
    )


# --------------------------------------------------------------------------- MLA
def mla_reference(x, w, cache=None, **slip):
    """MLA in float64 on the CPU, naive form, returning (out, (latent, rope_keys)); a switch of
    MLA_BUGS reproduces a mistake (all off unless given)."""
    on, chapter = slip.get, E.chapters()
    x, W = f64(x), {name: f64(t) for name, t in vars(w).items() if name.startswith("w_")}
    (b, n, d), h, hd, dr, dc = x.shape, w.heads, w.head_dim, w.rope_dim, W["w_dkv"].shape[0]
    turn = chapter.apply_rope_interleaved if on("interleaved") else chapter.apply_rope
    rope = partial(
        turn, base=10_000.0 ** (dr / hd if on("rope_width") else 1)
    )  # hd-wide frequencies
    start = 0 if cache is None else cache[0].shape[1]
    positions = torch.arange(n) + (0 if on("restart") else start)  # (n,)
    latent, rope_keys = x @ W["w_dkv"].T, rope(x @ W["w_kr"].T, positions)  # (b, n, dc), (b, n, dr)
    if cache is not None:
        latent, rope_keys = torch.cat([cache[0], latent], 1), torch.cat([cache[1], rope_keys], 1)
    N = latent.shape[1]
    views = {
        "T": lambda m: m.view(h, dc, hd).mT,
        "heads_last": lambda m: m.view(hd, h, dc).transpose(0, 1),
    }
    views["flat"] = lambda m: (
        m.T.reshape(h, dc, hd).mT
    )  # (h, hd, dc), like the right m.view(h, hd, dc)
    ups = (W["w_uv"], W["w_uk"]) if on("swap") else (W["w_uk"], W["w_uv"])
    ups = [views.get(on(side), lambda m: m.view(h, hd, dc))(m) for side, m in zip(("k", "v"), ups)]
    k, v = (latent[:, None] @ m.mT for m in ups)  # (b, h, N, hd) each
    q = (x @ W["w_q"].T).view(b, n, h, hd).transpose(1, 2)  # (b, h, n, hd)
    q_rope = rope((x @ W["w_qr"].T).view(b, n, h, dr).transpose(1, 2), positions)  # (b, h, n, dr)
    scores = q @ k.mT + (0 if on("no_rope") else q_rope @ rope_keys[:, None].mT)  # (b, h, n, N)
    scores = scores / math.sqrt(
        {"hd": hd, "latent": dc + dr, "model": d // h}.get(on("scale"), hd + dr)
    )
    first = 0 if on("mask") == "top_left" else N - n
    allowed = torch.arange(first, first + n)[:, None] >= torch.arange(N)[None, :]  # (n, N)
    if on("mask") == "none" or (on("mask") == "prefill" and cache is not None):
        allowed = torch.ones(n, N, dtype=torch.bool)
    weights = torch.softmax(scores.masked_fill(~allowed, -torch.inf), dim=-1)
    out = (weights @ v).transpose(1, 2).reshape(b, n, h * hd) @ W["w_o"].T  # (b, n, d)
    return out, (latent, rope_keys)


MLA_BUGS = (
    ("mla_absorbed_wrong_side", {"swap": True}),
    *(
        (bug, {side: view})
        for side in "kv"
        for bug, view in (
            ("mla_head_blocks_transposed", "T"),
            ("mla_head_blocks_interleaved", "heads_last"),
            ("mla_weight_transposed_before_view", "flat"),
        )
    ),
    ("mla_rope_part_missing", {"no_rope": True}),
    *(
        (f"mla_scale_{width}", {"scale": key})
        for width, key in (
            ("without_rope", "hd"),
            ("latent_width", "latent"),
            ("model_width", "model"),
        )
    ),
    ("mla_positions_restart", {"restart": True}),
    ("mla_cache_mask_top_left", {"mask": "top_left"}),
    *(("mla_not_causal", {"mask": mask}) for mask in ("none", "prefill")),
    ("mla_rope_interleaved", {"interleaved": True}),
    ("mla_rope_frequencies_of_head_width", {"rope_width": True}),
)
# (batch, d, heads, head_dim, latent, rope_dim, seed); the second has head_dim == latent width
MLA_CASES = ((2, 16, 4, 8, 6, 4, 1101), (1, 12, 3, 4, 4, 2, 1102), (2, 20, 2, 6, 10, 6, 1103))
STEPS = ((0, 3), (3, 4), (4, 6), (6, 7))  # a prompt of 3, then 1, 2 and 1 new tokens
RUNS = (("", ((0, 7),)), (", run step by step (3, 1, 2, 1 tokens) with the cache", STEPS))


def _steps(run, x, steps, w, **slip):
    """``run(x_step, w, cache, **slip)`` over the (lo, hi) token ranges of ``steps`` (one pass:
    one step), each handed the cache of the one before: the outputs joined, and the caches."""
    cache, outs, caches = None, [], []
    for lo, hi in steps:
        out, cache = run(x[:, lo:hi], w, cache, **slip)
        outs.append(out)
        caches.append(cache)
    return torch.cat(outs, dim=1), caches


def _check_cache(c: E.Check, cache, what: str, w, latent: torch.Tensor) -> None:
    """The returned cache is (latent (b, N, dc), rope keys (b, N, dr)), the latent itself."""
    (b, N, dc), h, hd, dr = latent.shape, w.heads, w.head_dim, w.rope_dim
    lat, r = cache if isinstance(cache, (tuple, list)) and len(cache) == 2 else (None, None)
    if isinstance(lat, torch.Tensor) and isinstance(r, torch.Tensor):
        if lat.dim() == 4 or lat.shape[-1] in (h * hd, 2 * h * hd) or lat.shape[-1] == hd != dc:
            shape = tuple(lat.shape)
            raise c.bug("mla_cache_after_up_projection", f"After {what}:", shape=shape, dc=dc)
        if tuple(lat.shape) == (b, N, dc) and tuple(r.shape) == (b, N, dr):
            if not E.same(f64(lat), latent, atol=1e-4):
                raise c.bug("mla_cache_not_latent", f"After {what}:")
            return
    raise c.bug("mla_cache_shape", f"After {what}:", got=E.shown(cache), b=b, N=N, dc=dc, dr=dr)


def _builds_no_keys(c: E.Check, fn) -> None:
    """One cached step, 1 token after 12, watched (torch calls observed, not changed): no result may
    hold the 13 tokens' keys or values, an axis of 13 beside one of hd = 5, hd + dr = 7, h * hd = 10
    or h * (hd + dr) = 14 (sizes nothing else of the absorbed form has)."""
    w = E.chapters().mla_weights(16, 2, 5, 6, 2, seed=1104)
    x = E.randn(1, 13, 16, seed=1105)  # (1, 13, 16)
    cache = tuple(t.float() for t in mla_reference(x[:, :12], w)[1])
    what = "mla_absorbed(x, w, cache) for 1 token after 12 cached, 2 heads of 5, latent 6, rope 2"
    with E.Watch() as watch:
        c.call(fn, x[:, 12:], w, cache, what=what)
    built = [s for s in watch.shapes if 13 in s and {5, 7, 10, 14} & set(s)]
    if built:
        raise c.bug("mla_absorbed_builds_keys", f"For {what}:", shape=built[0])


def _check_mla(c: E.Check, fn, form: str) -> None:
    __tracebackhide__ = True
    c.ensure_callable(fn, f"a function {form}(x, w, cache=None)")

    def student(x_step, w, cache):
        args, what = (x_step, w, cache), f"{form}(x, w, cache)"
        got = _pair(c, call_untouched(c, fn, args, ("x", "w", "cache"), what), "mla_not_a_pair")
        c.expect_tensor_output(got[0], f"{form}'s output", tuple(x_step.shape))
        return got

    with E.isolated():
        for b, d, h, hd, dc, dr, seed in MLA_CASES:
            w = E.chapters().mla_weights(d, h, hd, dc, dr, seed=seed)
            x = E.randn(b, 7, d, seed=seed + 50)  # (b, 7, d)
            what = f"{form}(x, w) on {b} x 7 tokens, d={d}, {h} heads of {hd}"
            what += f", latent {dc}, rope {dr}"
            ref, (latent, _) = mla_reference(x, w)
            for how, steps in RUNS:  # in one pass, then step by step: the caches, then the output
                out, caches = _steps(student, x, steps, w)
                for (lo, hi), cache in zip(steps, caches):
                    after = f"the step with tokens {lo} to {hi - 1}" if how else what
                    _check_cache(c, cache, after, w, latent[:, :hi])
                wrong = variants(partial(_steps, mla_reference), MLA_BUGS, x, steps, w, pairs=True)
                c.compare(f64(out), ref, f"For {what}{how}:", wrong, atol=1e-4)
            # the last step again, with x, every weight of w and the cache as if on another device
            # (the tensors given are placed themselves: the call takes them from w and the cache)
            last, weights = x[:, -1:], [t for n, t in vars(w).items() if n.startswith("w_")]
            where = f"For {what}, with x, w and the cache on another device:"
            step = lambda *placed: fn(last, w, tuple(cache))  # noqa: E731
            E.probe_device(c, None, [last, *cache, *weights], where, fn=step)
        if form == "mla_absorbed":
            _builds_no_keys(c, fn)
    built = ", and builds no key or value of width hd" if form == "mla_absorbed" else ""
    c.passed(
        f"equals MLA on {len(MLA_CASES)} shapes in one pass and step by step with its cache "
        f"(3, 1, 2, 1 tokens), and caches the latent{built}",
    )


def check_mla_attention(fn) -> None:
    """Check ``mla_attention(x, w, cache=None) -> (out, (latent, rope_keys))``."""
    __tracebackhide__ = True
    _check_mla(E.Check("check_mla_attention"), fn, "mla_attention")


def check_mla_absorbed(fn) -> None:
    """Check ``mla_absorbed(x, w, cache=None)``: MLA's outputs and cache, no key or value built."""
    __tracebackhide__ = True
    _check_mla(E.Check("check_mla_absorbed"), fn, "mla_absorbed")


# --------------------------------------------------------------------------- linear attention
def linear_reference(q, k, v, state=None, *, chunk=None, **slip):
    """Causal linear attention in float64 on the CPU, chunk by chunk (chunk None: one token per
    chunk, the recurrence), returning (out, (S, z)); switches reproduce CHUNK_BUGS."""
    on = slip.get
    phi = {"none": lambda t: t, "relu": F.relu}.get(on("phi"), lambda t: F.elu(t) + 1)
    fq, fk, v = phi(f64(q)), phi(f64(k)), f64(v)
    fq = fq * fq.shape[-1] ** -0.5 if on("q_scale") else fq  # the attention's scale, kept
    b, h, n, dk = fq.shape
    S, z = (torch.zeros(b, h, dk, v.shape[-1]), torch.zeros(b, h, dk)) if state is None else state
    S, z, outs, c = S.double(), z.double(), [], chunk or 1
    for lo in range(0, n, c):
        hi = min(lo + c, n)
        if on("drop_last") and hi - lo < c:  # the last, shorter chunk left out (zeros)
            outs.append(torch.zeros(b, h, hi - lo, v.shape[-1]))
            break
        cq, ck, cv = fq[:, :, lo:hi], fk[:, :, lo:hi], v[:, :, lo:hi]
        scores = (cq @ ck.mT).tril(-1 if on("strict") or on("before") else 0)  # (b, h, c, c)
        scores = (
            0 * scores if on("first") == "all" else scores
        )  # "all": the chunk only in the state
        S_read = S + ck.mT @ cv if on("first") else S  # the chunk added to the state before reading
        z_read = z + ck.sum(2) if on("first") in ("both", "all") else z
        top = scores @ cv + cq @ S_read
        normaliser = scores.sum(-1, keepdim=True) + cq @ z_read[..., None]  # (b, h, c, 1)
        outs.append(top if on("no_norm") else top / normaliser)
        end = min(hi + 1, n) if on("boundary_twice") else hi
        S, z = S + fk[:, :, lo:end].mT @ v[:, :, lo:end], z + fk[:, :, lo:end].sum(2)
    return torch.cat(outs, 2), (S, z)


def delta_reference(q, k, v, alpha, beta, state=None, **slip):
    """Gated DeltaNet's recurrence in float64 on the CPU; returns (out, S), S (b, h, dv, dk).
    Switches (False unless given) reproduce DELTA_BUGS."""
    on = slip.get
    q, k, v, alpha, beta = (f64(t) for t in (q, k, v, alpha, beta))
    b, h, n, dk = k.shape
    q, alpha = q * dk ** (-0.5 if on("q_scale") else 0), alpha.exp() if on("exp_gate") else alpha
    S = torch.zeros(b, h, v.shape[-1], dk, dtype=torch.float64) if state is None else state.double()
    outs = []
    for t in range(n):
        kt, vt, bt = k[:, :, t], v[:, :, t], beta[:, :, t, None, None]
        a = 1.0 if on("no_gate") else alpha[:, :, t, None, None]
        read = S
        decayed = S if on("gate_on_write") else a * S
        error = vt - ((S if on("erase_ungated") else decayed) @ kt[..., None]).squeeze(-1)
        write = vt if on("no_erase") else error
        outer = write[..., None] * kt[..., None, :]  # (b, h, dv, dk)
        outer = outer.mT if on("transposed") else outer
        S = a * (S + bt * outer) if on("gate_on_write") else decayed + bt * outer
        outs.append(((read if on("before") else S) @ q[:, :, t, :, None]).squeeze(-1))
    return torch.stack(outs, 2), S


CHUNK_BUGS = (
    *(("linear_no_normaliser", {"no_norm": True, "q_scale": s}) for s in (False, True)),
    *(("linear_feature_map_wrong", {"phi": phi}) for phi in ("none", "relu")),
    ("chunk_diagonal_dropped", {"strict": True}),
    *(("chunk_state_includes_chunk", {"first": first}) for first in ("all", "both", "S")),
    ("chunk_boundary_counted_twice", {"boundary_twice": True}),
    ("chunk_last_partial", {"drop_last": True}),
)
LINEAR_BUGS = (*CHUNK_BUGS[:4], ("linear_reads_before_write", {"before": True}))
DELTA_BUGS = tuple(
    (f"delta_{bug}", {switch: True})
    for bug, switch in (
        ("gate_on_write", "gate_on_write"),
        ("erase_ungated", "erase_ungated"),
        ("no_erase", "no_erase"),
        ("reads_before_write", "before"),
        ("outer_transposed", "transposed"),
        ("gate_ignored", "no_gate"),
        ("query_scaled", "q_scale"),
        ("gate_exponentiated", "exp_gate"),
    )
)
# (b, h, n, dk, dv, seed); the first has dk == dv, so that a transposed state runs and is named
RECURRENT_CASES = ((2, 1, 8, 4, 4, 1203), (2, 2, 9, 4, 5, 1201), (1, 3, 7, 3, 2, 1202))


def _inputs(b, h, n, dk, dv, seed, delta=False):
    q, k, v = (E.randn(b, h, n, w, seed=seed + i) for i, w in enumerate((dk, dk, dv)))
    if not delta:
        return (q, k, v)
    k = k / k.norm(dim=-1, keepdim=True)  # unit-length keys
    gates = torch.rand(2, b, h, n, generator=E.generator(seed + 3))
    return (q, k, v, 0.5 + 0.5 * gates[0], gates[1])  # alpha in (0.5, 1), beta in (0, 1)


def _compare(c: E.Check, got, expected, where, wrong, weigh=None) -> None:
    """c.compare; for linear attention (weigh(values) -> fn's outputs) a difference that no variant
    explains is then tested as an average: equal values must come back as they are (the normaliser),
    values in [0, 1] must give outputs in [0, 1] (positive features)."""
    try:
        c.compare(got, expected, where, wrong)
    except E.CheckFailure as failure:
        if failure.bug is None and weigh is not None:
            ones = f64(weigh(lambda v: torch.ones_like(v)))
            if not E.same(ones, torch.ones_like(ones)):
                raise c.bug("linear_no_normaliser", where) from None
            inside = f64(weigh(lambda v: torch.rand(v.shape, generator=E.generator(11))))
            if inside.min() < -1e-5 or inside.max() > 1 + 1e-5:
                raise c.bug("linear_feature_map_wrong", where) from None
        raise


def _check_recurrence(fn, form, reference, bugs, delta=False):
    __tracebackhide__ = True
    c = E.Check("check_" + form.split("(")[0])
    c.ensure_callable(fn, f"a function {form}")
    names = ("q", "k", "v", "alpha", "beta")[: 5 if delta else 3] + ("state",)

    def call(args, what):
        return _pair(c, call_untouched(c, fn, args, names, what), "recurrence_not_a_pair")

    with E.isolated():
        for b, h, n, dk, dv, seed in RECURRENT_CASES:
            inputs = _inputs(b, h, n, dk, dv, seed, delta)
            what = f"{form} with b={b}, h={h}, {n} tokens, dk={dk}, dv={dv}"
            got = call(inputs, what)
            out = f64(c.expect_tensor_output(got[0], what, (b, h, n, dv)))
            again = f"{form} on two different batches, each with state=None"
            call(tuple(t.flip(2) for t in inputs), again)  # another batch
            if not E.same(f64(call(inputs, again)[0]), out, atol=1e-6):
                raise c.bug("recurrence_state_not_reset", f"For {again}:")
            expected, state = reference(*inputs)
            weigh = None if delta else lambda new_v: call((*inputs[:2], new_v(inputs[2])), what)[0]
            _compare(
                c,
                out,
                expected,
                f"For {what}:",
                variants(reference, bugs, *inputs, pairs=True),
                weigh,
            )
            _check_state(c, got[1], state, what)
            _check_state_handed_on(c, call, form, inputs, reference, bugs, split=n // 2)
            E.probe_device(c, None, list(inputs), f"For {what}, inputs on another device:", fn=fn)
    c.passed(
        f"right on {len(RECURRENT_CASES)} shapes, continues from a given state without changing it "
        "and keeps none between calls",
    )


def _check_state(c: E.Check, mine, state, what: str) -> None:
    """The returned state equals the reference's (S, z) or S; transposed, it is named so."""
    mine = mine if isinstance(mine, (tuple, list)) else [mine]
    refs = state if isinstance(state, tuple) else (state,)
    same = lambda m, r: isinstance(m, torch.Tensor) and E.same(f64(m), r, atol=1e-5)  # noqa: E731
    if len(mine) == len(refs) and all(map(same, mine, refs)):
        return
    flipped = [m.mT if isinstance(m, torch.Tensor) and m.dim() == 4 else m for m in mine]
    swapped = len(mine) == len(refs) and all(map(same, flipped, refs))
    bug = "recurrence_state_transposed" if swapped else "recurrence_state_wrong"
    raise c.bug(bug, f"After {what}:", expected=[tuple(r.shape) for r in refs])


def _check_state_handed_on(c: E.Check, call, form, inputs, reference, bugs, split):
    """The texts in two calls, the second continuing from the state the first returned (which it
    must leave as it was: call_untouched)."""
    __tracebackhide__ = True
    head, tail = tuple(t[:, :, :split] for t in inputs), tuple(t[:, :, split:] for t in inputs)
    _, state = call(head, f"{form} on the first {split} tokens")
    what = f"{form} on the remaining tokens with the state of the first {split}"
    got = f64(call((*tail, state), what)[0])
    in_two = lambda **s: reference(*tail, reference(*head, **s)[1], **s)  # noqa: E731
    wrong = [("recurrence_state_ignored", lambda: reference(*tail)[0]), *variants(in_two, bugs)]
    c.compare(got, in_two()[0], f"For {what}:", wrong)


def check_linear_attention_recurrent(fn) -> None:
    """Check ``linear_attention_recurrent(q, k, v, state=None) -> (out, (S, z))``."""
    __tracebackhide__ = True
    form = "linear_attention_recurrent(q, k, v, state=None)"
    _check_recurrence(fn, form, linear_reference, LINEAR_BUGS)


def check_gated_delta_rule(fn) -> None:
    """Check ``gated_delta_rule(q, k, v, alpha, beta, state=None) -> (out, S)``."""
    __tracebackhide__ = True
    form = "gated_delta_rule(q, k, v, alpha, beta, state=None)"
    _check_recurrence(fn, form, delta_reference, DELTA_BUGS, delta=True)


def check_linear_attention_chunked(fn) -> None:
    """Check ``linear_attention_chunked(q, k, v, chunk)``: equal to the quadratic form for any chunk."""
    __tracebackhide__ = True
    c = E.Check("check_linear_attention_chunked")
    c.ensure_callable(fn, "a function linear_attention_chunked(q, k, v, chunk)")
    with E.isolated():
        q, k, v = _inputs(2, 2, 10, 4, 3, 1301)
        expected = linear_reference(q, k, v)[0]
        for chunk in (5, 10, 1, 3, 4, 7, 16):  # the chunks that divide the 10 tokens first
            what = f"linear_attention_chunked(q, k, v, chunk={chunk}) on 10 tokens"
            run = partial(call_untouched, c, fn, names=("q", "k", "v"), what=what)
            try:
                got = run((q, k, v, chunk))
            except E.CheckFailure as failure:  # a crash only when the last chunk is shorter
                if failure.bug is None and 10 % chunk:
                    raise c.bug("chunk_last_partial", f"For {what}:") from None
                raise
            if (
                isinstance(got, torch.Tensor)
                and got.dim() == 4
                and got.shape[2] == 10 - 10 % chunk < 10
            ):
                raise c.bug("chunk_last_partial", f"For {what}:")
            got = f64(c.expect_tensor_output(got, what, (2, 2, 10, 3)))
            wrong = variants(
                partial(linear_reference, chunk=chunk), CHUNK_BUGS, q, k, v, pairs=True
            )
            _compare(
                c, got, expected, f"For {what}:", wrong, lambda new_v: run((q, k, new_v(v), chunk))
            )
        where = "For chunk=4, inputs on another device:"
        E.probe_device(c, None, [q, k, v], where, fn=lambda *t: fn(*t, 4))
    c.passed(
        "equals the quadratic form for chunks of 1, 3, 4, 5, 7, 10 and 16 tokens (10 tokens in all)",
    )


__all__ = [
    "check_kv_cache_bytes",
    "check_mla_attention",
    "check_mla_absorbed",
    "check_linear_attention_recurrent",
    "check_linear_attention_chunked",
    "check_gated_delta_rule",
    "check_sparse_attention",
    "check_shared_kv_forward",
]
