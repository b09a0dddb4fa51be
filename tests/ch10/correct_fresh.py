"""Right but unusual answers to chapter 10's four exercises, written the way public code writes
them (source in each docstring), adapted to the exercise's interface. Every one must pass its check.
The exercise asks sinusoidal_positions to refuse an odd d with a ValueError that gives d: each table
here starts with that refusal (``_even``, added 2026-11-28 when the exercise's text asked for it).

``RIGHT`` lists (name, check, answer, source)."""

import math

import numpy as np
import torch
import torch.nn.functional as F

import course_utils as cu

Block = cu.chapters.TransformerBlock
Decoder = cu.chapters.DecoderBlock


# ---------------------------------------------------------------- exercise 1


class TorchStyleBlock(Block):
    """pytorch/pytorch, torch/nn/modules/transformer.py TransformerEncoderLayer.forward: ``_sa_block``
    and ``_ff_block`` helpers, here with the norms called functionally (F.layer_norm with the
    modules' own weight, bias and eps; the shape is read off the weight, since the chapter's own
    LayerNorm keeps no ``normalized_shape``)."""

    def _ln(self, norm, x):
        return F.layer_norm(x, tuple(norm.weight.shape), norm.weight, norm.bias, norm.eps)

    def _sa_block(self, x):
        return self.drop(self.attn(x))

    def _ff_block(self, x):
        return self.drop(self.ff(x))

    def forward(self, x):
        if self.norm_first:
            x = x + self._sa_block(self._ln(self.norm1, x))
            x = x + self._ff_block(self._ln(self.norm2, x))
        else:
            x = self._ln(self.norm1, x + self._sa_block(x))
            x = self._ln(self.norm2, x + self._ff_block(x))
        return x


class AnnotatedSublayerBlock(Block):
    """harvardnlp/annotated-transformer, SublayerConnection ``x + dropout(sublayer(norm(x)))`` called
    with a lambda per sub-layer, extended to both placements."""

    def _sublayer(self, x, norm, sublayer):
        if self.norm_first:
            return x + self.drop(sublayer(norm(x)))
        return norm(x + self.drop(sublayer(x)))

    def forward(self, x):
        x = self._sublayer(x, self.norm1, lambda h: self.attn(h))
        return self._sublayer(x, self.norm2, self.ff)


class FunctionalMHABlock(Block):
    """PyTorch's nn.MultiheadAttention computation inside (torch/nn/functional.py
    multi_head_attention_forward, the function nn.MultiheadAttention.forward calls) with the
    block's own weights stacked into one in_proj, as chapter 06's copy_into_torch_mha does; the
    causal mask in MHA's convention (True = hidden)."""

    def _mha(self, h):
        a = self.attn
        n = h.shape[1]
        w = torch.cat([a.W_query.weight, a.W_key.weight, a.W_value.weight])
        b = torch.cat([a.W_query.bias, a.W_key.bias, a.W_value.bias])
        mask = None
        if a.causal:
            mask = torch.ones(n, n, dtype=torch.bool, device=h.device).triu(1)
        hs = h.transpose(0, 1)  # (n, b, d): MHA's default layout
        out, _ = F.multi_head_attention_forward(
            hs,
            hs,
            hs,
            h.shape[-1],
            a.num_heads,
            w,
            b,
            None,
            None,
            False,
            a.dropout.p,
            a.out_proj.weight,
            a.out_proj.bias,
            training=self.training,
            need_weights=False,
            attn_mask=mask,
        )
        return out.transpose(0, 1)

    def forward(self, x):
        if self.norm_first:
            x = x + self.drop(self._mha(self.norm1(x)))
            return x + self.drop(self.ff(self.norm2(x)))
        x = self.norm1(x + self.drop(self._mha(x)))
        return self.norm2(x + self.drop(self.ff(x)))


