"""Code taught by chapter 11, exported from its `#| export` cells.

Generated from solutions/11_past_the_kv_wall.ipynb by `make exercises`; do not edit: edit the notebook.
"""

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from ..ch06 import merge_heads, split_heads
from ..ch09 import apply_rope, sliding_window_mask

__all__ = [
    "KVLayout", "PUBLISHED", "MAX_CONTEXT", "STATED_CONTEXT", "QUERY_HEADS", "beyond_limit",
    "kv_cache_bytes", "layout_variants", "MLAWeights", "mla_weights", "mla_attention", "mla_absorbed",
    "feature_map", "linear_attention_quadratic", "linear_attention_recurrent", "linear_attention_chunked",
    "gated_delta_rule", "recall_texts", "RecallModel", "lightning_index", "attend", "sparse_attention",
    "stack_weights", "shared_kv_forward", "DECODE_KINDS", "decode_cost", "sparse_decode_step",
    "mla_keys_cached",
]


@dataclass(frozen=True)
class KVLayout:
    """What a model keeps in its KV cache, enough to count the bytes.

    layers: attention layers; kv_heads, head_dim: the key/value heads and their width;
    window: tokens a windowed cache keeps (None: no window); windowed_caches: how many of the
    caches are windowed (the others keep every token); latent_dim, rope_dim: MLA caches one
    latent of latent_dim numbers and one shared rotary key of rope_dim numbers per token
    (latent_dim 0: keys and values are cached); layers_per_cache: layers that read one cache.
    """

    layers: int
    kv_heads: int
    head_dim: int
    window: int | None = None
    windowed_caches: int = 0
    latent_dim: int = 0
    rope_dim: int = 0
    layers_per_cache: int = 1

    def __post_init__(self):
        for name in ("layers", "kv_heads", "head_dim", "layers_per_cache"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}.")
        if self.layers % self.layers_per_cache:
            raise ValueError(
                f"layers_per_cache={self.layers_per_cache} must divide layers={self.layers}."
            )
        caches = self.layers // self.layers_per_cache
        if not 0 <= self.windowed_caches <= caches:
            raise ValueError(
                f"windowed_caches must lie in 0..{caches}, got {self.windowed_caches!r}."
            )
        if (self.window is None) != (self.windowed_caches == 0):
            raise ValueError(
                "give a window exactly when some caches are windowed (windowed_caches > 0)."
            )
        if self.window is not None and self.window < 1:
            raise ValueError(f"window must be a positive int or None, got {self.window!r}.")
        if self.latent_dim < 0 or self.rope_dim < 0 or (self.rope_dim and not self.latent_dim):
            raise ValueError("latent_dim and rope_dim must be >= 0, and rope_dim needs a latent.")


PUBLISHED = {
    "GPT-2 small": KVLayout(layers=12, kv_heads=12, head_dim=64),
    "Llama 3 8B": KVLayout(layers=32, kv_heads=8, head_dim=128),
    "Mistral 7B": KVLayout(layers=32, kv_heads=8, head_dim=128, window=4096, windowed_caches=32),
    "Gemma 3 1B": KVLayout(layers=26, kv_heads=1, head_dim=256, window=512, windowed_caches=22),
    "Qwen3 8B": KVLayout(layers=36, kv_heads=8, head_dim=128),
    "DeepSeek-V3": KVLayout(layers=61, kv_heads=128, head_dim=128, latent_dim=512, rope_dim=64),
}
MAX_CONTEXT = {  # max_position_embeddings (n_positions for GPT-2) of each config
    "GPT-2 small": 1024,
    "Llama 3 8B": 8192,
    "Mistral 7B": 32768,
    "Gemma 3 1B": 32768,
    "Qwen3 8B": 40960,
    "DeepSeek-V3": 163840,
}
STATED_CONTEXT = {  # what the makers state: trained (Mistral), native (Qwen3), advertised (V3)
    **MAX_CONTEXT,
    "Mistral 7B": 8192,
    "Qwen3 8B": 32768,
    "DeepSeek-V3": 131072,
}
QUERY_HEADS = {  # num_attention_heads of each config: what MHA would give a key/value head each
    "GPT-2 small": 12,
    "Llama 3 8B": 32,
    "Mistral 7B": 32,
    "Gemma 3 1B": 4,
    "Qwen3 8B": 32,
    "DeepSeek-V3": 128,
}


