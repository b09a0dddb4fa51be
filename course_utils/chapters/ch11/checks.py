"""Chapter 11's self-checks (sparse attention and KV sharing: sparse_shared.py). Each reference's
switches default to the right computation, each other value reproduces a mistake of mistakes.txt."""

from __future__ import annotations

import math
import numbers
from functools import partial
from itertools import combinations

import torch
import torch.nn.functional as F

from course_utils.checks import _engine as E

from . import probes as P
from . import sparse_shared
from .probes import backward, call, f64, finite_when_large, keeps_float64, replay, variants

check_sparse_attention = sparse_shared.check_sparse_attention  # and its helpers' home
check_shared_kv_forward = sparse_shared.check_shared_kv_forward

# Shortcuts graded answers may call (tools/grading/honesty.py): all; the weighting is no exercise here
ALLOWED_SHORTCUTS = ("sdpa", "mha", "flex")


# --------------------------------------------------------------------------- kv_cache_bytes
def cache_bytes(layout, context: int, batch: int = 1, bytes_per_value: int = 2, **slip) -> int:
    """Bytes of ``batch`` caches of ``context`` tokens; a switch of SLIPS reproduces a slip."""
    on, lay = slip.get, layout
    caches = lay.layers // (1 if on("sharing_ignored") else lay.layers_per_cache)
    per_token = (1 if on("values_forgotten") else 2) * lay.kv_heads * lay.head_dim
    if lay.latent_dim and not on("latent_ignored"):
        rope = 0 if on("rope_key_forgotten") else lay.rope_dim
        per_token = lay.latent_dim * (1 + bool(on("latent_doubled"))) + rope
        per_token *= 2 if on("latent_twice") else lay.kv_heads if on("latent_per_head") else 1
    windowed = caches if on("window_everywhere") else min(lay.windowed_caches, caches)
    held = context if (on("window_ignored") or not lay.window) else min(context, lay.window)
    held = 0 if on("windowed_dropped") else held
    return batch * (windowed * held + (caches - windowed) * context) * per_token * bytes_per_value


SLIPS = "values_forgotten window_ignored window_everywhere latent_ignored latent_per_head"
SLIPS = f"{SLIPS} latent_twice rope_key_forgotten sharing_ignored windowed_dropped latent_doubled"
SLIPS, SLIP_IDS = SLIPS.split(), {"latent_doubled": "latent_twice"}  # 2 dc + dr: the latent twice
# FACTORS, mistake: (layers, kv heads of 8, batch, bytes, how many times the count of (4, 2, 1, 1) it
# then gives, 10 tokens; the right count grows 2, 3, 3 and 4 times)
FACTORS = {"kv_heads_squared": (4, 4, 1, 1, 4), "kv_layers_ignored": (12, 2, 1, 1, 1)}
FACTORS |= {"kv_batch_ignored": (4, 2, 3, 1, 1), "kv_bytes_per_value_ignored": (4, 2, 1, 4, 1)}


def _byte_cases():
    """(name, layout, context, batch, bytes_per_value): the published layouts, shared ones, a latent."""
    KV = E.chapters().KVLayout
    layouts = dict(E.chapters().PUBLISHED)
    layouts["12 layers, pairs share"] = KV(12, 4, 64, layers_per_cache=2)
    layouts["12 layers, pairs share, windows"] = KV(12, 4, 64, 256, 4, layers_per_cache=2)
    layouts["MLA, shared"] = KV(8, 4, 32, latent_dim=48, rope_dim=16, layers_per_cache=4)
    contexts = ((1, 1, 2), (300, 3, 2), (5_000, 2, 1), (131_072, 4, 4))
    return [(name, lay, *c) for name, lay in layouts.items() for c in contexts]


