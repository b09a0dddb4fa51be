"""Code taught by chapter 10, exported from its `#| export` cells.

Generated from solutions/10_transformer.ipynb by `make exercises`; do not edit: edit the notebook.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..ch05 import MultiHeadAttention
from ..ch06 import copy_into_torch_mha, merge_heads, split_heads

__all__ = [
    "Attention", "LayerNorm", "gelu", "GELU", "TransformerBlock", "copy_into_encoder_layer", "RMSNorm",
    "SwiGLU", "sinusoidal_positions", "alibi_slopes", "alibi_bias", "DecoderBlock",
    "copy_into_decoder_layer", "packed_causal_mask", "masked_block_attention", "repeated_spans",
    "AttentionOnlyLM", "copy_accuracy", "head_scores",
]


class Attention(MultiHeadAttention):
    """Chapter 05's layer with a switch: causal or not; keys and values from memory (default x)."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, causal=True):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, qkv_bias)
        self.causal = causal

    def forward(self, x, memory=None, memory_real=None):
        """x: (b, n, d_in), memory: (b, m, d_in) or None, memory_real: (b, m) bool -> (b, n, d_out)."""
        memory = x if memory is None else memory
        n, m = x.shape[1], memory.shape[1]
        if max(n, m) > self.context_length:
            raise ValueError(f"the input has {max(n, m)} tokens, but this layer was built for "
                             f"context_length={self.context_length}")
        q = split_heads(self.W_query(x), self.num_heads)  # (b, h, n, hd)
        k = split_heads(self.W_key(memory), self.num_heads)  # (b, h, m, hd)
        v = split_heads(self.W_value(memory), self.num_heads)  # (b, h, m, hd)
        scores = q @ k.transpose(2, 3) / self.head_dim**0.5  # (b, h, n, m)
        if self.causal:
            scores = scores.masked_fill(self.mask[:n, :m], -torch.inf)  # (b, h, n, m)
        if memory_real is not None:
            scores = scores.masked_fill(~memory_real[:, None, None, :], -torch.inf)  # (b, h, n, m)
        weights = self.dropout(torch.softmax(scores, dim=-1))  # (b, h, n, m)
        return self.out_proj(merge_heads(weights @ v))  # (b, n, d_out)


class LayerNorm(nn.Module):
    """Normalises every vector over its last axis (d features), then scales and shifts it."""

    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))  # (d,): the scale, gamma
        self.bias = nn.Parameter(torch.zeros(d))  # (d,): the shift, beta
        self.eps = eps

    def forward(self, x):
        """x: (..., d) -> (..., d)."""
        mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
        variance = (x - mean).pow(2).mean(dim=-1, keepdim=True)  # (..., 1): divided by d, not d - 1
        return (x - mean) / torch.sqrt(variance + self.eps) * self.weight + self.bias


def gelu(x, approximate="none"):
    """GELU of every element of x: exact (erf) for approximate="none", the tanh form for "tanh"."""
    if approximate == "none":
        return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))
    if approximate == "tanh":
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    raise ValueError(f"approximate must be 'none' or 'tanh', but got {approximate!r}")


class GELU(nn.Module):
    """Your gelu as a layer; approximate="tanh" gives GPT-2's form."""

    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return gelu(x, self.approximate)


class TransformerBlock(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, context_length, dropout=0.0, norm_first=True, causal=True):
        super().__init__()
        self.attn = Attention(d_model, d_model, context_length, dropout, num_heads, qkv_bias=True, causal=causal)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), GELU(), nn.Linear(d_ff, d_model))
        self.drop = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x):
        """x: (b, n, d_model) -> (b, n, d_model)."""
        if self.norm_first:
            x = x + self.drop(self.attn(self.norm1(x)))  # (b, n, d): norm, attend, add
            return x + self.drop(self.ff(self.norm2(x)))  # (b, n, d): norm, feed forward, add
        x = self.norm1(x + self.drop(self.attn(x)))  # (b, n, d): attend, add, norm
        return self.norm2(x + self.drop(self.ff(x)))  # (b, n, d): feed forward, add, norm


def copy_into_encoder_layer(block, layer):
    """Copy a TransformerBlock's weights into an nn.TransformerEncoderLayer (in place)."""
    copy_into_torch_mha(block.attn, layer.self_attn)
    pairs = ((block.norm1, layer.norm1), (block.norm2, layer.norm2),
             (block.ff[0], layer.linear1), (block.ff[2], layer.linear2))
    with torch.no_grad():
        for ours, theirs in pairs:
            theirs.weight.copy_(ours.weight)
            theirs.bias.copy_(ours.bias)


