"""Right but unusual answers to chapter 11's exercises, written the way real code writes them
(second fresh set; the source in each docstring). Every one must pass its self-check."""

import math

import torch
import torch.nn.functional as F

import course_utils as cu

apply_rope = cu.chapters.apply_rope
sliding_window_mask = cu.chapters.sliding_window_mask
split_heads = cu.chapters.split_heads
merge_heads = cu.chapters.merge_heads
feature_map = cu.chapters.feature_map


def kv_bytes_per_layer_loop(layout, context, batch=1, bytes_per_value=2):
    """EricLBuehler/mistral.rs, mistralrs-core/src/paged_attention/config.rs: the numbers per token
    from the cache layout (``KvCacheLayout::Mla { kv_lora_rank, kpe_head_dim } => kv_lora_rank +
    kpe_head_dim``, else ``2 * num_kv_heads * head_dim``), then summed over a per-layer list of the
    caches, windowed ones first (as a layer_types list would give them)."""
    if layout.latent_dim:
        elements = layout.latent_dim + layout.rope_dim
    else:
        elements = 2 * layout.kv_heads * layout.head_dim
    caches = layout.layers // layout.layers_per_cache
    kinds = ["sliding"] * layout.windowed_caches + ["full"] * (caches - layout.windowed_caches)
    total = 0
    for kind in kinds:
        tokens = min(context, layout.window) if kind == "sliding" else context
        total += tokens * elements * bytes_per_value * batch
    return total


def mla_concatenated_heads(x, w, cache=None):
    """huggingface/nanotron, PR #278 "Add MLA" (and the junfanz1 MLA file): the rotary and plain
    parts concatenated, ``q = torch.cat([q_nope, q_pe])``, ``k = torch.cat([k_nope,
    k_pe.expand(...)])``, one product scaled by the concatenated width, an additive -inf mask."""
    b, n, _ = x.shape
    h, hd, dr = w.heads, w.head_dim, w.rope_dim
    past = 0 if cache is None else cache[0].shape[1]
    pos = torch.arange(past, past + n, device=x.device)
    compressed = x @ w.w_dkv.T
    k_pe = apply_rope(x @ w.w_kr.T, pos)
    if cache is not None:
        compressed = torch.cat((cache[0], compressed), dim=1)
        k_pe = torch.cat((cache[1], k_pe), dim=1)
    N = compressed.shape[1]
    q_nope = split_heads(x @ w.w_q.T, h)
    q_pe = apply_rope(split_heads(x @ w.w_qr.T, h), pos)
    k_nope = split_heads(compressed @ w.w_uk.T, h)
    value = split_heads(compressed @ w.w_uv.T, h)
    query = torch.cat([q_nope, q_pe], dim=-1)
    key = torch.cat([k_nope, k_pe.unsqueeze(1).expand(-1, h, -1, -1)], dim=-1)
    bias = torch.zeros(n, N, dtype=x.dtype, device=x.device)
    bias = bias.masked_fill(~sliding_window_mask(n, N, N, device=x.device), float("-inf"))
    scores = query @ key.transpose(-1, -2) * (hd + dr) ** -0.5 + bias
    out = merge_heads(scores.softmax(dim=-1) @ value)
    return out @ w.w_o.T, (compressed, k_pe)


