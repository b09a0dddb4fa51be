"""Code taught by chapter 07, exported from its `#| export` cells.

Generated from solutions/07_efficient_attention.ipynb by `make exercises`; do not edit: edit the notebook.
"""

import torch
import torch.nn.functional as F
from torch import nn

import course_utils as cu

__all__ = [
    "score_bytes", "qkv_bytes", "copy_of", "WrapperAttention", "split_attention", "FusedQKVAttention",
    "EinsumAttention", "SDPACausalAttention", "SDPAMaskAttention", "TorchMHAAttention", "causal_rule",
    "FlexCausalAttention", "VARIANTS", "SDPAInvertedMaskAttention", "SCORE_PASSES", "attention_flops",
    "moved_bytes",
]


def score_bytes(batch, heads, n, bytes_per_number=4):
    """Bytes of one (batch, heads, n, n) score tensor."""
    return batch * heads * n * n * bytes_per_number


def qkv_bytes(batch, n, d, bytes_per_number=4):
    """Bytes of the three (batch, n, d) tensors Q, K and V."""
    return 3 * batch * n * d * bytes_per_number


def copy_of(linear):
    """A new nn.Linear holding a copy of `linear`'s weight and bias."""
    twin = nn.Linear(linear.in_features, linear.out_features, bias=linear.bias is not None)
    twin.load_state_dict(linear.state_dict())
    return twin


class WrapperAttention(nn.Module):
    """(1) One CausalAttention per head, concatenated, then the output projection."""

    def __init__(self, ref):
        super().__init__()
        d_in, hd, has_bias = ref.W_query.in_features, ref.head_dim, ref.W_query.bias is not None
        self.heads = cu.chapters.MultiHeadAttentionWrapper(d_in, hd, ref.context_length, 0.0,
                                                           ref.num_heads, has_bias)
        with torch.no_grad():
            for i, head in enumerate(self.heads.heads):
                rows = slice(i * hd, (i + 1) * hd)                   # head i's rows of the reference
                for name in ("W_query", "W_key", "W_value"):
                    getattr(head, name).weight.copy_(getattr(ref, name).weight[rows])
                    if has_bias:
                        getattr(head, name).bias.copy_(getattr(ref, name).bias[rows])
        self.out_proj = copy_of(ref.out_proj)

    def forward(self, x):
        return self.out_proj(self.heads(x))                          # (b, n, d_out)


def split_attention(ref):
    """(2) Chapter 05's MultiHeadAttention, holding a copy of the reference's weights."""
    d_in, d_out = ref.W_query.in_features, ref.W_query.out_features
    layer = cu.chapters.MultiHeadAttention(d_in, d_out, ref.context_length, 0.0, ref.num_heads,
                                           qkv_bias=ref.W_query.bias is not None)
    layer.load_state_dict(ref.state_dict())
    return layer


class FusedQKVAttention(nn.Module):
    """(3) One (d_in -> 3 * d_out) projection for Q, K and V; explicit (b, h, n, n) scores."""

    def __init__(self, ref):
        super().__init__()
        self.num_heads = ref.num_heads
        self.qkv = nn.Linear(ref.W_query.in_features, 3 * ref.W_query.out_features,
                             bias=ref.W_query.bias is not None)
        with torch.no_grad():
            parts = (ref.W_query, ref.W_key, ref.W_value)
            self.qkv.weight.copy_(torch.cat([p.weight for p in parts]))  # (3 * d_out, d_in)
            if self.qkv.bias is not None:
                self.qkv.bias.copy_(torch.cat([p.bias for p in parts]))  # (3 * d_out,)
        self.out_proj = copy_of(ref.out_proj)
        self.register_buffer("mask", ref.mask.clone())               # (c, c): True = future

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)                       # 3 x (b, n, d_out)
        q, k, v = (cu.chapters.split_heads(t, self.num_heads) for t in (q, k, v))  # 3 x (b, h, n, hd)
        return self.out_proj(cu.chapters.merge_heads(self.attend(q, k, v)))  # (b, n, d_out)

    def attend(self, q, k, v):
        n = q.shape[-2]
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5       # (b, h, n, n)
        scores = scores.masked_fill(self.mask[:n, :n], -torch.inf)  # (b, h, n, n)
        return torch.softmax(scores, dim=-1) @ v                    # (b, h, n, hd)


class EinsumAttention(nn.Module):
    """(4) The same algebra as torch.einsum calls over named axes."""

    def __init__(self, ref):
        super().__init__()
        self.num_heads = ref.num_heads
        self.W_query, self.W_key, self.W_value = (copy_of(p) for p in (ref.W_query, ref.W_key, ref.W_value))
        self.out_proj = copy_of(ref.out_proj)
        self.register_buffer("mask", ref.mask.clone())               # (c, c): True = future

    def project(self, x, linear):
        w = linear.weight.unflatten(0, (self.num_heads, -1))         # (h, hd, d_in)
        out = torch.einsum("bni,hdi->bhnd", x, w)                    # (b, h, n, hd)
        if linear.bias is not None:
            out = out + linear.bias.unflatten(0, (self.num_heads, 1, -1))  # + (h, 1, hd)
        return out

    def forward(self, x):
        n = x.shape[1]
        q, k, v = (self.project(x, p) for p in (self.W_query, self.W_key, self.W_value))  # (b, h, n, hd)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / q.shape[-1] ** 0.5  # (b, h, n, n)
        weights = torch.softmax(scores.masked_fill(self.mask[:n, :n], -torch.inf), dim=-1)  # (b, h, n, n)
        context = torch.einsum("bhqk,bhkd->bhqd", weights, v)        # (b, h, n, hd)
        w_out = self.out_proj.weight.unflatten(1, (self.num_heads, -1))  # (d_out, h, hd)
        return torch.einsum("bhnd,ohd->bno", context, w_out) + self.out_proj.bias  # (b, n, d_out)


