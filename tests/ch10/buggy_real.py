"""Wrong answers to chapter 10's four exercises collected from public repositories and issue
threads (2026-11-29), each adapted minimally to the exercise's interface (the given __init__, its
part names, one function's arguments) and keeping the bug it was cited for. Each comment names the
repository and file or thread, and what is wrong. ``COLLECTION`` lists (check, answer, mistake id);
tests/ch10/test_ch10_real.py asserts each id and the share named by cause (>= 90%).

Where several sources wrote the same code, one fixture stands for them and its comment cites the
others, so that the share counts distinct mistakes rather than copies.

``HELD_OUT`` (and ``HELD_OUT_TABLES`` in buggy_real_tables.py, with the two table exercises): two
more rounds, each collected after the detectors for the rounds before were written, and run
against them unchanged (2026-11-29). Round 2: 4 of 9 named; the three detectors then added
(residual twice, residual overwritten, non-causal decoder self-attention) name all 9. Round 3 (the
items marked so): 2 of 3 named; the parallel-residual detector then added names the third.
"""

from __future__ import annotations

from tests.ch10.buggy import Block, Decoder
from tests.ch10.buggy_real_tables import TABLES


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


# ============================================================================= the held-out round
class BitNetResidualDoubled(Block):
    """kyegomez/BitNet#32, bit_transformer.py: x, _ = attn(x, x, x); x = x + x; x = ffn(x) + x: the
    attention output added to itself, the residual lost."""

    def pre(self, x):
        h = self.drop(self.attn(self.norm1(x)))
        x = h + h
        return x + self.drop(self.ff(self.norm2(x)))


class MultimodalInputOverwritten(Block):
    """facebookresearch/multimodal#305, torchmultimodal/models/gpt.py: x = attn_out, then x = x +
    self.dropout_attn(x) and the same for the MLP: the input overwritten before the residual add."""

    def pre(self, x):
        x = self.attn(self.norm1(x))
        x = x + self.drop(x)
        x = self.ff(self.norm2(x))
        return x + self.drop(x)


class GoogleResearchDuplicateShortcut(Block):
    """google-research/google-research#1581, summae/transformer.py: x += self._ffn_postprocess(x, y)
    where _ffn_postprocess already returns x + dropout(y): x + x + dropout(y) for the FFN."""

    def pre(self, x):
        x = x + self.drop(self.attn(self.norm1(x)))
        return x + (x + self.drop(self.ff(self.norm2(x))))


class FlashlightConformerTwice(Block):
    """flashlight/flashlight#582: ffn1 = x + fn(x); x = x + 0.5 * ffn1, x added twice for each
    sub-layer (the Conformer's half step left out)."""

    def pre(self, x):
        x = x + (x + self.drop(self.attn(self.norm1(x))))
        return x + (x + self.drop(self.ff(self.norm2(x))))


class KerasIoDecoderWithoutSourceMask(Decoder):
    """keras-team/keras-io#1046, examples/nlp/neural_machine_translation_with_transformer.py: the
    decoder only receives the target's mask, so its cross-attention sees the source's padding."""

    def cross(self, h, memory, memory_real):
        return self.cross_attn(h, memory)


class TransformersSelfAttentionNotCausal(Decoder):
    """huggingface/transformers#48745: decoder self-attention that attends to future tokens (adapted:
    the decoder's non-causal cross_attn module used for its self-attention)."""

    def forward(self, x, memory, memory_real=None):
        if self.norm_first:
            x = x + self.drop(self.cross_attn(self.norm1(x)))
            x = x + self.drop(self.cross_attn(self.norm2(x), memory, memory_real))
            return x + self.drop(self.ff(self.norm3(x)))
        x = self.norm1(x + self.drop(self.cross_attn(x)))
        x = self.norm2(x + self.drop(self.cross_attn(x, memory, memory_real)))
        return self.norm3(x + self.drop(self.ff(x)))


class NeoxParallelResidual(Block):
    """Round 3. huggingface/transformers#18695, models/gpt_neox/modeling_gpt_neox.py: with
    use_parallel_residual (GPT-NeoX-20B's default) x + attn(ln1(x)) + mlp(ln2(x)): the FFN reads
    the block's input, the parallel form, where the exercise builds the sequential block."""

    def pre(self, x):
        return x + self.drop(self.attn(self.norm1(x))) + self.drop(self.ff(self.norm2(x)))


HELD_OUT = [
    ("check_transformer_block", BitNetResidualDoubled, "block_residual_overwritten"),
    ("check_transformer_block", MultimodalInputOverwritten, "block_residual_overwritten"),
    ("check_transformer_block", GoogleResearchDuplicateShortcut, "block_residual_twice"),
    ("check_transformer_block", FlashlightConformerTwice, "block_residual_twice"),
    ("check_decoder_block", KerasIoDecoderWithoutSourceMask, "decoder_padding_ignored"),
    (
        "check_decoder_block",
        TransformersSelfAttentionNotCausal,
        "decoder_self_attention_not_causal",
    ),
    ("check_transformer_block", NeoxParallelResidual, "block_parallel_residual"),
]

COLLECTION = [
    *(("check_transformer_block", cls, bug) for cls, bug in BLOCKS),
    *(("check_decoder_block", cls, bug) for cls, bug in DECODERS),
    *HELD_OUT,
    *TABLES,
]