def mla_absorbed_einsum(x, w, cache=None):
    """flashinfer-ai/flashinfer PR #551 (MLA decode, the reference vLLM PR #12528 cites): scores in
    the latent space as two einsums, ``q_nope`` absorbed per head, ``q_pe`` against the shared
    rotary keys; the output up-projected per head after the weighting."""
    b, n, _ = x.shape
    h, hd, dr, dc = w.heads, w.head_dim, w.rope_dim, w.latent_dim
    past = 0 if cache is None else cache[0].shape[1]
    pos = torch.arange(past, past + n, device=x.device)
    ckv = x @ w.w_dkv.T
    kpe = apply_rope(x @ w.w_kr.T, pos)
    if cache is not None:
        ckv, kpe = torch.cat([cache[0], ckv], 1), torch.cat([cache[1], kpe], 1)
    N = ckv.shape[1]
    q_nope = (x @ w.w_q.T).view(b, n, h, hd)
    q_pe = apply_rope((x @ w.w_qr.T).view(b, n, h, dr).transpose(1, 2), pos)  # (b, h, n, dr)
    w_uk, w_uv = w.w_uk.view(h, hd, dc), w.w_uv.view(h, hd, dc)
    q_abs = torch.einsum("bnhd,hdc->bhnc", q_nope, w_uk)
    scores = torch.einsum("bhnc,bmc->bhnm", q_abs, ckv) + torch.einsum("bhnr,bmr->bhnm", q_pe, kpe)
    scores = scores / math.sqrt(hd + dr)
    scores = scores.masked_fill(~sliding_window_mask(n, N, N, device=x.device), float("-inf"))
    probs = scores.softmax(-1)
    o_lat = torch.einsum("bhnm,bmc->bhnc", probs, ckv)
    o = torch.einsum("bhnc,hdc->bnhd", o_lat, w_uv).reshape(b, n, h * hd)
    return o @ w.w_o.T, (ckv, kpe)


def linear_recurrent_cumsum(q, k, v, state=None):
    """EleutherAI/gpt-neo, models/layers.py (causal_linear_attention): the running sums as cumsums,
    ``cumulative_k = cumsum(k)``, ``cumulative_context = cumsum(k v^T)``, offset by the state handed
    in; the source's ``+ eps`` left out (the chapter's feature map keeps every sum positive)."""
    b, h, n, dk = q.shape
    fq, fk = feature_map(q), feature_map(k)
    if state is None:
        S0, z0 = q.new_zeros(b, h, dk, v.shape[-1]), q.new_zeros(b, h, dk)
    else:
        S0, z0 = state
    z = fk.cumsum(dim=2) + z0[:, :, None]  # (b, h, n, dk)
    S = torch.einsum("bhnd,bhne->bhnde", fk, v).cumsum(dim=2) + S0[:, :, None]
    top = torch.einsum("bhnd,bhnde->bhne", fq, S)
    bottom = torch.einsum("bhnd,bhnd->bhn", fq, z)[..., None]
    return top / bottom, (S[:, :, -1], z[:, :, -1])


def linear_chunked_cumsum(q, k, v, chunk):
    """lucidrains/linear-attention-transformer, causal_linear_attn: the context inside a bucket as a
    cumulative sum of k v^T (``context.cumsum(dim=-3)``) rather than a masked (c, c) matrix, plus the
    state carried from the buckets before (here with the intra-bucket part the source leaves to its
    local heads, and a partial last bucket)."""
    b, h, n, dk = q.shape
    fq, fk = feature_map(q), feature_map(k)
    S, z = q.new_zeros(b, h, dk, v.shape[-1]), q.new_zeros(b, h, dk)
    pieces = []
    for start in range(0, n, chunk):
        cq, ck, cv = (t[:, :, start : start + chunk] for t in (fq, fk, v))
        ctx = torch.einsum("bhnd,bhne->bhnde", ck, cv).cumsum(dim=2) + S[:, :, None]
        ksum = ck.cumsum(dim=2) + z[:, :, None]
        num = torch.einsum("bhnd,bhnde->bhne", cq, ctx)
        den = torch.einsum("bhnd,bhnd->bhn", cq, ksum)[..., None]
        pieces.append(num / den)
        S, z = ctx[:, :, -1], ksum[:, :, -1]
    return torch.cat(pieces, dim=2)


