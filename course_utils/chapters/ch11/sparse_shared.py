"""Chapter 11's checks of sparse attention and KV sharing (exported by checks.py), and their helpers."""

from dataclasses import is_dataclass, replace
from functools import partial
from itertools import combinations

import torch

from course_utils.checks import _engine as E
from course_utils.checks._engine.watch import tree_flatten

f64 = lambda t: t.detach().cpu().double()  # a student's tensor, to compare with a reference
leaves = lambda a: filter(torch.is_tensor, tree_flatten(vars(a) if is_dataclass(a) else a)[0])


def variants(reference, bugs, *args, pairs=False):
    """c.compare's (id, reference(*args, **switches)[0]) for bugs and, with pairs, each two of them."""
    both = [(a, {**s, **t}) for (a, s), (_, t) in combinations(bugs, 2)] if pairs else []
    return [(bug, lambda s=s: reference(*args, **s)[0]) for bug, s in (*bugs, *both)]


def call(c: E.Check, fn, args, names, what: str, pair=None, crash=None):
    """fn(*args), after which every tensor the caller gave (in containers and MLA weights too) must be
    unchanged; ``pair``: the mistake when fn returns no pair; ``crash``: the one a crash names."""
    before = [(name, t, t.clone()) for name, a in zip(names, args) for t in leaves(a)]
    try:
        got = c.call(fn, *args, what=what)
    except E.CheckFailure as failure:
        if crash and failure.bug is None:
            raise c.bug(crash, f"For {what}:") from None
        raise
    for name, t, old in before:
        if not torch.equal(t, old):
            bug = "recurrence_state_modified" if name == "state" else "input_modified"
            raise c.bug(bug, f"After {what}:", what=f"{name} tensor")
    if pair and not (isinstance(got, (tuple, list)) and len(got) == 2):
        raise c.bug(pair, got=E.shown(got))
    return got


def _leaf(a):  # a tensor, or MLA weights, as new tensors that require gradients
    if is_dataclass(a):
        return replace(a, **{k: _leaf(t) for k, t in vars(a).items() if torch.is_tensor(t)})
    return a.detach().clone().requires_grad_()


def backward(c: E.Check, fn, args, names, learn, what: str) -> None:
    """A training step: backward() from fn's output must work and reach every tensor named in learn."""
    args = [_leaf(a) if n in learn else a for n, a in zip(names, args)] + [*args[len(names) :]]
    try:
        with torch.enable_grad():
            out = fn(*args)
            loss = (out[0] if isinstance(out, (tuple, list)) else out).sum()
            if loss.requires_grad:  # else no input gets a gradient: named below
                loss.backward()
    except Exception as exc:  # noqa: BLE001 - the same call ran without gradients: autograd's failure
        raise c.bug("backward_fails", f"For {what}:", error=str(exc).split(":")[0]) from None
    grads = [(n, t.grad) for n, a in zip(names, args) if n in learn for t in leaves(a)]
    for name, grad in grads:
        if grad is None or not grad.isfinite().all():
            raise c.bug("gradient_missing", f"For {what}:", what=name)


# --------------------------------------------------------------------------- sparse attention
def sparse_reference(q, k, v, index, topk, **slip):
    """Top-k sparse attention in float64 on the CPU; a switch of SPARSE_BUGS reproduces a mistake."""
    q, k, v, index = (f64(t) for t in (q, k, v, index))
    n, N, on, dk = q.shape[-2], k.shape[-2], slip.get, q.shape[-1]
    causal = torch.arange(N - n, N)[:, None] - (N - n if on("top_left") else 0) >= torch.arange(N)
    scores = q @ k.mT  # (b, h, n, N), unscaled: by_scores ranks the keys by them
    rank = scores if on("by_scores") else index[:, None].expand_as(scores)
    rank = rank if on("over_future") else rank.masked_fill(~causal, -torch.inf)
    chosen = rank.topk(min(topk - on("fewer", 0), N), dim=-1).indices  # (b, h, n, k)
    keep = torch.zeros_like(causal.expand_as(scores)).scatter(-1, chosen, True) & causal
    if on("after_softmax"):  # a softmax over every key, then the keys not kept set to 0
        return (torch.softmax(scores / dk**0.5, -1) * keep) @ v
    return E.chapters().attend(q * dk**0.5 if on("unscaled") else q, k, v, keep)  # (b, h, n, dv)


