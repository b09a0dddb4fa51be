"""Wrong answers to chapter 10's exercises, one per known bug, each with where it comes from.

``Block`` is a right TransformerBlock whose forward is split into overridable steps; every buggy
class changes one. Each list holds (answer, mistake id the check must name);
tests/test_checks_ch10.py runs them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import course_utils as cu


# ============================================================================= the block
class Block(nn.Module):
    """The chapter's TransformerBlock: the given __init__ and a right forward."""

    def __init__(
        self, d_model, num_heads, d_ff, context_length, dropout=0.0, norm_first=True, causal=True
    ):
        super().__init__()
        self.attn = cu.chapters.Attention(
            d_model, d_model, context_length, dropout, num_heads, qkv_bias=True, causal=causal
        )
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
        self.drop = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x):
        return self.pre(x) if self.norm_first else self.post(x)

    def pre(self, x):
        x = x + self.drop(self.attn(self.norm1(x)))
        return x + self.drop(self.ff(self.norm2(x)))

    def post(self, x):
        x = self.norm1(x + self.drop(self.attn(x)))
        return self.norm2(x + self.drop(self.ff(x)))


# ----------------------------------------------------------------------------- one bug each
class AlwaysPreNorm(Block):
    """norm_first ignored: the GPT-2 block written once and used for both flags."""

    def forward(self, x):
        return self.pre(x)


class AlwaysPostNorm(Block):
    """karpathy/ng-video-lecture#22: the paper's post-norm block proposed where pre-norm was meant
    (here: for both flags). (keras-io#2144, cited here before, fixes x + norm(f(x)) instead: see
    buggy_real.KerasTimeseriesEncoder.)"""

    def forward(self, x):
        return self.post(x)


class FlagInverted(Block):
    """The branches of `if self.norm_first` exchanged."""

    def forward(self, x):
        return self.post(x) if self.norm_first else self.pre(x)


class ResidualAfterNorm(Block):
    """Howuhh/faster-trajectory-transformer#3 (norm_x + attn(norm_x)) and lbcb-sci/RiNALMo#9."""

    def pre(self, x):
        x = self.norm1(x)
        x = x + self.drop(self.attn(x))
        x = self.norm2(x)
        return x + self.drop(self.ff(x))


class FfnWithoutResidual(Block):
    """Written to the pattern of kyegomez/BitNet#32 (a residual lost in the block's forward)."""

    def pre(self, x):
        x = x + self.drop(self.attn(self.norm1(x)))
        return self.drop(self.ff(self.norm2(x)))

    def post(self, x):
        x = self.norm1(x + self.drop(self.attn(x)))
        return self.norm2(self.drop(self.ff(x)))


class AttentionWithoutResidual(Block):
    """Chapter 06's TinyGPT wiring kept inside a block (attention output replaces x)."""

    def pre(self, x):
        x = self.drop(self.attn(self.norm1(x)))
        return x + self.drop(self.ff(self.norm2(x)))


class FfnResidualFromInput(Block):
    """strutive07/transformer-tensorflow2.0#14: layer_norm_2(inputs + ffn(...)) instead of
    layer_norm_2(attention_result + ffn(...))."""

    def post(self, x):
        h = self.norm1(x + self.drop(self.attn(x)))
        return self.norm2(x + self.drop(self.ff(h)))


class SameNormTwice(Block):
    """allenai/OLMo#222: self.norm used before attention and before the FFN."""

    def pre(self, x):
        x = x + self.drop(self.attn(self.norm1(x)))
        return x + self.drop(self.ff(self.norm1(x)))


class NormsExchanged(Block):
    """Written to the pattern of a copy-paste slip: norm2 before attention, norm1 before the FFN."""

    def pre(self, x):
        x = x + self.drop(self.attn(self.norm2(x)))
        return x + self.drop(self.ff(self.norm1(x)))


class ResidualDetached(Block):
    """Written to the pattern of 'x.detach()' kept from a debugging print: right numbers, no
    gradient through the residual."""

    def pre(self, x):
        x = x.detach() + self.drop(self.attn(self.norm1(x)))
        return x + self.drop(self.ff(self.norm2(x)))


