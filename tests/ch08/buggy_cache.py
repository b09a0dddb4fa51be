"""Wrong answers to chapter 08's KV-cache exercise (attend_with_cache), each a mistake the checks must name; where each comes from is said beside it, as in buggy.py.

The steps every answer shares are written once (:func:`_attend`); each answer shows only the part
its mistake is in: a mask, a switch of :func:`_attend`, or its own code where the mistake changes
the steps themselves."""

from __future__ import annotations

import torch


# --------------------------------------------------------------------------- the shared steps
def _split(attn, t):  # (b, m, d_out) -> (b, h, m, hd)
    b, m, _ = t.shape
    return t.view(b, m, attn.num_heads, attn.head_dim).transpose(1, 2)


def _project(attn, x_new, cache, layers=None, linear=None):
    """q of the new tokens; k and v of every token so far, the cache's in front: (b, h, ., hd).
    ``layers``: the three projections (default W_query, W_key, W_value); ``linear(layer, x)``: how
    one is applied (default ``layer(x)``)."""
    layers = layers or (attn.W_query, attn.W_key, attn.W_value)
    q, k, v = (_split(attn, linear(w, x_new) if linear else w(x_new)) for w in layers)
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    return q, k, v


def _finish(attn, weights, v, *, transpose=True, project=True):
    """weights @ v with the heads merged, through out_proj: (b, m, d_out)."""
    context = weights @ v  # (b, h, m, hd)
    b, _, m, _ = context.shape
    context = context.transpose(1, 2).reshape(b, m, -1) if transpose else context.reshape(b, m, -1)
    return attn.out_proj(context) if project else context


def _right_mask(attn, m, t):
    """The (m, t) positions hidden from m new tokens, the last of t: rows t - m .. t - 1 of attn.mask."""
    return attn.mask[t - m : t, :t]


def _attend(
    attn,
    x_new,
    cache,
    *,
    hidden=_right_mask,
    scale=True,
    softmax=torch.softmax,
    layers=None,
    linear=None,
    transpose=True,
    project=True,
):
    """(output, (k, v)), every switch defaulting to the right step: project (``layers``, ``linear``:
    see :func:`_project`), scale the scores by 1/sqrt(hd) (``scale``), set the positions of
    ``hidden(attn, m, t)`` (an (m, t) bool mask; None: none) to -inf, ``softmax(scores, dim=-1)``,
    merge the heads (``transpose``, ``project``: see :func:`_finish`)."""
    q, k, v = _project(attn, x_new, cache, layers, linear)
    scores = q @ k.transpose(2, 3)  # (b, h, m, t)
    if scale:
        scores = scores / attn.head_dim**0.5
    if hidden is not None:
        m, t = scores.shape[-2:]
        scores = scores.masked_fill(hidden(attn, m, t), float("-inf"))
    weights = softmax(scores, dim=-1)
    return _finish(attn, weights, v, transpose=transpose, project=project), (k, v)


# --------------------------------------------------------------------------- attend_with_cache
def cache_right(attn, x_new, cache=None):
    return _attend(attn, x_new, cache)


def cache_attend_then_append(attn, x_new, cache=None):
    """Slip: attend to the cache, then append the new key (the token never sees itself)."""
    if cache is None:
        return cache_right(attn, x_new)
    q, k, v = _project(attn, x_new, None)
    old_k, old_v = cache
    scores = q @ old_k.transpose(2, 3) / attn.head_dim**0.5
    out = _finish(attn, torch.softmax(scores, dim=-1), old_v)
    return out, (torch.cat([old_k, k], dim=2), torch.cat([old_v, v], dim=2))


def cache_only_new(attn, x_new, cache=None):
    """Slip: the cache returned is the new keys and values only."""
    out, (k, v) = cache_right(attn, x_new, cache)
    m = x_new.shape[1]
    return out, (k[:, :, -m:], v[:, :, -m:])


def cache_mask_top_left(attn, x_new, cache=None):
    """Real code: a causal mask sliced from the top left in cached decoding (pytorch/pytorch#103082
    describes SDPA's is_causal doing the same)."""
    return _attend(attn, x_new, cache, hidden=lambda attn, m, t: attn.mask[:m, :t])


def cache_mask_square(attn, x_new, cache=None):
    """Written to the pattern of a KV cache that cuts a square block attn.mask[past:t, past:t] for the new
    tokens: right for the prompt, a crash once cached tokens and several new ones meet."""
    return _attend(attn, x_new, cache, hidden=lambda attn, m, t: attn.mask[t - m : t, t - m : t])


