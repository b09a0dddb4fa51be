"""Chapter 11's checks of sparse attention and KV sharing (exported by checks.py), and their helpers."""

from functools import partial

import torch

from course_utils.checks import _engine as E

from . import probes as P
from .probes import backward, call, f64, finite_when_large, keeps_float64, replay


# --------------------------------------------------------------------------- sparse attention
def sparse_reference(q, k, v, index, topk, **slip):
    """Top-k sparse attention in float64 on the CPU; a switch of SPARSE_BUGS reproduces a mistake."""
    q, k, v, index = (f64(t) for t in (q, k, v, index))
    n, N, on, dk = q.shape[-2], k.shape[-2], slip.get, q.shape[-1]
    causal = torch.arange(N - n, N)[:, None] - (N - n if on("top_left") else 0) >= torch.arange(N)
    scores = q @ k.mT  # (b, h, n, N), unscaled: by_scores ranks the keys by them
    rank = scores if on("by_scores") else index[:, None].expand_as(scores)
    hide = 0.0 if on("zero") else -torch.inf  # zero: the future hidden with 0 (index * causal)
    rank = rank if on("over_future") else rank.masked_fill(~causal, hide)
    chosen = rank.topk(min(topk - on("fewer", 0), N), dim=-1).indices  # (b, h, n, k)
    keep = torch.zeros_like(causal.expand_as(scores)).scatter(-1, chosen, True)
    keep = keep if on("leaky") else keep & causal  # leaky: the chosen keys not masked again
    if on("after_softmax"):  # a softmax over every key, then the keys not kept set to 0
        return (torch.softmax(scores / dk**0.5, -1) * keep) @ v
    if on("scores_zero"):  # the scores of the keys not kept set to 0, not -inf, before the softmax
        return torch.softmax((scores / dk**0.5).masked_fill(~keep, 0), -1) @ v
    return E.chapters().attend(q * dk**0.5 if on("unscaled") else q, k, v, keep)  # (b, h, n, dv)


SPARSE_BUGS = {"sparse_topk_over_future": "over_future", "sparse_selects_by_attention": "by_scores"}
SPARSE_BUGS |= {"sparse_queries_top_left": "top_left", "sparse_keeps_wrong_count": "fewer"}
SPARSE_BUGS |= {"no_scaling": "unscaled", "sparse_mask_after_softmax": "after_softmax"}
SPARSE_BUGS |= {"sparse_future_hidden_with_zero": "zero"}
# the future (and the keys not chosen) attended: a finite 0 in place of -inf, then no mask again
ZERO_LEAKS = {"sparse_future_hidden_with_zero": ("zero", "leaky")}
ZERO_LEAKS |= {"sparse_scores_hidden_with_zero": ("scores_zero",)}
# (b, h, n queries, N keys, topk, seed): a prompt, a cache's last queries, k = 1, a text shorter than k
SPARSE_CASES = ((2, 2, 8, 8, 3, 1), (1, 3, 3, 9, 4, 2), (2, 1, 7, 7, 1, 3), (1, 2, 4, 6, 8, 4))
SPARSE_ARGS = ("q", "k", "v", "index_scores")


