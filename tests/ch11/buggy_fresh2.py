"""A second fresh set of wrong answers to chapter 11's exercises 1 to 3 (counting the cache, MLA, MLA
absorbed), taken from public repositories and issue threads that the earlier collections did not
use, and adapted minimally to the exercise's interface, the bug kept as the source has it. Collected
by a reviewer who had read neither the checks nor their catalogue. Each docstring: the source, the
bug in one sentence, the cause a teacher would name. Exercises 4 to 6: ``buggy_fresh2_recurrent.py``;
7 and 8: ``buggy_fresh2_sparse_sharing.py``; the verdicts: ``cases_fresh2.py``."""

import math

import torch

import course_utils as cu

apply_rope = cu.chapters.apply_rope
sliding_window_mask = cu.chapters.sliding_window_mask


# ---------------------------------------------------------------- exercise 1: kv_cache_bytes


def kv_window_ignored(layout, context, batch=1, bytes_per_value=2):
    """gpustack/gguf-parser-go, issue #32 ("KV cache over-estimated for SWA architectures missing
    from the sliding-window pattern table"): an architecture outside the hard-coded switch keeps
    pattern 1 and "is charged a full, context-scaled KV cache on all blocks", though the GGUF
    declares attention.sliding_window. Cause: the window is ignored, every cache keeps every token."""
    caches = layout.layers // layout.layers_per_cache
    per_token = (
        layout.latent_dim + layout.rope_dim
        if layout.latent_dim
        else 2 * layout.kv_heads * layout.head_dim
    )
    return batch * caches * context * per_token * bytes_per_value


def kv_shared_layers_counted(layout, context, batch=1, bytes_per_value=2):
    """gpustack/gguf-parser-go, issue #32, second finding: "layers that hold no KV cache at all are
    not modeled" (gemma3n's n_layer_kv_from_start, gemma4's shared_kv_layers): every block is charged
    a cache. Cause: layers that read another layer's cache (layers_per_cache) are counted as caching."""
    per_token = (
        layout.latent_dim + layout.rope_dim
        if layout.latent_dim
        else 2 * layout.kv_heads * layout.head_dim
    )
    windowed = layout.windowed_caches
    full = layout.layers - windowed
    tokens = windowed * min(context, layout.window or context) + full * context
    return batch * tokens * per_token * bytes_per_value


def kv_mla_latent_only(layout, context, batch=1, bytes_per_value=2):
    """FlyTOmeLight/llm-cal, src/llm_cal/architecture/formulas/kv_cache.py at ca137f6
    (_per_layer_per_token_bytes): "MLA: KV is compressed into a single latent vector of size
    kv_lora_rank ... it's NOT 2 * kv_lora_rank", returning kv_lora_rank * dtype_bytes. Cause: MLA's
    shared rotary key (rope_dim numbers per token) is not counted."""
    caches = layout.layers // layout.layers_per_cache
    per_token = layout.latent_dim if layout.latent_dim else 2 * layout.kv_heads * layout.head_dim
    windowed = layout.windowed_caches
    tokens = windowed * min(context, layout.window or context) + (caches - windowed) * context
    return batch * tokens * per_token * bytes_per_value


def kv_window_caps_every_layer(layout, context, batch=1, bytes_per_value=2):
    """FlyTOmeLight/llm-cal, same file (compute_kv_cache_bytes, step 1): one effective_seq =
    min(seq_len, sliding_window) multiplies n_layers, so a model with a window in some layers (Gemma
    3: 22 of 26) is capped in all of them; the same mistake pytorch/executorch PR #19251 describes
    of #19250 ("caps every layer's KV cache at a single global window"). Cause: the window applied to
    the full-attention caches too (windowed_caches ignored)."""
    caches = layout.layers // layout.layers_per_cache
    per_token = (
        layout.latent_dim + layout.rope_dim
        if layout.latent_dim
        else 2 * layout.kv_heads * layout.head_dim
    )
    effective = min(context, layout.window) if layout.window else context
    return batch * caches * effective * per_token * bytes_per_value


