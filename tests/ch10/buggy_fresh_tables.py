"""A fresh set of wrong sinusoidal tables and packed masks (chapter 10, exercises 2 and 4), taken
from public repositories and issue threads and adapted minimally to the exercise's interface
(``sinusoidal_positions(n, d)`` -> (n, d) float32; ``packed_causal_mask(doc_ids)`` -> (b, n, n) bool,
True = may attend), the bug kept as the source has it. A table built once for ``max_len`` rows and
returned with a batch axis is built here for n rows and returned without it. Collected by a
reviewer who had not read the checks or their catalogue.

The list of cases, with sources, causes and the reviewer's verdicts: ``fresh_cases.py``."""

import math

import numpy as np
import torch

# ---------------------------------------------------------------- exercise 2: sinusoidal table


def dongjunlee_exponent_per_feature(n, d):
    """DongjunLee/transformer-tensorflow, transformer/attention.py positional_encoding (issue #6
    "positional encoding seems different from the paper"): ``pos / np.power(10000, 2*i/dim)`` for
    every feature i, so feature 2i+1 gets its own frequency. Cause: exponent uses the feature index
    instead of the pair index (sin and cos of a pair at different frequencies)."""
    encoded_vec = np.array([pos / np.power(10000, 2 * i / d) for pos in range(n) for i in range(d)])
    encoded_vec[::2] = np.sin(encoded_vec[::2])
    encoded_vec[1::2] = np.cos(encoded_vec[1::2])
    return torch.tensor(encoded_vec.reshape([n, d]), dtype=torch.float32)


def jadore_padding_row(n, d):
    """jadore801120/attention-is-all-you-need-pytorch, transformer/Models.py position_encoding_init
    before 7fa8c63 (issue #32, fixed by the author): ``2*i/d_pos_vec`` for every feature, and row 0
    kept all zeros "for padding token". Causes: exponent per feature, not per pair; position 0 is
    zeros instead of [0, 1, 0, 1, ...]."""
    position_enc = np.array(
        [
            [pos / np.power(10000, 2 * i / d) for i in range(d)] if pos != 0 else np.zeros(d)
            for pos in range(n)
        ]
    )
    position_enc[1:, 0::2] = np.sin(position_enc[1:, 0::2])
    position_enc[1:, 1::2] = np.cos(position_enc[1:, 1::2])
    return torch.from_numpy(position_enc).type(torch.FloatTensor)


def maxjcohen_base_1000(n, d):
    """maxjcohen/transformer, tst/utils.py generate_original_PE before ea5d977 (issue #62, fixed by
    the author): ``torch.pow(1000, ...)`` and the cosines' exponents from ``arange(1, d, 2)``.
    Causes: base 1000 instead of 10000; cosine frequencies shifted by one feature."""
    PE = torch.zeros((n, d))
    pos = torch.arange(n).unsqueeze(1)
    PE[:, 0::2] = torch.sin(pos / torch.pow(1000, torch.arange(0, d, 2, dtype=torch.float32) / d))
    PE[:, 1::2] = torch.cos(pos / torch.pow(1000, torch.arange(1, d, 2, dtype=torch.float32) / d))
    return PE


def samlynn_double_exponent(n, d):
    """SamLynnEvans/Transformer, Embed.py PositionalEncoder (issue #25 "A little error in Positional
    Encoder"): ``for i in range(0, d_model, 2)`` with ``10000 ** ((2 * i)/d_model)`` (i already
    even) and ``2 * (i + 1)`` for the cosine. Causes: exponent doubled (4i/d); cosine one step
    further."""
    pe = torch.zeros(n, d)
    for pos in range(n):
        for i in range(0, d, 2):
            pe[pos, i] = math.sin(pos / (10000 ** ((2 * i) / d)))
            pe[pos, i + 1] = math.cos(pos / (10000 ** ((2 * (i + 1)) / d)))
    return pe