class RMSNorm(nn.Module):
    """Divides every vector by its root mean square over the last axis, then scales it."""

    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))  # (d,): the scale, gamma
        self.eps = eps

    def forward(self, x):
        """x: (..., d) -> (..., d)."""
        mean_square = x.pow(2).mean(dim=-1, keepdim=True)  # (..., 1)
        return x / torch.sqrt(mean_square + self.eps) * self.weight


class SwiGLU(nn.Module):
    """Llama's feed-forward network: w2(silu(w1(x)) * w3(x)), no biases."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff, bias=False)  # the gate: goes through SiLU
        self.w3 = nn.Linear(d_model, d_ff, bias=False)  # the up projection: multiplied by the gate
        self.w2 = nn.Linear(d_ff, d_model, bias=False)  # the down projection, back to d_model

    def forward(self, x):
        """x: (..., d_model) -> (..., d_model)."""
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def sinusoidal_positions(n, d):
    """(n, d): row p is the encoding of position p, sin(p w_i) at feature 2i, cos(p w_i) at 2i + 1."""
    if d % 2:
        raise ValueError(f"sinusoidal_positions needs an even width d (sine/cosine pairs), but got d={d}")
    p = torch.arange(n, dtype=torch.float32)[:, None]  # (n, 1)
    omega = 10_000.0 ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)  # (d/2,): one per pair
    table = torch.zeros(n, d)  # (n, d)
    table[:, 0::2] = torch.sin(p * omega)  # (n, d/2): even features
    table[:, 1::2] = torch.cos(p * omega)  # (n, d/2): odd features
    return table


def alibi_slopes(num_heads):
    """(num_heads,) ALiBi slopes: the closest power of two's geometric sequence, then every other
    slope of the sequence for twice that many heads."""
    closest = 2 ** math.floor(math.log2(num_heads))  # the closest power of two at or below num_heads
    base = 2.0 ** (-8.0 * torch.arange(1, closest + 1) / closest)  # (closest,)
    extra = 2.0 ** (-8.0 * torch.arange(1, 2 * (num_heads - closest) + 1, 2) / (2 * closest))  # (num_heads - closest,)
    return torch.cat([base, extra]).float()  # (num_heads,)


def alibi_bias(n, num_heads):
    """(h, n, n) additive bias: -m_h * (i - j) for keys j <= i, -inf for future keys."""
    distance = torch.arange(n)[:, None] - torch.arange(n)[None, :]  # (n, n): i - j
    bias = alibi_slopes(num_heads)[:, None, None] * -distance  # (h, n, n): 0 on the diagonal, more negative further back
    return bias.masked_fill(distance < 0, -torch.inf)  # (h, n, n): causal too


class DecoderBlock(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, context_length, dropout=0.0, norm_first=True):
        super().__init__()
        self.self_attn = Attention(d_model, d_model, context_length, dropout, num_heads, qkv_bias=True, causal=True)
        self.cross_attn = Attention(d_model, d_model, context_length, dropout, num_heads, qkv_bias=True, causal=False)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.norm3 = LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), GELU(), nn.Linear(d_ff, d_model))
        self.drop = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x, memory, memory_real=None):
        """x: (b, n, d_model), memory: (b, m, d_model), memory_real: (b, m) bool -> (b, n, d_model)."""
        if self.norm_first:
            x = x + self.drop(self.self_attn(self.norm1(x)))  # (b, n, d)
            x = x + self.drop(self.cross_attn(self.norm2(x), memory, memory_real))  # (b, n, d): queries from x
            return x + self.drop(self.ff(self.norm3(x)))  # (b, n, d)
        x = self.norm1(x + self.drop(self.self_attn(x)))  # (b, n, d)
        x = self.norm2(x + self.drop(self.cross_attn(x, memory, memory_real)))  # (b, n, d)
        return self.norm3(x + self.drop(self.ff(x)))  # (b, n, d)


def copy_into_decoder_layer(block, layer):
    """Copy a DecoderBlock's weights into an nn.TransformerDecoderLayer (in place)."""
    copy_into_torch_mha(block.self_attn, layer.self_attn)
    copy_into_torch_mha(block.cross_attn, layer.multihead_attn)
    pairs = ((block.norm1, layer.norm1), (block.norm2, layer.norm2), (block.norm3, layer.norm3),
             (block.ff[0], layer.linear1), (block.ff[2], layer.linear2))
    with torch.no_grad():
        for ours, theirs in pairs:
            theirs.weight.copy_(ours.weight)
            theirs.bias.copy_(ours.bias)