class FusedQKVSdpaBlock(Block):
    """karpathy/nanoGPT, model.py CausalSelfAttention: one fused c_attn projection split into q, k,
    v, then F.scaled_dot_product_attention(is_causal=True, dropout_p=... if training); here the
    fused weight is the block's three projections stacked."""

    def _attend(self, h):
        a = self.attn
        b_, n, d = h.shape
        w = torch.cat([a.W_query.weight, a.W_key.weight, a.W_value.weight])
        bias = torch.cat([a.W_query.bias, a.W_key.bias, a.W_value.bias])
        q, k, v = F.linear(h, w, bias).split(d, dim=2)
        q, k, v = (t.view(b_, n, a.num_heads, a.head_dim).transpose(1, 2) for t in (q, k, v))
        p = a.dropout.p if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=a.causal)
        return a.out_proj(y.transpose(1, 2).contiguous().view(b_, n, d))

    def forward(self, x):
        if self.norm_first:
            x = x + self.drop(self._attend(self.norm1(x)))
            return x + self.drop(self.ff(self.norm2(x)))
        x = self.norm1(x + self.drop(self._attend(x)))
        return self.norm2(x + self.drop(self.ff(x)))


# ---------------------------------------------------------------- exercise 3


class TorchStyleDecoder(Decoder):
    """pytorch/pytorch, torch/nn/modules/transformer.py TransformerDecoderLayer.forward: ``_sa_block``,
    ``_mha_block`` and ``_ff_block`` helpers."""

    def _sa_block(self, x):
        return self.drop(self.self_attn(x))

    def _mha_block(self, x, mem, mem_real):
        return self.drop(self.cross_attn(x, mem, mem_real))

    def _ff_block(self, x):
        return self.drop(self.ff(x))

    def forward(self, x, memory, memory_real=None):
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x))
            x = x + self._mha_block(self.norm2(x), memory, memory_real)
            x = x + self._ff_block(self.norm3(x))
        else:
            x = self.norm1(x + self._sa_block(x))
            x = self.norm2(x + self._mha_block(x, memory, memory_real))
            x = self.norm3(x + self._ff_block(x))
        return x


class MlxFixedDecoder(Decoder):
    """ml-explore/mlx, python/mlx/nn/layers/transformer.py after a8776b7 (TransformerDecoderLayer,
    both placements fixed), in its y/x style; dropout on each sub-layer's output as the exercise
    places it."""

    def forward(self, x, memory, memory_real=None):
        if self.norm_first:
            y = self.norm1(x)
            y = self.drop(self.self_attn(y))
            x = x + y
            y = self.norm2(x)
            y = self.drop(self.cross_attn(y, memory, memory_real))
            x = x + y
            y = self.norm3(x)
            return x + self.drop(self.ff(y))
        y = self.drop(self.self_attn(x))
        x = self.norm1(x + y)
        y = self.drop(self.cross_attn(x, memory, memory_real))
        x = self.norm2(x + y)
        y = self.drop(self.ff(x))
        return self.norm3(x + y)


class LoopOfSublayersDecoder(Decoder):
    """lucidrains/x-transformers style: the layers as a list of (norm, function) pairs walked by one
    loop, the residual added in one place."""

    def forward(self, x, memory, memory_real=None):
        layers = [
            (self.norm1, self.self_attn),
            (self.norm2, lambda h: self.cross_attn(h, memory, memory_real)),
            (self.norm3, self.ff),
        ]
        for norm, fn in layers:
            residual = x
            h = norm(x) if self.norm_first else x
            x = residual + self.drop(fn(h))
            if not self.norm_first:
                x = norm(x)
        return x


# ---------------------------------------------------------------- exercise 2


def _even(d):
    """The exercise's refusal of an odd width (added to each source's table below)."""
    if d % 2:
        raise ValueError(f"an even d is needed for sine/cosine pairs, got d={d}")


