"""Self-checks for chapter 11: the KV-cache byte count, MLA with a latent cache, its absorbed form,
linear attention as a recurrence and chunk by chunk, the gated delta rule.

Each reference below is one small function whose keyword switches default to the right
computation; every other switch value reproduces a catalogued mistake (``mistakes.txt`` beside this
file), so a wrong answer is named by finding the switch that reproduces it on every case.
"""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn.functional as F

from course_utils.checks import _engine as E

from .sparse_shared import check_shared_kv_forward, check_sparse_attention

# Shortcuts graded answers may call (tools/nbgrader_honesty.py): all; the exercises are the caches,
# MLA, the recurrences, the top-k choice and the cache map, not the weighting itself
ALLOWED_SHORTCUTS = ("sdpa", "mha", "flex")


def _variants(reference, bugs, *args):
    """The (mistake id, recompute) pairs ``c.compare`` takes: for each ``(id, switch)`` of
    ``bugs``, the output ``reference(*args, **switch)[0]``."""
    return [(bug, lambda s=s: reference(*args, **s)[0]) for bug, s in bugs]


def _pair(c: E.Check, got, bug: str):
    """``got`` when it is a pair (a tuple or list of two), else the mistake ``bug``."""
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise c.bug(bug, got=E.shown(got))
    return got


def _float64(t: torch.Tensor) -> torch.Tensor:
    """A student's tensor detached, on the CPU and in float64, to compare with a reference."""
    return t.detach().cpu().double()


# --------------------------------------------------------------------------- kv_cache_bytes
def cache_bytes(layout, context: int, batch: int = 1, bytes_per_value: int = 2, **slip) -> int:
    """Bytes of ``batch`` caches of ``context`` tokens; a switch of BYTES_BUGS reproduces a slip."""
    on = slip.get
    caches = layout.layers // (1 if on("no_sharing") else layout.layers_per_cache)
    if layout.latent_dim:
        per_token = layout.latent_dim + (0 if on("no_rope_key") else layout.rope_dim)
        per_token *= 2 if on("latent_twice") else 1
        per_token *= layout.kv_heads if on("latent_per_head") else 1
    else:
        per_token = (1 if on("keys_only") else 2) * layout.kv_heads * layout.head_dim
    windowed = caches if on("window_all") else min(layout.windowed_caches, caches)
    held = context if (on("no_window") or not layout.window) else min(context, layout.window)
    tokens = windowed * held + (caches - windowed) * context
    return (1 if on("one_text") else batch) * tokens * per_token * bytes_per_value


BYTES_BUGS = (
    ("kv_values_forgotten", {"keys_only": True}),
    ("kv_window_ignored", {"no_window": True}),
    ("kv_window_everywhere", {"window_all": True}),
    ("kv_latent_per_head", {"latent_per_head": True}),
    ("kv_latent_twice", {"latent_twice": True}),
    ("kv_rope_key_forgotten", {"no_rope_key": True}),
    ("kv_sharing_ignored", {"no_sharing": True}),
    ("kv_batch_ignored", {"one_text": True}),
)


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


def _count(c: E.Check, got, what: str) -> int:
    """``got`` as an int if it is a whole int, float or one-element tensor, else kv_not_a_count."""
    number = got.item() if isinstance(got, torch.Tensor) and got.numel() == 1 else got
    if isinstance(number, (int, float)) and not isinstance(number, bool):
        if float(number).is_integer():
            return int(number)
    raise c.bug("kv_not_a_count", what=what, got=E.shown(got))