def beyond_limit(model, context):
    """A note for a context past what the model reads ("" when it reads it): past its config
    limit, or within it but past the context its makers state (Llama 3 8B: what Llama 3.1 8B,
    the same shape, reads instead)."""
    limit, stated = MAX_CONTEXT[model], STATED_CONTEXT[model]
    if context > limit:
        note = f"beyond its {limit:,}-token config limit"
    elif context > stated:
        return f"past its stated {stated:,} tokens (config: {limit:,})"
    else:
        return ""
    if model == "Llama 3 8B" and context <= 131072:
        note += " (Llama 3.1 8B, the same shape, reads it)"
    return note


def kv_cache_bytes(layout, context, batch=1, bytes_per_value=2):
    """Bytes held by the KV cache of `batch` texts of `context` tokens under `layout`."""
    caches = layout.layers // layout.layers_per_cache
    if layout.latent_dim:
        per_token = layout.latent_dim + layout.rope_dim  # one latent and one rotary key
    else:
        per_token = 2 * layout.kv_heads * layout.head_dim  # a key and a value per key/value head
    windowed = layout.windowed_caches
    tokens = windowed * min(context, layout.window or context) + (caches - windowed) * context
    return batch * tokens * per_token * bytes_per_value


def layout_variants(model):
    """The published layout of `model` (a key of PUBLISHED) and its shape under the other layouts;
    a str saying why where the shape cannot take a layout. An MLA model's variants cache keys of
    head_dim + rope_dim and values of head_dim, as DeepSeek-V3's attn_impl="naive" does: counted
    as two numbers of head_dim + rope_dim / 2 per key/value head, the same total."""
    if model not in PUBLISHED:
        raise ValueError(f"model must be one of {list(PUBLISHED)}, got {model!r}.")
    base, heads = PUBLISHED[model], QUERY_HEADS[model]
    plain = KVLayout(base.layers, base.kv_heads, base.head_dim + base.rope_dim // 2)
    gqa_8 = f"not possible: {heads} query heads do not form 8 groups"
    if heads > 8 and heads % 8 == 0:  # 8 groups of more than one query head each
        gqa_8 = replace(plain, kv_heads=8)
    pairs = f"not possible: {base.layers} layers do not pair up"
    if base.layers % 2 == 0:
        pairs = replace(plain, layers_per_cache=2)
    return {
        "published": base,
        "MHA": replace(plain, kv_heads=heads),
        "GQA 8": gqa_8,
        "MQA": replace(plain, kv_heads=1),
        "window 4,096": replace(plain, window=4096, windowed_caches=base.layers),
        "2 layers per cache": pairs,
        "MLA 512 + 64": replace(plain, latent_dim=512, rope_dim=64),
    }


@dataclass
class MLAWeights:
    """One MLA layer's projections, each (out, in) like nn.Linear.weight."""

    w_q: torch.Tensor  # queries without rotation, h * hd rows by d
    w_qr: torch.Tensor  # rotary queries, one per head, h * dr by d
    w_dkv: torch.Tensor  # down to the latent, dc by d
    w_kr: torch.Tensor  # the one rotary key all heads share, dr by d
    w_uk: torch.Tensor  # latent up to every head's key, h * hd by dc
    w_uv: torch.Tensor  # latent up to every head's value, h * hd by dc
    w_o: torch.Tensor  # heads back to the model width, d by h * hd
    heads: int
    head_dim: int
    rope_dim: int

    @property
    def latent_dim(self):
        """dc, the width of the cached latent (the rows of w_dkv)."""
        return self.w_dkv.shape[0]

    def to(self, *args, **kwargs):
        """A copy with every weight moved or cast like Tensor.to (device and/or dtype)."""
        fields = vars(self).items()
        moved = {k: v.to(*args, **kwargs) if torch.is_tensor(v) else v for k, v in fields}
        return MLAWeights(**moved)


def mla_weights(d, heads, head_dim, latent_dim, rope_dim, seed=0):
    """Random MLA weights from their own generator, uniform in +-1/sqrt(fan_in) like nn.Linear."""
    sizes = {"d": d, "heads": heads, "head_dim": head_dim, "latent_dim": latent_dim}
    for name, value in sizes.items():
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}.")
    if not isinstance(rope_dim, int) or rope_dim < 2 or rope_dim % 2:
        raise ValueError(f"rope_dim must be an even int >= 2 (RoPE turns pairs), got {rope_dim!r}.")
    draws = torch.Generator().manual_seed(seed)

    def linear(n_out, n_in):
        return (torch.rand(n_out, n_in, generator=draws) * 2 - 1) / n_in**0.5  # (n_out, n_in)

    return MLAWeights(
        w_q=linear(heads * head_dim, d), w_qr=linear(heads * rope_dim, d),
        w_dkv=linear(latent_dim, d), w_kr=linear(rope_dim, d),
        w_uk=linear(heads * head_dim, latent_dim), w_uv=linear(heads * head_dim, latent_dim),
        w_o=linear(d, heads * head_dim), heads=heads, head_dim=head_dim, rope_dim=rope_dim,
    )


