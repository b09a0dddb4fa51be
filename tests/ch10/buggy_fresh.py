"""A fresh set of wrong transformer and decoder blocks (chapter 10, exercises 1 and 3), taken from
public repositories and issue threads and adapted minimally to the exercise's interface: each is a
subclass of the exercise's own class (its ``__init__`` as given) with the source's ``forward``, the
bug kept as the source has it. The source has one design where the exercise asks for two
(``norm_first`` True or False): the other branch is written right, unless the source's mistake does
not depend on the placement (then it is in both). Collected by a reviewer who had not read the
checks or their catalogue. Positions and packed masks: ``buggy_fresh_tables.py``.

The list of cases, with sources, causes and the reviewer's verdicts: ``fresh_cases.py``."""

import course_utils as cu

Block = cu.chapters.TransformerBlock
Decoder = cu.chapters.DecoderBlock


# ---------------------------------------------------------------- exercise 1: the block


class HowuhhNormedResidual(Block):
    """Howuhh/faster-trajectory-transformer, trajectory/models/gpt/gpt.py (TransformerBlock.forward;
    issue #3 "pre-norm bug in transformer block", the author's own report). ``x = self.norm1(x)``
    overwrites x, so the attention's residual adds the normalised x. Cause: pre-norm residual taken
    from norm(x) instead of x."""

    def forward(self, x):
        if self.norm_first:
            x = self.norm1(x)
            x = x + self.drop(self.attn(x))
            return x + self.drop(self.ff(self.norm2(x)))  # the source's mlp ends with its dropout
        x = self.norm1(x + self.drop(self.attn(x)))
        return self.norm2(x + self.drop(self.ff(x)))


class TorchNormFirst60593(Block):
    """pytorch/pytorch, torch/nn/modules/transformer.py at 54673fc (TransformerEncoderLayer, norm_first
    as added by PR #60593); issue #61165 "Incorrect pre-LN in the transformer model" (high priority,
    fixed by #61692): ``src = self.norm1(src)`` and ``src = self.norm2(src)`` keep no copy of the
    input (reconstructed from the issue's quote and description). Cause: both pre-norm residuals
    taken from the normalised x."""

    def forward(self, x):
        if self.norm_first:
            x = self.norm1(x)
            x = x + self.drop(self.attn(x))
            x = self.norm2(x)
            return x + self.drop(self.ff(x))
        x = self.norm1(x + self.drop(self.attn(x)))
        return self.norm2(x + self.drop(self.ff(x)))


class CompactFFNNormedResidual(Block):
    """SHI-Labs/Compact-Transformers, src/utils/transformers.py (TransformerEncoderLayer.forward);
    issue #25, the maintainer: "a bad merge ... It should in fact be src2 = self.norm1(src)".
    ``src = self.norm1(src)`` before the FFN: the FFN's residual adds the normalised stream.
    Cause: FFN residual taken from norm(x) (attention sub-layer right)."""

    def forward(self, x):
        if self.norm_first:
            x = x + self.drop(self.attn(self.norm1(x)))
            x = self.norm2(x)
            return x + self.drop(self.ff(x))
        x = self.norm1(x + self.drop(self.attn(x)))
        return self.norm2(x + self.drop(self.ff(x)))


class HkprojAlwaysPreNorm(Block):
    """hkproj/pytorch-transformer, model.py ResidualConnection ``x + dropout(sublayer(norm(x)))``
    used for the paper's post-norm model (issues #14 and #29; the author: "not 1-to-1 with the
    paper when it comes to Normalization"). Cause: norm_first=False still computes pre-norm."""

    def forward(self, x):
        x = x + self.drop(self.attn(self.norm1(x)))
        return x + self.drop(self.ff(self.norm2(x)))


class MlxPostNormFFNResidualFromInput(Block):
    """ml-explore/mlx, python/mlx/nn/layers/transformer.py at 4417e37ed (TransformerEncoderLayer,
    norm_first=False), fixed by #1327 "fix transformer": ``y = self.ln1(x + y)`` then
    ``self.ln2(x + y)`` with x still the block's input. Cause: post-norm FFN residual adds the
    block's input instead of the attention sub-layer's output."""

    def forward(self, x):
        if self.norm_first:
            x = x + self.drop(self.attn(self.norm1(x)))
            return x + self.drop(self.ff(self.norm2(x)))
        y = self.drop(self.attn(x))
        y = self.norm1(x + y)
        y = self.drop(self.ff(y))
        return self.norm2(x + y)