def packed_causal_mask(doc_ids):
    """(b, n, n) bool, True = may attend: same document and not in the future."""
    n = doc_ids.shape[-1]
    same_doc = doc_ids[:, :, None] == doc_ids[:, None, :]  # (b, n, n): query's doc == key's doc
    causal = torch.ones(n, n, dtype=torch.bool, device=doc_ids.device).tril()  # (n, n)
    return same_doc & causal  # (b, n, n)


def masked_block_attention(attn, x, allowed):
    """An Attention layer's projections with SDPA under a (b, n, n) bool mask (True = may attend)."""
    q, k, v = (split_heads(layer(x), attn.num_heads) for layer in (attn.W_query, attn.W_key, attn.W_value))  # (b, h, n, hd) each
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed[:, None])  # (b, h, n, hd)
    return attn.out_proj(merge_heads(out))  # (b, n, d)


def repeated_spans(batch, n, vocab, generator):
    """(batch, n) random ids in which a span of 4 .. 14 tokens is repeated right after itself, a
    (batch, n) bool, True where the next token is predictable by copying, and the (batch,) lengths."""
    ids = torch.randint(0, vocab, (batch, n), generator=generator)  # (b, n)
    length = torch.randint(4, 15, (batch, 1), generator=generator)  # (b, 1)
    start = (torch.rand(batch, 1, generator=generator) * (n - 2 * length + 1)).long()  # (b, 1)
    pos = torch.arange(n)  # (n,)
    second = (pos >= start + length) & (pos < start + 2 * length)  # (b, n): the second copy
    ids = torch.where(second, ids.gather(1, (pos - length).clamp(min=0)), ids)  # (b, n)
    predictable = second & (pos + 1 < start + 2 * length)  # (b, n): the next token is a copy too
    return ids, predictable, length[:, 0]


class AttentionOnlyLM(nn.Module):
    def __init__(self, vocab, context_length, d_model, num_heads, num_layers):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, d_model)
        self.pos_emb = nn.Embedding(context_length, d_model)
        self.layers = nn.ModuleList(Attention(d_model, d_model, context_length, 0.0, num_heads)
                                    for _ in range(num_layers))
        self.head = nn.Linear(d_model, vocab)

    def run(self, ids, off=()):
        """Logits (b, n, vocab) and every layer's weights (b, h, n, n), heads in `off` switched off."""
        n = ids.shape[1]
        x = self.tok_emb(ids) + self.pos_emb(torch.arange(n, device=ids.device))  # (b, n, d)
        maps = []
        for i, attn in enumerate(self.layers):
            q, k, v = (split_heads(layer(x), attn.num_heads) for layer in (attn.W_query, attn.W_key, attn.W_value))  # (b, h, n, hd)
            scores = (q @ k.transpose(2, 3) / attn.head_dim**0.5).masked_fill(attn.mask[:n, :n], -torch.inf)  # (b, h, n, n)
            weights = torch.softmax(scores, dim=-1)  # (b, h, n, n)
            keep = torch.tensor([(i, h) not in off for h in range(attn.num_heads)], device=x.device)  # (h,)
            context = (weights @ v) * keep[:, None, None]  # (b, h, n, hd): switched-off heads give 0
            x = x + attn.out_proj(merge_heads(context))  # (b, n, d): added to the residual stream
            maps.append(weights)
        return self.head(x), maps

    def forward(self, ids, off=()):
        return self.run(ids, off)[0]  # (b, n, vocab)

    def maps(self, ids):
        with torch.no_grad():
            return self.run(ids)[1]  # one (b, h, n, n) per layer


def copy_accuracy(model, ids, predictable, off=()):
    """Fraction of the predictable positions whose next token the model predicts."""
    with torch.no_grad():
        guess = model(ids[:, :-1], off).argmax(dim=-1)  # (b, n - 1)
    hits = guess == ids[:, 1:]  # (b, n - 1)
    return hits[predictable[:, :-1]].float().mean().item()


def head_scores(model, ids, predictable, length):
    """(layers, heads) previous-token and induction scores on rows made by repeated_spans."""
    maps = torch.stack(model.maps(ids))  # (layers, b, h, n, n)
    previous = torch.diagonal(maps, offset=-1, dim1=-2, dim2=-1).mean(dim=(1, 3))  # (layers, h)
    rows, queries = predictable.nonzero(as_tuple=True)  # one entry per predictable query
    target = queries - length[rows] + 1  # the key right after the query token's earlier occurrence
    per_query = maps.permute(1, 3, 4, 0, 2)[rows, queries, target]  # (q, layers, h): indexed axes first
    induction = per_query.mean(dim=0)  # (layers, h): the mean over the predictable queries
    return previous, induction