class SDPACausalAttention(FusedQKVAttention):
    """(5) Fused projection + scaled_dot_product_attention(is_causal=True)."""

    def attend(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (b, h, n, hd)


class SDPAMaskAttention(FusedQKVAttention):
    """(6) The same with an explicit (n, n) boolean mask; SDPA's convention: True = may attend."""

    def attend(self, q, k, v):
        n = q.shape[-2]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=~self.mask[:n, :n])  # (b, h, n, hd)


class TorchMHAAttention(nn.Module):
    """(7) nn.MultiheadAttention holding the reference's weights."""

    def __init__(self, ref):
        super().__init__()
        d_in, d_out = ref.W_query.in_features, ref.W_query.out_features
        if d_in != d_out:
            raise ValueError(f"nn.MultiheadAttention needs d_in == d_out, but the reference has "
                             f"d_in={d_in} and d_out={d_out}")
        self.mha = nn.MultiheadAttention(d_out, ref.num_heads, bias=True, batch_first=True)
        cu.chapters.copy_into_torch_mha(ref, self.mha)
        self.register_buffer("mask", ref.mask.clone())               # (c, c): True = may NOT attend

    def forward(self, x):
        n = x.shape[1]
        out, _ = self.mha(x, x, x, attn_mask=self.mask[:n, :n], need_weights=False)
        return out                                                   # (b, n, d_out)


def causal_rule(b, h, q_idx, kv_idx):
    """FlexAttention's mask_mod: True where query q_idx may attend to key kv_idx."""
    return q_idx >= kv_idx


class FlexCausalAttention(FusedQKVAttention):
    """(8) Fused projection + FlexAttention with a causal block mask (torch 2.5+)."""

    def __init__(self, ref, compile=True):
        super().__init__(ref)
        self.compile = compile
        self.block_masks = {}                                        # one per (length, device)

    def attend(self, q, k, v):
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        n, key = q.shape[-2], (q.shape[-2], str(q.device))
        if key not in self.block_masks:
            self.block_masks[key] = create_block_mask(causal_rule, None, None, n, n, device=q.device)
        run = torch.compile(flex_attention, dynamic=False) if self.compile else flex_attention
        return run(q, k, v, block_mask=self.block_masks[key])       # (b, h, n, hd)


VARIANTS = {                     # name -> class (or function) building it from the reference
    "wrapper": WrapperAttention,          # (1)
    "split": split_attention,             # (2)
    "fused_qkv": FusedQKVAttention,       # (3)
    "einsum": EinsumAttention,            # (4)
    "sdpa_causal": SDPACausalAttention,   # (5)
    "sdpa_mask": SDPAMaskAttention,       # (6)
    "torch_mha": TorchMHAAttention,       # (7)
    "flex": FlexCausalAttention,          # (8)
}


class SDPAInvertedMaskAttention(FusedQKVAttention):
    """A deliberately WRONG variant: SDPA given the nn.MultiheadAttention mask (True = blocked)."""

    def attend(self, q, k, v):
        n = q.shape[-2]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask[:n, :n])  # the bug


SCORE_PASSES = {  # forward pass: how often a (b, h, n, n) tensor crosses main memory
    "wrapper": 8, "split": 8, "fused_qkv": 8, "einsum": 8,
    "sdpa_causal": 0, "sdpa_mask": 0, "torch_mha": 4, "flex": 0,
}


def attention_flops(batch, n, d_in, d_out):
    """FLOPs of one forward pass, from the shapes: (projections, the two n x n products)."""
    projections = 2 * batch * n * d_in * 3 * d_out + 2 * batch * n * d_out * d_out
    return projections, 2 * 2 * batch * n * n * d_out


def moved_bytes(variant, batch, heads, n, d_in, d_out, bytes_per_number=4):
    """Bytes one forward pass moves through main memory, from the shapes: weights and
    activations once each, plus SCORE_PASSES[variant] passes over the scores."""
    weights = (3 * d_in * d_out + d_out * d_out) * bytes_per_number
    activations = batch * n * (d_in + 9 * d_out) * bytes_per_number  # x; Q, K, V, context twice; out
    scores = SCORE_PASSES[variant] * score_bytes(batch, heads, n, bytes_per_number)
    mask = n * n if variant == "sdpa_mask" else 0                    # one byte per bool
    return weights + activations + scores + mask
