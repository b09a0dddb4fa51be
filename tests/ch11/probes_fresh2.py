"""Grader probes of the second fresh set: wrong answers built to slip past one kind of probe each
(a second call, training, another device, the caller's tensors, extreme and short inputs, float64),
and bad things handed to the checks themselves. Each starts from a right answer of
``correct_fresh2.py`` and changes one thing a student plausibly would; the verdicts and what the
checks said: ``cases_fresh2.py``."""

import torch

import course_utils as cu
from tests.ch11 import correct_fresh2 as ok

sliding_window_mask = cu.chapters.sliding_window_mask
split_heads = cu.chapters.split_heads
merge_heads = cu.chapters.merge_heads
attend = cu.chapters.attend
feature_map = cu.chapters.feature_map

_MEMO = {}


def _memo_by_shape(name, fn):
    """A result cached by the inputs' shapes, dtype and device (a "speed-up" a student adds after
    noticing the proof cells call the function twice on the same input): a second text of the same
    shape gets the first text's answer."""

    def wrapped(*args, **kwargs):
        tensors = [a for a in args if torch.is_tensor(a)]
        key = (name, tuple((t.shape, t.dtype, str(t.device)) for t in tensors))
        if key not in _MEMO:
            _MEMO[key] = fn(*args, **kwargs)
        return _MEMO[key]

    wrapped.__name__ = fn.__name__
    return wrapped


probe_mla_memo = _memo_by_shape("mla", ok.mla_concatenated_heads)
probe_absorbed_memo = _memo_by_shape("absorbed", ok.mla_absorbed_einsum)
probe_chunked_memo = _memo_by_shape("chunked", ok.linear_chunked_cumsum)
probe_sparse_memo = _memo_by_shape("sparse", ok.sparse_one_hot_gather)
probe_shared_memo = _memo_by_shape("shared", ok.shared_kv_handed_along)


def probe_sparse_scores_masked_in_place(q, k, v, index_scores, topk):
    """The future hidden with ``index_scores.masked_fill_(...)``: the caller's index scores changed."""
    n, N = q.shape[-2], k.shape[-2]
    causal = sliding_window_mask(n, N, N, device=q.device)
    index_scores.masked_fill_(~causal, -torch.inf)
    chosen = index_scores.sort(dim=-1, descending=True, stable=True).indices[..., : min(topk, N)]
    keep = torch.zeros_like(index_scores, dtype=torch.bool).scatter(-1, chosen, True) & causal
    return attend(q, k, v, keep[:, None])


def probe_shared_cache_dict_updated(x, layers, kv_source, heads, cache=None):
    """The dict handed in updated in place (``cache[i] = ...`` without a copy): the caller's cache
    of the previous step now holds this step's tokens too."""
    n = x.shape[1]
    cache = {} if cache is None else cache
    for i, w in enumerate(layers):
        q = split_heads(x @ w["w_q"].T, heads)
        if kv_source[i] == i:
            k, v = split_heads(x @ w["w_k"].T, heads), split_heads(x @ w["w_v"].T, heads)
            if i in cache:
                k, v = torch.cat([cache[i][0], k], 2), torch.cat([cache[i][1], v], 2)
            cache[i] = (k, v)
        k, v = cache[kv_source[i]]
        allowed = sliding_window_mask(n, k.shape[2], k.shape[2], device=x.device)
        x = x + merge_heads(attend(q, k, v, allowed)) @ w["w_o"].T
    return x, cache


def probe_delta_state_detached(q, k, v, alpha, beta, state=None):
    """The memory detached between tokens (``S = S.detach()``, truncated backpropagation): the
    outputs right, the gradients through the memory cut."""
    out, _ = ok.delta_rule_k_major(q, k, v, alpha, beta, state)
    b, h, n, dk = k.shape
    S = k.new_zeros(b, h, v.shape[-1], dk) if state is None else state
    outs = []
    for t in range(n):
        kt, vt = k[:, :, t], v[:, :, t]
        S = alpha[:, :, t, None, None] * S
        error = vt - (S @ kt[..., None]).squeeze(-1)
        S = S + beta[:, :, t, None, None] * error[..., None] * kt[:, :, None, :]
        outs.append((S @ q[:, :, t, :, None]).squeeze(-1))
        S = S.detach()
    return torch.stack(outs, dim=2), S


def probe_chunked_no_grad_state(q, k, v, chunk):
    """The carried state updated under ``torch.no_grad()`` ("it is only a running sum")."""
    b, h, n, dk = q.shape
    fq, fk = feature_map(q), feature_map(k)
    S, z = q.new_zeros(b, h, dk, v.shape[-1]), q.new_zeros(b, h, dk)
    outs = []
    for lo in range(0, n, chunk):
        hi = min(lo + chunk, n)
        cq, ck, cv = fq[:, :, lo:hi], fk[:, :, lo:hi], v[:, :, lo:hi]
        scores = (cq @ ck.mT).tril()
        outs.append((scores @ cv + cq @ S) / (scores.sum(-1, keepdim=True) + cq @ z[..., None]))
        with torch.no_grad():
            S, z = S + ck.mT @ cv, z + ck.sum(2)
    return torch.cat(outs, dim=2)


def probe_kv_bytes_float(layout, context, batch=1, bytes_per_value=2):
    """The bytes as a float (``/ 8 * bits`` style arithmetic), right in value."""
    return float(ok.kv_bytes_per_layer_loop(layout, context, batch, bytes_per_value))


def probe_kv_bytes_gib(layout, context, batch=1, bytes_per_value=2):
    """The count returned in GiB, as most calculators print it."""
    return ok.kv_bytes_per_layer_loop(layout, context, batch, bytes_per_value) / 2**30


def probe_linear_state_float32(q, k, v, state=None):
    """The state kept in float32 whatever the inputs (``dtype=torch.float32`` for "stability"), the
    outputs cast back: float64 inputs lose precision."""
    out, (S, z) = ok.linear_recurrent_cumsum(q.float(), k.float(), v.float(), None)
    if state is not None:
        out, (S, z) = ok.linear_recurrent_cumsum(
            q.float(), k.float(), v.float(), (state[0].float(), state[1].float())
        )
    return out.to(q.dtype), (S, z)


CHECK = {
    "probe_mla_memo": "check_mla_attention",
    "probe_absorbed_memo": "check_mla_absorbed",
    "probe_chunked_memo": "check_linear_attention_chunked",
    "probe_sparse_memo": "check_sparse_attention",
    "probe_shared_memo": "check_shared_kv_forward",
    "probe_sparse_scores_masked_in_place": "check_sparse_attention",
    "probe_shared_cache_dict_updated": "check_shared_kv_forward",
    "probe_delta_state_detached": "check_gated_delta_rule",
    "probe_chunked_no_grad_state": "check_linear_attention_chunked",
    "probe_kv_bytes_float": "check_kv_cache_bytes",
    "probe_kv_bytes_gib": "check_kv_cache_bytes",
    "probe_linear_state_float32": "check_linear_attention_recurrent",
}