def cache_mask_one_late(attn, x_new, cache=None):
    """Written to the pattern of a 1-based position counter: the mask's rows start at past + 1."""
    return _attend(attn, x_new, cache, hidden=lambda attn, m, t: attn.mask[t - m + 1 : t + 1, :t])


def cache_no_mask(attn, x_new, cache=None):
    """Real code: many minimal KV-cache tutorials skip the mask, right only one token at a time."""
    return _attend(attn, x_new, cache, hidden=None)


def cache_no_scale(attn, x_new, cache=None):
    """Slip: the scaling forgotten."""
    return _attend(attn, x_new, cache, scale=False)


def cache_values_from_keys(attn, x_new, cache=None):
    """Slip: copy-paste, W_key twice."""
    layers = (attn.W_query, attn.W_key, attn.W_key)
    return _attend(attn, x_new, cache, layers=layers)


def cache_interleaved(attn, x_new, cache=None):
    """Real code: heads merged without the transpose (raised for chapter 05 in issue 11)."""
    return _attend(attn, x_new, cache, transpose=False)


def cache_no_out_proj(attn, x_new, cache=None):
    """Slip: out_proj forgotten."""
    return _attend(attn, x_new, cache, project=False)


def cache_of_inputs(attn, x_new, cache=None):
    """Slip: caches the input vectors and re-projects them all: right numbers, no saving."""
    x_all = x_new if cache is None else torch.cat([cache, x_new], dim=1)
    m = x_new.shape[1]
    return attn(x_all)[:, -m:], x_all


def cache_values_of_inputs(attn, x_new, cache=None):
    """Written to the pattern of cache_of_inputs, for the values alone: the keys are cached, but the
    inputs are kept in place of the values, which are projected again for every token."""
    if cache is None:
        out, (k, _) = cache_right(attn, x_new)
        return out, (k, x_new)
    old_k, x_old = cache
    out, (k, _) = _attend(attn, x_new, (old_k, _split(attn, attn.W_value(x_old))))
    return out, (k, torch.cat([x_old, x_new], dim=1))


def cache_returns_output_only(attn, x_new, cache=None):
    """Slip: the function returns the output and keeps the cache to itself."""
    return cache_right(attn, x_new, cache)[0]


def cache_mask_times_inf(attn, x_new, cache=None):
    """Slip: an additive mask made as mask.float() * -inf: 0 * -inf is NaN at every visible position."""
    q, k, v = _project(attn, x_new, cache)
    m, t = q.shape[2], k.shape[2]
    additive = _right_mask(attn, m, t).float() * float("-inf")
    scores = q @ k.transpose(2, 3) / attn.head_dim**0.5 + additive
    return _finish(attn, torch.softmax(scores, dim=-1), v), (k, v)


def cache_half(attn, x_new, cache=None):
    """Slip: keys and values stored in float16 "to save memory"."""
    old = None if cache is None else (cache[0].float(), cache[1].float())
    out, (k, v) = cache_right(attn, x_new, old)
    return out, (k.half(), v.half())


def cache_softmax_eps(attn, x_new, cache=None):
    """Slip: a softmax written by hand with + 1e-4 in the denominator "for stability" (outputs off by
    less than 1e-4: once crashed the check's report of the first differing token)."""

    def softmax(scores, dim):
        e = (scores - scores.amax(dim, keepdim=True)).exp()
        return e / (e.sum(dim, keepdim=True) + 1e-4)

    return _attend(attn, x_new, cache, softmax=softmax)


def cache_on_layer(attn, x_new, cache=None):
    """Real code: the KV cache kept on the layer (LLMs-from-scratch's KV-cache bonus keeps cache_k on the
    module and needs reset_kv_cache() between texts); here the reset is missing and the argument ignored."""
    past = getattr(attn, "_kv", None)
    out, attn._kv = cache_right(attn, x_new, past)
    return out, attn._kv


def cache_cpu_mask(attn, x_new, cache=None):
    """Slip: the mask rebuilt with torch.ones(m, t) without device=: right on the CPU, crashes on a GPU."""

    def hidden(attn, m, t):
        return torch.ones(m, t, dtype=torch.bool).triu(t - m + 1)

    return _attend(attn, x_new, cache, hidden=hidden)


def cache_no_qkv_bias(attn, x_new, cache=None):
    """Slip: projections written as x @ layer.weight.T, which drops the biases of a qkv_bias=True layer."""
    return _attend(attn, x_new, cache, linear=lambda layer, x: x @ layer.weight.T)