def mla_attention(x, w, cache=None):
    """MLA without absorption: every head's key and value computed from the cached latent."""
    b, n, _ = x.shape
    h, hd, dr = w.heads, w.head_dim, w.rope_dim
    start = 0 if cache is None else cache[0].shape[1]
    positions = torch.arange(start, start + n, device=x.device)  # (n,)
    latent = x @ w.w_dkv.T  # (b, n, dc)
    rope_keys = apply_rope(x @ w.w_kr.T, positions)  # (b, n, dr)
    if cache is not None:
        latent = torch.cat([cache[0], latent], dim=1)  # (b, N, dc)
        rope_keys = torch.cat([cache[1], rope_keys], dim=1)  # (b, N, dr)
    N = latent.shape[1]
    q = (x @ w.w_q.T).view(b, n, h, hd).transpose(1, 2)  # (b, h, n, hd)
    q_rope = (x @ w.w_qr.T).view(b, n, h, dr).transpose(1, 2)  # (b, h, n, dr)
    q_rope = apply_rope(q_rope, positions)  # (b, h, n, dr)
    k = (latent @ w.w_uk.T).view(b, N, h, hd).transpose(1, 2)  # (b, h, N, hd)
    v = (latent @ w.w_uv.T).view(b, N, h, hd).transpose(1, 2)  # (b, h, N, hd)
    scores = (q @ k.mT + q_rope @ rope_keys[:, None].mT) / math.sqrt(hd + dr)  # (b, h, n, N)
    allowed = sliding_window_mask(n, N, N, device=x.device)  # (n, N)
    weights = torch.softmax(scores.masked_fill(~allowed, -torch.inf), dim=-1)  # (b, h, n, N)
    context = (weights @ v).transpose(1, 2).reshape(b, n, h * hd)  # (b, n, h * hd)
    return context @ w.w_o.T, (latent, rope_keys)


def mla_absorbed(x, w, cache=None):
    """MLA with W_uk absorbed into the query and W_uv applied after the weighting."""
    b, n, _ = x.shape
    h, hd, dr = w.heads, w.head_dim, w.rope_dim
    start = 0 if cache is None else cache[0].shape[1]
    positions = torch.arange(start, start + n, device=x.device)  # (n,)
    latent = x @ w.w_dkv.T  # (b, n, dc)
    rope_keys = apply_rope(x @ w.w_kr.T, positions)  # (b, n, dr)
    if cache is not None:
        latent = torch.cat([cache[0], latent], dim=1)  # (b, N, dc)
        rope_keys = torch.cat([cache[1], rope_keys], dim=1)  # (b, N, dr)
    N, dc = latent.shape[1], latent.shape[2]
    q = (x @ w.w_q.T).view(b, n, h, hd).transpose(1, 2)  # (b, h, n, hd)
    q_rope = (x @ w.w_qr.T).view(b, n, h, dr).transpose(1, 2)  # (b, h, n, dr)
    q_rope = apply_rope(q_rope, positions)  # (b, h, n, dr)
    q_lat = q @ w.w_uk.view(h, hd, dc)  # (b, h, n, dc): the query moved into the latent space
    scores = q_lat @ latent[:, None].mT + q_rope @ rope_keys[:, None].mT  # (b, h, n, N)
    scores = scores / math.sqrt(hd + dr)  # (b, h, n, N)
    allowed = sliding_window_mask(n, N, N, device=x.device)  # (n, N)
    weights = torch.softmax(scores.masked_fill(~allowed, -torch.inf), dim=-1)  # (b, h, n, N)
    mixed = weights @ latent[:, None]  # (b, h, n, dc): weighted latents
    context = mixed @ w.w_uv.view(h, hd, dc).mT  # (b, h, n, hd)
    return context.transpose(1, 2).reshape(b, n, h * hd) @ w.w_o.T, (latent, rope_keys)


