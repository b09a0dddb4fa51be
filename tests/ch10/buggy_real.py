"""Wrong answers to chapter 10's four exercises collected from public repositories and issue
threads (2026-11-29), each adapted minimally to the exercise's interface (the given __init__, its
part names, one function's arguments) and keeping the bug it was cited for. Each comment names the
repository and file or thread, and what is wrong. ``COLLECTION`` lists (check, answer, mistake id);
tests/ch10/test_ch10_real.py asserts each id and the share named by cause (>= 90%).

Where several sources wrote the same code, one fixture stands for them and its comment cites the
others, so that the share counts distinct mistakes rather than copies.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from tests.ch10.buggy import Block, Decoder


# ============================================================================= TransformerBlock
class KwtPostNormOnBranch(Block):
    """mashrurmorshed/Torch-KWT#13, model/kwt.py: PostNorm returns norm(fn(x)) and the layer loop adds
    x after it (x = attn(x) + x): post-norm written as x + norm(f(x)); pre-norm is right."""

    def post(self, x):
        x = self.norm1(self.drop(self.attn(x))) + x
        return self.norm2(self.drop(self.ff(x))) + x


class KerasTimeseriesEncoder(Block):
    """keras-team/keras-io examples/timeseries/timeseries_classification_transformer.py (commit
    2024821): x = Dropout(attn(inputs)); x = LayerNorm(x); res = x + inputs; the FFN likewise, then
    return x + res: the norm on the branch, one function whatever the flag (keras-io#2144 fixes it)."""

    def forward(self, x):
        x = self.norm1(self.drop(self.attn(x))) + x
        return self.norm2(self.drop(self.ff(x))) + x


class KeitakuritaEncoderBranchNorm(Block):
    """keitakurita/Practical_NLP_in_PyTorch#1, deep_dives/transformer_from_scratch.ipynb: x = x +
    self.dropout(self.layer_norm1(att)): dropout outside the norm on the branch, for both flags."""

    def forward(self, x):
        x = x + self.drop(self.norm1(self.attn(x)))
        return x + self.drop(self.norm2(self.ff(x)))


class HyunwoongkoDropoutAfterNorm(Block):
    """hyunwoongko/transformer#8, models/blocks/encoder_layer.py before the fix: x = self.norm1(x +
    _x); x = self.dropout1(x): add, norm, then dropout (post-norm; its pre-norm kept right)."""

    def post(self, x):
        x = self.drop(self.norm1(x + self.attn(x)))
        return self.drop(self.norm2(x + self.ff(x)))


class BertPytorchOutputDropout(Block):
    """codertimo/BERT-pytorch bert_pytorch/model/transformer.py (commit 3e23e9b) and issue #85: two
    SublayerConnections, then return self.dropout(x): one more dropout on the block's output."""

    def forward(self, x):
        return self.drop(super().forward(x))


class TirexDropoutNeverUsed(Block):
    """NX-AI/tirex#19, src/tirex/models/components.py: a Dropout made in __init__ and never applied."""

    def pre(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.ff(self.norm2(x))

    def post(self, x):
        x = self.norm1(x + self.attn(x))
        return self.norm2(x + self.ff(x))


class CellFlowDropoutOnInput(Block):
    """theislab/CellFlow#296, src/cellflow/networks/_utils.py: z_ = act(Dense(z)); z_ = Dropout(z);
    z = z + z_: dropout applied to the FFN's input, so the FFN's output is thrown away."""

    def pre(self, x):
        x = x + self.drop(self.attn(self.norm1(x)))
        h = self.norm2(x)
        _ = self.ff(h)
        return x + self.drop(h)

    def post(self, x):
        x = self.norm1(x + self.drop(self.attn(x)))
        _ = self.ff(x)
        return self.norm2(x + self.drop(x))


class PytorchFirstNormFirst(Block):
    """pytorch/pytorch#61165: the norm_first branch added by #60593 in torch/nn/modules/transformer.py
    did src = self.norm1(src) before the residual (the same in tracel-ai/burn#1056: x = norm(x);
    x += FF(x)): the residual is the normalised x."""

    def pre(self, x):
        x = self.norm1(x)
        x = x + self.drop(self.attn(x))
        x = self.norm2(x)
        return x + self.drop(self.ff(x))


class CompactTransformersFfnAfterNorm(Block):
    """SHI-Labs/Compact-Transformers#25, src/utils/transformers.py: src = src + attn(pre_norm(src));
    src = self.norm1(src); src = src + ffn(src): only the FFN's residual is the normalised stream
    (naklecha/llama3-from-scratch#28's figure draws the same)."""

    def pre(self, x):
        x = x + self.drop(self.attn(self.norm1(x)))
        x = self.norm2(x)
        return x + self.drop(self.ff(x))


class CapMarketFfnResidualFromInput(Block):
    """JanSchm/CapMarket#8: ff_layer = self.ff_normalize(x[0] + ff_layer), the block's input, where
    the attention layer's result belongs (post-norm; pre-norm kept right)."""

    def post(self, x):
        h = self.norm1(x + self.drop(self.attn(x)))
        return self.norm2(x + self.drop(self.ff(h)))


class NemoPostLnResidual(Block):
    """NVIDIA-NeMo/Speech#4350, nemo/collections/nlp/modules/common/megatron/transformer.py: in
    post-LN the MLP's residual was layernorm_input, the sum before the norm, not the norm's output."""

    def post(self, x):
        s = x + self.drop(self.attn(x))
        h = self.norm1(s)
        return self.norm2(s + self.drop(self.ff(h)))


class SnowfallFlagNotPassed(Block):
    """k2-fsa/snowfall#184: normalize_before was not passed on to the layers, which kept their
    default (pre-norm) whatever was asked."""

    def forward(self, x):
        return self.pre(x)


class RinKeysFromRawInput(Block):
    """lucidrains/recurrent-interface-network-pytorch#6, rin_pytorch/rin_pytorch.py: queries from the
    layer-normalised latents, keys and values from the un-normalised ones (the same in
    pmixer/SASRec.pytorch#33: mha(Q, seqs, seqs) with Q = layernorm(seqs))."""

    def pre(self, x):
        x = x + self.drop(self.attn(self.norm1(x), x))
        return x + self.drop(self.ff(self.norm2(x)))


BLOCKS = [
    (KwtPostNormOnBranch, "block_norm_on_branch"),
    (KerasTimeseriesEncoder, "block_norm_on_branch"),
    (KeitakuritaEncoderBranchNorm, "block_norm_on_branch"),
    (HyunwoongkoDropoutAfterNorm, "block_dropout_after_residual"),
    (BertPytorchOutputDropout, "block_output_dropped"),
    (TirexDropoutNeverUsed, "block_dropout_missing"),
    (CellFlowDropoutOnInput, "block_ffn_output_unused"),
    (PytorchFirstNormFirst, "block_residual_after_norm"),
    (CompactTransformersFfnAfterNorm, "block_residual_after_norm"),
    (CapMarketFfnResidualFromInput, "block_ffn_residual_from_input"),
    (NemoPostLnResidual, "block_residual_skips_norm"),
    (SnowfallFlagNotPassed, "block_norm_placement"),
    (RinKeysFromRawInput, "block_keys_not_normalised"),
]


# ============================================================================= DecoderBlock
class MlxCrossNotNormalised(Decoder):
    """ml-explore/mlx#210, python/mlx/nn/layers/transformer.py: y = self.ln2(x); y =
    self.cross_attention(x, memory, memory, memory_mask): ln2's output unused (pre-norm)."""

    def forward(self, x, memory, memory_real=None):
        if not self.norm_first:
            return super().forward(x, memory, memory_real)
        x = x + self.drop(self.self_attn(self.norm1(x)))
        x = x + self.drop(self.cross_attn(x, memory, memory_real))
        return x + self.drop(self.ff(self.norm3(x)))


class MlxCrossQueriesFromSelfAttention(Decoder):
    """ml-explore/mlx#3382: in the post-LN TransformerDecoderLayer the cross-attention received y,
    the dropped-out self-attention output, as its queries instead of x = ln1(x + y)."""

    def forward(self, x, memory, memory_real=None):
        if self.norm_first:
            return super().forward(x, memory, memory_real)
        y = self.drop(self.self_attn(x))
        x = self.norm1(x + y)
        x = self.norm2(x + self.drop(self.cross_attn(y, memory, memory_real)))
        return self.norm3(x + self.drop(self.ff(x)))


class RinContextNormalised(Decoder):
    """lucidrains/recurrent-interface-network-pytorch#17: the cross-attention normalises its context
    (the memory) too, which the paper's algorithm does not (adapted: with norm2)."""

    def cross(self, h, memory, memory_real):
        return self.cross_attn(h, self.norm2(memory), memory_real)


class KeitakuritaMasksSwapped(Decoder):
    """keitakurita/Practical_NLP_in_PyTorch#1: masked_attn_head(x, x, x, mask=src_mask) and the
    encoder-decoder attention with mask=tgt_mask: the two masks exchanged."""

    def forward(self, x, memory, memory_real=None):
        if self.norm_first:
            x = x + self.drop(self.self_attn(self.norm1(x), None, memory_real))
            x = x + self.drop(self.cross_attn(self.norm2(x), memory))
            return x + self.drop(self.ff(self.norm3(x)))
        x = self.norm1(x + self.drop(self.self_attn(x, None, memory_real)))
        x = self.norm2(x + self.drop(self.cross_attn(x, memory)))
        return self.norm3(x + self.drop(self.ff(x)))


class HyunwoongkoDecoderDropoutAfterNorm(Decoder):
    """hyunwoongko/transformer#8 (the order of its encoder layer, add and norm, then dropout, applied
    to its decoder layer's three sub-layers; post-norm, pre-norm kept right)."""

    def forward(self, x, memory, memory_real=None):
        if self.norm_first:
            return super().forward(x, memory, memory_real)
        x = self.drop(self.norm1(x + self.self_attn(x)))
        x = self.drop(self.norm2(x + self.cross_attn(x, memory, memory_real)))
        return self.drop(self.norm3(x + self.ff(x)))


DECODERS = [
    (MlxCrossNotNormalised, "decoder_cross_not_normalised"),
    (MlxCrossQueriesFromSelfAttention, "decoder_cross_queries_from_sublayer"),
    (RinContextNormalised, "decoder_memory_normalised"),
    (KeitakuritaMasksSwapped, "decoder_masks_swapped"),
    (HyunwoongkoDecoderDropoutAfterNorm, "block_dropout_after_residual"),
]


# ============================================================================= sinusoidal_positions
def _interleaved(sin, cos):
    return torch.stack([sin, cos], dim=-1).flatten(1)  # (n, d): sin, cos, sin, cos, ...


def loftr_precedence(n, d):
    # zju3dv/LoFTR#41, src/loftr/utils/position_encoding.py: -math.log(10000.0) / d_model//2 parses
    # as (-log(10000) / d) // 2 = -1.0, so w_i = exp(-2i) (adapted from its 2-D half widths to d)
    div_term = torch.exp(torch.arange(0, d, 2).float() * (-math.log(10000.0) / d // 2))
    p = torch.arange(n).float()[:, None]
    return _interleaved(torch.sin(p * div_term), torch.cos(p * div_term))


def intro_llm_doubled_index(n, d):
    # intro-llm/intro-llm.github.io#34: for i in range(0, d, 2): pe[pos, i] = sin(pos / 10000 **
    # ((2 * i) / d)); pe[pos, i + 1] = cos(pos / 10000 ** ((2 * (i + 1)) / d))
    pe = torch.zeros(n, d)
    for pos in range(n):
        for i in range(0, d, 2):
            pe[pos, i] = math.sin(pos / (10000 ** ((2 * i) / d)))
            pe[pos, i + 1] = math.cos(pos / (10000 ** ((2 * (i + 1)) / d)))
    return pe


def deepctr_frequency_per_feature(n, d):
    # shenweichen/DeepCTR#379, deepctr/layers/sequence.py: pos / np.power(10000, 2. * i / num_units)
    # for every feature i, then sin at the even columns and cos at the odd ones
    enc = np.array([[pos / np.power(10000, 2.0 * i / d) for i in range(d)] for pos in range(n)])
    enc[:, 0::2], enc[:, 1::2] = np.sin(enc[:, 0::2]), np.cos(enc[:, 1::2])
    return torch.tensor(enc, dtype=torch.float32)


def kyubyong_integer_division(n, d):
    # Kyubyong/transformer#81: pos / np.power(10000, 2 * (i // 2) / d) under Python 2, where the
    # integer division 2 * (i // 2) / d is 0 for every feature: all frequencies 1
    enc = np.array(
        [[pos / np.power(10000, 2 * (i // 2) // d) for i in range(d)] for pos in range(n)]
    )
    enc[:, 0::2], enc[:, 1::2] = np.sin(enc[:, 0::2]), np.cos(enc[:, 1::2])
    return torch.tensor(enc, dtype=torch.float32)


def pips_multiplied(n, d):
    # aharley/pips#30, misc.py get_3d_embedding: div_term grows with the feature and multiplies the
    # position (x * div_term): w_i = 10000^(2i/d) instead of its inverse
    div_term = 10000.0 ** (torch.arange(0, d, 2).float() / d)
    p = torch.arange(n).float()[:, None]
    return _interleaved(torch.sin(p * div_term), torch.cos(p * div_term))


def annotated_divided(n, d):
    # harvardnlp/annotated-transformer#131: torch.sin(position / div_term) with the tutorial's
    # div_term = exp(-log(10000) 2i / d): the frequencies inverted
    position = torch.arange(n).float()[:, None]
    div_term = torch.exp(torch.arange(0, d, 2).float() * (-math.log(10000.0) / d))
    return _interleaved(torch.sin(position / div_term), torch.cos(position / div_term))


def wavegrad_exponent(n, d):
    # ivanvovk/WaveGrad#12, model/linear_modulation.py: exponents = exponents ** 1e-4 where
    # 1e-4 ** exponents was meant: every frequency near 1 (interleaved here, the exercise's layout)
    exponents = (torch.arange(d // 2).float() / (d // 2)) ** 1e-4
    p = torch.arange(n).float()[:, None]
    return _interleaved(torch.sin(p * exponents), torch.cos(p * exponents))


def maplewarrior_doubled_exponent(n, d):
    # Maplewarrior/MT_HW2 PositionalEncoder.py: for i in range(0, d, 2): sin(pos / 10000 ** (2 * i /
    # d)) and the same for its cosine: the even index i doubled again (w = 10000^(-4k/d) for pair k)
    pe = torch.zeros(n, d)
    for pos in range(n):
        for i in range(0, d, 2):
            pe[pos, i] = np.sin(pos / 10000 ** (2 * i / d))
            pe[pos, i + 1] = np.cos(pos / 10000 ** (2 * i / d))
    return pe


def brianpulfer_rows(n, d):
    # BrianPulfer/PapersReimplementations#9 (ddpm): sin_mask = torch.arange(0, n, 2);
    # embedding[sin_mask] = sin(...); embedding[1 - sin_mask] = cos(...): sine and cosine by row
    embedding = torch.tensor([[i / 10_000 ** (2 * j / d) for j in range(d)] for i in range(n)])
    sin_mask = torch.arange(0, n, 2)
    embedding[sin_mask] = torch.sin(embedding[sin_mask])
    embedding[1 - sin_mask] = torch.cos(embedding[sin_mask])
    return embedding


def hf_tf_marian_overwritten(n, d):
    # huggingface/transformers#11724, modeling_tf_marian.py: position_enc[:, :d//2] = sin(...0::2)
    # overwrites the columns that position_enc[:, d//2:] = cos(position_enc[:, 1::2]) then reads
    enc = np.array(
        [[pos / np.power(10000, 2 * (j // 2) / d) for j in range(d)] for pos in range(n)]
    )
    enc[:, 0 : d // 2] = np.sin(enc[:, 0::2])
    enc[:, d // 2 :] = np.cos(enc[:, 1::2])
    return torch.tensor(enc, dtype=torch.float32)


def tensorflow_concatenated(n, d):
    # tensorflow/tensorflow#37191: the tutorial's angles, then np.concatenate([angle_rads[:, 0::2],
    # angle_rads[:, 1::2]], axis=-1): all sines first, then all cosines
    angle = np.array(
        [[pos / np.power(10000, 2 * (i // 2) / d) for i in range(d)] for pos in range(n)]
    )
    angle[:, 0::2], angle[:, 1::2] = np.sin(angle[:, 0::2]), np.cos(angle[:, 1::2])
    return torch.tensor(np.concatenate([angle[:, 0::2], angle[:, 1::2]], axis=-1)).float()


def pytorch_tutorial_buffer(n, d):
    # pytorch/tutorials beginner_source/transformer_tutorial.py: PositionalEncoding keeps
    # pe = torch.zeros(max_len, 1, d_model) for (seq, batch, d) inputs: the table with a batch axis
    position = torch.arange(n).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
    pe = torch.zeros(n, 1, d)
    pe[:, 0, 0::2] = torch.sin(position * div_term)
    pe[:, 0, 1::2] = torch.cos(position * div_term)
    return pe


def interview_review_unsqueezed(n, d):
    # aiwq2/interview-review position_embedding.py (the Annotated Transformer's code): pe =
    # pe.unsqueeze(0) before register_buffer: a (1, n, d) table
    pe = torch.zeros(n, d)
    position = torch.arange(0, n).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2) * -(math.log(10000.0) / d))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe.unsqueeze(0)


SINUSOIDS = [
    (loftr_precedence, "sinusoid_wrong_frequencies"),
    (intro_llm_doubled_index, "sinusoid_frequency_per_feature"),
    (deepctr_frequency_per_feature, "sinusoid_frequency_per_feature"),
    (kyubyong_integer_division, "sinusoid_wrong_frequencies"),
    (pips_multiplied, "sinusoid_wrong_frequencies"),
    (annotated_divided, "sinusoid_wrong_frequencies"),
    (wavegrad_exponent, "sinusoid_wrong_frequencies"),
    (maplewarrior_doubled_exponent, "sinusoid_wrong_frequencies"),
    (brianpulfer_rows, "sinusoid_cos_missing"),
    (hf_tf_marian_overwritten, "sinusoid_halves"),
    (tensorflow_concatenated, "sinusoid_halves"),
    (pytorch_tutorial_buffer, "sinusoid_layout"),
    (interview_review_unsqueezed, "sinusoid_layout"),
]


# ============================================================================= packed_causal_mask
def _same_doc(ids):
    return ids[:, :, None] == ids[:, None, :]  # (b, n, n)


def _ones(ids):
    n = ids.shape[-1]
    return torch.ones(n, n, dtype=torch.bool, device=ids.device)


def nanovlm_positions_only(ids):
    # huggingface/nanoVLM#201 and #204 (also 0-5788719150923125/praxis#38, huggingface/transformers
    # #46634): packed samples under the plain causal mask, so a sample attends to the ones before it
    return _ones(ids).tril().expand(ids.shape[0], -1, -1)


def attention_gym_batch_zero(ids):
    # meta-pytorch/attention-gym#98, bug 3: create_block_mask(..., B=None) with a batch-dependent
    # mask_mod evaluates the mask for b = 0 only and broadcasts it over the batch
    return (_same_doc(ids[:1]) & _ones(ids).tril()).expand(ids.shape[0], -1, -1)


def xformers_causal_lost(ids):
    # facebookresearch/xformers#1185: BlockDiagonalCausalMask.to(device) returned a
    # BlockDiagonalMask: the document blocks kept, the causal part lost
    return _same_doc(ids)


def gpt_sovits_diagonal(ids):
    # RVC-Boss/GPT-SoVITS#965, GPT_SoVITS/AR/models/t2s_model.py: the causal mask's diagonal one off,
    # so a position does not see itself (here tril(-1); pytorch/tutorials#2250 proposed the same)
    return _same_doc(ids) & _ones(ids).tril(-1)


def pytorch_143287_self_masked(ids):
    # pytorch/pytorch#143287: triu(diagonal=0) hides each token from itself, with mask[0, 0] = False
    # special-cased "to avoid NaN results" (True = hidden there; inverted to the exercise's True = may)
    hidden = _ones(ids).triu(0)
    hidden[0, 0] = False
    return _same_doc(ids) & ~hidden


def pytorch_29546_flipped(ids):
    # pytorch/pytorch#29546 (and pytorch/examples#649): PyTorch 1.3's generate_square_subsequent_mask
    # came out flipped, hiding the past and showing the future (marin-community/levanter#102's loop
    # `if j >= i` draws the same)
    return _same_doc(ids) & _ones(ids).triu()


def llamafactory_4d(ids):
    # hiyouga/LlamaFactory#7318: neat_packing builds a 4-D (b, 1, n, n) attention mask for the model,
    # with the head axis the caller of this exercise adds itself
    return (_same_doc(ids) & _ones(ids).tril())[:, None]


PACKED = [
    (nanovlm_positions_only, "packed_leaks_across_documents"),
    (attention_gym_batch_zero, "packed_first_row_only"),
    (xformers_causal_lost, "packed_not_causal"),
    (gpt_sovits_diagonal, "packed_self_hidden"),
    (pytorch_143287_self_masked, "packed_self_hidden"),
    (pytorch_29546_flipped, "packed_future_not_past"),
    (llamafactory_4d, "packed_layout"),
]

COLLECTION = [
    *(("check_transformer_block", cls, bug) for cls, bug in BLOCKS),
    *(("check_decoder_block", cls, bug) for cls, bug in DECODERS),
    *(("check_sinusoidal_positions", fn, bug) for fn, bug in SINUSOIDS),
    *(("check_packed_causal_mask", fn, bug) for fn, bug in PACKED),
]
