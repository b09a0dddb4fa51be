"""Mistakes of chapter 09: attention in today's LLMs."""

from . import mistake

# ----------------------------------------------------------------- attention in today's LLMs (09)
mistake("window_not_bool",
        "The mask must be a bool tensor (True = may attend), as SDPA's attn_mask reads it; a float mask "
        "of 0s and 1s would be *added* to the scores instead of hiding anything.",
        "return the comparison itself, e.g. (distance >= 0) & (distance < window), without .float() or .int().")
mistake("window_inverted",
        "Your mask is inverted: True where the query must *not* look. That is nn.MultiheadAttention's "
        "convention; SDPA and this exercise read True as 'may attend'.",
        "return the allowed positions, 0 <= i - j < window, not the hidden ones (or apply ~ once more).")
mistake("window_cut_short",
        "Each query sees one key too few: window - 1 keys instead of window (itself plus window - 1 "
        "before it). The same off-by-one cut a sliding-window KV cache one token short in "
        "LLMs-from-scratch (#1008).",
        "a key j is allowed when 0 <= i - j < window: window values of i - j, from 0 to window - 1.")
mistake("window_one_too_many",
        "Each query sees one key too many: window + 1 keys (i - j <= window) instead of window. Mistral's "
        "Flash Attention path in Hugging Face transformers had this off-by-one (#29623): the model then "
        "attends further back than it was trained to.",
        "use a strict comparison: i - j < window.")
mistake("window_not_causal",
        "Your band is symmetric: it also lets a query see the window - 1 keys *after* it (|i - j| < window), "
        "so future tokens leak in.",
        "keep the causal half only: (i - j >= 0) & (i - j < window).")
mistake("window_top_left",
        "With fewer queries than keys you numbered the queries 0 .. n_queries - 1 (aligned to the top "
        "left, like SDPA's is_causal=True). The queries are the *newest* tokens, positions "
        "n_keys - n_queries .. n_keys - 1.",
        "query positions: torch.arange(n_keys - n_queries, n_keys); key positions: torch.arange(n_keys).")
mistake("mask_device_ignored",
        "The mask ignores the device argument: torch.{made}(...) is called without device=..., so the "
        "mask is always made on the CPU. On a GPU it then meets CUDA scores and SDPA fails with "
        "'Expected all tensors to be on the same device'.",
        "pass device=device to every torch.arange / torch.ones that builds the mask.")
mistake("is_causal_top_left",
        "You used a causal mask aligned to the top left (SDPA's is_causal=True, or ones(n_q, n_k).tril()). "
        "With fewer queries than keys the new tokens then see only the first keys instead of all earlier "
        "ones (pytorch/pytorch#103082).",
        "build the bottom-right mask: sliding_window_mask(n_q, n_k, n_k, device=q.device), and pass it as attn_mask.")
mistake("cache_mask_missing",
        "You attended without a mask. That is right for a single new token (it may see every cached key), "
        "but with several new tokens each one sees the new tokens after it.",
        "mask the future even in cached steps: attn_mask=sliding_window_mask(n_q, n_k, n_k, device=q.device).")
mistake("padding_mask_inverted",
        "Your mask is inverted at the real tokens: they attend only to padding and future keys. This is "
        "what happens when nn.MultiheadAttention's masks (True = hidden) are given to SDPA (True = may attend).",
        "SDPA's bool attn_mask is True where a query may attend: causal & real key.")
mistake("padding_ignored",
        "The real tokens also attend to the padded keys (your mask hides the future but not the padding, "
        "or hides padded *queries* instead of padded keys). With left padding the padding sits before "
        "the text, so it leaks into every real token.",
        "combine the causal mask with the keys' mask: causal & real[:, None, None, :] (the last axis is the keys).")
mistake("padding_not_causal",
        "Your mask hides padded keys but not the future: each real token sees the real tokens after it.",
        "combine both: causal (n, n).tril() & real[:, None, None, :].")
mistake("padding_nan_rows",
        "The real tokens are right, but the output contains NaN (or inf) at padded query positions. A padded "
        "query that may see no key gets a row of -inf scores, and softmax of that row is 0/0 = NaN "
        "(pytorch/pytorch#103749, #110213); the NaN then spreads through later layers and the loss.",
        "let every query see at least itself (allowed | torch.eye(n, dtype=torch.bool)) or overwrite the "
        "padded rows afterwards: torch.where(real[:, None, :, None], context, 0.0).")
mistake("rope_layout_mixed",
        "You rotated interleaved pairs (0, 1), (2, 3), ... The exercise uses the split-halves layout, pairs "
        "(i, i + hd/2), as Hugging Face's Llama does. Both are RoPE, but weights trained with one layout give "
        "wrong scores with the other.",
        "first, second = x.chunk(2, dim=-1); rotate (first, second) with cos and sin of shape (n, hd/2).")
mistake("rope_rotation_reversed",
        "Your pairs turn the wrong way: (a cos + b sin, -a sin + b cos) rotates by minus the angle. Scores "
        "still depend only on distances, but on the opposite ones of a model trained the usual way.",
        "a pair (a, b) becomes (a cos - b sin, a sin + b cos).")
mistake("rope_frequency_exponent",
        "Your frequencies are off: pair i must turn by base ** (-2i / hd), the exponent running over the "
        "even numbers 0, 2, 4, ... divided by hd.",
        "use rope_angles(positions, hd, base), or base ** (-torch.arange(0, hd, 2) / hd).")
mistake("rope_positions_ignored",
        "You rotated by the token's index 0 .. n-1 instead of the positions passed in. In cached generation "
        "the new token's position is not 0.",
        "compute the angles from the positions argument: rope_angles(positions, hd, base).")
mistake("rope_base_ignored",
        "The base argument is ignored: with base=500,000 (Llama 3) your angles still use 10,000.",
        "pass base on: rope_angles(positions, hd, base).")
mistake("gqa_repeat_not_interleave",
        "Your heads are copied with repeat, which tiles the groups (0 1 0 1 ...): query head j then reads "
        "group j % g instead of j // n_rep. The shape is right, but every checkpoint (Llama, Mistral, "
        "Hugging Face's repeat_kv) expects consecutive query heads to share a group.",
        "kv.repeat_interleave(n_rep, dim=1): copies each group in place (0 0 1 1 ...).")
mistake("gqa_repeat_wrong_axis",
        "You copied along the wrong axis: the key/value heads are axis 1 of (b, g, n, hd), but your copies "
        "went along the tokens or the batch.",
        "kv.repeat_interleave(n_rep, dim=1).")