def feature_map(x):
    """elu(x) + 1: positive features, so every weight and every normaliser is > 0."""
    return F.elu(x) + 1


def linear_attention_quadratic(q, k, v):
    """(b, h, n, dk), (b, h, n, dk), (b, h, n, dv) -> (b, h, n, dv): causal, through an (n, n)
    matrix."""
    scores = (feature_map(q) @ feature_map(k).mT).tril()  # (b, h, n, n): the future set to 0
    return (scores @ v) / scores.sum(dim=-1, keepdim=True)  # (b, h, n, dv)


def linear_attention_recurrent(q, k, v, state=None):
    """Causal linear attention one token at a time; returns (out, (S, z))."""
    b, h, n, dk = q.shape
    fq, fk = feature_map(q), feature_map(k)  # (b, h, n, dk) each
    if state is None:
        S = q.new_zeros(b, h, dk, v.shape[-1])  # (b, h, dk, dv)
        z = q.new_zeros(b, h, dk)  # (b, h, dk)
    else:
        S, z = state
    outs = []
    for t in range(n):
        S = S + fk[:, :, t, :, None] * v[:, :, t, None, :]  # (b, h, dk, dv): + phi(k_t) v_t^T
        z = z + fk[:, :, t]  # (b, h, dk)
        top = (fq[:, :, t, None, :] @ S).squeeze(-2)  # (b, h, dv)
        outs.append(top / (fq[:, :, t] * z).sum(-1, keepdim=True))
    return torch.stack(outs, dim=2), (S, z)


def linear_attention_chunked(q, k, v, chunk):
    """Causal linear attention in chunks: quadratic inside a chunk, a state carried between."""
    b, h, n, dk = q.shape
    fq, fk = feature_map(q), feature_map(k)  # (b, h, n, dk) each
    S = q.new_zeros(b, h, dk, v.shape[-1])  # (b, h, dk, dv): the chunks so far
    z = q.new_zeros(b, h, dk)  # (b, h, dk)
    outs = []
    for lo in range(0, n, chunk):
        hi = min(lo + chunk, n)
        cq, ck, cv = fq[:, :, lo:hi], fk[:, :, lo:hi], v[:, :, lo:hi]  # (b, h, c, dk|dv)
        scores = (cq @ ck.mT).tril()  # (b, h, c, c)
        top = scores @ cv + cq @ S  # (b, h, c, dv)
        bottom = scores.sum(-1, keepdim=True) + (cq @ z[..., None])  # (b, h, c, 1)
        outs.append(top / bottom)
        S = S + ck.mT @ cv  # (b, h, dk, dv)
        z = z + ck.sum(dim=2)  # (b, h, dk)
    return torch.cat(outs, dim=2)  # (b, h, n, dv)


def gated_delta_rule(q, k, v, alpha, beta, state=None):
    """Gated DeltaNet's recurrence: decay by alpha, move S k towards v by beta, read S q."""
    b, h, n, dk = k.shape
    S = k.new_zeros(b, h, v.shape[-1], dk) if state is None else state  # (b, h, dv, dk)
    outs = []
    for t in range(n):
        kt, vt = k[:, :, t], v[:, :, t]  # (b, h, dk), (b, h, dv)
        S = alpha[:, :, t, None, None] * S  # (b, h, dv, dk): decay
        error = vt - (S @ kt[..., None]).squeeze(-1)  # (b, h, dv): what S gets wrong for k_t
        S = S + beta[:, :, t, None, None] * error[..., None] * kt[:, :, None, :]  # (b, h, dv, dk)
        outs.append((S @ q[:, :, t, :, None]).squeeze(-1))
    return torch.stack(outs, dim=2), S


def recall_texts(batch, generator, keys=16, values=16, pairs=8):
    """`batch` texts of `pairs` (key, value) writes, then a query key of the text: key and value ids
    (batch, pairs + 1), the query's value the blank id `values`; the newest value written for the
    query key (batch,); whether that key was written more than once (batch,)."""
    key_ids = torch.randint(keys, (batch, pairs + 1), generator=generator)  # (batch, pairs + 1)
    value_ids = torch.randint(values, (batch, pairs + 1), generator=generator)  # (batch, pairs + 1)
    rows = torch.arange(batch)  # (batch,)
    asked = torch.randint(pairs, (batch,), generator=generator)  # (batch,): which write to ask for
    key_ids[:, -1] = key_ids[rows, asked]  # ask for a key of the text
    value_ids[:, -1] = values  # the blank
    written = key_ids[:, :-1] == key_ids[:, -1:]  # (batch, pairs): where the query key was written
    newest = (written * torch.arange(1, pairs + 1)).argmax(dim=1)  # (batch,): its last write
    return key_ids, value_ids, value_ids[rows, newest], written.sum(dim=1) > 1