def kv_mla_as_expanded_heads(layout, context, batch=1, bytes_per_value=2):
    """jundot/omlx, PR #2626 (the bug it fixes): when the MLA estimator does not recognise the config,
    "the generic uniform-KV fallback is used. That fallback charges num_kv_heads * head_dim expanded
    K/V that MLA never materializes" (5.4x over). Cause: an MLA layout counted as keys and values per
    head instead of latent + rotary key."""
    caches = layout.layers // layout.layers_per_cache
    per_token = 2 * layout.kv_heads * layout.head_dim
    windowed = layout.windowed_caches
    tokens = windowed * min(context, layout.window or context) + (caches - windowed) * context
    return batch * tokens * per_token * bytes_per_value


def kv_mla_latent_twice(layout, context, batch=1, bytes_per_value=2):
    """A C++ memory predictor in the code index (memory_predictor.cpp, index id 60518614224; the
    index does not name its repository; LMCache's calculator had the same formula, PR #694, not
    used here): "MLA: 2 * kv_lora_rank + qk_rope_head_dim per layer", as if the latent were a key
    and a value. Cause: the one shared latent counted twice."""
    caches = layout.layers // layout.layers_per_cache
    per_token = (
        2 * layout.latent_dim + layout.rope_dim
        if layout.latent_dim
        else 2 * layout.kv_heads * layout.head_dim
    )
    windowed = layout.windowed_caches
    tokens = windowed * min(context, layout.window or context) + (caches - windowed) * context
    return batch * tokens * per_token * bytes_per_value


# ---------------------------------------------------------------- exercise 2: mla_attention


def _mla_parts(x, w, cache, positions):
    """The new tokens' latent and rotary key appended to the cache, as the exercise asks."""
    latent = x @ w.w_dkv.T  # (b, n, dc)
    rope_keys = apply_rope(x @ w.w_kr.T, positions)  # (b, n, dr)
    if cache is not None:
        latent = torch.cat([cache[0], latent], dim=1)
        rope_keys = torch.cat([cache[1], rope_keys], dim=1)
    return latent, rope_keys


def mla_mask_only_when_given(x, w, cache=None, attention_mask=None):
    """junfanz1/MiniGPT-and-DeepSeek-MLA-Multi-Head-Latent-Attention, "Multi-Head Latent
    Attention.py" (MLA.forward; issue #1 "bugs in MLA attention" lists others in the same file): the
    causal mask is applied only ``if attention_mask is not None``, and the file's own test_mla calls
    it without one. Cause: no causal mask, every query sees later tokens."""
    b, n, _ = x.shape
    h, hd, dr = w.heads, w.head_dim, w.rope_dim
    start = 0 if cache is None else cache[0].shape[1]
    positions = torch.arange(start, start + n, device=x.device)
    latent, rope_keys = _mla_parts(x, w, cache, positions)
    N = latent.shape[1]
    q = (x @ w.w_q.T).view(b, n, h, hd).transpose(1, 2)
    q_rope = apply_rope((x @ w.w_qr.T).view(b, n, h, dr).transpose(1, 2), positions)
    k = (latent @ w.w_uk.T).view(b, N, h, hd).transpose(1, 2)
    v = (latent @ w.w_uv.T).view(b, N, h, hd).transpose(1, 2)
    query = torch.cat([q, q_rope], dim=-1)
    key = torch.cat([k, rope_keys[:, None].expand(b, h, N, dr)], dim=-1)
    scores = query @ key.transpose(2, 3) / math.sqrt(hd + dr)
    if attention_mask is not None:
        scores = scores.masked_fill(attention_mask == 0, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    out = (weights @ v).transpose(1, 2).reshape(b, n, h * hd)
    return out @ w.w_o.T, (latent, rope_keys)


def mla_query_rope_from_zero(x, w, cache=None):
    """RobertCsordas/moeut, PR #6 "fix rope positions for incremental output": "the RoPE query offset
    was computed before cached K/V tensors were concatenated, so token-by-token decoding could rotate
    queries as if they were still at position 0". Cause: with a cache, the new queries are rotated at
    positions 0.. n-1 instead of N0 .. N-1 (the keys are right)."""
    b, n, _ = x.shape
    h, hd, dr = w.heads, w.head_dim, w.rope_dim
    start = 0 if cache is None else cache[0].shape[1]
    key_positions = torch.arange(start, start + n, device=x.device)
    query_positions = torch.arange(n, device=x.device)  # the offset taken before the cache
    latent, rope_keys = _mla_parts(x, w, cache, key_positions)
    N = latent.shape[1]
    q = (x @ w.w_q.T).view(b, n, h, hd).transpose(1, 2)
    q_rope = apply_rope((x @ w.w_qr.T).view(b, n, h, dr).transpose(1, 2), query_positions)
    k = (latent @ w.w_uk.T).view(b, N, h, hd).transpose(1, 2)
    v = (latent @ w.w_uv.T).view(b, N, h, hd).transpose(1, 2)
    scores = (q @ k.mT + q_rope @ rope_keys[:, None].mT) / math.sqrt(hd + dr)
    scores = scores.masked_fill(~sliding_window_mask(n, N, N, device=x.device), -torch.inf)
    out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, n, h * hd)
    return out @ w.w_o.T, (latent, rope_keys)


