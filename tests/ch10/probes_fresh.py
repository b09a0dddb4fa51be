"""Grader-style probes of chapter 10's checks: answers right on the inputs a quick test would try
and wrong where a grader looks (another device, the decoder's default ``memory_real=None``, a table
longer than the checks' largest, the float32 the exercise asks for, the caller's tensors, a second
call). Each is written the way real code writes it (source or idiom in its docstring)."""

import math

import torch
import torch.nn.functional as F

import course_utils as cu
from tests.ch10 import correct_fresh as right


def mask_built_on_cpu(doc_ids):
    """sign/image-latent-transformer, image_latent_transformer/attention.py
    get_attention_mask_for_packed_sequence (a collator's mask: ``torch.zeros(...)`` and
    ``torch.tril(torch.ones(...))`` without device, fine there, moved later by the trainer), fed
    with each row's document lengths. As an answer to this exercise it returns a CPU mask for
    doc_ids on a GPU; SDPA then refuses it ('Tensor on device cpu is not on the expected device')."""
    rows = []
    for row in doc_ids:
        seq_lengths = torch.unique_consecutive(row, return_counts=True)[1].tolist()
        total_length = sum(seq_lengths)
        mask = torch.zeros((total_length, total_length), dtype=torch.bool)
        current_position = 0
        for length in seq_lengths:
            tril = torch.tril(torch.ones((length, length), dtype=torch.bool))
            end = current_position + length
            mask[current_position:end, current_position:end] = tril
            current_position += length
        rows.append(mask)
    return torch.stack(rows)


def mask_via_cpu_copy(doc_ids):
    """The whole mask computed on ``doc_ids.cpu()`` (a habit from data-loading code) and returned
    there."""
    ids = doc_ids.cpu()
    n = ids.shape[-1]
    return (ids[:, :, None] == ids[:, None, :]) & torch.ones(n, n, dtype=torch.bool).tril()


def mask_shifts_ids_in_place(doc_ids):
    """Ids renumbered from 0 in place (``doc_ids -= doc_ids.min(...)``): the caller's tensor changes."""
    doc_ids -= doc_ids.min(dim=-1, keepdim=True).values
    return right.boundary_cumsum(doc_ids)


def table_sliced_from_512_rows(n, d, max_len=512):
    """codertimo/BERT-pytorch, bert_pytorch/model/embedding/position.py PositionalEmbedding (max_len
    512; SamLynnEvans/Transformer uses 200, the PyTorch tutorial 5000): a table built once for
    max_len rows and sliced to n. Right for n <= max_len, 512 rows for any longer n. Odd d refused,
    as the check demands."""
    if d % 2:
        raise ValueError(f"an even d is needed, got d={d}")
    pe = torch.zeros(max_len, d).float()
    position = torch.arange(0, max_len).float().unsqueeze(1)
    div_term = (torch.arange(0, d, 2).float() * -(math.log(10000.0) / d)).exp()
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe[:n]


def table_float64(n, d):
    """A NumPy table returned as ``torch.from_numpy`` without the cast: float64 where the exercise
    asks for float32 (``x + table`` then turns a float32 model's activations to float64 and the next
    Linear raises a dtype error)."""
    import numpy as np

    if d % 2:
        raise ValueError(f"an even d is needed, got d={d}")
    angle = np.arange(n)[:, None] / np.power(10000.0, np.arange(0, d, 2) / d)
    table = np.zeros((n, d))
    table[:, 0::2], table[:, 1::2] = np.sin(angle), np.cos(angle)
    return torch.from_numpy(table)


class BlockInPlaceResidual(right.TorchStyleBlock):
    """``x += ...`` (in-place residual, common in hand-written GPT blocks): the caller's x changes."""

    def forward(self, x):
        if self.norm_first:
            x += self._sa_block(self.norm1(x))
            x += self._ff_block(self.norm2(x))
            return x
        return super().forward(x)