class RecallModel(torch.nn.Module):
    """Embed each (key, value) pair, mix the tokens with one head of `mixer` ("softmax",
    "linear attention" or "delta rule"), read the value off the last token."""

    def __init__(self, mixer, keys=16, values=16, width=32):
        super().__init__()
        self.mixer = mixer
        self.key_embedding = torch.nn.Embedding(keys, width)
        self.value_embedding = torch.nn.Embedding(values + 1, width)  # + the blank
        self.qkv = torch.nn.Linear(width, 3 * width, bias=False)
        self.gates = torch.nn.Linear(width, 2)  # alpha and beta of the delta rule, via a sigmoid
        with torch.no_grad():
            self.gates.bias.copy_(torch.tensor([3.0, 2.0]))  # at first alpha ~ 0.95, beta ~ 0.88
        self.read_out = torch.nn.Linear(width, values)

    def forward(self, key_ids, value_ids):
        x = self.key_embedding(key_ids) + self.value_embedding(value_ids)  # (b, n, width)
        q, k, v = self.qkv(x)[:, None].chunk(3, dim=-1)  # (b, 1, n, width) each: one head
        if self.mixer == "softmax":
            mixed = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (b, 1, n, width)
        elif self.mixer == "linear attention":
            mixed = linear_attention_quadratic(q, k, v)  # (b, 1, n, width)
        else:
            alpha, beta = torch.sigmoid(self.gates(x)).permute(2, 0, 1)[:, :, None]  # (b, 1, n)
            q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)  # (b, 1, n, width) each
            mixed = gated_delta_rule(q, k, v, alpha, beta)[0]  # (b, 1, n, width)
        return self.read_out(mixed[:, 0, -1])  # (b, values): the guess at the query


def lightning_index(q_index, k_index, head_weights):
    """DSA's index scores: (b, n, H, dI), (b, N, dI), (b, n, H) -> (b, n, N), the indexer
    heads' ReLU(q . k) summed with each query's head weights."""
    per_head = torch.relu(torch.einsum("bnhd,bsd->bnhs", q_index, k_index))  # (b, n, H, N)
    return (head_weights[..., None] * per_head).sum(dim=2)  # (b, n, N)


def attend(q, k, v, allowed):
    """Softmax attention over the keys `allowed` ((n, N) or (b, h, n, N) bool) -> (b, h, n, dv)."""
    scores = q @ k.mT / math.sqrt(q.shape[-1])  # (b, h, n, N)
    return torch.softmax(scores.masked_fill(~allowed, -torch.inf), dim=-1) @ v  # (b, h, n, dv)


def sparse_attention(q, k, v, index_scores, topk):
    """Each query attends to its topk earlier keys by index score (queries are the last n)."""
    n, N = q.shape[-2], k.shape[-2]
    causal = sliding_window_mask(n, N, N, device=q.device)  # (n, N)
    ranked = index_scores.masked_fill(~causal, -torch.inf)  # (b, n, N): the future cannot win
    order = ranked.sort(dim=-1, descending=True, stable=True).indices  # (b, n, N): ties, earliest
    chosen = order[..., :topk]  # (b, n, min(topk, N))
    keep = torch.zeros_like(ranked, dtype=torch.bool).scatter(-1, chosen, True)  # (b, n, N)
    return attend(q, k, v, keep[:, None] & causal)  # (b, h, n, dv)


def stack_weights(d, layers, seed=0):
    """Random weights of `layers` attention layers: dicts of w_q, w_k, w_v, w_o, each (d, d)."""
    draws = torch.Generator().manual_seed(seed)
    names = ("w_q", "w_k", "w_v", "w_o")
    return [
        {m: (torch.rand(d, d, generator=draws) * 2 - 1) / d**0.5 for m in names}
        for _ in range(layers)
    ]