class BitNetDoubledAttention(Block):
    """kyegomez/BitNet, bitnet/bit_transformer.py Transformer.forward (issue #32 "residual connection
    wrong?", fixed by the author): ``x, _ = attn(x, x, x); x = x + x; x = ffn(x) + x``. Cause: the
    attention residual is lost (its output added to itself, the input dropped)."""

    def forward(self, x):
        if self.norm_first:
            x = self.drop(self.attn(self.norm1(x)))
            x = x + x
            return x + self.drop(self.ff(self.norm2(x)))
        x = self.norm1(x + self.drop(self.attn(x)))
        return self.norm2(x + self.drop(self.ff(x)))


class MultimodalOverwrittenInput(Block):
    """facebookresearch/multimodal, torchmultimodal/models/gpt.py TransformerLayer (PR #305 "Fixed a
    bug that overrode the input to the transformer layer before the latter was added to the
    attention output"): ``x = attn_out; x = x + self.dropout_attn(x); x = self._mlp_block(...);
    x = x + self.dropout_mlp(x)``. Cause: both residuals lost (x overwritten by the sub-layer's
    output, which is then added to itself)."""

    def forward(self, x):
        if self.norm_first:
            x = self.attn(self.norm1(x))
            x = x + self.drop(x)
            x = self.ff(self.norm2(x))
            return x + self.drop(x)
        x = self.norm1(x + self.drop(self.attn(x)))
        return self.norm2(x + self.drop(self.ff(x)))


class CellFlowDiscardedFFN(Block):
    """theislab/CellFlow, src/cellflow/networks/_utils.py SelfAttention FC sub-layer (PR #296
    "Dropout applied to the wrong variable ... z = z + dropout(z)"). Cause: the FFN's output is
    thrown away; dropout is applied to the residual input instead."""

    def forward(self, x):
        if self.norm_first:
            x = x + self.drop(self.attn(self.norm1(x)))
            h = self.ff(self.norm2(x))
            h = self.drop(x)
            return x + h
        x = self.norm1(x + self.drop(self.attn(x)))
        return self.norm2(x + self.drop(self.ff(x)))


class HyunwoongDropoutAfterNorm(Block):
    """hyunwoongko/transformer, models/blocks/encoder_layer.py before 20ad1b2 (issue #8 "Dropout
    should comes before residual connection and layer norm", fixed): ``x = self.norm1(x + _x);
    x = self.dropout1(x)``. Cause: dropout applied after add & norm instead of to the sub-layer's
    output (seen only in training)."""

    def forward(self, x):
        if self.norm_first:
            x = x + self.drop(self.attn(self.norm1(x)))
            return x + self.drop(self.ff(self.norm2(x)))
        x = self.drop(self.norm1(x + self.attn(x)))
        return self.drop(self.norm2(x + self.ff(x)))


class BertPytorchExtraDropout(Block):
    """codertimo/BERT-pytorch, bert_pytorch/model/transformer.py TransformerBlock.forward ends with
    ``return self.dropout(x)`` (issue #85 "Do we need dropout at the last of
    TransformerBlock.forward()?"). Cause: an extra dropout on the block's output (training only)."""

    def forward(self, x):
        if self.norm_first:
            x = x + self.drop(self.attn(self.norm1(x)))
            x = x + self.drop(self.ff(self.norm2(x)))
        else:
            x = self.norm1(x + self.drop(self.attn(x)))
            x = self.norm2(x + self.drop(self.ff(x)))
        return self.drop(x)


class KeitakuritaNormedSublayer(Block):
    """keitakurita/Practical_NLP_in_PyTorch, deep_dives/transformer_from_scratch.ipynb at 42af144
    (EncoderBlock.forward): ``x = x + self.dropout(self.layer_norm1(att))``, one design for both.
    Cause: the norm is applied to the sub-layer's output, x + norm(f(x)), neither pre- nor
    post-norm."""

    def forward(self, x):
        x = x + self.drop(self.norm1(self.attn(x)))
        return x + self.drop(self.norm2(self.ff(x)))


class DiffusionPlannerRawKeys(Block):
    """ZhengYinan-AIR/Diffusion-Planner SelfAttentionBlock ``self.attn(norm1(x), x, x)``, fixed in
    the fork tier4/Diffusion-Planner PR #239 ("apply LayerNorm to key/value as well as query").
    Cause: pre-norm attention normalises only the queries; keys and values see the raw x."""

    def forward(self, x):
        if self.norm_first:
            x = x + self.drop(self.attn(self.norm1(x), x))
            return x + self.drop(self.ff(self.norm2(x)))
        x = self.norm1(x + self.drop(self.attn(x)))
        return self.norm2(x + self.drop(self.ff(x)))