def brianpulfer_rows(n, d):
    """BrianPulfer/PapersReimplementations, ddpm/models.py sinusoidal_embedding before 5114bab (issue
    #9, the author: "there has been a mistake"): same signature (n, d); sine and cosine applied to
    even and "1 - even" ROWS (positions). Cause: sin/cos chosen by position instead of by feature
    (and the exponent per feature)."""
    embedding = torch.tensor([[i / 10_000 ** (2 * j / d) for j in range(d)] for i in range(n)])
    sin_mask = torch.arange(0, n, 2)
    embedding[sin_mask] = torch.sin(embedding[sin_mask])
    embedding[1 - sin_mask] = torch.cos(embedding[sin_mask])
    return embedding


def brianpulfer_fixed_still_doubled(n, d):
    """BrianPulfer/PapersReimplementations, ddpm/models.py at 5114bab, the merged fix of issue #9
    (PR #10): ``wk = [1 / 10_000 ** (2 * j / d) for j in range(d)]`` then ``wk[:, ::2]``: pair i
    gets j = 2i, exponent 4i/d. Not reported; shown by computing it. Cause: exponent doubled."""
    embedding = torch.zeros(n, d)
    wk = torch.tensor([1 / 10_000 ** (2 * j / d) for j in range(d)])
    wk = wk.reshape((1, d))
    t = torch.arange(n).reshape((n, 1))
    embedding[:, ::2] = torch.sin(t * wk[:, ::2])
    embedding[:, 1::2] = torch.cos(t * wk[:, ::2])
    return embedding


def loftr_precedence(n, d):
    """zju3dv/LoFTR, src/loftr/utils/position_encoding.py before 3955e99 (issue #41, fixed): 2-D,
    here its x half: ``(-math.log(10000.0) / d_model//2)`` is floor(-9.2 / d / 2) = -1, and
    positions from ``torch.ones(...).cumsum(...)`` run 1..n. Causes: frequencies exp(-2i) (operator
    precedence); positions start at 1."""
    pe = torch.zeros(n, d)
    position = torch.ones(n).cumsum(0).float().unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2).float() * (-math.log(10000.0) / d // 2))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def warner_context_size(n, d):
    """warner-benjamin/commented-transformers, models/bert.py PositionalEncoding before cd0e67c
    (issue #1, fixed by PR #2): ``-math.log(10000) / context_size``. Cause: the exponent divides by
    the number of positions instead of d (right only when n == d)."""
    pe = torch.zeros(n, d, dtype=torch.float)
    position = torch.arange(n).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2) * (-math.log(10000) / n))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def annotated_divides(n, d):
    """harvardnlp/annotated-transformer issue #131 "Multiplication positional encoding seems to work
    better than the original division one?": the learner's ``torch.sin(position / div_term)`` with
    the tutorial's div_term = exp(-2i log(10000)/d). Cause: frequencies inverted (10000^(2i/d))."""
    pe = torch.zeros(n, d)
    position = torch.arange(0, n).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2) * -(math.log(10000.0) / d))
    pe[:, 0::2] = torch.sin(position / div_term)
    pe[:, 1::2] = torch.cos(position / div_term)
    return pe