def shared_kv_forward(x, layers, kv_source, heads, cache=None):
    """Attention layers where layer i reads the keys and values of layer kv_source[i]."""
    n = x.shape[1]
    cache = {} if cache is None else dict(cache)
    for i, w in enumerate(layers):
        q = split_heads(x @ w["w_q"].T, heads)  # (b, h, n, hd)
        if kv_source[i] == i:
            k = split_heads(x @ w["w_k"].T, heads)  # (b, h, n, hd)
            v = split_heads(x @ w["w_v"].T, heads)  # (b, h, n, hd)
            if i in cache:
                k = torch.cat([cache[i][0], k], dim=2)  # (b, h, N, hd)
                v = torch.cat([cache[i][1], v], dim=2)  # (b, h, N, hd)
            cache[i] = (k, v)
        k, v = cache[kv_source[i]]  # (b, h, N, hd) each: this layer's or an earlier layer's
        allowed = sliding_window_mask(n, k.shape[2], k.shape[2], device=x.device)  # (n, N)
        x = x + merge_heads(attend(q, k, v, allowed)) @ w["w_o"].T  # (b, n, d)
    return x, cache


DECODE_KINDS = ("gqa", "shared", "sparse", "mla", "mla_kv_cache", "mla_absorbed", "linear", "delta")


def decode_cost(kind, N, d, heads, head_dim, kv_heads=None, window=None, latent_dim=0,
                rope_dim=0, query_latent_dim=0, topk=None, index_heads=0, index_dim=0):
    """(FLOPs of the matrix products, weight numbers read, cache or state numbers read) of one
    layer's attention generating one token that attends to N tokens (itself included), for one
    text.

    kind: "gqa" (MHA, GQA, MQA; a window as chapter 09's cache runs it: its W tokens and the new
    one multiplied), "shared" (a layer reading an earlier layer's cache), "sparse" (GQA over the
    topk keys an indexer of index_heads heads of index_dim chooses), "mla" (keys and values from
    the latent at every step), "mla_kv_cache" (computed once per token and cached),
    "mla_absorbed", "linear", "delta". query_latent_dim: MLA's query latent (0: none)."""
    if kind not in DECODE_KINDS:
        raise ValueError(f"kind must be one of {DECODE_KINDS}, got {kind!r}.")
    if not isinstance(N, int) or N < 1:
        raise ValueError(
            f"N (the tokens the new one attends to, itself included) must be an int >= 1, "
            f"got {N!r}."
        )
    indexer = (topk, index_heads, index_dim)
    if kind == "sparse" and not (isinstance(topk, int) and min(indexer) >= 1):
        raise ValueError(f"kind 'sparse' needs topk, index_heads, index_dim >= 1, got {indexer}.")
    if kind.startswith("mla") and not (latent_dim >= 1 and rope_dim >= 1):
        raise ValueError(
            f"MLA needs latent_dim and rope_dim >= 1, got {latent_dim!r} and {rope_dim!r}."
        )
    h, hd, g = heads, head_dim, kv_heads or heads
    dc, dr, dq = latent_dim, rope_dim, query_latent_dim
    if kind in ("gqa", "shared", "sparse"):
        keys = min(N, window + 1) if window else N  # the keys multiplied
        if kind == "sparse":
            keys = min(N, topk)
        weights = d * hd * 2 * h + (0 if kind == "shared" else d * hd * 2 * g)  # W_q, W_o; W_k, W_v
        flops, cached = 2 * weights + 4 * h * hd * keys, 2 * g * hd * keys
        if kind == "sparse":  # the indexer: its projections, every key scored, its heads summed
            index_weights = d * (index_heads * index_dim + index_dim + index_heads)  # I
            weights += index_weights
            flops += 2 * index_weights + 2 * index_heads * index_dim * N + 2 * index_heads * N
            cached += index_dim * N
        return flops, weights, cached
    if kind.startswith("mla"):
        queries = d * dq + dq * h * (hd + dr) if dq else d * h * (hd + dr)
        projections = queries + d * (dc + dr) + h * hd * d  # P: all but W_uk and W_uv
        weights = projections + 2 * h * hd * dc
        if kind == "mla":  # N keys and values from the latent, attend at width hd (+ dr)
            flops = 2 * projections + 4 * N * dc * h * hd + 2 * h * N * (2 * hd + dr)
            return flops, weights, N * (dc + dr)
        if kind == "mla_kv_cache":  # the new token's key and value once, attend at width hd (+ dr)
            flops = 2 * projections + 4 * h * hd * dc + 2 * h * N * (2 * hd + dr)
            return flops, weights, N * h * (2 * hd + dr)
        # q @ W_uk and W_uv after the weighting, once; attend at width dc (+ dr)
        return 2 * projections + 4 * h * hd * dc + 2 * h * N * (2 * dc + dr), weights, N * (dc + dr)
    weights = 4 * d * h * hd  # W_q, W_k, W_v, W_o
    if kind == "linear":  # write phi(k) v^T, read phi(q) S and phi(q) . z
        return 2 * weights + 4 * h * hd * hd + 2 * h * hd, weights, h * hd * hd + h * hd
    return 2 * weights + 6 * h * hd * hd, weights, h * hd * hd  # read S k, write, read S q