class MlxDropoutInsideFFN(Block):
    """ml-explore/mlx, python/mlx/nn/layers/transformer.py at 4417e37ed (TransformerEncoderLayer):
    ``y = self.activation(y); y = self.dropout2(y); y = self.linear2(y); y = x + y``: the FFN's
    dropout sits between GELU and the second Linear, none on the FFN's output (the paper, 5.4:
    "dropout to the output of each sub-layer"). Cause: FFN dropout misplaced (training only)."""

    def _ffn(self, y):
        return self.ff[2](self.drop(self.ff[1](self.ff[0](y))))

    def forward(self, x):
        if self.norm_first:
            x = x + self.drop(self.attn(self.norm1(x)))
            return x + self._ffn(self.norm2(x))
        x = self.norm1(x + self.drop(self.attn(x)))
        return self.norm2(x + self._ffn(x))


# ---------------------------------------------------------------- exercise 3: the decoder block


def _pre_self(block, x):
    return x + block.drop(block.self_attn(block.norm1(x)))


def _post_self(block, x):
    return block.norm1(x + block.drop(block.self_attn(x)))


class MlxUnusedNorm2(Decoder):
    """ml-explore/mlx, python/mlx/nn/layers/transformer.py before f4f6e17 (PR #210 "Fix
    cross-attention": "With the current code, ln2 is a no-op"): ``y = self.ln2(x);
    y = self.cross_attention(x, memory, memory, memory_mask)``. Cause: pre-norm cross-attention
    gets the un-normalised x (norm2's output unused)."""

    def forward(self, x, memory, memory_real=None):
        if self.norm_first:
            x = _pre_self(self, x)
            y = self.norm2(x)
            y = self.cross_attn(x, memory, memory_real)
            x = x + self.drop(y)
            return x + self.drop(self.ff(self.norm3(x)))
        x = _post_self(self, x)
        x = self.norm2(x + self.drop(self.cross_attn(x, memory, memory_real)))
        return self.norm3(x + self.drop(self.ff(x)))


class MlxPostNormLn1Twice(Decoder):
    """ml-explore/mlx, transformer.py at 4417e37ed (TransformerDecoderLayer, norm_first=False):
    issue #1636 "Wrong layer norm used" (``x = self.ln1(x + y)`` after cross-attention, fixed by
    #1637) and, in the same lines, PR #3382 (cross-attention's query is y, the self-attention's raw
    output). Causes: norm1 reused instead of norm2; cross-attention queries skip add & norm."""

    def forward(self, x, memory, memory_real=None):
        if self.norm_first:
            x = _pre_self(self, x)
            x = x + self.drop(self.cross_attn(self.norm2(x), memory, memory_real))
            return x + self.drop(self.ff(self.norm3(x)))
        y = self.drop(self.self_attn(x))
        x = self.norm1(x + y)
        y = self.drop(self.cross_attn(y, memory, memory_real))
        x = self.norm1(x + y)
        y = self.drop(self.ff(x))
        return self.norm3(x + y)


class MlxCrossQueryFromSublayer(Decoder):
    """ml-explore/mlx, transformer.py between aa86876 and a8776b7 (PR #3382 "Correct cross-attention
    query routing in Post-LN TransformerDecoderLayer": the query "bypassed the first LayerNorm ...
    and severed the residual"). Cause: post-norm cross-attention queries come from the
    self-attention's output y instead of norm1(x + y)."""

    def forward(self, x, memory, memory_real=None):
        if self.norm_first:
            x = _pre_self(self, x)
            x = x + self.drop(self.cross_attn(self.norm2(x), memory, memory_real))
            return x + self.drop(self.ff(self.norm3(x)))
        y = self.drop(self.self_attn(x))
        x = self.norm1(x + y)
        y = self.drop(self.cross_attn(y, memory, memory_real))
        x = self.norm2(x + y)
        y = self.drop(self.ff(x))
        return self.norm3(x + y)


class KeitakuritaNoMemory(Decoder):
    """keitakurita/Practical_NLP_in_PyTorch, transformer_from_scratch.ipynb at 42af144
    (DecoderBlock.forward; issue #1 "decoder block does not use encoder output for keys and values",
    fixed in c90e740): ``att = self.attn_head(queries=att, keys=x, values=x)``; one design for both
    placements, x + norm(f(x)), norm2 again for the FFN. Cause: cross-attention never reads the
    memory (keys and values from the decoder)."""

    def forward(self, x, memory, memory_real=None):
        att = self.self_attn(x)
        x = x + self.drop(self.norm1(att))
        att = self.cross_attn(att, x)
        x = x + self.drop(self.norm2(att))
        pos = self.ff(x)
        return x + self.drop(self.norm2(pos))


