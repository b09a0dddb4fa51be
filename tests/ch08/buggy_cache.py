"""Wrong answers to chapter 08's KV-cache exercise (attend_with_cache), each a mistake the checks must name; where each comes from is said beside it, as in buggy.py."""

from __future__ import annotations

import torch


# --------------------------------------------------------------------------- attend_with_cache
def _split(attn, t):
    b, m, _ = t.shape
    return t.view(b, m, attn.num_heads, attn.head_dim).transpose(1, 2)


def _finish(attn, weights, v, b, m, *, transpose=True, project=True):
    context = weights @ v
    context = context.transpose(1, 2).reshape(b, m, -1) if transpose else context.reshape(b, m, -1)
    return attn.out_proj(context) if project else context


def cache_right(attn, x_new, cache=None):
    b, m, _ = x_new.shape
    q, k, v = (_split(attn, w(x_new)) for w in (attn.W_query, attn.W_key, attn.W_value))
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    t = k.shape[2]
    scores = (q @ k.transpose(2, 3) / attn.head_dim**0.5).masked_fill(
        attn.mask[t - m : t, :t], float("-inf")
    )
    return _finish(attn, torch.softmax(scores, dim=-1), v, b, m), (k, v)


def cache_attend_then_append(attn, x_new, cache=None):
    """Slip: attend to the cache, then append the new key (the token never sees itself)."""
    b, m, _ = x_new.shape
    q, k, v = (_split(attn, w(x_new)) for w in (attn.W_query, attn.W_key, attn.W_value))
    if cache is None:
        scores = (q @ k.transpose(2, 3) / attn.head_dim**0.5).masked_fill(
            attn.mask[:m, :m], float("-inf")
        )
        return _finish(attn, torch.softmax(scores, dim=-1), v, b, m), (k, v)
    old_k, old_v = cache
    scores = q @ old_k.transpose(2, 3) / attn.head_dim**0.5
    out = _finish(attn, torch.softmax(scores, dim=-1), old_v, b, m)
    return out, (torch.cat([old_k, k], dim=2), torch.cat([old_v, v], dim=2))


def cache_only_new(attn, x_new, cache=None):
    """Slip: the cache returned is the new keys and values only."""
    out, (k, v) = cache_right(attn, x_new, cache)
    m = x_new.shape[1]
    return out, (k[:, :, -m:], v[:, :, -m:])


def cache_mask_top_left(attn, x_new, cache=None):
    """Real code: a causal mask sliced from the top left in cached decoding (pytorch/pytorch#103082
    describes SDPA's is_causal doing the same)."""
    b, m, _ = x_new.shape
    q, k, v = (_split(attn, w(x_new)) for w in (attn.W_query, attn.W_key, attn.W_value))
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    t = k.shape[2]
    scores = (q @ k.transpose(2, 3) / attn.head_dim**0.5).masked_fill(
        attn.mask[:m, :t], float("-inf")
    )
    return _finish(attn, torch.softmax(scores, dim=-1), v, b, m), (k, v)


def cache_mask_square(attn, x_new, cache=None):
    """Written to the pattern of a KV cache that cuts a square block attn.mask[past:t, past:t] for the new
    tokens: right for the prompt, a crash once cached tokens and several new ones meet."""
    b, m, _ = x_new.shape
    q, k, v = (_split(attn, w(x_new)) for w in (attn.W_query, attn.W_key, attn.W_value))
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    t = k.shape[2]
    scores = (q @ k.transpose(2, 3) / attn.head_dim**0.5).masked_fill(
        attn.mask[t - m : t, t - m : t], float("-inf")
    )
    return _finish(attn, torch.softmax(scores, dim=-1), v, b, m), (k, v)


def cache_mask_one_late(attn, x_new, cache=None):
    """Written to the pattern of a 1-based position counter: the mask's rows start at past + 1."""
    b, m, _ = x_new.shape
    q, k, v = (_split(attn, w(x_new)) for w in (attn.W_query, attn.W_key, attn.W_value))
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    t = k.shape[2]
    scores = (q @ k.transpose(2, 3) / attn.head_dim**0.5).masked_fill(
        attn.mask[t - m + 1 : t + 1, :t], float("-inf")
    )
    return _finish(attn, torch.softmax(scores, dim=-1), v, b, m), (k, v)


def cache_no_mask(attn, x_new, cache=None):
    """Real code: many minimal KV-cache tutorials skip the mask, right only one token at a time."""
    b, m, _ = x_new.shape
    q, k, v = (_split(attn, w(x_new)) for w in (attn.W_query, attn.W_key, attn.W_value))
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    scores = q @ k.transpose(2, 3) / attn.head_dim**0.5
    return _finish(attn, torch.softmax(scores, dim=-1), v, b, m), (k, v)


def cache_no_scale(attn, x_new, cache=None):
    """Slip: the scaling forgotten."""
    b, m, _ = x_new.shape
    q, k, v = (_split(attn, w(x_new)) for w in (attn.W_query, attn.W_key, attn.W_value))
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    t = k.shape[2]
    scores = (q @ k.transpose(2, 3)).masked_fill(attn.mask[t - m : t, :t], float("-inf"))
    return _finish(attn, torch.softmax(scores, dim=-1), v, b, m), (k, v)