class DropoutAlwaysOn(Block):
    """F.dropout without training=self.training (its default is True), a classic of tutorials."""

    def pre(self, x):
        x = x + F.dropout(self.attn(self.norm1(x)), self.drop.p)
        return x + F.dropout(self.ff(self.norm2(x)), self.drop.p)


class InPlaceResidual(Block):
    """x += ... on the caller's tensor: the input changes under the caller."""

    def pre(self, x):
        x += self.drop(self.attn(self.norm1(x)))
        return x + self.drop(self.ff(self.norm2(x)))


class DropoutAfterResidual(Block):
    """Issue 38's student trial (accepted while the check ran in eval mode only): dropout on the sum,
    x = drop(x + f(norm(x))); post-norm: norm(drop(x + f(x))), the order codertimo/BERT-pytorch#85
    describes ("residual connection -> dropout -> normalization")."""

    def pre(self, x):
        x = self.drop(x + self.attn(self.norm1(x)))
        return self.drop(x + self.ff(self.norm2(x)))

    def post(self, x):
        x = self.norm1(self.drop(x + self.attn(x)))
        return self.norm2(self.drop(x + self.ff(x)))


class DropoutKeepProbability(Block):
    """kok202/Dluid#125 ("dropout value was inverted"): the keep probability 1 - p given as the rate."""

    def pre(self, x):
        x = x + F.dropout(self.attn(self.norm1(x)), 1 - self.drop.p, self.training)
        return x + F.dropout(self.ff(self.norm2(x)), 1 - self.drop.p, self.training)


class DropoutOnSublayerInput(Block):
    """Written to the pattern of dropout moved onto the sub-layer's input: x + f(drop(norm(x)))."""

    def pre(self, x):
        x = x + self.attn(self.drop(self.norm1(x)))
        return x + self.ff(self.drop(self.norm2(x)))


BLOCK_BUGS = [
    (AlwaysPreNorm, "block_norm_placement"),
    (AlwaysPostNorm, "block_norm_placement"),
    (FlagInverted, "block_norm_placement"),
    (ResidualAfterNorm, "block_residual_after_norm"),
    (FfnWithoutResidual, "block_ffn_no_residual"),
    (AttentionWithoutResidual, "block_attn_no_residual"),
    (FfnResidualFromInput, "block_ffn_residual_from_input"),
    (SameNormTwice, "block_norm_reused"),
    (NormsExchanged, "block_norms_exchanged"),
    (ResidualDetached, "block_gradient_differs"),
    (DropoutAlwaysOn, "block_dropout_in_eval"),
    (InPlaceResidual, "input_modified"),
    (DropoutAfterResidual, "block_dropout_after_residual"),
    (DropoutKeepProbability, "block_dropout_wrong_p"),
    (DropoutOnSublayerInput, "block_dropout_elsewhere"),
]


