"""Right answers to chapter 11's exercises written the way other projects write them (a loop over
layers, one fused score over [nope | rope], attention in the latent space, cumulative sums, padded
chunks, the paper's product form, gathers, aliased caches), collected without seeing the checks.
Each must pass its check: RIGHT is (check name, answer) for tests/ch11/test_ch11_fresh.py."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from course_utils.chapters import apply_rope, merge_heads, sliding_window_mask, split_heads


# unslothai/unsloth PR #5225 (_estimate_kv_cache_bytes): a loop over the layers that allocate, each
# charged for its own window: sum over the caches instead of one product.
def kv_loop_over_caches(layout, context, batch=1, bytes_per_value=2):
    total = 0
    for c in range(layout.layers // layout.layers_per_cache):
        tokens = min(context, layout.window) if c < layout.windowed_caches else context
        width = layout.latent_dim + layout.rope_dim or 2 * layout.kv_heads * layout.head_dim
        total += batch * tokens * width * bytes_per_value
    return int(total)


def _mla_parts(x, w, cache):
    b, n, _ = x.shape
    h, hd, dr = w.heads, w.head_dim, w.rope_dim
    start = 0 if cache is None else cache[0].shape[1]
    positions = torch.arange(start, start + n, device=x.device)
    latent, rope_keys = x @ w.w_dkv.T, apply_rope(x @ w.w_kr.T, positions)
    if cache is not None:
        latent = torch.cat([cache[0], latent], dim=1)
        rope_keys = torch.cat([cache[1], rope_keys], dim=1)
    q_pass = (x @ w.w_q.T).view(b, n, h, hd).transpose(1, 2)
    q_rot = apply_rope((x @ w.w_qr.T).view(b, n, h, dr).transpose(1, 2), positions)
    return latent, rope_keys, q_pass, q_rot


# huggingface/transformers models/deepseek_v3/modeling_deepseek_v3.py (DeepseekV3Attention): one
# query and one key of width hd + dr, `cat((q_pass, q_rot))` and `cat((k_pass, k_rot.expand(...)))`,
# through SDPA with an explicit boolean mask (here placed for a cache) and scale (hd + dr) ** -0.5.
def mla_fused_nope_rope_sdpa(x, w, cache=None):
    b, n, _ = x.shape
    h, hd, dr = w.heads, w.head_dim, w.rope_dim
    latent, rope_keys, q_pass, q_rot = _mla_parts(x, w, cache)
    N = latent.shape[1]
    kv = latent @ torch.cat([w.w_uk.view(h, hd, -1), w.w_uv.view(h, hd, -1)], 1).flatten(0, 1).T
    k_pass, value = kv.view(b, N, h, 2 * hd).transpose(1, 2).split([hd, hd], dim=-1)
    query = torch.cat((q_pass, q_rot), dim=-1)
    key = torch.cat((k_pass, rope_keys[:, None].expand(b, h, N, dr)), dim=-1)
    mask = sliding_window_mask(n, N, N, device=x.device)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=(hd + dr) ** -0.5)
    return out.transpose(1, 2).reshape(b, n, h * hd) @ w.w_o.T, (latent, rope_keys)


# NVIDIA/Megatron-LM PR #3198 (absorbed-mla): "MQA in latent space": q_final = [q_absorbed |
# q_rope] and one shared kv_final = [latent | rope key] of width dc + dr; the weighted latents are
# up-projected per head by einsum.
def mla_absorbed_latent_mqa(x, w, cache=None):
    b, n, _ = x.shape
    h, hd, dr = w.heads, w.head_dim, w.rope_dim
    latent, rope_keys, q_pass, q_rot = _mla_parts(x, w, cache)
    N, dc = latent.shape[1], latent.shape[2]
    q_absorbed = torch.einsum("bhnd,hdc->bhnc", q_pass, w.w_uk.view(h, hd, dc))
    q_final = torch.cat([q_absorbed, q_rot], dim=-1)  # (b, h, n, dc + dr)
    kv_final = torch.cat([latent, rope_keys], dim=-1)  # (b, N, dc + dr)
    scores = torch.einsum("bhnc,bmc->bhnm", q_final, kv_final) / math.sqrt(hd + dr)
    scores = scores.masked_fill(~sliding_window_mask(n, N, N, device=x.device), float("-inf"))
    attn_out = torch.einsum("bhnm,bmc->bhnc", scores.softmax(dim=-1), latent)
    projected = torch.einsum("bhnc,hdc->bnhd", attn_out, w.w_uv.view(h, hd, dc))
    return projected.reshape(b, n, h * hd) @ w.w_o.T, (latent, rope_keys)


# lucidrains/performer-pytorch causal_linear_attention_noncuda as fixed in 0.11.2 (issue #40):
# cumulative sums instead of a loop, `D_inv = 1. / einsum(q, k.cumsum(dim=-2))`, with the state
# added to both sums.
def la_cumsum_performer_fixed(q, k, v, state=None):
    q, k = F.elu(q) + 1, F.elu(k) + 1
    S0 = 0 if state is None else state[0][:, :, None]
    z0 = 0 if state is None else state[1][:, :, None]
    k_cumsum = k.cumsum(dim=-2) + z0
    D_inv = 1.0 / torch.einsum("...nd,...nd->...n", q, k_cumsum)
    context = torch.einsum("...nd,...ne->...nde", k, v).cumsum(dim=-3) + S0
    out = torch.einsum("...nde,...nd,...n->...ne", context, q, D_inv)
    return out, (context[:, :, -1], k_cumsum[:, :, -1])


# huggingface/transformers qwen3_next torch_chunk_gated_delta_rule's layout: pad the text to a
# multiple of the chunk (`pad_size = (chunk_size - seq_len % chunk_size) % chunk_size`), view it as
# (chunks, chunk), run every chunk, cut the padding off. Padded keys only reach padded queries.
# (Padding after the feature map instead gives padded rows 0 / 0: right outputs, NaN gradients.)
def chunked_padded_then_truncated(q, k, v, chunk):
    b, h, n, dk = q.shape
    pad = (chunk - n % chunk) % chunk
    fq, fk = (F.elu(F.pad(t, (0, 0, 0, pad))) + 1 for t in (q, k))  # pad the raw q, k as the source
    vv = F.pad(v, (0, 0, 0, pad))
    fq, fk, vv = (t.view(b, h, -1, chunk, t.shape[-1]) for t in (fq, fk, vv))
    S, z = q.new_zeros(b, h, dk, v.shape[-1]), q.new_zeros(b, h, dk)
    mask = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    out = []
    for i in range(fq.shape[2]):
        cq, ck, cv = fq[:, :, i], fk[:, :, i], vv[:, :, i]
        attn = (cq @ ck.mT).masked_fill(~mask, 0)
        out.append(
            (attn @ cv + cq @ S)
            / (attn.sum(-1, keepdim=True) + (cq * z[:, :, None]).sum(-1, keepdim=True))
        )
        S, z = S + ck.mT @ cv, z + ck.sum(2)
    return torch.cat(out, dim=2)[:, :, :n]


# NVlabs/GatedDeltaNet (the paper's eq. 10, also dl_techniques' docstring): the product form
# S_t = S_{t-1} (alpha_t (I - beta_t k_t k_t^T)) + beta_t v_t k_t^T, with an explicit identity.
def gdr_product_form(q, k, v, alpha, beta, state=None):
    b, h, n, dk = k.shape
    S = k.new_zeros(b, h, v.shape[-1], dk) if state is None else state
    eye = torch.eye(dk, dtype=k.dtype, device=k.device)
    outs = []
    for t in range(n):
        kt, a, bt = k[:, :, t], alpha[:, :, t, None, None], beta[:, :, t, None, None]
        S = (
            S @ (a * (eye - bt * kt[..., :, None] * kt[..., None, :]))
            + bt * v[:, :, t, :, None] * kt[..., None, :]
        )
        outs.append(torch.einsum("bhvk,bhk->bhv", S, q[:, :, t]))
    return torch.stack(outs, dim=2), S


# huggingface/transformers qwen3_next torch_recurrent_gated_delta_rule's loop (state (dk, dv),
# decay as exp(log alpha), elementwise sums), without the query scaling the model adds.
def gdr_hf_loop_unscaled(q, k, v, alpha, beta, state=None):
    g = alpha.log()
    state_kv = k.new_zeros(*k.shape[:2], k.shape[-1], v.shape[-1]) if state is None else state.mT
    out = []
    for i in range(k.shape[2]):
        q_t, k_t, v_t = q[:, :, i], k[:, :, i], v[:, :, i]
        state_kv = state_kv * g[:, :, i].exp()[..., None, None]
        kv_mem = (state_kv * k_t.unsqueeze(-1)).sum(dim=-2)
        delta = (v_t - kv_mem) * beta[:, :, i, None]
        state_kv = state_kv + k_t.unsqueeze(-1) * delta.unsqueeze(-2)
        out.append((state_kv * q_t.unsqueeze(-1)).sum(dim=-2))
    return torch.stack(out, dim=2), state_kv.mT


# ml-explore/mlx-lm PR #531 (deepseek_v32): a boolean mask built from the chosen indices, for any
# number of queries against k_seq keys; plain torch.topk (no tie rule) and the causal mask again.
def sparse_topk_bool_mask(q, k, v, index_scores, topk):
    n, N = q.shape[-2], k.shape[-2]
    causal = sliding_window_mask(n, N, N, device=q.device)
    idx = index_scores.masked_fill(~causal, float("-inf")).topk(min(topk, N), dim=-1).indices
    mask = torch.zeros(index_scores.shape, dtype=torch.bool, device=q.device)
    mask.scatter_(-1, idx, True)
    scores = (q @ k.mT) * q.shape[-1] ** -0.5
    scores = scores.masked_fill(~(mask & causal)[:, None], float("-inf"))
    return scores.softmax(dim=-1) @ v


# lucidrains/native-sparse-attention-pytorch's fine branch: gather the selected keys and values
# per query ((b, h, n, k, d)) and attend over the gathered ones, masking choices that are invalid.
def sparse_gather_selected(q, k, v, index_scores, topk):
    b, h, n, d = q.shape
    N = k.shape[-2]
    causal = sliding_window_mask(n, N, N, device=q.device)
    sel = index_scores.masked_fill(~causal, float("-inf")).topk(min(topk, N), dim=-1)
    valid = sel.values > float("-inf")  # (b, n, kk)
    gather = sel.indices[:, None, :, :, None]  # (b, 1, n, kk, 1)
    ks = k[:, :, None].expand(b, h, n, N, d).gather(3, gather.expand(b, h, n, -1, d))
    vs = (
        v[:, :, None]
        .expand(b, h, n, N, v.shape[-1])
        .gather(3, gather.expand(b, h, n, -1, v.shape[-1]))
    )
    sim = torch.einsum("bhnd,bhnkd->bhnk", q, ks) / math.sqrt(d)
    attn = sim.masked_fill(~valid[:, None], float("-inf")).softmax(dim=-1)
    return torch.einsum("bhnk,bhnkd->bhnd", attn, vs)


# ovg-project/kvcached PR #472 (as vLLM does it): only producers own a cache; each sharing layer's
# entry is an alias of its target's; attention through SDPA with a boolean mask for the cache.
def shared_aliased_sdpa(x, layers, kv_source, heads, cache=None):
    n = x.shape[1]
    owned = {} if cache is None else {i: kv for i, kv in cache.items()}
    for i, w in enumerate(layers):
        target = kv_source[i]
        if target == i:
            k, v = split_heads(x @ w["w_k"].T, heads), split_heads(x @ w["w_v"].T, heads)
            if i in owned:
                k, v = torch.cat([owned[i][0], k], 2), torch.cat([owned[i][1], v], 2)
            owned[i] = (k, v)
        k, v = owned[target]  # kv_caches[layer] = kv_caches[target]
        mask = sliding_window_mask(n, k.shape[2], k.shape[2], device=x.device)
        q = split_heads(x @ w["w_q"].T, heads)
        x = x + merge_heads(F.scaled_dot_product_attention(q, k, v, attn_mask=mask)) @ w["w_o"].T
    return x, owned


RIGHT = [
    ("check_kv_cache_bytes", kv_loop_over_caches),
    ("check_mla_attention", mla_fused_nope_rope_sdpa),
    ("check_mla_absorbed", mla_absorbed_latent_mqa),
    ("check_linear_attention_recurrent", la_cumsum_performer_fixed),
    ("check_linear_attention_chunked", chunked_padded_then_truncated),
    ("check_gated_delta_rule", gdr_product_form),
    ("check_gated_delta_rule", gdr_hf_loop_unscaled),
    ("check_sparse_attention", sparse_topk_bool_mask),
    ("check_sparse_attention", sparse_gather_selected),
    ("check_shared_kv_forward", shared_aliased_sdpa),
]