def check_kv_cache_bytes(fn) -> None:
    """Check ``kv_cache_bytes(layout, context, batch=1, bytes_per_value=2)``: the cache's bytes."""
    __tracebackhide__ = True
    c = E.Check("check_kv_cache_bytes")
    c.ensure_callable(fn, "a function kv_cache_bytes(layout, context, batch=1, bytes_per_value=2)")
    with E.isolated():
        answers = []  # (the call, the student's count, the arguments of cache_bytes)
        for label, *case in _byte_cases():
            layout, context, batch, size = case
            what = f"kv_cache_bytes(<{label}>, {context}, batch={batch}, bytes_per_value={size})"
            got = c.call(fn, layout, context, batch=batch, bytes_per_value=size, what=what)
            answers.append((what, _count(c, got, what), case))
    wrong = [(what, number, case) for what, number, case in answers if number != cache_bytes(*case)]
    if wrong:  # named by the slip that reproduces every answer, if one does
        slips = (b for b, s in BYTES_BUGS if all(n == cache_bytes(*a, **s) for _, n, a in answers))
        what, number, case = wrong[0]
        expected = f"For {what}: got {number:,}, expected {cache_bytes(*case):,}."
        raise c.bug(next(slips, "kv_count_wrong"), expected)
    c.passed(
        f"right on {len(answers)} cases: the six published layouts, sharing, "
        "windows and a latent, at contexts from 1 to 131,072 tokens",
    )


# --------------------------------------------------------------------------- MLA
def mla_reference(x, w, cache=None, **slip):
    """MLA in float64 on the CPU, naive form, returning (out, (latent, rope_keys)).

    swap: keys from w_uv and values from w_uk (the absorbed query took the value side);
    transposed: each head's (hd, dc) block read as w.view(h, dc, hd), i.e. the wrong side of W;
    scale_without_rope, restart, top_left, no_rope: see MLA_BUGS (all off unless given)."""
    on = slip.get
    rope = E.chapters().apply_rope
    x = _float64(x)
    b, n, _ = x.shape
    h, hd, dr = w.heads, w.head_dim, w.rope_dim
    W = {name: _float64(t) for name, t in vars(w).items() if name.startswith("w_")}
    start = 0 if cache is None else cache[0].shape[1]
    positions = torch.arange(n) + (0 if on("restart") else start)  # (n,)
    latent, rope_keys = x @ W["w_dkv"].T, rope(x @ W["w_kr"].T, positions)  # (b, n, dc), (b, n, dr)
    if cache is not None:
        latent, rope_keys = torch.cat([cache[0], latent], 1), torch.cat([cache[1], rope_keys], 1)
    N, dc = latent.shape[1:]
    w_k, w_v = (W["w_uv"], W["w_uk"]) if on("swap") else (W["w_uk"], W["w_uv"])
    blocks = [m.view(h, dc, hd) if on("transposed") else m.view(h, hd, dc).mT for m in (w_k, w_v)]
    k, v = (latent[:, None] @ block for block in blocks)  # (b, h, N, hd) each
    q = (x @ W["w_q"].T).view(b, n, h, hd).transpose(1, 2)  # (b, h, n, hd)
    q_rope = rope((x @ W["w_qr"].T).view(b, n, h, dr).transpose(1, 2), positions)  # (b, h, n, dr)
    scores = q @ k.mT + (0 if on("no_rope") else q_rope @ rope_keys[:, None].mT)  # (b, h, n, N)
    scores = scores / math.sqrt(hd if on("scale_without_rope") else hd + dr)
    first = 0 if on("top_left") else N - n
    allowed = torch.arange(first, first + n)[:, None] >= torch.arange(N)[None, :]  # (n, N)
    weights = torch.softmax(scores.masked_fill(~allowed, -torch.inf), dim=-1)
    out = (weights @ v).transpose(1, 2).reshape(b, n, h * hd) @ W["w_o"].T  # (b, n, d)
    return out, (latent, rope_keys)