def delta_rule_k_major(q, k, v, alpha, beta, state=None):
    """openvinotoolkit/openvino, PR #34529 (GatedDeltaNet spec, Qwen3-Next's recurrence): the state
    kept k-major [dk, dv] and read with elementwise sums, ``kv_mem = (S * k[..., None]).sum(-2)``,
    ``S = S + k[..., None] * delta[..., None, :]``, ``o = (S * q[..., None]).sum(-2)``; transposed to
    the exercise's (dv, dk) memory at the boundary."""
    b, h, n, dk = k.shape
    dv = v.shape[-1]
    S = k.new_zeros(b, h, dk, dv) if state is None else state.transpose(-1, -2)
    out = torch.empty(b, h, n, dv, dtype=v.dtype, device=v.device)
    outs = []
    for i in range(n):
        S = S * alpha[:, :, i, None, None]
        kv_mem = (S * k[:, :, i, :, None]).sum(dim=-2)
        delta = (v[:, :, i] - kv_mem) * beta[:, :, i, None]
        S = S + k[:, :, i, :, None] * delta[:, :, None, :]
        outs.append((S * q[:, :, i, :, None]).sum(dim=-2))
    out = torch.stack(outs, dim=2) if outs else out
    return out, S.transpose(-1, -2)


def sparse_one_hot_gather(q, k, v, index_scores, topk):
    """aosama/astronomical, PR #590 (the qwen4_exp indexer's selection and sparse attention): the
    causal mask applied before any ranking, ties toward the lower index, and the chosen keys and
    values gathered through a one-hot matrix product, then ordinary attention over the gathered
    slots only."""
    n, N = q.shape[-2], k.shape[-2]
    causal = sliding_window_mask(n, N, N, device=q.device)
    ranked = index_scores.masked_fill(~causal, -torch.inf)
    chosen = ranked.sort(dim=-1, descending=True, stable=True).indices[..., : min(topk, N)]
    valid = torch.gather(causal.expand_as(ranked), -1, chosen)  # (b, n, c): a real earlier key
    one_hot = F.one_hot(chosen, N).to(q.dtype)  # (b, n, c, N)
    k_sel = torch.einsum("bncN,bhNd->bhncd", one_hot, k)
    v_sel = torch.einsum("bncN,bhNd->bhncd", one_hot, v)
    scores = torch.einsum("bhnd,bhncd->bhnc", q, k_sel) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~valid[:, None], -torch.inf)
    return torch.einsum("bhnc,bhncd->bhnd", scores.softmax(-1), v_sel)


def shared_kv_handed_along(x, layers, kv_source, heads, cache=None):
    """pytorch/executorch, PR #18485 (YOCO in AttentionMHA): a donor layer returns ``kv_to_share``
    and a shared layer skips its K/V projection and uses the donor's keys and values handed to it;
    the cache written by donors only."""
    n = x.shape[1]
    new_cache = {}
    shared = {}
    for i, w in enumerate(layers):
        q = split_heads(x @ w["w_q"].T, heads)
        if kv_source[i] == i:
            k, v = split_heads(x @ w["w_k"].T, heads), split_heads(x @ w["w_v"].T, heads)
            if cache is not None and i in cache:
                k, v = torch.cat((cache[i][0], k), 2), torch.cat((cache[i][1], v), 2)
            shared[i] = new_cache[i] = (k, v)
        k, v = shared[kv_source[i]]
        N = k.shape[2]
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(~sliding_window_mask(n, N, N, device=x.device), float("-inf"))
        x = x + merge_heads(torch.softmax(scores, dim=-1) @ v) @ w["w_o"].T
    return x, new_cache


CHECK = {
    "kv_bytes_per_layer_loop": "check_kv_cache_bytes",
    "mla_concatenated_heads": "check_mla_attention",
    "mla_absorbed_einsum": "check_mla_absorbed",
    "linear_recurrent_cumsum": "check_linear_attention_recurrent",
    "linear_chunked_cumsum": "check_linear_attention_chunked",
    "delta_rule_k_major": "check_gated_delta_rule",
    "sparse_one_hot_gather": "check_sparse_attention",
    "shared_kv_handed_along": "check_shared_kv_forward",
}