def _count(c: E.Check, fn, label, layout, context, batch, size):
    """(the call in words, fn's count as an int): an int, a NumPy integer or a one-number integer
    tensor; anything else (None, text, NaN or infinity, a fraction, a float) is named."""
    what = f"kv_cache_bytes(<{label}>, {context}, batch={batch}, bytes_per_value={size})"
    got = c.call(fn, layout, context, batch=batch, bytes_per_value=size, what=what)
    n = got.item() if isinstance(got, torch.Tensor) and got.numel() == 1 else got
    if isinstance(n, bool) or not isinstance(n, numbers.Real):
        raise c.bug("kv_not_a_count", what=what, got=E.shown(got))
    if isinstance(n, numbers.Integral):
        return what, int(n)
    bug = "kv_not_finite" if not math.isfinite(n) else "kv_in_gib" if n % 1 else "kv_not_an_int"
    raise c.bug(bug, what=what, got=E.shown(got))


def _explained(lay, context, batch, size) -> str:
    """The right count and its factors, in words."""
    caches, w = lay.layers // lay.layers_per_cache, lay.windowed_caches
    per = lay.latent_dim + lay.rope_dim if lay.latent_dim else 2 * lay.kv_heads * lay.head_dim
    many = lambda n, word: f"{n:,} {word}{'s' * (n != 1)}"
    held = [f"{many(w, 'windowed cache')} x {many(min(context, lay.window or context), 'token')}"]
    held = held * bool(w) + [f"{many(caches - w, 'cache')} x {many(context, 'token')}"] * (
        caches > w
    )
    return (
        f"{cache_bytes(lay, context, batch, size):,} = {batch} x ({' + '.join(held)}) x "
        f"{per:,} numbers per token x {many(size, 'byte')}"
    )


def check_kv_cache_bytes(fn) -> None:
    """Check ``kv_cache_bytes(layout, context, batch=1, bytes_per_value=2)``: the cache's bytes."""
    __tracebackhide__ = True
    c = E.Check("check_kv_cache_bytes")
    c.ensure_callable(fn, "a function kv_cache_bytes(layout, context, batch=1, bytes_per_value=2)")
    with E.isolated():
        answers = [(*_count(c, fn, *case), case[1:]) for case in _byte_cases()]
        wrong = [(what, n, case) for what, n, case in answers if n != cache_bytes(*case)]
        if wrong:  # wrapped at 2**32; factors that change nothing; else slips that explain them all
            what, n, case = wrong[0]
            expected = f"For {what}: got {n:,}, expected {_explained(*case)}."
            if all((n - cache_bytes(*case)) % 2**32 == 0 for _, n, case in wrong):
                raise c.bug("kv_int32_overflow", expected)
            KV = E.chapters().KVLayout
            probe = lambda L, h, *rest: _count(
                c, fn, f"{L} layers, {h} kv heads of 8", KV(L, h, 8), 10, *rest
            )
            (base, n0), found = probe(4, 2, 1, 1), []
            for bug, (*args, factor) in FACTORS.items():
                other, n1 = probe(*args)
                if n0 and n1 == n0 * factor:
                    found.append((bug, f"{base} gave {n0:,}, {other} {n1:,}."))
            if found:  # the first named; any other said before it
                also = [E.MISTAKES[bug].diagnosis for bug, _ in found[1:]]
                raise c.bug(found[0][0], "\n".join([" ".join(t for _, t in found), *also]))
            fits = lambda co: all(
                n == cache_bytes(*a, **dict.fromkeys(co, 1)) for _, n, a in answers
            )
            fit = [co[0] for r in (1, 2, 3) for co in combinations(SLIPS, r) if fits(co)]
            raise c.bug(f"kv_{SLIP_IDS.get(fit[0], fit[0])}" if fit else "kv_count_wrong", expected)
    c.passed(
        f"right on {len(answers)} cases: the six published layouts, sharing, "
        "windows and a latent, at contexts from 1 to 131,072 tokens",
    )