MLA_BUGS = (
    ("mla_absorbed_wrong_side", {"swap": True}),
    ("mla_head_blocks_transposed", {"transposed": True}),
    ("mla_rope_part_missing", {"no_rope": True}),
    ("mla_scale_without_rope", {"scale_without_rope": True}),
    ("mla_positions_restart", {"restart": True}),
    ("mla_cache_mask_top_left", {"top_left": True}),
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
            if not E.same(_float64(lat), latent, atol=1e-4):
                raise c.bug("mla_cache_not_latent", f"After {what}:")
            return
    raise c.bug("mla_cache_shape", f"After {what}:", got=E.shown(cache), b=b, N=N, dc=dc, dr=dr)


def _check_mla(c: E.Check, fn, form: str) -> None:
    __tracebackhide__ = True
    c.ensure_callable(fn, f"a function {form}(x, w, cache=None)")

    def student(x_step, w, cache):
        got = c.call_pure(fn, (x_step,), w, cache, what=f"{form}(x, w, cache)")
        _pair(c, got, "mla_not_a_pair")
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
                variants = _variants(partial(_steps, mla_reference), MLA_BUGS, x, steps, w)
                c.compare(_float64(out), ref, f"For {what}{how}:", variants, atol=1e-4)
            # the last step again, with x, every weight of w and the cache as if on another device
            # (the tensors given are placed themselves: the call takes them from w and the cache)
            last, weights = x[:, -1:], [t for n, t in vars(w).items() if n.startswith("w_")]
            where = f"For {what}, with x, w and the cache on another device:"
            step = lambda *placed: fn(last, w, tuple(cache))  # noqa: E731
            E.probe_device(c, None, [last, *cache, *weights], where, fn=step)
    c.passed(
        f"equals MLA on {len(MLA_CASES)} shapes in one pass and step by step with its cache "
        "(3, 1, 2, 1 tokens), and caches the latent",
    )


def check_mla_attention(fn) -> None:
    """Check ``mla_attention(x, w, cache=None) -> (out, (latent, rope_keys))``."""
    __tracebackhide__ = True
    _check_mla(E.Check("check_mla_attention"), fn, "mla_attention")


def check_mla_absorbed(fn) -> None:
    """Check ``mla_absorbed(x, w, cache=None)``: the same outputs and cache as MLA."""
    __tracebackhide__ = True
    _check_mla(E.Check("check_mla_absorbed"), fn, "mla_absorbed")


# --------------------------------------------------------------------------- linear attention
def linear_reference(q, k, v, state=None, *, chunk=None, **slip):
    """Causal linear attention in float64 on the CPU, chunk by chunk (chunk None: one token per
    chunk, the recurrence), returning (out, (S, z)); switches reproduce LINEAR_BUGS, CHUNK_BUGS."""
    on = slip.get
    fq, fk = (F.elu(_float64(t)) + 1 for t in (q, k))
    v = _float64(v)
    b, h, n, dk = fq.shape
    S, z = (torch.zeros(b, h, dk, v.shape[-1]), torch.zeros(b, h, dk)) if state is None else state
    S, z, outs, c = S.double(), z.double(), [], chunk or 1
    for lo in range(0, n, c):
        hi = min(lo + c, n)
        cq, ck, cv = fq[:, :, lo:hi], fk[:, :, lo:hi], v[:, :, lo:hi]
        scores = cq @ ck.mT  # (b, h, c, c); state_first: all of the chunk, as if in the state
        if not on("state_first"):
            scores = scores.tril(-1 if on("strict") or on("before") else 0)
        top = scores @ cv + cq @ S
        normaliser = scores.sum(-1, keepdim=True) + cq @ z[..., None]  # (b, h, c, 1)
        outs.append(top if on("no_norm") else top / normaliser)
        end = min(hi + 1, n) if on("boundary_twice") else hi
        S, z = S + fk[:, :, lo:end].mT @ v[:, :, lo:end], z + fk[:, :, lo:end].sum(2)
    return torch.cat(outs, 2), (S, z)


def delta_reference(q, k, v, alpha, beta, state=None, **slip):
    """Gated DeltaNet's recurrence in float64 on the CPU; returns (out, S), S (b, h, dv, dk).
    Switches (False unless given) reproduce DELTA_BUGS."""
    on = slip.get
    q, k, v, alpha, beta = (_float64(t) for t in (q, k, v, alpha, beta))
    b, h, n, dk = k.shape
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


LINEAR_BUGS = (
    ("linear_no_normaliser", {"no_norm": True}),
    ("linear_reads_before_write", {"before": True}),
)
CHUNK_BUGS = (
    ("linear_no_normaliser", {"no_norm": True}),
    ("chunk_diagonal_dropped", {"strict": True}),
    ("chunk_state_includes_chunk", {"state_first": True}),
    ("chunk_boundary_counted_twice", {"boundary_twice": True}),
)
DELTA_BUGS = (
    ("delta_gate_on_write", {"gate_on_write": True}),
    ("delta_erase_ungated", {"erase_ungated": True}),
    ("delta_no_erase", {"no_erase": True}),
    ("delta_reads_before_write", {"before": True}),
    ("delta_outer_transposed", {"transposed": True}),
    ("delta_gate_ignored", {"no_gate": True}),
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


def _check_recurrence(fn, form, reference, bugs, delta=False):
    __tracebackhide__ = True
    c = E.Check("check_" + form.split("(")[0])
    c.ensure_callable(fn, f"a function {form}")
    with E.isolated():
        for b, h, n, dk, dv, seed in RECURRENT_CASES:
            inputs = _inputs(b, h, n, dk, dv, seed, delta)
            what = f"{form} with b={b}, h={h}, {n} tokens, dk={dk}, dv={dv}"
            got = _pair(c, c.call_pure(fn, inputs, what=what), "recurrence_not_a_pair")
            out = _float64(c.expect_tensor_output(got[0], what, (b, h, n, dv)))
            again = f"{form} on two different batches, each with state=None"
            c.call_pure(fn, tuple(t.flip(2) for t in inputs), what=again)  # another batch
            if not E.same(_float64(c.call_pure(fn, inputs, what=again)[0]), out, atol=1e-6):
                raise c.bug("recurrence_state_not_reset", f"For {again}:")
            expected, state = reference(*inputs)
            c.compare(out, expected, f"For {what}:", _variants(reference, bugs, *inputs))
            mine = got[1] if isinstance(got[1], (tuple, list)) else [got[1]]
            refs = state if isinstance(state, tuple) else (state,)
            matches = [E.same(m, r, atol=1e-5) for m, r in zip(mine, refs)]  # False: not a tensor
            if len(mine) != len(refs) or not all(matches):
                shapes = [tuple(r.shape) for r in refs]
                raise c.bug("recurrence_state_wrong", f"After {what}:", expected=shapes)
            _check_state_handed_on(c, fn, form, inputs, reference, bugs, split=n // 2)
            E.probe_device(c, None, list(inputs), f"For {what}, inputs on another device:", fn=fn)
    c.passed(
        f"right on {len(RECURRENT_CASES)} shapes, continues from a given state and keeps none between calls",
    )


def _check_state_handed_on(c: E.Check, fn, form, inputs, reference, bugs, split):
    """The texts in two calls, the second continuing from the state the first returned."""
    __tracebackhide__ = True
    head, tail = tuple(t[:, :, :split] for t in inputs), tuple(t[:, :, split:] for t in inputs)
    _, state = c.call_pure(fn, head, what=f"{form} on the first {split} tokens")
    what = f"{form} on the remaining tokens with the state of the first {split}"
    got = _float64(c.call(fn, *tail, state, what=what)[0])
    in_two = lambda **s: reference(*tail, reference(*head, **s)[1], **s)  # noqa: E731
    variants = [("recurrence_state_ignored", lambda: reference(*tail)[0]), *_variants(in_two, bugs)]
    c.compare(got, in_two()[0], f"For {what}:", variants)


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
        for chunk in (3, 4, 1, 7, 10, 16):
            what = f"linear_attention_chunked(q, k, v, chunk={chunk}) on 10 tokens"
            got = c.call_pure(fn, (q, k, v), chunk, what=what)
            got = _float64(c.expect_tensor_output(got, what, (2, 2, 10, 3)))
            variants = _variants(partial(linear_reference, chunk=chunk), CHUNK_BUGS, q, k, v)
            c.compare(got, expected, f"For {what}:", variants)
        where = "For chunk=4, inputs on another device:"
        E.probe_device(c, None, [q, k, v], where, fn=lambda *t: fn(*t, 4))
    c.passed(
        "equals the quadratic form for chunks of 1, 3, 4, 7, 10 and 16 tokens (10 tokens in all)",
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