class MaxjcohenSelfAttentionTwice(Decoder):
    """maxjcohen/transformer, tst/decoder.py before 240f8fb (issue #23 "self._encoderDecoderAttention
    defined but not used"): ``x = self._selfAttention(query=x, key=memory, value=memory)``. Cause:
    cross-attention computed with the self-attention layer's weights (cross_attn never used)."""

    def forward(self, x, memory, memory_real=None):
        if self.norm_first:
            x = _pre_self(self, x)
            x = x + self.drop(self.self_attn(self.norm2(x), memory, memory_real))
            return x + self.drop(self.ff(self.norm3(x)))
        x = _post_self(self, x)
        x = self.norm2(x + self.drop(self.self_attn(x, memory, memory_real)))
        return self.norm3(x + self.drop(self.ff(x)))


class SlpResidualFromMemory(Decoder):
    """georgepar/slp, slp/modules/transformer.py Sublayer3 before d07e852 (PR #26 "fix cross
    attention residuals: using the output of the previous decoder layer and not the encoder's output
    as a residual"): ``return out + x`` with x the encoder output. Cause: cross-attention residual
    adds the memory instead of the decoder stream."""

    def forward(self, x, memory, memory_real=None):
        if self.norm_first:
            x = _pre_self(self, x)
            x = memory + self.drop(self.cross_attn(self.norm2(x), memory, memory_real))
            return x + self.drop(self.ff(self.norm3(x)))
        x = _post_self(self, x)
        x = self.norm2(memory + self.drop(self.cross_attn(x, memory, memory_real)))
        return self.norm3(x + self.drop(self.ff(x)))


class Gpt2DiscardedMemoryMask(Decoder):
    """huggingface/transformers, models/gpt2/modeling_gpt2.py GPT2Model.forward (PR #47946 "Fix
    encoder_attention_mask being silently discarded in cross-attention": ``encoder_attention_mask =
    None`` before the mask is built). Cause: the source padding mask is dropped, padded memory
    tokens are attended."""

    def forward(self, x, memory, memory_real=None):
        memory_real = None
        if self.norm_first:
            x = _pre_self(self, x)
            x = x + self.drop(self.cross_attn(self.norm2(x), memory, memory_real))
            return x + self.drop(self.ff(self.norm3(x)))
        x = _post_self(self, x)
        x = self.norm2(x + self.drop(self.cross_attn(x, memory, memory_real)))
        return self.norm3(x + self.drop(self.ff(x)))


class RexrexSwappedCross(Decoder):
    """rexrex9/nlp_torchtext, transformer/transformer.py DecoderLayer.forward
    (``self.interactive_attention(outs, querys)`` with querys = the encoder output, so OneHeadAttention
    builds Q from the encoder and K, V from the decoder); PR #2 fixes it. Cause: cross-attention
    queries from the memory, keys and values from the decoder (roles swapped)."""

    def forward(self, x, memory, memory_real=None):
        if self.norm_first:
            x = _pre_self(self, x)
            x = x + self.drop(self.cross_attn(memory, self.norm2(x)))
            return x + self.drop(self.ff(self.norm3(x)))
        outs = _post_self(self, x)
        outs = self.norm2(outs + self.drop(self.cross_attn(memory, outs)))
        return self.norm3(outs + self.drop(self.ff(outs)))


class HyunwoongDecoderDropoutAfterNorm(Decoder):
    """hyunwoongko/transformer, models/blocks/decoder_layer.py at c19810c (the same order as the
    encoder layer of issue #8): ``x = self.norm1(x + _x); x = self.dropout1(x)`` for all three
    sub-layers. Cause: dropout after add & norm instead of on each sub-layer's output (training
    only)."""

    def forward(self, x, memory, memory_real=None):
        if self.norm_first:
            x = _pre_self(self, x)
            x = x + self.drop(self.cross_attn(self.norm2(x), memory, memory_real))
            return x + self.drop(self.ff(self.norm3(x)))
        x = self.drop(self.norm1(x + self.self_attn(x)))
        x = self.drop(self.norm2(x + self.cross_attn(x, memory, memory_real)))
        return self.drop(self.norm3(x + self.ff(x)))
