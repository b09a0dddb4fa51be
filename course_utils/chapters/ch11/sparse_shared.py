"""Chapter 11's checks of sparse attention (top-k keys per query) and of cross-layer KV sharing
(``check_sparse_attention``, ``check_shared_kv_forward``, re-exported by ``checks.py``)."""

from __future__ import annotations

import math

import torch

from course_utils.checks import _engine as E


# --------------------------------------------------------------------------- sparse attention
def sparse_reference(q, k, v, index, topk, over_future=False, by_scores=False, top_left=False):
    """Top-k sparse attention in float64 on the CPU; the switches reproduce SPARSE_BUGS."""
    q, k, v, index = (t.detach().cpu().double() for t in (q, k, v, index))
    n, N = q.shape[-2], k.shape[-2]
    first = 0 if top_left else N - n
    causal = torch.arange(first, first + n)[:, None] >= torch.arange(N)  # (n, N)
    scores = q @ k.mT / math.sqrt(q.shape[-1])  # (b, h, n, N)
    rank = scores if by_scores else index[:, None].expand_as(scores)
    rank = rank if over_future else rank.masked_fill(~causal, -torch.inf)
    chosen = rank.topk(min(topk, N), dim=-1).indices  # (b, h, n, k)
    keep = torch.zeros_like(scores, dtype=torch.bool).scatter(-1, chosen, True) & causal
    return torch.softmax(scores.masked_fill(~keep, -torch.inf), dim=-1) @ v  # (b, h, n, dv)


SPARSE_BUGS = (
    ("sparse_topk_over_future", {"over_future": True}),
    ("sparse_selects_by_attention", {"by_scores": True}),
    ("sparse_queries_top_left", {"top_left": True}),
)
# (b, h, n queries, N keys, dk, topk, seed): a prompt, the last queries of a cache, k = 1, k = N
SPARSE_CASES = ((2, 2, 8, 8, 4, 3, 1401), (1, 3, 3, 9, 4, 4, 1402), (2, 1, 7, 7, 3, 1, 1403))
SPARSE_CASES += ((1, 2, 6, 6, 5, 6, 1404),)


def check_sparse_attention(fn) -> None:
    """Check ``sparse_attention(q, k, v, index_scores, topk)``: top-k keys per query, causal."""
    __tracebackhide__ = True
    c = E.Check("check_sparse_attention")
    c.ensure_callable(fn, "a function sparse_attention(q, k, v, index_scores, topk)")
    with E.isolated():
        for b, h, n, N, dk, topk, seed in SPARSE_CASES:
            q, k = E.randn(b, h, n, dk, seed=seed), E.randn(b, h, N, dk, seed=seed + 1)
            idx = E.randn(b, n, N, seed=seed + 2)  # index scores without ties
            eye = torch.eye(N).expand(b, h, N, N)  # one-hot values: the output is the weights
            what = (
                f"sparse_attention(q, k, v, index_scores, topk={topk}) with {n} queries, {N} keys"
            )
            got = c.call_pure(fn, (q, k, eye, idx), topk, what=what)
            weights = c.expect_tensor_output(got, what, (b, h, n, N)).detach().cpu().double()
            future = torch.arange(N - n, N)[:, None] < torch.arange(N)  # (n, N)
            if (weights[..., future].nan_to_num(0) != 0).any():  # NaN: an empty row, named below
                raise c.bug("sparse_sees_future", f"For {what}:")
            if ((weights > 0).sum(-1) > topk).any():  # more than topk keys for some query
                raise c.bug("sparse_keeps_wrong_count", f"For {what}:", topk=topk)
            make = [
                (bug, lambda s=s: sparse_reference(q, k, eye, idx, topk, **s))
                for bug, s in SPARSE_BUGS
            ]
            if topk > 1:
                make.append(
                    ("sparse_keeps_wrong_count", lambda: sparse_reference(q, k, eye, idx, topk - 1))
                )
            ref = sparse_reference(q, k, eye, idx, topk)
            c.compare(weights, ref, f"For {what}, the weights:", make, detail={"topk": topk})
            v = E.randn(b, h, N, 5, seed=seed + 3)
            got = c.call_pure(fn, (q, k, v, idx), topk, what=what)
            c.compare(
                c.expect_tensor_output(got, what, (b, h, n, 5)).detach().cpu().double(),
                sparse_reference(q, k, v, idx, topk),
                f"For {what}:",
            )
        # ties at the k-th score between keys 1 and 4, which have equal keys and values
        q, k, v = (
            E.randn(1, 2, 6, 4, seed=1405),
            E.randn(1, 2, 6, 4, seed=1406),
            E.randn(1, 2, 6, 3, seed=1407),
        )
        k[..., 4, :], v[..., 4, :] = k[..., 1, :], v[..., 1, :]
        idx = torch.tensor([5.0, 2.0, 0.0, 3.0, 2.0, 1.0]).expand(1, 6, 6)
        got = c.call_pure(fn, (q, k, v, idx), 3, what="sparse_attention with tied index scores")
        c.compare(
            got.detach().cpu().double(),
            sparse_reference(q, k, v, idx, 3),
            "With two keys tied at the 3rd score:",
        )
        E.probe_device(
            c, None, [q, k, v, idx], "For inputs on another device:", fn=lambda *t: fn(*t, 2)
        )
    c.passed(
        f"right on {len(SPARSE_CASES)} shapes and a tie: at most k earlier keys, the top k of the index"
    )


