"""Right but unusual answers to chapter 11's exercises: every one must pass its check."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from course_utils.chapters import apply_rope, sliding_window_mask


def bytes_by_loops(layout, context, batch=1, bytes_per_value=2):
    """Layer by layer: every cache's tokens summed one layer at a time. (It once summed a float,
    0.0 + ...: the exercise asks for an int, and a float is now refused, probes_fresh.py's
    kv_returns_float.)"""
    total = 0
    for cache in range(layout.layers // layout.layers_per_cache):
        held = min(context, layout.window) if cache < layout.windowed_caches else context
        width = (
            layout.latent_dim + layout.rope_dim
            if layout.latent_dim
            else 2 * layout.kv_heads * layout.head_dim
        )
        total += held * width * bytes_per_value
    return total * batch


def bytes_as_tensor(layout, context, batch=1, bytes_per_value=2):
    """A one-element int64 tensor from a product over a tensor of the caches' token counts."""
    caches = layout.layers // layout.layers_per_cache
    held = torch.full((caches,), context, dtype=torch.int64)
    held[: layout.windowed_caches] = min(context, layout.window or context)
    width = (
        layout.latent_dim + layout.rope_dim
        if layout.latent_dim
        else 2 * layout.kv_heads * layout.head_dim
    )
    return held.sum() * width * bytes_per_value * batch


def mla_with_sdpa(x, w, cache=None):
    """Naive MLA through SDPA: queries and keys of width hd + dr (the cached, rotated rotary key
    broadcast to every head), SDPA's default scale 1/sqrt(hd + dr). Until the second fresh attack
    this cached the rotary keys unrotated and rotated all N at every call: right outputs, but not the
    cache the exercise asks for (buggy_fresh2.py's mla_rope_keys_cached_unrotated, now refused)."""
    b, n, _ = x.shape
    h, hd, dr = w.heads, w.head_dim, w.rope_dim
    start = 0 if cache is None else cache[0].shape[1]
    latent = x @ w.w_dkv.T  # (b, n, dc)
    rotated = apply_rope(
        x @ w.w_kr.T, torch.arange(start, start + n, device=x.device)
    )  # (b, n, dr)
    if cache is not None:
        latent, rotated = torch.cat([cache[0], latent], 1), torch.cat([cache[1], rotated], 1)
    N = latent.shape[1]
    every = torch.arange(N, device=x.device)  # (N,)
    q = torch.cat(
        [
            (x @ w.w_q.T).view(b, n, h, hd).transpose(1, 2),
            apply_rope((x @ w.w_qr.T).view(b, n, h, dr).transpose(1, 2), every[N - n :]),
        ],
        -1,
    )
    k = torch.cat(
        [
            (latent @ w.w_uk.T).view(b, N, h, hd).transpose(1, 2),
            rotated[:, None].expand(b, h, N, dr),
        ],
        -1,
    )  # (b, h, N, hd + dr)
    v = (latent @ w.w_uv.T).view(b, N, h, hd).transpose(1, 2)  # (b, h, N, hd)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=sliding_window_mask(n, N, N, x.device))
    return out.transpose(1, 2).reshape(b, n, h * hd) @ w.w_o.T, (latent, rotated)


def mla_absorbed_into_output(x, w, cache=None):
    """Absorbed with einsum, W_uv folded into W_o as one (h, dc, d) matrix per head."""
    b, n, d = x.shape
    h, hd, dr = w.heads, w.head_dim, w.rope_dim
    start = 0 if cache is None else cache[0].shape[1]
    pos = torch.arange(start, start + n, device=x.device)
    latent, rk = x @ w.w_dkv.T, apply_rope(x @ w.w_kr.T, pos)
    if cache is not None:
        latent, rk = torch.cat([cache[0], latent], 1), torch.cat([cache[1], rk], 1)
    N, dc = latent.shape[1:]
    q = (x @ w.w_q.T).view(b, n, h, hd)
    qr = apply_rope((x @ w.w_qr.T).view(b, n, h, dr).transpose(1, 2), pos)
    q_lat = torch.einsum("bnhe,hec->bhnc", q, w.w_uk.view(h, hd, dc))
    s = torch.einsum("bhnc,bmc->bhnm", q_lat, latent) + torch.einsum("bhnr,bmr->bhnm", qr, rk)
    s = s.masked_fill(~sliding_window_mask(n, N, N, x.device), -math.inf) / math.sqrt(hd + dr)
    mixed = torch.einsum("bhnm,bmc->bhnc", s.softmax(-1), latent)
    w_vo = torch.einsum("hec,dhe->hcd", w.w_uv.view(h, hd, dc), w.w_o.view(d, h, hd))  # (h, dc, d)
    return torch.einsum("bhnc,hcd->bnd", mixed, w_vo), (latent, rk)