def _rope_interleaved(t, positions):
    """RoPE on adjacent pairs (2i, 2i + 1), DeepSeek's reference layout, where the chapter's
    apply_rope turns (i, i + width/2)."""
    width = t.shape[-1]
    inv = 1.0 / (10000 ** (torch.arange(0, width, 2, device=t.device, dtype=t.dtype) / width))
    angles = positions.to(t.dtype)[:, None] * inv  # (n, width/2)
    cos, sin = angles.cos(), angles.sin()
    even, odd = t[..., 0::2], t[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


def mla_rope_interleaved(x, w, cache=None):
    """huggingface/optimum-intel, PR #1877 (bug 2, "RoPE-interleave"): the DeepSeek-V3 attention
    patch rotated the rotary parts with the half-split (rotate_half) pairing where the checkpoint
    needs the interleaved one, so "silently corrupt MLA attention". Adapted the other way round: the
    rotary parts turned on adjacent pairs where this chapter's apply_rope turns (i, i + dr/2). Cause:
    RoPE's pairing of coordinates differs from the one the course uses, so the cached rotary keys
    and the scores differ."""
    b, n, _ = x.shape
    h, hd, dr = w.heads, w.head_dim, w.rope_dim
    start = 0 if cache is None else cache[0].shape[1]
    positions = torch.arange(start, start + n, device=x.device)
    latent = x @ w.w_dkv.T
    rope_keys = _rope_interleaved(x @ w.w_kr.T, positions)
    if cache is not None:
        latent = torch.cat([cache[0], latent], dim=1)
        rope_keys = torch.cat([cache[1], rope_keys], dim=1)
    N = latent.shape[1]
    q = (x @ w.w_q.T).view(b, n, h, hd).transpose(1, 2)
    q_rope = _rope_interleaved((x @ w.w_qr.T).view(b, n, h, dr).transpose(1, 2), positions)
    k = (latent @ w.w_uk.T).view(b, N, h, hd).transpose(1, 2)
    v = (latent @ w.w_uv.T).view(b, N, h, hd).transpose(1, 2)
    scores = (q @ k.mT + q_rope @ rope_keys[:, None].mT) / math.sqrt(hd + dr)
    scores = scores.masked_fill(~sliding_window_mask(n, N, N, device=x.device), -torch.inf)
    out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, n, h * hd)
    return out @ w.w_o.T, (latent, rope_keys)