def check_sparse_attention(fn) -> None:
    """Check ``sparse_attention(q, k, v, index_scores, topk)``: top-k keys per query, causal."""
    __tracebackhide__ = True
    c = E.Check("check_sparse_attention")
    c.ensure_callable(fn, "a function sparse_attention(q, k, v, index_scores, topk)")
    with E.isolated():
        for b, h, n, N, topk, seed in SPARSE_CASES:
            q, k = E.randn(b, h, n, 4, seed=seed), E.randn(b, h, N, 4, seed=seed + 1)
            idx = E.randn(b, n, N, seed=seed + 2)  # index scores without ties
            eye = torch.eye(N).expand(b, h, N, N)  # one-hot values: the output is the weights
            what = f"sparse_attention(q, k, v, index_scores, topk={topk}), {n} queries, {N} keys"
            crash = "sparse_topk_over_length" if topk > N else n < N and "sparse_mask_square"
            args = (q, k, eye, idx, topk)
            got = call(c, fn, args, SPARSE_ARGS, what, crash=crash)
            got = f64(c.expect_tensor_output(got, what, (b, h, n, N)))
            future = torch.arange(N - n, N)[:, None] < torch.arange(N)  # (n, N)
            leak = (got.nan_to_num(0) != 0) & future  # NaN: an empty row, named below
            # 0, not -inf; when topk covers every key, a 0 chooses as -inf does: no mask at all
            for bug, switches in ZERO_LEAKS.items() if leak.any() and N > topk else ():
                if E.same(got, sparse_reference(*args, **dict.fromkeys(switches, 1))):
                    raise c.bug(bug, f"For {what}:")
            if leak.any():  # only where fewer than topk keys precede: topk took later ones
                short = (~future).sum(-1) < topk  # (n,)
                fills = N > topk and not leak[..., ~short, :].any()
                bug = "sparse_topk_takes_future" if fills else "sparse_sees_future"
                raise c.bug(bug, f"For {what}:", topk=topk)
            if ((got > 0).sum(-1) > topk).any():  # more than topk keys for some query
                raise c.bug("sparse_keeps_wrong_count", f"For {what}:", topk=topk)
            ref = partial(sparse_reference, q, k, eye, idx, topk)
            bugs = [(bug, partial(ref, **{switch: 1})) for bug, switch in SPARSE_BUGS.items()]
            c.compare(got, ref(), f"For {what}, the weights:", bugs, detail={"topk": topk})
            P.second_text(c, fn, (q, k, eye, idx, topk), sparse_reference, what, (0, 1, 3))
        backward(c, fn, args, SPARSE_ARGS, ("q", "k", "v"), what, sparse_reference)
        keeps_float64(c, fn, args, what)
        finite_when_large(c, fn, (30 * q, 30 * k, eye, idx, topk), f"{what}, q and k times 30")
        q, k, v = (E.randn(1, 2, 6, w, seed=5 + i) for i, w in enumerate((4, 4, 3)))
        k[..., 4, :], v[..., 4, :] = k[..., 1, :], v[..., 1, :]  # keys 1 and 4 tie at the 3rd place
        idx = torch.tensor([5.0, 2.0, 0.0, 3.0, 2.0, 1.0]).expand(1, 6, 6)
        what = "sparse_attention(q, k, v, index_scores, 3) with a tie at the 3rd place"
        got = call(c, fn, (q, k, v, idx, 3), SPARSE_ARGS, what)
        got = f64(c.expect_tensor_output(got, what, (1, 2, 6, 3)))
        c.compare(got, sparse_reference(q, k, v, idx, 3), f"For {what}:")
        E.probe_device(c, None, [q, k, v, idx], "On another device:", fn=lambda *t: fn(*t, 2))
    c.passed(f"right on {len(SPARSE_CASES)} shapes and a tie: causal, the top k of the index")


# --------------------------------------------------------------------------- KV sharing
def shared_reference(x, layers, sources, heads, steps, reads=None, recompute=False, **slip):
    """(out, cache) in float64, the tokens arriving in steps ((lo, hi)), layer i reading the cache of
    reads[i] (default sources[i]), the queries the last positions of the keys (top_left: the first);
    mode: a sharing layer's own keys and values "appends" to its source's cache or "overwrites" its
    newest entries."""
    ws, on = [{m: f64(t) for m, t in w.items()} for w in layers], slip.get
    x, reads, cache, outs = f64(x), reads or sources, {}, []
    for lo, hi in steps:
        y, n = x[:, lo:hi], hi - lo
        split = lambda t: t.view(x.shape[0], n, heads, -1).transpose(1, 2)
        for i, w in enumerate(ws):
            new = [split(y @ (ws[sources[i]] if recompute else w)[m].T) for m in ("w_k", "w_v")]
            slot = sources[i] if on("mode") else i  # where they are written
            old = cache.get(slot, [t[:, :, :0] for t in new])
            cut = old[0].shape[2] - (n if on("mode") == "overwrites" and slot != i else 0)
            cache[slot] = [torch.cat([o[:, :, :cut], t], 2) for o, t in zip(old, new)]
            k, v = cache[i if recompute else slot if on("mode") else reads[i]]  # (b, h, N, hd)
            N, first = k.shape[2], 0 if on("top_left") else k.shape[2] - n  # the first query's
            keys = torch.arange(N) - N * bool(on("no_mask"))  # no_mask: every key before the query
            allowed = torch.arange(first, first + n)[:, None] >= keys  # (n, N)
            attended = E.chapters().attend(split(y @ w["w_q"].T), k, v, allowed)  # (b, h, n, hd)
            y = y + attended.transpose(1, 2).reshape(y.shape) @ w["w_o"].T
        outs.append(y)
    return torch.cat(outs, 1), {i: kv for i, kv in cache.items() if sources[i] == i}


def _wrong(x, layers, s, heads, steps):
    """(bug, recompute): the newest cache, the source's previous, i-1's source; a sharing layer's
    own keys written over its source's newest; no sharing; keys recomputed with the source's weights;
    the queries aligned top left; a sharing layer's own keys appended to its source's cache."""
    made, L = [j for j in range(len(s)) if s[j] == j], range(len(s))
    newest = [max(j for j in made if j <= i) for i in L]
    before = [s[i] if s[i] == i else max([j for j in made if j < s[i]] or [i]) for i in L]
    shifted = [s[i] if s[i] == i else s[i - 1] for i in L]
    ref = partial(shared_reference, x, layers, s, heads, steps)
    wrong = [("share_wrong_layer", partial(ref, r)) for r in (newest, before, shifted)]
    wrong += [("share_sharer_overwrites", partial(ref, mode="overwrites"))]
    wrong += [("share_ignored", partial(ref, L)), ("share_recomputes_kv", partial(ref, None, 1))]
    wrong += [("is_causal_top_left", partial(ref, top_left=True))]
    wrong += [("mla_not_causal", partial(ref, no_mask=True))]
    return [*wrong, ("share_sharer_appends", partial(ref, mode="appends"))]