# --------------------------------------------------------------------------- MLA
def mla_reference(x, w, cache=None, **slip):
    """MLA in float64 on the CPU, keys and values rebuilt from the latent: (out, (latent, rope_keys))."""
    on, ch = slip.get, E.chapters()
    x, W = f64(x), {name: f64(t) for name, t in vars(w).items() if name.startswith("w_")}
    (b, n, d), h, hd, dr, dc = x.shape, w.heads, w.head_dim, w.rope_dim, W["w_dkv"].shape[0]
    base = 10_000.0 ** (dr / hd if on("rope_width") else 1)  # rope_width: an hd-wide head's
    rope = partial(ch.apply_rope_interleaved if on("interleaved") else ch.apply_rope, base=base)
    positions = torch.arange(n) + (0 if cache is None or on("restart") else cache[0].shape[1])
    k_at, q_at = positions * (not on("over_heads")), positions + n * bool(on("shift"))
    q_at = torch.arange(n) if on("q_restart") else q_at  # the queries' offset read before the cache
    latent, rope_keys = x @ W["w_dkv"].T, rope(x @ W["w_kr"].T, k_at)  # (b, n, dc), (b, n, dr)
    if cache is not None:
        latent, rope_keys = torch.cat([cache[0], latent], 1), torch.cat([cache[1], rope_keys], 1)
    N = latent.shape[1]
    keys = rope(rope_keys, torch.arange(N)) if on("rerotate") else rope_keys  # rotated twice
    views = {"T": lambda m: m.view(h, dc, hd).mT, "flat": lambda m: m.T.reshape(h, dc, hd).mT}
    views["heads_last"] = lambda m: m.view(hd, h, dc).transpose(0, 1)  # each (h, hd, dc)
    ups = (W["w_uv"], W["w_uk"]) if on("swap") else (W["w_uk"], W["w_uv"])
    ups = [views.get(on(side), lambda m: m.view(h, hd, dc))(m) for side, m in zip("kv", ups)]
    k, v = (latent[:, None] @ m.mT for m in ups)  # (b, h, N, hd) each
    q = (x @ W["w_q"].T).view(b, n, h, hd).transpose(1, 2)  # (b, h, n, hd)
    q_rope = (x @ W["w_qr"].T).view(b, n, h, dr)  # over_heads: turned by the head's index
    q_rope = rope(q_rope, torch.arange(h)) if on("over_heads") else q_rope
    q_rope = q_rope.transpose(1, 2) if on("over_heads") else rope(q_rope.transpose(1, 2), q_at)
    scores = q @ k.mT + (0 if on("no_rope") else q_rope @ keys[:, None].mT)  # (b, h, n, N)
    width = {"hd": hd, "latent": dc + dr, "model": d // h}.get(on("scale"), hd + dr)
    first = 0 if on("mask") == "top_left" else N - n
    allowed = torch.arange(first, first + n)[:, None] >= torch.arange(N)[None, :]  # (n, N)
    if on("mask") == "none" or (on("mask") == "prefill" and cache is not None):
        allowed = torch.ones(n, N, dtype=torch.bool)
    weights = torch.softmax((scores / math.sqrt(width)).masked_fill(~allowed, -torch.inf), dim=-1)
    out = (weights @ v).transpose(1, 2).reshape(b, n, h * hd) @ W["w_o"].T  # (b, n, d)
    return out, (latent, rope_keys)


MLA_BUGS = [  # (mistake, switches of mla_reference): W_uk (k) or W_uv (v) cut into heads wrongly
    *(("mla_head_blocks_transposed", {side: "T"}) for side in "kv"),
    *(("mla_head_blocks_interleaved", {side: "heads_last"}) for side in "kv"),
    *(("mla_weight_transposed_before_view", {side: "flat"}) for side in "kv"),
    ("mla_absorbed_wrong_side", {"swap": True}),
    ("mla_rope_part_missing", {"no_rope": True}),
    ("mla_scale_without_rope", {"scale": "hd"}),
    ("mla_scale_latent_width", {"scale": "latent"}),
    ("mla_scale_model_width", {"scale": "model"}),
    ("mla_positions_restart", {"restart": True}),
    ("mla_query_positions_restart", {"q_restart": True}),
    ("mla_cache_mask_top_left", {"mask": "top_left"}),
    ("mla_not_causal", {"mask": "none"}),
    ("mla_not_causal", {"mask": "prefill"}),
    ("mla_rope_interleaved", {"interleaved": True}),
    ("mla_rope_frequencies_of_head_width", {"rope_width": True}),
    ("mla_rope_keys_rotated_twice", {"rerotate": True}),
    ("mla_rope_over_heads", {"over_heads": True}),
    ("mla_query_positions_shifted", {"shift": True}),
]
# (batch, d, heads, head_dim, latent, rope_dim, seed); the second has head_dim == latent width
MLA_CASES = ((2, 16, 4, 8, 6, 4, 1101), (1, 12, 3, 4, 4, 2, 1102), (2, 20, 2, 6, 10, 6, 1103))
STEPS = ((0, 3), (3, 4), (4, 6), (6, 7))  # a prompt of 3, then 1, 2 and 1 new tokens
RUNS = (("", ((0, 7),)), (", run step by step (3, 1, 2, 1 tokens) with the cache", STEPS))


def _steps(run, x, steps, w, **slip):
    """run(x_step, w, cache) over the (lo, hi) ranges of steps, each given the last step's cache."""
    cache, outs, caches = None, [], []
    for lo, hi in steps:
        out, cache = run(x[:, lo:hi], w, cache, **slip)
        outs, caches = [*outs, out], [*caches, cache]
    return torch.cat(outs, dim=1), caches


def _check_cache(c: E.Check, cache, what: str, w, latent, rotated, raw) -> bool:
    """The returned cache is (latent (b, N, dc), rope keys (b, N, dr)), the latent itself; True when
    the rotary keys are ``raw`` (x @ w_kr^T before its rotation), named once the outputs are right."""
    (b, N, dc), h, hd, dr = latent.shape, w.heads, w.head_dim, w.rope_dim
    lat, r = cache if isinstance(cache, (tuple, list)) and len(cache) == 2 else (None, None)
    if isinstance(lat, torch.Tensor) and isinstance(r, torch.Tensor):
        if lat.dim() == 4 or lat.shape[-1] in (h * hd, 2 * h * hd) or lat.shape[-1] == hd != dc:
            raise c.bug("mla_cache_after_up_projection", what, shape=(*lat.shape,), dc=dc)
        if tuple(lat.shape) == (b, N, dc) and tuple(r.shape) == (b, N, dr):
            if not E.same(f64(lat), latent, atol=1e-4):
                raise c.bug("mla_cache_not_latent", what)
            return not E.same(f64(r), rotated, atol=1e-4) and E.same(f64(r), raw, atol=1e-4)
    raise c.bug("mla_cache_shape", what, got=E.shown(cache), b=b, N=N, dc=dc, dr=dr)


def _builds_no_keys(c: E.Check, fn) -> None:
    """A cached step of 1 token after 12, its torch calls watched (observed, not changed): no result
    may hold keys or values, an axis of 13 beside one of hd, hd + dr, h * hd, h * (hd + dr)."""
    w, x = E.chapters().mla_weights(16, 2, 5, 6, 2, seed=1104), E.randn(1, 13, 16, seed=1105)
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
        what = f"{form}(x, w, cache)"
        got = call(c, fn, (x_step, w, cache), ("x", "w", "cache"), what, pair="mla_not_a_pair")
        c.expect_tensor_output(got[0], f"{form}'s output", tuple(x_step.shape))
        return got

    with E.isolated():
        for b, d, h, hd, dc, dr, seed in MLA_CASES:
            w = E.chapters().mla_weights(d, h, hd, dc, dr, seed=seed)
            x = E.randn(b, 7, d, seed=seed + 50)  # (b, 7, d)
            what = f"{form}(x, w) on {b} x 7 tokens, {h} heads of {hd}, latent {dc}, rope {dr}"
            ref, parts = mla_reference(x, w)
            parts = (*parts, f64(x) @ f64(w.w_kr).T)  # the latent, the rotary keys, unrotated
            for how, steps in RUNS:  # in one pass, then step by step: the caches, then the output
                out, caches = _steps(student, x, steps, w)
                unrotated = False
                for (lo, hi), cache in zip(steps, caches):
                    after = f"the step with tokens {lo} to {hi - 1}" if how else what
                    parts_hi = (t[:, :hi] for t in parts)
                    unrotated |= _check_cache(c, cache, f"After {after}:", w, *parts_hi)
                wrong = variants(partial(_steps, mla_reference), MLA_BUGS, x, steps, w, pairs=True)
                c.compare(f64(out), ref, f"For {what}{how}:", wrong, atol=1e-4)
                if unrotated:
                    raise c.bug("mla_rope_keys_cached_unrotated", f"After {what}{how}:")
                if not how:  # a second text in one pass, before any other call of the same shape
                    P.second_text(c, fn, (x, w), mla_reference, what)
            again = f"{form}(x, w, cache) on token 3 again, handed the cache of tokens 0 to 2"
            replay(c, fn, (x[:, 3:4], w, caches[0]), ref[:, 3:4], again)
            # the last step again as if x, every weight of w and the cache were on another device
            last, placed = x[:, -1:], [t for n, t in vars(w).items() if n.startswith("w_")]
            step = lambda *placed: fn(last, w, tuple(cache))  # the tensors given are placed
            E.probe_device(
                c, None, [last, *cache, *placed], f"For {what}, on another device:", fn=step
            )
        backward(c, fn, (x, w, None), ("x", "w", "cache"), ("x", "w"), what, mla_reference)
        keeps_float64(c, fn, (x, w), what)
        finite_when_large(c, fn, (30 * x, w), f"{what}, x times 30")
        P.future_hidden(c, fn, (x, w), what)
        if form == "mla_absorbed":
            _builds_no_keys(c, fn)
    built = ", building no key or value of width hd" if form == "mla_absorbed" else ""
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
    """Causal linear attention in float64 chunk by chunk (chunk None: the recurrence): (out, (S, z))."""
    on = slip.get
    phi = {"none": lambda t: t, "relu": F.relu}.get(on("phi"), lambda t: F.elu(t) + 1)
    fq, fk, v = phi(f64(q)) * q.shape[-1] ** (-0.5 if on("q_scale") else 0), phi(f64(k)), f64(v)
    b, h, n, dk = fq.shape
    S, z = (torch.zeros(b, h, dk, v.shape[-1]), torch.zeros(b, h, dk)) if state is None else state
    S, z, outs, c = S.double(), z.double() * (0 if on("z_restart") else 1), [], chunk or 1
    for lo in range(0, n, c):
        hi = min(lo + c, n)
        if on("drop_last") and hi - lo < c:  # the last, shorter chunk left out (zeros)
            outs.append(torch.zeros(b, h, hi - lo, v.shape[-1]))
            break
        cq, ck, cv = fq[:, :, lo:hi], fk[:, :, lo:hi], v[:, :, lo:hi]
        scores = (cq @ ck.mT).tril(-1 if on("strict") or on("before") else 0)  # (b, h, c, c)
        # first: the chunk in the state before it is read; no_intra: only the chunks before it
        scores = 0 * scores if on("first") == "all" or on("no_intra") else scores
        S_read = S + ck.mT @ cv if on("first") else S  # before the chunk's outputs are read
        z_read = z + ck.sum(2) if on("first") in ("both", "all") else z
        z_read = 0 * z_read if on("no_z") else z_read  # no_z: the earlier chunks' keys left out
        normaliser = scores.sum(-1, keepdim=True) + cq @ z_read[..., None]  # (b, h, c, 1)
        top = scores @ cv + cq @ S_read
        if on("per_feature"):  # each row of the state divided by its entry of z (chunks of 1)
            top, normaliser = cq @ ((S + ck.mT @ cv) / (z + ck.sum(2))[..., None]), 1
        out = top if on("no_norm") else top * normaliser if on("times") else top / normaliser
        outs.append(out.nan_to_num(0) if on("no_intra") else out)
        end = min(hi + 1, n) if on("boundary_twice") else hi
        S, z = S + fk[:, :, lo:end].mT @ v[:, :, lo:end], z + fk[:, :, lo:end].sum(2)
    return torch.cat(outs, 2), (S, z)


def delta_reference(q, k, v, alpha, beta, state=None, **slip):
    """Gated DeltaNet's recurrence in float64 on the CPU: (out, S), the memory S (b, h, dv, dk)."""
    on = slip.get
    q, k, v, alpha, beta = (f64(t) for t in (q, k, v, alpha, beta))
    b, h, n, dk = k.shape
    q, alpha = q * dk ** (-0.5 if on("q_scale") else 0), alpha.exp() if on("exp_gate") else alpha
    q = F.normalize(q, dim=-1) if on("q_norm") else q
    S = torch.zeros(b, h, v.shape[-1], dk, dtype=torch.float64) if state is None else state.double()
    outs = []
    for t in range(n):
        kt, vt, bt = k[:, :, t], v[:, :, t], beta[:, :, t, None, None]
        vt, bt = (vt * bt[..., 0], 1.0) if on("beta_v") else (vt, bt)  # beta on the value only
        a = 1.0 if on("no_gate") else alpha[:, :, t, None, None]
        read, decayed = S, S if on("gate_on_write") else a * S
        error = vt - ((S if on("erase_ungated") else decayed) @ kt[..., None]).squeeze(-1)
        outer = (vt if on("no_erase") else error)[..., None] * kt[..., None, :]  # (b, h, dv, dk)
        outer = outer.mT if on("transposed") else outer
        S = a * (S + bt * outer) if on("gate_on_write") else decayed + bt * outer
        outs.append(((read if on("before") else S) @ q[:, :, t, :, None]).squeeze(-1))
    return torch.stack(outs, 2), S


CHUNK_BUGS = [  # the recurrence's (LINEAR_BUGS) are its first five and its own slips
    ("linear_no_normaliser", {"no_norm": True}),
    ("linear_no_normaliser", {"no_norm": True, "q_scale": True}),
    ("linear_feature_map_wrong", {"phi": "none"}),
    ("linear_feature_map_wrong", {"phi": "relu"}),
    ("linear_normaliser_multiplied", {"times": True}),
    ("chunk_diagonal_dropped", {"strict": True}),
    *(("chunk_state_includes_chunk", {"first": first}) for first in ("all", "both", "S")),
    ("chunk_boundary_counted_twice", {"boundary_twice": True}),
    ("chunk_last_partial", {"drop_last": True}),
    ("chunk_intra_missing", {"no_intra": True}),
    ("chunk_normaliser_without_state", {"no_z": True}),
]
LINEAR_BUGS = [*CHUNK_BUGS[:5], ("linear_reads_before_write", {"before": True})]
LINEAR_BUGS += [("linear_normaliser_per_feature", {"per_feature": 1})]
LINEAR_BUGS += [("linear_normaliser_restarts", {"z_restart": 1})]
DELTA = "gate_on_write erase_ungated no_erase reads_before_write:before outer_transposed:transposed"
DELTA += " gate_ignored:no_gate query_scaled:q_scale gate_exponentiated:exp_gate"  # id:switch
DELTA += " query_normalised:q_norm beta_on_value_only:beta_v"
DELTA_BUGS = [(f"delta_{b.split(':')[0]}", {b.split(":")[-1]: True}) for b in DELTA.split()]
# (b, h, n, dk, dv, seed); the first has dk == dv, so that a transposed state runs and is named
RECURRENT_CASES = ((2, 1, 8, 4, 4, 1203), (2, 2, 9, 4, 5, 1201), (1, 3, 7, 3, 2, 1202))


def _inputs(b, h, n, dk, dv, seed, delta=False):
    q, k, v = (E.randn(b, h, n, w, seed=seed + i) for i, w in enumerate((dk, dk, dv)))
    gates = torch.rand(
        2, b, h, n, generator=E.generator(seed + 3)
    )  # alpha in (0.5, 1), beta (0, 1)
    unit = k / k.norm(dim=-1, keepdim=True)  # the delta rule's keys have unit length
    return (q, unit, v, 0.5 + gates[0] / 2, gates[1]) if delta else (q, k, v)


def _check_recurrence(fn, name, reference, bugs, delta=False):
    __tracebackhide__ = True
    c, names = E.Check(f"check_{name}"), ("q", "k", "v", "alpha", "beta")[: 5 if delta else 3]
    form = f"{name}({', '.join(names)}, state=None)"
    c.ensure_callable(fn, f"a function {form}")
    names += ("state",)
    run = lambda args, what: call(c, fn, args, names, what, pair="recurrence_not_a_pair")
    with E.isolated():
        for b, h, n, dk, dv, seed in RECURRENT_CASES:
            inputs, split = _inputs(b, h, n, dk, dv, seed, delta), n // 2
            what = f"{form} with b={b}, h={h}, {n} tokens, dk={dk}, dv={dv}"
            got = run(inputs, what)
            out = f64(c.expect_tensor_output(got[0], what, (b, h, n, dv)))
            again = f"{form} on two different batches, each with state=None"
            run(tuple(t.flip(2) for t in inputs), again)  # another batch
            if not E.same(f64(run(inputs, again)[0]), out, atol=1e-6):
                raise c.bug("recurrence_state_not_reset", f"For {again}:")
            expected, state = reference(*inputs)
            c.compare(out, expected, f"For {what}:", variants(reference, bugs, *inputs, pairs=True))
            mine = got[1] if isinstance(got[1], (tuple, list)) else [got[1]]
            refs = state if isinstance(state, tuple) else (state,)
            same = lambda m, r: isinstance(m, torch.Tensor) and E.same(f64(m), r, atol=1e-5)
            if len(mine) != len(refs) or not all(map(same, mine, refs)):
                swapped = [m.mT if torch.is_tensor(m) and m.dim() == 4 else m for m in mine]
                flipped = len(mine) == len(refs) and all(map(same, swapped, refs))
                bug = "recurrence_state_transposed" if flipped else "recurrence_state_wrong"
                raise c.bug(bug, f"After {what}:", expected=[tuple(r.shape) for r in refs])
            # the text in two calls, the second from the first's state (which it must not change)
            head = tuple(t[:, :, :split] for t in inputs)
            tail = tuple(t[:, :, split:] for t in inputs)
            state = run(head, f"{form} on the first {split} tokens")[1]
            then = f"{form} on the remaining tokens with the state of the first {split}"
            in_two = lambda **s: reference(*tail, reference(*head, **s)[1], **s)
            ignored = ("recurrence_state_ignored", lambda: reference(*tail)[0])
            mT = lambda s: (s[0].mT, s[1]) if isinstance(s, tuple) else s.mT  # S read as S^T
            read_mT = lambda: reference(*tail, mT(reference(*head)[1]))[0]
            read_mT = [ignored, ("recurrence_state_read_transposed", read_mT)]
            continued = f64(run((*tail, state), then)[0])
            c.compare(continued, in_two()[0], f"For {then}:", [*read_mT, *variants(in_two, bugs)])
            backward(c, fn, inputs, names, names[:-1], what, reference)
            keeps_float64(c, fn, inputs, what)
            E.probe_device(c, None, list(inputs), f"For {what}, inputs on another device:", fn=fn)
        if not delta:
            _tiny_queries(c, fn, f"{name}(q, k, v)")
    c.passed(
        f"right on {len(RECURRENT_CASES)} shapes, continues from a given state without changing it "
        "and keeps none between calls",
    )


def _tiny_queries(c: E.Check, fn, what: str) -> None:
    """Queries of -10 in every feature: phi(q) = e^-10 for each, so phi(q) . z is about 1e-4 and
    the outputs are the weighted means of the values as for any constant query (the values
    positive). A normaliser clamped (or floored, or given an eps of 3e-5 or more) shrinks them."""
    _, k, v = _inputs(2, 2, 10, 4, 3, 1302)
    q, v = torch.full_like(k, -10.0), v.abs() + 1  # (2, 2, 10, 4), (2, 2, 10, 3)
    what = f"{what} with every query feature -10 (phi(q) . z about 1e-4), the values positive"
    out = c.expect_tensor_output(P.first(c.call(fn, q, k, v, what=what)), what, (2, 2, 10, 3))
    if not E.same(f64(out), linear_reference(q, k, v)[0], rtol=0.1):  # an eps of 1e-5: 5%
        raise c.bug("linear_normaliser_clamped", f"For {what}:")


def check_linear_attention_recurrent(fn) -> None:
    """Check ``linear_attention_recurrent(q, k, v, state=None) -> (out, (S, z))``."""
    __tracebackhide__ = True
    _check_recurrence(fn, "linear_attention_recurrent", linear_reference, LINEAR_BUGS)


def check_gated_delta_rule(fn) -> None:
    """Check ``gated_delta_rule(q, k, v, alpha, beta, state=None) -> (out, S)``."""
    __tracebackhide__ = True
    _check_recurrence(fn, "gated_delta_rule", delta_reference, DELTA_BUGS, delta=True)


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
            short = 10 % chunk and "chunk_last_partial"  # a crash only then: the last chunk short
            got = call(c, fn, (q, k, v, chunk), "qkv", what, crash=short)
            if isinstance(got, (tuple, list)):  # (out, state): the recurrent form's pair
                got = f"a {type(got).__name__} of {len(got)}"  # its tensors' numbers say nothing
                raise c.bug("chunk_returns_state", f"For {what}:", got=got)
            if torch.is_tensor(got) and got.dim() == 4 and got.shape[2] == 10 - 10 % chunk < 10:
                raise c.bug("chunk_last_partial", f"For {what}:")  # the last chunk's tokens dropped
            got, ref = f64(c.expect_tensor_output(got, what, (2, 2, 10, 3))), linear_reference
            wrong = variants(partial(ref, chunk=chunk), CHUNK_BUGS, q, k, v, pairs=True)
            c.compare(got, expected, f"For {what}:", wrong)
            if chunk == 5:  # a second text of the same shape, before another call on these
                P.second_text(c, fn, (q, k, v, 5), lambda *a: ref(*a[:3]), what, negate=(0, 1, 2))
        what, ref = "linear_attention_chunked(q, k, v, chunk=4) on 10 tokens", linear_reference
        backward(c, fn, (q, k, v, 4), "qkv", tuple("qkv"), what, lambda *a: ref(*a[:3]))
        keeps_float64(c, fn, (q, k, v, 4), what)
        E.probe_device(c, None, [q, k, v], "For chunk=4, on a device:", fn=lambda *t: fn(*t, 4))
        _tiny_queries(c, lambda *t: fn(*t, 3), "linear_attention_chunked(q, k, v, chunk=3)")
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