def mla_mask_minus_ten_thousand(x, w, cache=None):
    """google-research/bert, modeling.py (attention_layer): the mask added to the scores as
    ``adder = (1.0 - attention_mask) * -10000.0``, a value that has to out-weigh every score.
    Adapted to MLA's causal mask. Cause: the future is hidden by -1e4 instead of -inf, so a score
    over about 1e4 in size (large activations) lets a later token through; exact on small inputs."""
    b, n, _ = x.shape
    h, hd, dr = w.heads, w.head_dim, w.rope_dim
    start = 0 if cache is None else cache[0].shape[1]
    positions = torch.arange(start, start + n, device=x.device)
    latent, rope_keys = _mla_parts(x, w, cache, positions)
    N = latent.shape[1]
    q = (x @ w.w_q.T).view(b, n, h, hd).transpose(1, 2)
    q_rope = apply_rope((x @ w.w_qr.T).view(b, n, h, dr).transpose(1, 2), positions)
    k = (latent @ w.w_uk.T).view(b, N, h, hd).transpose(1, 2)
    v = (latent @ w.w_uv.T).view(b, N, h, hd).transpose(1, 2)
    scores = (q @ k.mT + q_rope @ rope_keys[:, None].mT) / math.sqrt(hd + dr)
    allowed = sliding_window_mask(n, N, N, device=x.device).to(scores.dtype)
    scores = scores + (1.0 - allowed) * -10000.0
    out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, n, h * hd)
    return out @ w.w_o.T, (latent, rope_keys)


def mla_rope_keys_cached_unrotated(x, w, cache=None):
    """mit-han-lab/streaming-llm, streaming_llm/pos_shift/modify_llama.py
    (llama_pos_shift_attention_forward): the keys are cached before RoPE and every cached key is
    rotated again on each call (``key_position_ids = torch.arange(kv_seq_len)``). Adapted: the
    rotary keys x @ w_kr^T cached unrotated and all N rotated at positions 0 .. N-1 on every call.
    The outputs are right; the cache is not the one the exercise asks for (the chapter: "cached
    already rotated, so it never needs re-rotating"). Cause: the rotary key cached before its
    rotation."""
    b, n, _ = x.shape
    h, hd, dr = w.heads, w.head_dim, w.rope_dim
    start = 0 if cache is None else cache[0].shape[1]
    latent, raw_keys = x @ w.w_dkv.T, x @ w.w_kr.T
    if cache is not None:
        latent = torch.cat([cache[0], latent], dim=1)
        raw_keys = torch.cat([cache[1], raw_keys], dim=1)
    N = latent.shape[1]
    rope_keys = apply_rope(raw_keys, torch.arange(N, device=x.device))
    positions = torch.arange(start, start + n, device=x.device)
    q = (x @ w.w_q.T).view(b, n, h, hd).transpose(1, 2)
    q_rope = apply_rope((x @ w.w_qr.T).view(b, n, h, dr).transpose(1, 2), positions)
    k = (latent @ w.w_uk.T).view(b, N, h, hd).transpose(1, 2)
    v = (latent @ w.w_uv.T).view(b, N, h, hd).transpose(1, 2)
    scores = (q @ k.mT + q_rope @ rope_keys[:, None].mT) / math.sqrt(hd + dr)
    scores = scores.masked_fill(~sliding_window_mask(n, N, N, device=x.device), -torch.inf)
    out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, n, h * hd)
    return out @ w.w_o.T, (latent, raw_keys)


# ---------------------------------------------------------------- exercise 3: mla_absorbed