def _variant(bug, f, cache, lo, hi):
    """Variant f's output on tokens lo .. hi-1; share_sharer_overwrites (whose outputs in one pass are
    share_ignored's) only when the student's cache holds that variant's too."""
    out, made = f()
    stack = lambda i: f64(torch.stack([*cache[i]]))
    same = sorted(cache) == sorted(made) and all(
        E.same(stack(i), torch.stack(made[i])[..., :hi, :]) for i in made
    )
    return out[:, lo:hi] if same or bug != "share_sharer_overwrites" else None


# (b, d, heads, kv_source): pairs as in CLA, the last producer shared, two kinds of layers
SHARE_CASES = ((2, 8, 2, (0, 0, 2, 2)), (1, 12, 3, (0, 1, 2, 2, 2)), (2, 8, 2, (0, 1, 2, 1, 2)))
SHARE_ARGS = ("x", "layers", "kv_source", "heads", "cache")


def check_shared_kv_forward(fn) -> None:
    """Check ``shared_kv_forward(x, layers, kv_source, heads, cache=None) -> (out, cache)``."""
    __tracebackhide__ = True
    c = E.Check("check_shared_kv_forward")
    c.ensure_callable(fn, "a function shared_kv_forward(x, layers, kv_source, heads, cache=None)")
    with E.isolated():
        for seed, (b, d, heads, sources) in enumerate(SHARE_CASES):
            layers = E.chapters().stack_weights(d, len(sources), seed)
            x = E.randn(b, 6, d, seed=seed)  # (b, 6, d)
            what = f"shared_kv_forward(x, layers, kv_source={list(sources)}, heads={heads})"
            args = (x, layers, list(sources), heads)
            one_pass = partial(shared_reference, steps=[(0, 6)])
            for steps in (((0, 6),), ((0, 3), (3, 4), (4, 6))):  # one pass; a prompt, two steps
                ref, ref_cache = shared_reference(x, layers, sources, heads, steps)
                bugs, caches = _wrong(x, layers, sources, heads, steps), [None]
                for lo, hi in steps:
                    step = (x[:, lo:hi], layers, list(sources), heads, caches[-1])
                    got = call(c, fn, step, SHARE_ARGS, what, pair="share_cache_form")
                    if not isinstance(got[1], dict):
                        raise c.bug("share_cache_form", f"After {what}:", got=E.shown(got))
                    out, cache = c.expect_tensor_output(got[0], what, (b, hi - lo, d)), got[1]
                    where, caches = f"For {what} on tokens {lo} to {hi - 1}:", [*caches, cache]
                    slices = [(bug, partial(_variant, bug, f, cache, lo, hi)) for bug, f in bugs]
                    c.compare(f64(out), ref[:, lo:hi], where, slices)
                    keys = sorted(cache), sorted(ref_cache)
                    if keys[0] != keys[1]:
                        raise c.bug("share_cache_duplicated", where, got=keys[0], expected=keys[1])
                    want = torch.stack([torch.stack(ref_cache[i]) for i in keys[1]])[..., :hi, :]
                    stack = lambda: torch.stack([torch.stack([*cache[i]]) for i in keys[1]])
                    mine = c.call(stack, what="stacking your cache's (keys, values)").cpu().double()
                    c.compare(mine, want, f"After {what}, the caches (keys, values):")
                if len(steps) == 1:  # a second text, right after a first of the same shape
                    P.second_text(c, fn, args, one_pass, what)
            again = f"{what} on token 3 again, handed the cache of tokens 0 to 2"
            replay(c, fn, (x[:, 3:4], layers, list(sources), heads, caches[1]), ref[:, 3:4], again)
            backward(c, fn, args, SHARE_ARGS, ("x",), what, one_pass)
            keeps_float64(c, fn, args, what)
            finite_when_large(c, fn, (30 * x, *args[1:]), f"{what}, x times 30")
            P.future_hidden(c, fn, args, what)
            whole = lambda *placed: fn(x, layers, list(sources), heads)  # x, layers placed
            E.probe_device(c, None, [x, *(t for w in layers for t in w.values())], what, fn=whole)
    c.passed(f"right on {len(SHARE_CASES)} maps, in one pass and step by step with its cache")