# --------------------------------------------------------------------------- KV sharing
def shared_reference(x, layers, sources, heads, cache=None, reads=None, recompute=False):
    """Layers that read the cache of layer ``reads[i]`` (default ``sources``), in float64 on the
    CPU; returns (out, cache). ``recompute``: a sharing layer projects its own input with its
    source's weights. Switches reproduce the mistakes of ``_wrong_reads``."""
    ws = [{m: t.detach().cpu().double() for m, t in w.items()} for w in layers]
    x, reads, cache = x.detach().cpu().double(), reads or sources, dict(cache or {})
    b, n, d = x.shape
    split = lambda t: t.view(b, n, heads, d // heads).transpose(1, 2)  # noqa: E731
    for i, w in enumerate(ws):
        src = ws[sources[i]] if recompute else w
        k, v = (split(x @ src[m].T) for m in ("w_k", "w_v"))  # (b, h, n, hd) each
        if i in (sources[i], reads[i]) or recompute:
            old = cache.get(i)
            cache[i] = (
                (k, v) if old is None else (torch.cat([old[0], k], 2), torch.cat([old[1], v], 2))
            )
        k, v = cache[i if recompute else reads[i]]  # (b, h, N, hd) each
        N = k.shape[2]
        allowed = torch.arange(N - n, N)[:, None] >= torch.arange(N)  # (n, N)
        scores = (split(x @ w["w_q"].T) @ k.mT / math.sqrt(d // heads)).masked_fill(
            ~allowed, -torch.inf
        )
        x = x + (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(b, n, d) @ w["w_o"].T
    return x, {i: kv for i, kv in cache.items() if sources[i] == i}


def _wrong_reads(sources):
    """(bug, reads): no sharing, the newest cache, the source's previous producer, layer i-1's source."""
    made = [j for j, s in enumerate(sources) if s == j]
    newest = [max(j for j in made if j <= i) for i in range(len(sources))]
    before = [
        s if s == i else max([j for j in made if j < s] or [s]) for i, s in enumerate(sources)
    ]
    shifted = [s if s == i else sources[i - 1] for i, s in enumerate(sources)]
    return [("share_ignored", list(range(len(sources))))] + [
        ("share_wrong_layer", r) for r in (newest, before, shifted) if r != list(sources)
    ]


SHARE_CASES = (
    (2, 8, 2, (0, 0, 2, 2), 1501),
    (1, 12, 3, (0, 1, 2, 2, 2), 1502),
    (2, 8, 2, (0, 1, 2, 1, 2), 1503),
)


def check_shared_kv_forward(fn) -> None:
    """Check ``shared_kv_forward(x, layers, kv_source, heads, cache=None) -> (out, cache)``."""
    __tracebackhide__ = True
    c = E.Check("check_shared_kv_forward")
    c.ensure_callable(fn, "a function shared_kv_forward(x, layers, kv_source, heads, cache=None)")
    with E.isolated():
        for b, d, heads, sources, seed in SHARE_CASES:
            layers = E.chapters().stack_weights(d, len(sources), seed=seed)
            x = E.randn(b, 6, d, seed=seed + 1)  # (b, 6, d)
            what = f"shared_kv_forward(x, layers, kv_source={list(sources)}, heads={heads})"
            cache = None
            for lo, hi in ((0, 6), (0, 3), (3, 4), (4, 6)):
                got = c.call_pure(
                    fn,
                    (x[:, lo:hi],),
                    layers,
                    list(sources),
                    heads,
                    cache if lo else None,
                    what=what,
                )
                if not (
                    isinstance(got, (tuple, list)) and len(got) == 2 and isinstance(got[1], dict)
                ):
                    raise c.bug("share_cache_form", f"After {what}:", got=E.shown(got))
                ref, ref_cache = shared_reference(x[:, :hi], layers, sources, heads)
                out, cache = (
                    c.expect_tensor_output(got[0], what, (b, hi - lo, d)).detach().cpu().double(),
                    got[1],
                )
                wrong = [
                    (bug, lambda r=r: shared_reference(x, layers, sources, heads, reads=r)[0])
                    for bug, r in _wrong_reads(sources)
                ]
                wrong.append(
                    (
                        "share_recomputes_kv",
                        lambda: shared_reference(x, layers, sources, heads, recompute=True)[0],
                    )
                )
                c.compare(
                    out,
                    ref[:, lo:hi],
                    f"For {what} on tokens {lo} to {hi - 1}:",
                    wrong if hi - lo == 6 else (),
                )
                if sorted(cache) != sorted(ref_cache):
                    raise c.bug(
                        "share_cache_duplicated",
                        f"After {what}:",
                        got=sorted(cache),
                        expected=sorted(ref_cache),
                    )
                for i, (k, v) in ref_cache.items():
                    c.compare(
                        torch.stack([t.detach().cpu().double() for t in cache[i]]),
                        torch.stack([k, v]),
                        f"After {what}, cache[{i}] (keys, values):",
                    )
            flat = [t for w in layers for t in w.values()]
            rebuild = lambda x, *t: fn(
                x,
                [dict(zip(layers[0], t[i : i + 4])) for i in range(0, len(t), 4)],
                list(sources),
                heads,
            )  # noqa: E731
            E.probe_device(c, None, [x, *flat], f"For {what}, on another device:", fn=rebuild)
    c.passed(
        f"right on {len(SHARE_CASES)} sharing patterns, in one pass and step by step with its cache"
    )