def _absorbed(x, w, cache, query_positions=None, causal=True, w_uk_blocks=None):
    """The absorbed form as the exercise asks; the fixtures below change one part each."""
    b, n, _ = x.shape
    h, hd, dr = w.heads, w.head_dim, w.rope_dim
    start = 0 if cache is None else cache[0].shape[1]
    positions = torch.arange(start, start + n, device=x.device)
    latent, rope_keys = _mla_parts(x, w, cache, positions)
    N, dc = latent.shape[1], latent.shape[2]
    q = (x @ w.w_q.T).view(b, n, h, hd).transpose(1, 2)
    qp = positions if query_positions is None else query_positions
    q_rope = apply_rope((x @ w.w_qr.T).view(b, n, h, dr).transpose(1, 2), qp)
    blocks = w.w_uk.view(h, hd, dc) if w_uk_blocks is None else w_uk_blocks
    q_lat = q @ blocks  # (b, h, n, dc)
    scores = (q_lat @ latent[:, None].mT + q_rope @ rope_keys[:, None].mT) / math.sqrt(hd + dr)
    if causal:
        scores = scores.masked_fill(~sliding_window_mask(n, N, N, device=x.device), -torch.inf)
    mixed = torch.softmax(scores, dim=-1) @ latent[:, None]  # (b, h, n, dc)
    context = mixed @ w.w_uv.view(h, hd, dc).mT  # (b, h, n, hd)
    return context.transpose(1, 2).reshape(b, n, h * hd) @ w.w_o.T, (latent, rope_keys)


def absorbed_w_uk_reshaped_not_transposed(x, w, cache=None):
    """vllm-project/vllm-ascend, PR #3850 "Fix mlapo accuracy problem related with weight
    processing": an MLA weight was re-laid out with ``.contiguous()`` where a ``.t().contiguous()``
    was needed, so the fused kernel read a reshaped, not a transposed, matrix. Adapted to the
    absorbed query: the heads' (hd, dc) blocks of w_uk taken as ``view(h, dc, hd).mT`` (the shape
    right, the numbers not). Cause: W_uk's per-head blocks built by a reshape instead of a view of
    the (h * hd, dc) rows, so q_lat is not q @ W_uk,h."""
    h, hd = w.heads, w.head_dim
    dc = w.latent_dim
    return _absorbed(x, w, cache, w_uk_blocks=w.w_uk.reshape(h, dc, hd).mT)


def absorbed_query_rope_from_zero(x, w, cache=None):
    """RobertCsordas/moeut, PR #6 (see mla_query_rope_from_zero), in the absorbed form: the query
    offset taken before the cache is concatenated. Cause: with a cache, the rotary queries are turned
    at positions 0 .. n-1 instead of N0 .. N-1."""
    n = x.shape[1]
    return _absorbed(x, w, cache, query_positions=torch.arange(n, device=x.device))


def absorbed_no_causal_mask(x, w, cache=None):
    """junfanz1/MiniGPT-and-DeepSeek-MLA-Multi-Head-Latent-Attention (see mla_mask_only_when_given):
    the causal mask applied only when one is passed, here never. In the absorbed form, which decodes
    one token at a time where a mask changes nothing, the omission shows only on a prompt. Cause: no
    causal mask."""
    return _absorbed(x, w, cache, causal=False)


CHECK = {  # fixture -> the self-check it answers
    **dict.fromkeys(
        [
            "kv_window_ignored",
            "kv_shared_layers_counted",
            "kv_mla_latent_only",
            "kv_window_caps_every_layer",
            "kv_mla_as_expanded_heads",
            "kv_mla_latent_twice",
        ],
        "check_kv_cache_bytes",
    ),
    **dict.fromkeys(
        [
            "mla_mask_only_when_given",
            "mla_query_rope_from_zero",
            "mla_rope_interleaved",
            "mla_mask_minus_ten_thousand",
            "mla_rope_keys_cached_unrotated",
        ],
        "check_mla_attention",
    ),
    **dict.fromkeys(
        [
            "absorbed_w_uk_reshaped_not_transposed",
            "absorbed_query_rope_from_zero",
            "absorbed_no_causal_mask",
        ],
        "check_mla_absorbed",
    ),
}