def mla_absorbed_head_by_head(x, w, cache=None):
    """Absorbed, one head at a time in a Python loop (each head's q_lat of width dc), the rotary
    part through the chapter's apply_rope at use time, the mask built by comparing positions."""
    b, n, _ = x.shape
    h, hd, dr = w.heads, w.head_dim, w.rope_dim
    start = 0 if cache is None else cache[0].shape[1]
    pos = torch.arange(start, start + n, device=x.device)
    latent, rk = x @ w.w_dkv.T, apply_rope(x @ w.w_kr.T, pos)
    if cache is not None:
        latent, rk = torch.cat([cache[0], latent], 1), torch.cat([cache[1], rk], 1)
    N = latent.shape[1]
    keep = pos[:, None] >= torch.arange(N, device=x.device)  # (n, N)
    q_all, qr_all = x @ w.w_q.T, x @ w.w_qr.T  # (b, n, h * hd), (b, n, h * dr)
    heads = []
    for i in range(h):
        q_lat = q_all[..., i * hd : (i + 1) * hd] @ w.w_uk[i * hd : (i + 1) * hd]  # (b, n, dc)
        q_rope = apply_rope(qr_all[..., i * dr : (i + 1) * dr], pos)  # (b, n, dr)
        s = (q_lat @ latent.mT + q_rope @ rk.mT) / math.sqrt(hd + dr)  # (b, n, N)
        mixed = s.masked_fill(~keep, -torch.inf).softmax(-1) @ latent  # (b, n, dc)
        heads.append(mixed @ w.w_uv[i * hd : (i + 1) * hd].T)  # (b, n, hd)
    return torch.cat(heads, -1) @ w.w_o.T, (latent, rk)


BYTES_CORRECT = [bytes_by_loops, bytes_as_tensor]
ABSORBED_CORRECT = [mla_absorbed_into_output, mla_absorbed_head_by_head]
MLA_CORRECT = [mla_with_sdpa, *ABSORBED_CORRECT]  # an absorbed answer is a right naive one too


def linear_by_cumsum(q, k, v, state=None):
    """Every prefix state at once: cumulative sums of the outer products (plus the given state)."""
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    S = torch.cumsum(fk[..., :, None] * v[..., None, :], dim=2)  # (b, h, n, dk, dv)
    z = torch.cumsum(fk, dim=2)  # (b, h, n, dk)
    if state is not None:
        S, z = S + state[0][:, :, None], z + state[1][:, :, None]
    out = torch.einsum("bhnd,bhnde->bhne", fq, S) / (fq * z).sum(-1, keepdim=True)
    return out, (S[:, :, -1], z[:, :, -1])


def chunked_by_prefix_quadratic(q, k, v, chunk):
    """Each chunk's queries against all keys up to the chunk's end, one rectangular masked product."""
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    n, outs = q.shape[2], []
    for lo in range(0, n, chunk):
        hi = min(lo + chunk, n)
        scores = (fq[:, :, lo:hi] @ fk[:, :, :hi].mT).tril(lo)  # (b, h, c, hi): bottom-right causal
        outs.append((scores @ v[:, :, :hi]) / scores.sum(-1, keepdim=True))
    return torch.cat(outs, dim=2)


def delta_as_householder(q, k, v, alpha, beta, state=None):
    """The paper's product form, S (alpha (I - beta k k^T)) + beta v k^T, with explicit matrices."""
    b, h, n, dk = k.shape
    S = (
        torch.zeros(b, h, v.shape[-1], dk, dtype=k.dtype, device=k.device)
        if state is None
        else state
    )
    eye = torch.eye(dk, dtype=k.dtype, device=k.device)
    outs = []
    for t in range(n):
        kt = k[:, :, t, :, None]  # (b, h, dk, 1)
        a, bt = alpha[:, :, t, None, None], beta[:, :, t, None, None]
        S = S @ (a * (eye - bt * kt @ kt.mT)) + bt * v[:, :, t, :, None] @ kt.mT
        outs.append(torch.einsum("bhek,bhk->bhe", S, q[:, :, t]))
    return torch.stack(outs, dim=2), S


def chunked_padded(q, k, v, chunk):
    """flash-linear-attention's way with a short last chunk (fla/ops/simple_gla/naive.py): pad the
    tokens to a multiple of chunk, compute every chunk at full size, cut the padding off the output.
    The padded keys come after every real query, so no real query sees them."""
    n = q.shape[2]
    pad = (chunk - n % chunk) % chunk
    q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))  # (b, h, n + pad, d)
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    b, h, m, dk = q.shape
    c = lambda t: t.view(b, h, m // chunk, chunk, t.shape[-1])  # noqa: E731
    kv = (c(fk).mT @ c(v)).cumsum(2) - c(fk).mT @ c(v)  # (b, h, chunks, dk, dv): earlier chunks
    kz = c(fk).sum(3).cumsum(2) - c(fk).sum(3)  # (b, h, chunks, dk)
    scores = (c(fq) @ c(fk).mT).tril()  # (b, h, chunks, chunk, chunk)
    top = scores @ c(v) + c(fq) @ kv
    bottom = scores.sum(-1, keepdim=True) + c(fq) @ kz[..., None]
    return (top / bottom).reshape(b, h, m, -1)[:, :, :n]


def delta_in_fla_layout(q, k, v, alpha, beta, state=None):
    """flash-linear-attention's (dk, dv) layout inside (fla/ops/gated_delta_rule/naive.py, without
    its query scale, with the gate itself), the exercise's (dv, dk) memory at the boundaries."""
    b, h, n, dk = k.shape
    H = k.new_zeros(b, h, dk, v.shape[-1]) if state is None else state.mT
    o = torch.zeros_like(v)
    for i in range(n):
        H = H * alpha[:, :, i, None, None]
        err = (v[:, :, i] - (H * k[:, :, i, :, None]).sum(-2)) * beta[:, :, i, None]
        H = H + k[:, :, i].unsqueeze(-1) * err.unsqueeze(-2)
        o[:, :, i] = torch.einsum("bhd,bhdm->bhm", q[:, :, i], H)
    return o, H.mT


LINEAR_CORRECT = [linear_by_cumsum]
CHUNK_CORRECT = [chunked_by_prefix_quadratic, chunked_padded]
DELTA_CORRECT = [delta_as_householder, delta_in_fla_layout]