def cache_values_from_keys(attn, x_new, cache=None):
    """Slip: copy-paste, W_key twice."""
    b, m, _ = x_new.shape
    q, k, v = (_split(attn, w(x_new)) for w in (attn.W_query, attn.W_key, attn.W_key))
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    t = k.shape[2]
    scores = (q @ k.transpose(2, 3) / attn.head_dim**0.5).masked_fill(
        attn.mask[t - m : t, :t], float("-inf")
    )
    return _finish(attn, torch.softmax(scores, dim=-1), v, b, m), (k, v)


def cache_interleaved(attn, x_new, cache=None):
    """Real code: heads merged without the transpose (raised for chapter 05 in issue 11)."""
    b, m, _ = x_new.shape
    q, k, v = (_split(attn, w(x_new)) for w in (attn.W_query, attn.W_key, attn.W_value))
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    t = k.shape[2]
    scores = (q @ k.transpose(2, 3) / attn.head_dim**0.5).masked_fill(
        attn.mask[t - m : t, :t], float("-inf")
    )
    return _finish(attn, torch.softmax(scores, dim=-1), v, b, m, transpose=False), (k, v)


def cache_no_out_proj(attn, x_new, cache=None):
    """Slip: out_proj forgotten."""
    b, m, _ = x_new.shape
    q, k, v = (_split(attn, w(x_new)) for w in (attn.W_query, attn.W_key, attn.W_value))
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    t = k.shape[2]
    scores = (q @ k.transpose(2, 3) / attn.head_dim**0.5).masked_fill(
        attn.mask[t - m : t, :t], float("-inf")
    )
    return _finish(attn, torch.softmax(scores, dim=-1), v, b, m, project=False), (k, v)


def cache_of_inputs(attn, x_new, cache=None):
    """Slip: caches the input vectors and re-projects them all: right numbers, no saving."""
    x_all = x_new if cache is None else torch.cat([cache, x_new], dim=1)
    m = x_new.shape[1]
    return attn(x_all)[:, -m:], x_all


def cache_returns_output_only(attn, x_new, cache=None):
    """Slip: the function returns the output and keeps the cache to itself."""
    return cache_right(attn, x_new, cache)[0]


def cache_mask_times_inf(attn, x_new, cache=None):
    """Slip: an additive mask made as mask.float() * -inf: 0 * -inf is NaN at every visible position."""
    b, m, _ = x_new.shape
    q, k, v = (_split(attn, w(x_new)) for w in (attn.W_query, attn.W_key, attn.W_value))
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    t = k.shape[2]
    scores = q @ k.transpose(2, 3) / attn.head_dim**0.5 + attn.mask[t - m : t, :t].float() * float(
        "-inf"
    )
    return _finish(attn, torch.softmax(scores, dim=-1), v, b, m), (k, v)


def cache_half(attn, x_new, cache=None):
    """Slip: keys and values stored in float16 "to save memory"."""
    old = None if cache is None else (cache[0].float(), cache[1].float())
    out, (k, v) = cache_right(attn, x_new, old)
    return out, (k.half(), v.half())


def cache_softmax_eps(attn, x_new, cache=None):
    """Slip: a softmax written by hand with + 1e-4 in the denominator "for stability" (outputs off by
    less than 1e-4: once crashed the check's report of the first differing token)."""
    b, m, _ = x_new.shape
    q, k, v = (_split(attn, w(x_new)) for w in (attn.W_query, attn.W_key, attn.W_value))
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    t = k.shape[2]
    scores = (q @ k.transpose(2, 3) / attn.head_dim**0.5).masked_fill(
        attn.mask[t - m : t, :t], float("-inf")
    )
    e = (scores - scores.amax(-1, keepdim=True)).exp()
    return _finish(attn, e / (e.sum(-1, keepdim=True) + 1e-4), v, b, m), (k, v)


def cache_on_layer(attn, x_new, cache=None):
    """Real code: the KV cache kept on the layer (LLMs-from-scratch's KV-cache bonus keeps cache_k on the
    module and needs reset_kv_cache() between texts); here the reset is missing and the argument ignored."""
    past = getattr(attn, "_kv", None)
    out, attn._kv = cache_right(attn, x_new, past)
    return out, attn._kv


def cache_cpu_mask(attn, x_new, cache=None):
    """Slip: the mask rebuilt with torch.ones(m, t) without device=: right on the CPU, crashes on a GPU."""
    b, m, _ = x_new.shape
    q, k, v = (_split(attn, w(x_new)) for w in (attn.W_query, attn.W_key, attn.W_value))
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    t = k.shape[2]
    hidden = torch.ones(m, t, dtype=torch.bool).triu(t - m + 1)
    scores = (q @ k.transpose(2, 3) / attn.head_dim**0.5).masked_fill(hidden, float("-inf"))
    return _finish(attn, torch.softmax(scores, dim=-1), v, b, m), (k, v)


def cache_no_qkv_bias(attn, x_new, cache=None):
    """Slip: projections written as x @ layer.weight.T, which drops the biases of a qkv_bias=True layer."""
    b, m, _ = x_new.shape
    q, k, v = (_split(attn, x_new @ w.weight.T) for w in (attn.W_query, attn.W_key, attn.W_value))
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    t = k.shape[2]
    scores = (q @ k.transpose(2, 3) / attn.head_dim**0.5).masked_fill(
        attn.mask[t - m : t, :t], float("-inf")
    )
    return _finish(attn, torch.softmax(scores, dim=-1), v, b, m), (k, v)


def cache_stub(attn, x_new, cache=None):
    raise NotImplementedError()