def compact_pair_index(n, d):
    """SHI-Labs/Compact-Transformers, src/utils/transformers.py sinusoidal_embedding: a list
    comprehension in Python floats with ``2 * (i // 2) / dim``, made a FloatTensor (batch axis
    dropped)."""
    _even(d)
    pe = torch.FloatTensor(
        [[p / (10000 ** (2 * (i // 2) / d)) for i in range(d)] for p in range(n)]
    )
    pe[:, 0::2] = torch.sin(pe[:, 0::2])
    pe[:, 1::2] = torch.cos(pe[:, 1::2])
    return pe


def bert_pytorch_log_space(n, d):
    """codertimo/BERT-pytorch, bert_pytorch/model/embedding/position.py: div_term computed in log
    space, ``(arange(0, d, 2).float() * -(log(10000) / d)).exp()`` (batch axis dropped)."""
    _even(d)
    pe = torch.zeros(n, d).float()
    position = torch.arange(0, n).float().unsqueeze(1)
    div_term = (torch.arange(0, d, 2).float() * -(math.log(10000.0) / d)).exp()
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def dongjunlee_issue_matmul(n, d):
    """DongjunLee/transformer-tensorflow issue #6, the rewrite proposed there: a frequency per
    feature from ``np.arange(dim) // 2``, one matmul of positions by frequencies, then sin/cos of
    alternate columns, in float32 NumPy."""
    _even(d)
    div_term = np.power(10000.0, -(np.arange(d) // 2).astype(np.float32) * 2.0 / d)
    div_term = div_term.reshape(1, -1)
    pos = np.arange(n, dtype=np.float32).reshape(-1, 1)
    encoded_vec = np.matmul(pos, div_term)
    encoded_vec[:, 0::2] = np.sin(encoded_vec[:, 0::2])
    encoded_vec[:, 1::2] = np.cos(encoded_vec[:, 1::2])
    return torch.from_numpy(encoded_vec.reshape([n, d]).astype(np.float32))


def llama_polar(n, d):
    """meta-llama/llama, llama/model.py precompute_freqs_cis: ``freqs = 1 / theta ** (arange(0, dim,
    2) / dim)``, ``torch.polar(ones, outer(t, freqs))``; the complex numbers' imaginary (sin) and
    real (cos) parts interleaved."""
    _even(d)
    freqs = 1.0 / (10000.0 ** (torch.arange(0, d, 2)[: d // 2].float() / d))
    t = torch.arange(n, dtype=torch.float32)
    freqs_cis = torch.polar(torch.ones(n, d // 2), torch.outer(t, freqs))
    return torch.stack((freqs_cis.imag, freqs_cis.real), dim=-1).flatten(1)


# ---------------------------------------------------------------- exercise 4


def torchtune_block_diag(doc_ids):
    """pytorch/torchtune, torchtune/modules/attention_utils.py create_block_causal_mask: one tril per
    document, ``torch.block_diag`` per row, stacked; the lengths from ``unique_consecutive``."""
    rows = []
    for row in doc_ids:
        seq_lens = torch.unique_consecutive(row, return_counts=True)[1]
        blocks = [
            torch.tril(torch.ones(int(s), int(s), dtype=torch.bool, device=doc_ids.device))
            for s in seq_lens
        ]
        rows.append(torch.block_diag(*blocks))
    return torch.stack(rows)


def flex_create_mask(doc_ids):
    """torchtune's mask_mod (``causal_mask & document_mask``) given to FlexAttention's dense
    ``create_mask`` (torch.nn.attention.flex_attention), heads axis dropped."""
    from torch.nn.attention.flex_attention import create_mask

    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (doc_ids[b, q_idx] == doc_ids[b, kv_idx])

    b, n = doc_ids.shape
    return create_mask(mask_mod, b, 1, n, n, device=doc_ids.device)[:, 0]


flex_create_mask.needs_torch = "2.5"  # torch.nn.attention.flex_attention


def boundary_cumsum(doc_ids):
    """huggingface/transformers, masking_utils.find_packed_sequence_indices: a new segment where the
    sequence breaks, numbered by ``cumsum``; equal segment numbers and the causal triangle."""
    starts = torch.ones_like(doc_ids, dtype=torch.bool)
    starts[:, 1:] = doc_ids[:, 1:] != doc_ids[:, :-1]
    segment = starts.long().cumsum(-1)
    n = doc_ids.shape[-1]
    pos = torch.arange(n, device=doc_ids.device)
    return (segment[:, :, None] == segment[:, None, :]) & (pos[None, :] <= pos[:, None])


def sirluk_end_index(doc_ids):
    """huggingface.co/blog/sirluk/llm-sequence-packing get_attention_mask_for_packed_sequence, in the
    copy that adds ``device = x.device``: each key's document end repeated along the row, the
    causal triangle, and ``masked_fill(query >= end of the key's document)``; the EOS flags here
    are the last token of each document."""
    x = torch.ones_like(doc_ids)
    x[:, :-1] = (doc_ids[:, 1:] != doc_ids[:, :-1]).long()
    token_id, eos = 1, True
    B, T = x.shape
    device = x.device
    eos_idx = (x.view(-1) == token_id).nonzero(as_tuple=True)[0] + eos
    eos_idx_expanded = (
        torch.cat([eos_idx, torch.arange(0, B * T + 1, T, device=device)]).unique().sort()[0]
    )
    normalized_idx = eos_idx_expanded - (eos_idx_expanded // T) * T
    normalized_idx = torch.where(normalized_idx == 0, T, normalized_idx)
    reps = normalized_idx[1:] - normalized_idx[:-1]
    reps = torch.where(reps < 1, normalized_idx[1:], reps)
    repeated_idx = torch.repeat_interleave(normalized_idx[1:], reps).view(B, 1, T).expand(-1, T, -1)
    mask_indices = torch.arange(T, device=device).view(1, -1, 1).expand(B, -1, T)
    mask = torch.ones(T, T, dtype=torch.bool, device=device).tril().expand(B, -1, -1)
    return mask.masked_fill(mask_indices >= repeated_idx, False)


B, D, P, M = (
    "check_transformer_block",
    "check_decoder_block",
    "check_sinusoidal_positions",
    "check_packed_causal_mask",
)
RIGHT = [
    ("torch_style_block", B, TorchStyleBlock, "pytorch/pytorch TransformerEncoderLayer"),
    ("annotated_sublayer_block", B, AnnotatedSublayerBlock, "harvardnlp/annotated-transformer"),
    ("functional_mha_block", B, FunctionalMHABlock, "pytorch F.multi_head_attention_forward"),
    ("fused_qkv_sdpa_block", B, FusedQKVSdpaBlock, "karpathy/nanoGPT CausalSelfAttention"),
    ("torch_style_decoder", D, TorchStyleDecoder, "pytorch/pytorch TransformerDecoderLayer"),
    ("mlx_fixed_decoder", D, MlxFixedDecoder, "ml-explore/mlx@a8776b7"),
    ("loop_of_sublayers_decoder", D, LoopOfSublayersDecoder, "lucidrains/x-transformers style"),
    ("compact_pair_index", P, compact_pair_index, "SHI-Labs/Compact-Transformers"),
    ("bert_pytorch_log_space", P, bert_pytorch_log_space, "codertimo/BERT-pytorch"),
    ("dongjunlee_issue_matmul", P, dongjunlee_issue_matmul, "DongjunLee/transformer-tensorflow#6"),
    ("llama_polar", P, llama_polar, "meta-llama/llama precompute_freqs_cis"),
    ("torchtune_block_diag", M, torchtune_block_diag, "pytorch/torchtune create_block_causal_mask"),
    ("flex_create_mask", M, flex_create_mask, "torchtune mask_mod + flex create_mask"),
    ("boundary_cumsum", M, boundary_cumsum, "transformers find_packed_sequence_indices"),
    ("sirluk_end_index", M, sirluk_end_index, "huggingface blog sirluk/llm-sequence-packing"),
]