def sparse_decode_step(x_new, w, cache, topk, heads):
    """One generated token (b, 1, d) through a layer of `heads` heads that attends only to the
    topk keys its indexer ranks highest (ties: the earliest). w: dict of w_q, w_k, w_v, w_o (d, d),
    w_qi (H * dI, d), w_ki (dI, d), w_wi (H, d); cache: (keys, values, indexer keys) of the earlier
    tokens, or None. Returns the (b, 1, d) output and the cache with the new token in it."""
    b = x_new.shape[0]
    q, k, v = (split_heads(x_new @ w["w_" + m].T, heads) for m in "qkv")  # (b, h, 1, hd) each
    index_keys = x_new @ w["w_ki"].T  # (b, 1, dI)
    if cache is not None:
        k = torch.cat([cache[0], k], dim=2)  # (b, h, N, hd)
        v = torch.cat([cache[1], v], dim=2)  # (b, h, N, hd)
        index_keys = torch.cat([cache[2], index_keys], dim=1)  # (b, N, dI)
    q_index = (x_new @ w["w_qi"].T).view(b, 1, w["w_wi"].shape[0], -1)  # (b, 1, H, dI)
    scores = lightning_index(q_index, index_keys, x_new @ w["w_wi"].T)  # (b, 1, N)
    order = scores.sort(dim=-1, descending=True, stable=True).indices  # (b, 1, N): ties, earliest
    chosen = order[:, 0, :topk]  # (b, min(topk, N))
    rows = torch.arange(b, device=x_new.device)[:, None]  # (b, 1)
    k_kept = k.transpose(1, 2)[rows, chosen].transpose(1, 2)  # (b, h, min(topk, N), hd)
    v_kept = v.transpose(1, 2)[rows, chosen].transpose(1, 2)  # (b, h, min(topk, N), hd)
    every = torch.ones(1, chosen.shape[1], dtype=torch.bool, device=x_new.device)  # (1, kept)
    return merge_heads(attend(q, k_kept, v_kept, every)) @ w["w_o"].T, (k, v, index_keys)


def mla_keys_cached(x, w, cache=None):
    """MLA that computes each token's key and value once and caches them, the rotary part in the
    keys (as DeepSeek-V3's attn_impl="naive" does): returns (out, (keys, values)), the keys
    (b, h, N, hd + dr), the values (b, h, N, hd)."""
    b, n, _ = x.shape
    h, dr = w.heads, w.rope_dim
    start = 0 if cache is None else cache[0].shape[2]
    positions = torch.arange(start, start + n, device=x.device)  # (n,)
    latent = x @ w.w_dkv.T  # (b, n, dc)
    rope_keys = apply_rope(x @ w.w_kr.T, positions)  # (b, n, dr)
    rope_keys = rope_keys[:, None].expand(b, h, n, dr)  # (b, h, n, dr): one for all heads
    k = torch.cat([split_heads(latent @ w.w_uk.T, h), rope_keys], dim=-1)  # (b, h, n, hd + dr)
    v = split_heads(latent @ w.w_uv.T, h)  # (b, h, n, hd)
    if cache is not None:
        k = torch.cat([cache[0], k], dim=2)  # (b, h, N, hd + dr)
        v = torch.cat([cache[1], v], dim=2)  # (b, h, N, hd)
    q_rope = apply_rope(split_heads(x @ w.w_qr.T, h), positions)  # (b, h, n, dr)
    q = torch.cat([split_heads(x @ w.w_q.T, h), q_rope], dim=-1)  # (b, h, n, hd + dr)
    allowed = sliding_window_mask(n, k.shape[2], k.shape[2], device=x.device)  # (n, N)
    return merge_heads(attend(q, k, v, allowed)) @ w.w_o.T, (k, v)