# ============================================================================= sinusoidal positions
def _angles(n, d, start=0, exponent_scale=2.0):
    p = torch.arange(start, start + n, dtype=torch.float32)[:, None]  # (n, 1)
    return p * 10_000.0 ** (-exponent_scale * torch.arange(d // 2) / d)  # (n, d/2)


def _interleave(even, odd):
    return torch.stack([even, odd], dim=-1).flatten(1)  # (n, d)


def phases_swapped(n, d):
    # Cos at 2i, sin at 2i + 1: `pe[:, 0::2] = torch.cos(...)`, `pe[:, 1::2] = torch.sin(...)` occurs in
    # public code in the workplace's code index (a PositionalEncoding in a file named
    # sign_lstm_attention.py; the index does not name its repository, searched 2026-11-25).
    a = _angles(n, d)
    return _interleave(torch.cos(a), torch.sin(a))


def halves(n, d):
    # allenai/allennlp#2993 (tensor2tensor's layout): torch.cat([sin, cos]).
    a = _angles(n, d)
    return torch.cat([torch.sin(a), torch.cos(a)], dim=1)


def frequency_per_feature(n, d):
    # Kyubyong/transformer#38: pos / 10000^(2i/d) for every feature i, then sin at even, cos at odd.
    angle = torch.arange(n, dtype=torch.float32)[:, None] * 10_000.0 ** (-2 * torch.arange(d) / d)
    table = torch.zeros(n, d)
    table[:, 0::2], table[:, 1::2] = torch.sin(angle[:, 0::2]), torch.cos(angle[:, 1::2])
    return table


def pair_index(n, d):
    # Written to the pattern of torch.arange(d // 2) / d for the exponent (2 forgotten).
    a = _angles(n, d, exponent_scale=1.0)
    return _interleave(torch.sin(a), torch.cos(a))


def from_one(n, d):
    # Written to the pattern of positions counted from 1 (torch.arange(1, n + 1)).
    a = _angles(n, d, start=1)
    return _interleave(torch.sin(a), torch.cos(a))


def integer_table(n, d):
    # torch.zeros(n, d, dtype=torch.long) as the table: every value truncated to 0 or +-1.
    return _interleave(torch.sin(_angles(n, d)), torch.cos(_angles(n, d))).long()


def course_first_version(n, d):
    # This course's first sinusoidal_positions (issue 38): right for an even d, an unexplained
    # RuntimeError from the cosine assignment for an odd one.
    p = torch.arange(n, dtype=torch.float32)[:, None]  # (n, 1)
    omega = 10_000.0 ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)  # (ceil(d/2),)
    table = torch.zeros(n, d)
    table[:, 0::2] = torch.sin(p * omega)
    table[:, 1::2] = torch.cos(p * omega)
    return table


def refuses_without_saying_d(n, d):
    # Written to the pattern of a bare assert turned into a ValueError that names no value.
    if d % 2:
        raise ValueError("d must be even")
    return course_first_version(n, d)


SINUSOID_BUGS = [
    (phases_swapped, "sinusoid_phases_swapped"),
    (halves, "sinusoid_halves"),
    (frequency_per_feature, "sinusoid_frequency_per_feature"),
    (pair_index, "sinusoid_pair_index"),
    (from_one, "sinusoid_positions_from_one"),
    (integer_table, "sinusoid_not_float"),
    (course_first_version, "sinusoid_odd_width"),
    (refuses_without_saying_d, "sinusoid_odd_width"),
]


# ============================================================================= the decoder block
class Decoder(nn.Module):
    """The chapter's DecoderBlock: the given __init__ and a right forward in overridable steps."""

    def __init__(self, d_model, num_heads, d_ff, context_length, dropout=0.0, norm_first=True):
        super().__init__()
        make = cu.chapters.Attention
        self.self_attn = make(d_model, d_model, context_length, dropout, num_heads, True, True)
        self.cross_attn = make(d_model, d_model, context_length, dropout, num_heads, True, False)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
        self.drop = nn.Dropout(dropout)
        self.norm_first = norm_first

    def cross(self, h, memory, memory_real):
        return self.cross_attn(h, memory, memory_real)

    def residual_base(self, x, memory):
        return x

    def forward(self, x, memory, memory_real=None):
        if self.norm_first:
            x = x + self.drop(self.self_attn(self.norm1(x)))
            x = self.residual_base(x, memory) + self.drop(
                self.cross(self.norm2(x), memory, memory_real)
            )
            return x + self.drop(self.ff(self.norm3(x)))
        x = self.norm1(x + self.drop(self.self_attn(x)))
        x = self.norm2(
            self.residual_base(x, memory) + self.drop(self.cross(x, memory, memory_real))
        )
        return self.norm3(x + self.drop(self.ff(x)))


class CrossQueriesFromMemory(Decoder):
    """rexrex9/nlp_torchtext#2: the decoder computed Q from the encoder's output, K and V from its own."""

    def cross(self, h, memory, memory_real):
        return self.cross_attn(memory, h, memory_real)


class CrossQueriesFromMemoryNoMask(Decoder):
    """The same swap without the padding mask."""

    def cross(self, h, memory, memory_real):
        return self.cross_attn(memory, h)


class CrossIgnoresMemory(Decoder):
    """Written to the pattern of lucidrains/reformer-pytorch#90 (the decoder attends over its own tokens
    where the encoder's output belongs): cross_attn(h) alone."""

    def cross(self, h, memory, memory_real):
        return self.cross_attn(h)


class SourcePaddingIgnored(Decoder):
    """Kamichanw/SeekDeeper#3: the cross-attention ran without the source mask."""

    def cross(self, h, memory, memory_real):
        return self.cross_attn(h, memory)


class CrossResidualFromMemory(Decoder):
    """georgepar/slp#26: the encoder's output used as the residual of the cross-attention."""

    def residual_base(self, x, memory):
        return memory


class DecoderAlwaysPreNorm(Decoder):
    """norm_first ignored."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.norm_first = True


class MemoryDetached(Decoder):
    """memory.detach() ('the encoder is done'): the encoder would never learn from the decoder's loss."""

    def cross(self, h, memory, memory_real):
        return self.cross_attn(h, memory.detach(), memory_real)


class CrossMemoryKeptFromFirstCall(Decoder):
    """Written to the pattern of fairseq's static_kv (cross-attention keys and values computed once,
    as generation reuses one source): the memory of the first call kept on self and reused."""

    def cross(self, h, memory, memory_real):
        if not hasattr(self, "kept"):
            self.kept = (memory, memory_real)
        return self.cross_attn(h, *self.kept)


DECODER_BUGS = [
    (CrossQueriesFromMemory, "decoder_cross_swapped"),
    (CrossQueriesFromMemoryNoMask, "decoder_cross_swapped"),
    (CrossIgnoresMemory, "decoder_memory_unused"),
    (SourcePaddingIgnored, "decoder_padding_ignored"),
    (CrossResidualFromMemory, "decoder_cross_residual_from_memory"),
    (DecoderAlwaysPreNorm, "block_norm_placement"),
    (MemoryDetached, "block_gradient_differs"),
    (CrossMemoryKeptFromFirstCall, "state_between_calls"),
]


# ============================================================================= packed documents
def _same_doc(doc_ids):
    return doc_ids[:, :, None] == doc_ids[:, None, :]  # (b, n, n)


def _causal(doc_ids):
    n = doc_ids.shape[-1]
    return torch.ones(n, n, dtype=torch.bool, device=doc_ids.device).tril()


def plain_causal(doc_ids):
    # axolotl-ai-cloud/axolotl#3796: packed rows under the plain causal mask (documents leak).
    return _causal(doc_ids).expand(doc_ids.shape[0], -1, -1)


def positions_reset_only(doc_ids):
    # DeepOpt-com/WrinkleFree-Monorepo#53: positions restarted per document, the mask left causal.
    return _causal(doc_ids).repeat(doc_ids.shape[0], 1, 1)


def block_diagonal_only(doc_ids):
    # Written to the pattern of a document mask without the causal part (same_doc alone).
    return _same_doc(doc_ids)


def inverted(doc_ids):
    # nn.MultiheadAttention's convention (True = hidden) given where SDPA's is asked for.
    return ~(_same_doc(doc_ids) & _causal(doc_ids))


def first_row_only(doc_ids):
    # Written to the pattern of a mask built for doc_ids[0] and broadcast over the batch.
    ids = doc_ids[0]
    return ((ids[:, None] == ids[None, :]) & _causal(doc_ids)).expand(doc_ids.shape[0], -1, -1)


def float_mask(doc_ids):
    # (.float() for SDPA: added to the scores, hides nothing)
    return (_same_doc(doc_ids) & _causal(doc_ids)).float()


def causal_made_on_cpu(doc_ids):
    # torch.ones(n, n) without device=: right on the CPU, a device mix on a GPU.
    n = doc_ids.shape[-1]
    return _same_doc(doc_ids) & torch.ones(n, n, dtype=torch.bool).tril()


def sees_next_token(doc_ids):
    # Written to the pattern of tril(1), the causal diagonal one too far: each token sees the next.
    n = doc_ids.shape[-1]
    return _same_doc(doc_ids) & torch.ones(n, n, dtype=torch.bool, device=doc_ids.device).tril(1)


PACKED_BUGS = [
    (plain_causal, "packed_leaks_across_documents"),
    (positions_reset_only, "packed_leaks_across_documents"),
    (block_diagonal_only, "packed_not_causal"),
    (inverted, "packed_inverted"),
    (first_row_only, "packed_first_row_only"),
    (float_mask, "packed_not_bool"),
    (causal_made_on_cpu, "cpu_tensor_in_forward"),
    (sees_next_token, "packed_sees_next"),
]
