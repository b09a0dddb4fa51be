"""Wrong answers to chapter 11's cross-layer KV-sharing exercise; each says where it comes from."""

from __future__ import annotations

import torch

from course_utils.chapters import attend, merge_heads, sliding_window_mask, split_heads


def _layers(x, layers, heads, cache, reads, makes, stored=None, top_left=False):
    """Layer i makes keys and values when makes(i), appends them to cache[i], reads cache[reads(i)];
    the returned cache keeps the layers of stored(i) (default: those that make their own)."""
    n, cache = x.shape[1], dict(cache or {})
    for i, w in enumerate(layers):
        if makes(i):
            k, v = (split_heads(x @ w[m].T, heads) for m in ("w_k", "w_v"))  # (b, h, n, hd) each
            if i in cache:
                k, v = torch.cat([cache[i][0], k], 2), torch.cat([cache[i][1], v], 2)
            cache[i] = (k, v)
        k, v = cache[reads(i)]  # (b, h, N, hd) each
        mask = sliding_window_mask(n, k.shape[2], k.shape[2], device=x.device)
        mask = torch.ones_like(mask).tril() if top_left else mask
        x = x + merge_heads(attend(split_heads(x @ w["w_q"].T, heads), k, v, mask)) @ w["w_o"].T
    keep = stored or makes
    return x, {i: kv for i, kv in cache.items() if keep(i)}


def newest_cache(x, layers, kv_source, heads, cache=None):
    """Every sharing layer reads the keys and values made last, as the loop of rasbt/LLMs-from-scratch
    ch04/10_kv-sharing/gpt_with_kv_sharing.py hands one `shared_kv` along (right for its layout,
    where all later layers share the last producing layer; wrong for any other map)."""
    made = [j for j, s in enumerate(kv_source) if s == j]
    newest = lambda i: max(j for j in made if j <= i)  # noqa: E731
    return _layers(x, layers, heads, cache, newest, lambda i: kv_source[i] == i)


def shifted_lookup(x, layers, kv_source, heads, cache=None):
    """Constructed: an off-by-one index into the map, kv_source[i - 1] for a sharing layer."""
    reads = lambda i: kv_source[i] if kv_source[i] == i else kv_source[i - 1]  # noqa: E731
    return _layers(x, layers, heads, cache, reads, lambda i: kv_source[i] == i)


def map_ignored(x, layers, kv_source, heads, cache=None):
    """Constructed: the plain stack, every layer its own keys and values (kv_source unused)."""
    return _layers(x, layers, heads, cache, lambda i: i, lambda i: True)


def shared_weights(x, layers, kv_source, heads, cache=None):
    """Constructed: a sharing layer projects its own input with its source's w_k and w_v (weights
    tied, mistaken for a shared cache)."""
    tied = [
        {**w, "w_k": layers[s]["w_k"], "w_v": layers[s]["w_v"]} for w, s in zip(layers, kv_source)
    ]
    return _layers(x, tied, heads, cache, lambda i: i, lambda i: True, lambda i: kv_source[i] == i)


def cache_copied(x, layers, kv_source, heads, cache=None):
    """Constructed: right outputs, but every sharing layer stores a copy of its source's cache."""
    out, made = _layers(
        x, layers, heads, cache, lambda i: kv_source[i], lambda i: kv_source[i] == i
    )
    return out, {i: made[s] for i, s in enumerate(kv_source)}


def cache_as_list(x, layers, kv_source, heads, cache=None):
    """Constructed: the caches returned as a list, one entry per layer (None for sharing layers)."""
    old = None if cache is None else {i: kv for i, kv in enumerate(cache) if kv is not None}
    out, made = _layers(x, layers, heads, old, lambda i: kv_source[i], lambda i: kv_source[i] == i)
    return out, [made.get(i) for i in range(len(layers))]


def mask_top_left(x, layers, kv_source, heads, cache=None):
    """Issue 38's trial: the square prompt's causal mask, ones(n, N).tril(), kept for cached steps,
    which aligns the queries top left (pytorch/pytorch#103082), as SDPA's is_causal=True does."""
    makes = lambda i: kv_source[i] == i  # noqa: E731
    return _layers(x, layers, heads, cache, lambda i: kv_source[i], makes, top_left=True)


SHARE_BUGS = [
    (newest_cache, "share_wrong_layer"),
    (shifted_lookup, "share_wrong_layer"),
    (map_ignored, "share_ignored"),
    (shared_weights, "share_recomputes_kv"),
    (cache_copied, "share_cache_duplicated"),
    (cache_as_list, "share_cache_form"),
    (mask_top_left, "is_causal_top_left"),
]
