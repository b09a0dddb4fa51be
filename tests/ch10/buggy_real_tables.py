"""Wrong answers to chapter 10's sinusoidal_positions and packed_causal_mask from public
repositories and issue threads, adapted to the exercises' arguments (see tests/ch10/buggy_real.py,
which gathers them into COLLECTION with the blocks'); HELD_OUT_TABLES: the held-out round."""

from __future__ import annotations

import math

import numpy as np
import torch


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


def pyaptamer_odd_width(n, d):
    # gc-os-ai/pyaptamer#607: div_term has ceil(d/2) values, so pe[..., 1::2] = torch.cos(position *
    # div_term) raises a RuntimeError (a shape mismatch) for an odd d_model; even widths are right
    position = torch.arange(n).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
    pe = torch.zeros(n, d)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


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
    (pyaptamer_odd_width, "sinusoid_odd_width"),
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


def tensorflow_text_concatenated(n, d):
    # tensorflow/text#1122, docs/tutorials/transformer.ipynb: angle_rads = positions / 10000**depths,
    # then np.concatenate([np.sin(angle_rads), np.cos(angle_rads)], axis=-1)
    depth = d / 2
    angle_rads = np.arange(n)[:, None] / (10000 ** (np.arange(depth)[None, :] / depth))
    return torch.tensor(np.concatenate([np.sin(angle_rads), np.cos(angle_rads)], axis=-1)).float()


def deep_ml_example_extra_axis(n, d):
    # Open-Deep-ML/DML-OpenProblem#495 and #595, questions/85_positional-encoding-calculator: its
    # example answer had sines then cosines and an extra array dimension, (1, n, d)
    return tensorflow_text_concatenated(n, d)[None]


def repbert_segments(ids):
    # jingtaozhan/RepBERT-Index#5: clamp(valid - |type_i - type_j|, 0) keeps the pairs of one segment,
    # with no causal part (its padding term left out; made bool, as the exercise asks)
    return (1 - (ids[:, :, None] - ids[:, None, :]).abs()).clamp(min=0).bool()


def t2t_timescales(n, d):
    # Round 3. tensorflow/tensor2tensor layers/common_attention.py get_timing_signal_1d:
    # log_timescale_increment = log(max_timescale / min_timescale) / (num_timescales - 1), so the
    # slowest pair reaches 1e-4 exactly: w_i = 10000^(-i / (d/2 - 1)) (interleaved here)
    k = d // 2
    inv_timescales = torch.exp(torch.arange(k).float() * -(math.log(10000.0) / max(k - 1, 1)))
    scaled_time = torch.arange(n).float()[:, None] * inv_timescales
    return torch.stack([scaled_time.sin(), scaled_time.cos()], dim=-1).flatten(1)


def swift_boundary_on_decrease(ids):
    # Round 3. modelscope/ms-swift#9904: sequence boundaries found only where the value decreases
    # (there: position ids, so a one-token sequence merged with the next; here: document ids, so
    # documents with increasing ids merge)
    start = torch.ones_like(ids, dtype=torch.bool)
    start[:, 1:] = ids[:, 1:] < ids[:, :-1]
    doc = start.cumsum(dim=1)
    return (doc[:, :, None] == doc[:, None, :]) & _ones(ids).tril()


HELD_OUT_TABLES = [
    ("check_sinusoidal_positions", tensorflow_text_concatenated, "sinusoid_halves"),
    ("check_sinusoidal_positions", deep_ml_example_extra_axis, "sinusoid_layout"),
    ("check_packed_causal_mask", repbert_segments, "packed_not_causal"),
    ("check_sinusoidal_positions", t2t_timescales, "sinusoid_wrong_frequencies"),
    ("check_packed_causal_mask", swift_boundary_on_decrease, "packed_leaks_across_documents"),
]

TABLES = [
    *(("check_sinusoidal_positions", fn, bug) for fn, bug in SINUSOIDS),
    *(("check_packed_causal_mask", fn, bug) for fn, bug in PACKED),
    *HELD_OUT_TABLES,
]