class BlockSdpaMaskOnCpu(right.TorchStyleBlock):
    """Attention through SDPA with the causal mask made without device (the SDPA docstring's
    ``temp_mask``, pytorch/pytorch#166117)."""

    def _sa_block(self, h):
        a = self.attn
        n = h.shape[1]
        q, k, v = (
            cu.chapters.split_heads(w(h), a.num_heads) for w in (a.W_query, a.W_key, a.W_value)
        )
        mask = torch.ones(n, n, dtype=torch.bool).tril() if a.causal else None
        p = a.dropout.p if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        return self.drop(a.out_proj(cu.chapters.merge_heads(out)))


class DecoderKeyPaddingIdiom(right.TorchStyleDecoder):
    """The chapter's own proof-cell idiom ``key_padding_mask=~memory_real`` carried into forward:
    ``~None`` raises TypeError when the caller leaves memory_real at its default."""

    def forward(self, x, memory, memory_real=None):
        padding = ~memory_real
        return super().forward(x, memory, ~padding)


class DecoderDefaultMaskOnCpu(right.TorchStyleDecoder):
    """A default 'every source token is real' mask when none is given, made without device."""

    def forward(self, x, memory, memory_real=None):
        if memory_real is None:
            memory_real = torch.ones(memory.shape[:2], dtype=torch.bool)
        return super().forward(x, memory, memory_real)


class DecoderCachesMemory(right.TorchStyleDecoder):
    """The memory kept on self at the first call (a cross-attention 'static kv' cache never reset)."""

    def forward(self, x, memory, memory_real=None):
        if not hasattr(self, "_memory"):
            self._memory, self._memory_real = memory, memory_real
        return super().forward(x, self._memory, self._memory_real)


# ---------------------------------------------------------------- added with the fixes (ch10fix)
# Probes of the same kind for what the reviewer did not try: large inputs, the random state, a
# constructor whose arguments moved. Each names its source or the idiom it follows.


class BlockBiasBeforeDropout(right.TorchStyleBlock):
    """An ``__init__`` that gains a ``bias=True`` parameter between context_length and dropout (the
    common wish to switch the projections' bias, nanoGPT's ``bias`` option, put in the middle):
    built with the exercise's positional arguments, 0.3 lands in ``bias`` and dropout stays 0."""

    def __init__(self, d_model, num_heads, d_ff, context_length, bias=True, dropout=0.0, **kw):
        super().__init__(d_model, num_heads, d_ff, context_length, dropout, **kw)
        self.bias = bias


def table_seeds_the_global_rng(n, d):
    """A helper that starts with ``torch.manual_seed(0)`` "for reproducibility", as notebook cells
    do: right table, but the caller's random state is reset by every call."""
    torch.manual_seed(0)
    return right.bert_pytorch_log_space(n, d)


class LayerNormOnePass(cu.chapters.LayerNorm):
    """The one-pass variance E[x^2] - E[x]^2: PyTorch's own LayerNorm kernel computed it that way
    until pytorch/pytorch#40302 (PRs #40307, #54921); #51102 shows it failing for a mean of 2000,
    microsoft/onnxruntime#28463 returning NaN for 40000, 40001, ... Right for ordinary inputs."""

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        variance = (x * x).mean(dim=-1, keepdim=True) - mean * mean
        return (x - mean) / torch.sqrt(variance + self.eps) * self.weight + self.bias


def gelu_tanh_from_exp(x, approximate="none"):
    """GPT-2's tanh form with tanh written out as (e^z - e^-z) / (e^z + e^-z), the Tanh of
    Jiang15/Deep-Learning-Project-1, Project2/Functionals.py: inf / inf = NaN once |z| > 88 (at
    x = 30 the tanh form's z is about 990); the exact form through torch.erf."""
    if approximate == "tanh":
        z = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
        return 0.5 * x * (1 + (z.exp() - (-z).exp()) / (z.exp() + (-z).exp()))
    if approximate == "none":
        return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))
    raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")


class SwiGLUSiluFromExp(cu.chapters.SwiGLU):
    """SiLU written as g / (1 + exp(-g)) (trymirai/lalamo#328, "will produce NaN gradients during
    the backward pass for large input values even though the value itself is finite"): right
    forward, NaN gradients where a gate is below about -88."""

    def forward(self, x):
        g = self.w1(x)
        return self.w2(g / (1 + torch.exp(-g)) * self.w3(x))
