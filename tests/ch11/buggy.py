"""Wrong answers for chapter 11's checks; each says where it comes from."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from course_utils.chapters import apply_rope, sliding_window_mask


# --------------------------------------------------------------------------- kv_cache_bytes
def _count(layout, context, batch, size, *, per_token=None, caches=None, held=None, texts=None):
    """A byte count written the usual way, with any of its four factors replaced."""
    n_caches = layout.layers // layout.layers_per_cache if caches is None else caches(layout)
    if per_token is None:
        per = (
            layout.latent_dim + layout.rope_dim
            if layout.latent_dim
            else 2 * layout.kv_heads * layout.head_dim
        )
    else:
        per = per_token(layout)
    if held is None:
        w = layout.windowed_caches
        tokens = w * min(context, layout.window or context) + (n_caches - w) * context
    else:
        tokens = held(layout, context, n_caches)
    return (batch if texts is None else texts) * tokens * per * size


def keys_only(layout, context, batch=1, bytes_per_value=2):
    # Where from: the GQA chapter's count without its factor 2, "kv_heads * head_dim per token and
    # layer": a slip seen in hand-written estimates that count "the cache" as the key tensor alone.
    no_values = lambda l: l.latent_dim + l.rope_dim if l.latent_dim else l.kv_heads * l.head_dim  # noqa: E731
    return _count(layout, context, batch, bytes_per_value, per_token=no_values)


def window_ignored(layout, context, batch=1, bytes_per_value=2):
    # Where from: LLMs-from-scratch ch04/04_gqa/memory_estimator.py's kv_bytes_total, applied to
    # Mistral: batch * context * head_dim * n_kv_heads * 2 * bytes * layers, with no window.
    return _count(layout, context, batch, bytes_per_value, held=lambda l, n, c: c * n)


def window_everywhere(layout, context, batch=1, bytes_per_value=2):
    # Where from: a window estimate applied to Gemma 3 as if all 26 layers were windowed (its
    # config's sliding_window alone says nothing of the 5:1 layer_types pattern).
    def held(l, n, c):
        return c * (min(n, l.window) if l.window else n)

    return _count(layout, context, batch, bytes_per_value, held=held)


def latent_per_head(layout, context, batch=1, bytes_per_value=2):
    # Where from: counting MLA like GQA with latent_dim as the head width, kv_heads * latent_dim.
    def per(l):
        return (
            (l.latent_dim + l.rope_dim) * l.kv_heads
            if l.latent_dim
            else 2 * l.kv_heads * l.head_dim
        )

    return _count(layout, context, batch, bytes_per_value, per_token=per)


def latent_twice(layout, context, batch=1, bytes_per_value=2):
    # Where from: "K and V: times 2" kept from the MHA formula when switching it to MLA.
    def per(l):
        return 2 * (l.latent_dim + l.rope_dim) if l.latent_dim else 2 * l.kv_heads * l.head_dim

    return _count(layout, context, batch, bytes_per_value, per_token=per)


def rope_key_forgotten(layout, context, batch=1, bytes_per_value=2):
    # Where from: rasbt/LLMs-from-scratch ch04/05_mla/memory_estimator_mla.py, mla_bytes_total:
    # batch * seqlen * n_layers * latent_dim * bytes (its MLA has no decoupled RoPE key).
    def per(l):
        return l.latent_dim if l.latent_dim else 2 * l.kv_heads * l.head_dim

    return _count(layout, context, batch, bytes_per_value, per_token=per)


def sharing_ignored(layout, context, batch=1, bytes_per_value=2):
    # Where from: the per-layer estimate times num_hidden_layers, the usual formula, used on a
    # cross-layer-sharing model without dividing by the layers that share.
    return _count(layout, context, batch, bytes_per_value, caches=lambda l: l.layers)


def batch_ignored(layout, context, batch=1, bytes_per_value=2):
    # Where from: a per-text estimate called with a batch (the batch argument accepted, unused).
    return _count(layout, context, batch, bytes_per_value, texts=1)


BYTES_BUGS = [
    (keys_only, "kv_values_forgotten"),
    (window_ignored, "kv_window_ignored"),
    (window_everywhere, "kv_window_everywhere"),
    (latent_per_head, "kv_latent_per_head"),
    (latent_twice, "kv_latent_twice"),
    (rope_key_forgotten, "kv_rope_key_forgotten"),
    (sharing_ignored, "kv_sharing_ignored"),
    (batch_ignored, "kv_batch_ignored"),
]


# --------------------------------------------------------------------------- MLA (absorbed style)
def _mla(
    x,
    w,
    cache=None,
    *,
    swap=False,
    view_t=False,
    uk_view=None,
    rope=True,
    scale_full=True,
    latent_scale=False,
    restart=False,
    top_left=False,
    cache_up=False,
):
    """MLA written in the absorbed style, float32, with one slip switched on."""
    b, n, _ = x.shape
    h, hd, dr = w.heads, w.head_dim, w.rope_dim
    if cache_up:  # the cache holds up-projected keys and values of width h * hd
        return _mla_cache_up(x, w, cache)
    start = 0 if cache is None or restart else cache[0].shape[1]
    pos = torch.arange(start, start + n, device=x.device)  # (n,)
    latent, rk = x @ w.w_dkv.T, apply_rope(x @ w.w_kr.T, pos)  # (b, n, dc), (b, n, dr)
    if cache is not None:
        latent, rk = torch.cat([cache[0], latent], 1), torch.cat([cache[1], rk], 1)
    N, dc = latent.shape[1:]
    w_k, w_v = (w.w_uv, w.w_uk) if swap else (w.w_uk, w.w_uv)
    W_k = w_k.view(h, dc, hd).mT if view_t else w_k.view(h, hd, dc)  # (h, hd, dc)
    W_k = uk_view(w_k, h, hd, dc) if uk_view else W_k
    W_v = w_v.view(h, dc, hd).mT if view_t else w_v.view(h, hd, dc)  # (h, hd, dc)
    q = (x @ w.w_q.T).view(b, n, h, hd).transpose(1, 2)  # (b, h, n, hd)
    qr = apply_rope((x @ w.w_qr.T).view(b, n, h, dr).transpose(1, 2), pos)  # (b, h, n, dr)
    scores = (q @ W_k) @ latent[:, None].mT  # (b, h, n, N)
    if rope:
        scores = scores + qr @ rk[:, None].mT
    scores = scores / math.sqrt(dc + dr if latent_scale else hd + dr if scale_full else hd)
    allowed = (
        torch.ones(n, N, dtype=torch.bool, device=x.device).tril()
        if top_left
        else sliding_window_mask(n, N, N, x.device)
    )
    weights = torch.softmax(scores.masked_fill(~allowed, -torch.inf), -1)  # (b, h, n, N)
    ctx = (weights @ latent[:, None]) @ W_v.mT  # (b, h, n, hd)
    return ctx.transpose(1, 2).reshape(b, n, h * hd) @ w.w_o.T, (latent, rk)


def _mla_cache_up(x, w, cache):
    b, n, _ = x.shape
    h, hd, dr = w.heads, w.head_dim, w.rope_dim
    start = 0 if cache is None else cache[0].shape[2]
    pos = torch.arange(start, start + n, device=x.device)
    latent = x @ w.w_dkv.T  # (b, n, dc)
    k = (latent @ w.w_uk.T).view(b, n, h, hd).transpose(1, 2)  # (b, h, n, hd)
    v = (latent @ w.w_uv.T).view(b, n, h, hd).transpose(1, 2)  # (b, h, n, hd)
    kr = apply_rope(x @ w.w_kr.T, pos)[:, None].expand(b, h, n, dr)  # (b, h, n, dr)
    k = torch.cat([k, kr], -1)  # (b, h, n, hd + dr)
    if cache is not None:
        k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
    q = torch.cat(
        [
            (x @ w.w_q.T).view(b, n, h, hd).transpose(1, 2),
            apply_rope((x @ w.w_qr.T).view(b, n, h, dr).transpose(1, 2), pos),
        ],
        -1,
    )
    N = k.shape[2]
    mask = sliding_window_mask(n, N, N, x.device)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (b, h, n, hd)
    return out.transpose(1, 2).reshape(b, n, h * hd) @ w.w_o.T, (k, v)


def wrong_side(x, w, cache=None):
    # Where from: modelled on DeepSeek-V3's inference/model.py (deepseek-ai/DeepSeek-V3), whose
    # absorbed path slices one wkv_b into keys wkv_b[:, :qk_nope_head_dim] and values
    # wkv_b[:, -v_head_dim:]; taking the value slice for the query puts the absorption on the wrong side.
    return _mla(x, w, cache, swap=True)


def blocks_transposed(x, w, cache=None):
    # Where from: the same file reshapes the (h * hd, dc) weight as wkv_b.view(n_heads, -1, kv_lora_rank);
    # view(h, dc, hd) followed by a transpose also runs and scrambles the heads.
    return _mla(x, w, cache, view_t=True)


def no_rope_part(x, w, cache=None):
    # Where from: rasbt/LLMs-from-scratch ch04/05_mla/gpt_with_kv_mla.py: its MultiHeadLatentAttention
    # scores queries against up-projected keys only, with no decoupled rotary part.
    return _mla(x, w, cache, rope=False)


def scale_by_nope_width(x, w, cache=None):
    # Where from: a scale of head_dim ** -0.5 kept from chapter 05 after adding the rotary part
    # (DeepSeek's code scales by qk_head_dim = qk_nope_head_dim + qk_rope_head_dim).
    return _mla(x, w, cache, scale_full=False)


def positions_restart(x, w, cache=None):
    # Where from: a cached step that numbers its tokens from 0, as GPTModel.forward in
    # rasbt/LLMs-from-scratch ch04/03_kv-cache would without its current_pos counter.
    return _mla(x, w, cache, restart=True)


def mask_top_left(x, w, cache=None):
    # Where from: the is_causal=True mask with fewer queries than keys (pytorch/pytorch#103082).
    return _mla(x, w, cache, top_left=True)


def cache_after_up_projection(x, w, cache=None):
    # Where from: Hugging Face transformers' DeepseekV3Attention (models/deepseek_v3), which
    # up-projects the latent with kv_b_proj and stores key_states and value_states in its cache.
    return _mla(x, w, cache, cache_up=True)


MLA_BUGS = [
    (wrong_side, "mla_absorbed_wrong_side"),
    (blocks_transposed, "mla_head_blocks_transposed"),
    (no_rope_part, "mla_rope_part_missing"),
    (scale_by_nope_width, "mla_scale_without_rope"),
    (positions_restart, "mla_positions_restart"),
    (mask_top_left, "mla_cache_mask_top_left"),
    (cache_after_up_projection, "mla_cache_after_up_projection"),
]


# --------------------------------------------------------------------------- linear attention
_LEFTOVER = {}


def _linear(
    q, k, v, state=None, *, norm=True, before=False, keep=False, ignore_state=False, in_place=False
):
    """The recurrence, written token by token with one slip switched on."""
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    b, h, n, dk = q.shape
    if keep and "S" in _LEFTOVER and _LEFTOVER["S"].shape == (b, h, dk, v.shape[-1]):
        S, z = _LEFTOVER["S"], _LEFTOVER["z"]
    elif state is None or ignore_state:
        S, z = q.new_zeros(b, h, dk, v.shape[-1]), q.new_zeros(b, h, dk)
    else:
        S, z = state
    outs = []
    for t in range(n):
        if before:
            outs.append(
                (fq[:, :, t, None] @ S).squeeze(-2) / (fq[:, :, t] * z).sum(-1, keepdim=True)
            )
        if in_place:  # the caller's state written into
            S += fk[:, :, t, :, None] * v[:, :, t, None, :]
            z += fk[:, :, t]
        else:
            S = S + fk[:, :, t, :, None] * v[:, :, t, None, :]
            z = z + fk[:, :, t]
        if not before:
            top = (fq[:, :, t, None] @ S).squeeze(-2)
            outs.append(top / (fq[:, :, t] * z).sum(-1, keepdim=True) if norm else top)
    if keep:
        _LEFTOVER.update(S=S, z=z)
    return torch.stack(outs, 2), (S, z)


def linear_no_normaliser(q, k, v, state=None):
    # Where from: the "unnormalised" linear attention many later models use (no denominator), given
    # where the exercise asks for Katharopoulos et al.'s normalised form.
    return _linear(q, k, v, state, norm=False)


def linear_reads_before_write(q, k, v, state=None):
    # Where from: the read-then-write order of an RNN cell carried over to the state update.
    return _linear(q, k, v, state, before=True)


def linear_state_kept(q, k, v, state=None):
    # Where from: modelled on KV caches kept as module attributes (rasbt/LLMs-from-scratch
    # ch04/03_kv-cache/gpt_with_kv_cache.py keeps cache_k and cache_v until reset_cache() is called):
    # here the state lives in a module-level dict and a new text continues the old one.
    return _linear(q, k, v, state, keep=True)


def linear_state_ignored(q, k, v, state=None):
    # Where from: a function that accepts state= for its signature and always starts from zeros.
    return _linear(q, k, v, state, ignore_state=True)


def _chunked(
    q, k, v, chunk, *, strict=False, state_first=False, overlap=False, floor=False, first=False
):
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    b, h, n, dk = q.shape
    S, z, outs = q.new_zeros(b, h, dk, v.shape[-1]), q.new_zeros(b, h, dk), []
    for lo in range(0, n - n % chunk if floor else n, chunk):
        hi = min(lo + chunk, n)
        if state_first or first:
            S, z = S + fk[:, :, lo:hi].mT @ v[:, :, lo:hi], z + fk[:, :, lo:hi].sum(2)
        cq, ck = fq[:, :, lo:hi], fk[:, :, lo:hi]
        scores = (cq @ ck.mT).tril(-1 if strict else 0) * (0 if state_first else 1)
        outs.append(
            (scores @ v[:, :, lo:hi] + cq @ S) / (scores.sum(-1, keepdim=True) + cq @ z[..., None])
        )
        if not (state_first or first):
            end = hi + 1 if overlap else hi
            S, z = S + fk[:, :, lo:end].mT @ v[:, :, lo:end], z + fk[:, :, lo:end].sum(2)
    return torch.cat(outs, 2)


def chunk_diagonal_dropped(q, k, v, chunk):
    # Where from: the strict mask of "earlier tokens only" (tril(-1)) used inside the chunk, as for the
    # inter-chunk part, which holds only earlier chunks.
    return _chunked(q, k, v, chunk, strict=True)


def chunk_state_first(q, k, v, chunk):
    # Where from: the state updated at the top of the loop body, the order of the recurrence of Exercise 4.
    return _chunked(q, k, v, chunk, state_first=True)


def chunk_boundary_off_by_one(q, k, v, chunk):
    # Where from: an inclusive end index (lo:hi + 1) in the state update, the off-by-one of the chunk
    # boundary the issue names.
    return _chunked(q, k, v, chunk, overlap=True)


def _delta(
    q,
    k,
    v,
    alpha,
    beta,
    state=None,
    *,
    gate_write=False,
    ungated=False,
    no_erase=False,
    before=False,
    transposed=False,
    no_gate=False,
    in_place=False,
):
    b, h, n, dk = k.shape
    S = k.new_zeros(b, h, v.shape[-1], dk) if state is None else state
    given, outs = state, []
    for t in range(n):
        kt, vt = k[:, :, t], v[:, :, t]
        a = 1.0 if no_gate else alpha[:, :, t, None, None]
        bt = beta[:, :, t, None, None]
        old = S
        base = S if gate_write else a * S
        err = vt - ((old if ungated else base) @ kt[..., None]).squeeze(-1)
        write = vt if no_erase else err
        outer = (
            kt[..., :, None] * write[..., None, :]
            if transposed
            else write[..., :, None] * kt[..., None, :]
        )
        S = a * (S + bt * outer) if gate_write else base + bt * outer
        outs.append(((old if before else S) @ q[:, :, t, :, None]).squeeze(-1))
    if in_place and given is not None:  # the new memory written into the caller's state
        given.copy_(S)
    return torch.stack(outs, 2), S


def delta_gate_on_write(q, k, v, alpha, beta, state=None):
    # Where from: the gate written as a decay of the updated memory, S_t = alpha (S + write).
    return _delta(q, k, v, alpha, beta, state, gate_write=True)


def delta_erase_ungated(q, k, v, alpha, beta, state=None):
    # Where from: the error v - S k computed once from the previous memory before the decay line.
    return _delta(q, k, v, alpha, beta, state, ungated=True)


def delta_no_erase(q, k, v, alpha, beta, state=None):
    # Where from: gated linear attention's write (beta v k^T) in place of the delta rule's.
    return _delta(q, k, v, alpha, beta, state, no_erase=True)


def delta_reads_before_write(q, k, v, alpha, beta, state=None):
    # Where from: the output read at the top of the loop, before the token's own write.
    return _delta(q, k, v, alpha, beta, state, before=True)


def delta_outer_transposed(q, k, v, alpha, beta, state=None):
    # Where from: torch.outer(k, error) where the memory is (dv, dk).
    return _delta(q, k, v, alpha, beta, state, transposed=True)


def delta_gate_ignored(q, k, v, alpha, beta, state=None):
    # Where from: plain DeltaNet (no gate), run with Gated DeltaNet's inputs.
    return _delta(q, k, v, alpha, beta, state, no_gate=True)


LINEAR_BUGS = [
    (linear_no_normaliser, "linear_no_normaliser"),
    (linear_reads_before_write, "linear_reads_before_write"),
    (linear_state_kept, "recurrence_state_not_reset"),
    (linear_state_ignored, "recurrence_state_ignored"),
]
CHUNK_BUGS = [
    (chunk_diagonal_dropped, "chunk_diagonal_dropped"),
    (chunk_state_first, "chunk_state_includes_chunk"),
    (chunk_boundary_off_by_one, "chunk_boundary_counted_twice"),
]
DELTA_BUGS = [
    (delta_gate_on_write, "delta_gate_on_write"),
    (delta_erase_ungated, "delta_erase_ungated"),
    (delta_no_erase, "delta_no_erase"),
    (delta_reads_before_write, "delta_reads_before_write"),
    (delta_outer_transposed, "delta_outer_transposed"),
    (delta_gate_ignored, "delta_gate_ignored"),
]