SPARSE_BUGS = {"sparse_topk_over_future": "over_future", "sparse_selects_by_attention": "by_scores"}
SPARSE_BUGS |= {"sparse_queries_top_left": "top_left", "sparse_keeps_wrong_count": "fewer"}
SPARSE_BUGS |= {"no_scaling": "unscaled", "sparse_mask_after_softmax": "after_softmax"}
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
            short = topk > N and "sparse_topk_over_length"  # a crash only there: torch.topk's
            got = call(c, fn, (q, k, eye, idx, topk), SPARSE_ARGS, what, crash=short)
            got = f64(c.expect_tensor_output(got, what, (b, h, n, N)))
            future = torch.arange(N - n, N)[:, None] < torch.arange(N)  # (n, N)
            if (got[..., future].nan_to_num(0) != 0).any():  # NaN: an empty row, named below
                raise c.bug("sparse_sees_future", f"For {what}:")
            if ((got > 0).sum(-1) > topk).any():  # more than topk keys for some query
                raise c.bug("sparse_keeps_wrong_count", f"For {what}:", topk=topk)
            ref = partial(sparse_reference, q, k, eye, idx, topk)
            bugs = [(bug, partial(ref, **{switch: 1})) for bug, switch in SPARSE_BUGS.items()]
            c.compare(got, ref(), f"For {what}, the weights:", bugs, detail={"topk": topk})
        backward(c, fn, (q, k, eye, idx, topk), SPARSE_ARGS, "qkv", what)
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
def shared_reference(x, layers, sources, heads, steps, reads=None, recompute=False, top_left=False):
    """(out, cache) in float64, the tokens arriving in steps ((lo, hi)), layer i reading the cache of
    reads[i] (default sources[i]), the queries the last positions of the keys (top_left: the first)."""
    ws = [{m: f64(t) for m, t in w.items()} for w in layers]
    x, reads, cache, outs = f64(x), reads or sources, {}, []
    for lo, hi in steps:
        y, n = x[:, lo:hi], hi - lo
        first = 0 if top_left else lo  # the position of the step's first query
        allowed = torch.arange(first, first + n)[:, None] >= torch.arange(hi)  # (n, hi)
        split = lambda t: t.view(x.shape[0], n, heads, -1).transpose(1, 2)
        for i, w in enumerate(ws):
            new = [split(y @ (ws[sources[i]] if recompute else w)[m].T) for m in ("w_k", "w_v")]
            cache[i] = [torch.cat(pair, 2) for pair in zip(cache[i], new)] if i in cache else new
            k, v = cache[i if recompute else reads[i]]  # (b, h, hi, hd) each
            attended = E.chapters().attend(split(y @ w["w_q"].T), k, v, allowed)  # (b, h, n, hd)
            y = y + attended.transpose(1, 2).reshape(y.shape) @ w["w_o"].T
        outs.append(y)
    return torch.cat(outs, 1), {i: kv for i, kv in cache.items() if sources[i] == i}


def _wrong(x, layers, s, heads, steps):
    """(bug, recompute): the newest cache, the source's previous, i-1's source; no sharing; keys
    recomputed with the source's weights; the queries aligned top left."""
    made, L = [j for j in range(len(s)) if s[j] == j], range(len(s))
    newest = [max(j for j in made if j <= i) for i in L]
    before = [s[i] if s[i] == i else max([j for j in made if j < s[i]] or [i]) for i in L]
    shifted = [s[i] if s[i] == i else s[i - 1] for i in L]
    ref = partial(shared_reference, x, layers, s, heads, steps)
    wrong = [("share_wrong_layer", partial(ref, r)) for r in (newest, before, shifted)]
    wrong += [("share_ignored", partial(ref, L)), ("share_recomputes_kv", partial(ref, None, 1))]
    return [*wrong, ("is_causal_top_left", partial(ref, top_left=True))]


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
            for steps in (((0, 6),), ((0, 3), (3, 4), (4, 6))):  # one pass; a prompt, two steps
                ref, ref_cache = shared_reference(x, layers, sources, heads, steps)
                bugs, cache = _wrong(x, layers, sources, heads, steps), None
                for lo, hi in steps:
                    args = (x[:, lo:hi], layers, list(sources), heads, cache)
                    got = call(c, fn, args, SHARE_ARGS, what, pair="share_cache_form")
                    if not isinstance(got[1], dict):
                        raise c.bug("share_cache_form", f"After {what}:", got=E.shown(got))
                    out, cache = c.expect_tensor_output(got[0], what, (b, hi - lo, d)), got[1]
                    where = f"For {what} on tokens {lo} to {hi - 1}:"
                    slices = [(bug, lambda f=f, a=lo, z=hi: f()[0][:, a:z]) for bug, f in bugs]
                    c.compare(f64(out), ref[:, lo:hi], where, slices)
                    keys = sorted(cache), sorted(ref_cache)
                    if keys[0] != keys[1]:
                        raise c.bug("share_cache_duplicated", where, got=keys[0], expected=keys[1])
                    want = torch.stack([torch.stack(ref_cache[i]) for i in keys[1]])[..., :hi, :]
                    stack = lambda: torch.stack([torch.stack([*cache[i]]) for i in keys[1]])
                    mine = c.call(stack, what="stacking your cache's (keys, values)").cpu().double()
                    c.compare(mine, want, f"After {what}, the caches (keys, values):")
            backward(c, fn, (x, layers, list(sources), heads), SHARE_ARGS, "x", what)
            whole = lambda *placed: fn(x, layers, list(sources), heads)  # x, layers placed
            E.probe_device(c, None, [x, *(t for w in layers for t in w.values())], what, fn=whole)
    c.passed(f"right on {len(SHARE_CASES)} maps, in one pass and step by step with its cache")