def tatp22_concatenated(n, d):
    """tatp22/multidim-positional-encoding, positional_encodings/positional_encodings.py
    PositionalEncoding1D before ee6c998 (issue #20, fixed by #21/#22 "Make the encodings
    intertwine"): ``torch.cat((sin_inp_x.sin(), sin_inp_x.cos()), dim=-1)``. Cause: sines in the
    first half, cosines in the second, instead of interleaved."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    pos_x = torch.arange(n).type(inv_freq.type())
    sin_inp_x = torch.einsum("i,j->ij", pos_x, inv_freq)
    return torch.cat((sin_inp_x.sin(), sin_inp_x.cos()), dim=-1)


# ---------------------------------------------------------------- exercise 4: packed mask


def _causal(n, device):
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


def wrinklefree_positions_only(doc_ids):
    """DeepOpt-com/WrinkleFree-Monorepo issue #53: the old packing "only reset position IDs at
    document boundaries, but this does NOT block cross-document attention". Cause: a plain causal
    mask, no document restriction."""
    b, n = doc_ids.shape
    return _causal(n, doc_ids.device).expand(b, n, n)


def xformers_to_drops_causal(doc_ids):
    """facebookresearch/xformers issue #1185: ``BlockDiagonalCausalMask.to(...)`` returned its parent
    ``BlockDiagonalMask``, materialising [[0, 0, -inf, ...], [0, 0, -inf, ...]]. Cause:
    block-diagonal without the causal triangle (a token sees its document's future)."""
    return doc_ids[:, :, None] == doc_ids[:, None, :]


def rasbt_true_means_hidden(doc_ids):
    """rasbt/LLMs-from-scratch PR #1062 (issue #1061) "invert the boolean mask passed to
    scaled_dot_product_attention": the triu(diagonal=1) mask, True = hidden, given to SDPA. Cause:
    True/False convention inverted (True marks the hidden pairs)."""
    n = doc_ids.shape[-1]
    future = torch.ones(n, n, dtype=torch.bool, device=doc_ids.device).triu(1)
    return (doc_ids[:, :, None] != doc_ids[:, None, :]) | future


def llama4_float_to_bool(doc_ids):
    """huggingface/transformers PR #38094 "In Llama4 fix wrongly inverted causal attention mask when
    using SDPA": an additive mask (0 where allowed, finfo.min where hidden) converted with
    ``.bool()``. Cause: convention inverted (True where hidden)."""
    n = doc_ids.shape[-1]
    allowed = (doc_ids[:, :, None] == doc_ids[:, None, :]) & _causal(n, doc_ids.device)
    additive = torch.zeros(allowed.shape, device=doc_ids.device)
    additive = additive.masked_fill(~allowed, torch.finfo(torch.float32).min)
    return additive.bool()


def attention_gym_first_row(doc_ids):
    """meta-pytorch/attention-gym issue #98, bug 3 of the corrected repro: ``create_block_mask(...,
    B=None, ...)`` with a batch-dependent mask_mod "evaluates the mask only for b=0 and broadcasts
    it across the batch". Cause: row 0's documents used for every row."""
    b, n = doc_ids.shape
    same = doc_ids[0][:, None] == doc_ids[0][None, :]
    return (same & _causal(n, doc_ids.device)).expand(b, n, n)


def axolotl_batch_of_one(doc_ids):
    """axolotl-ai-cloud/axolotl issue #1375 "Llama Multipacking Correctness": "for bs>1 the
    cu_seqlens are incorrectly computed ... effectively throwing out/ignoring the cu_seqlens".
    Cause: packing honoured only for a batch of one row; plain causal otherwise."""
    b, n = doc_ids.shape
    causal = _causal(n, doc_ids.device)
    if b == 1:
        return (doc_ids[:, :, None] == doc_ids[:, None, :]) & causal
    return causal.expand(b, n, n)


def tinytorch_additive(doc_ids):
    """harvard-edge/cs249r_book PR #1785 "fix GPT causal mask convention": ``_create_causal_mask``
    made an additive -inf mask where a binary one (1 = allow) was expected. Cause: a float 0/-inf
    mask returned instead of a bool mask (True = may attend)."""
    n = doc_ids.shape[-1]
    allowed = (doc_ids[:, :, None] == doc_ids[:, None, :]) & _causal(n, doc_ids.device)
    return torch.zeros(allowed.shape, device=doc_ids.device).masked_fill(~allowed, float("-inf"))


def pbloem_offset_zero(doc_ids):
    """pbloem/former issue #10 "Issue with masking" (the blog's ``triu_indices(t, t, offset=0)``, the
    author: "the offset should be 1 if you want to include the diagonal"). Cause: the diagonal is
    hidden too; the first token of each document sees nothing."""
    n = doc_ids.shape[-1]
    hidden = torch.ones(n, n, dtype=torch.bool, device=doc_ids.device).triu(0)
    return (doc_ids[:, :, None] == doc_ids[:, None, :]) & ~hidden


def sdpa_docstring_cpu_mask(doc_ids):
    """pytorch/pytorch issue #166117 (fixed by PR #178684): the scaled_dot_product_attention
    docstring's ``temp_mask = torch.ones(L, S, dtype=torch.bool).tril(diagonal=0)`` is made on the
    CPU (also InfiniTensor/llaisys PR #11). Cause: the causal triangle is not made on doc_ids's
    device."""
    n = doc_ids.shape[-1]
    temp_mask = torch.ones(n, n, dtype=torch.bool).tril(diagonal=0)
    return (doc_ids[:, :, None] == doc_ids[:, None, :]) & temp_mask
