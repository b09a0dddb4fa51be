"""Multi-head classes with the right numbers on the first call and wrong behaviour elsewhere, and bugs found by review, for tests/ch05/test_ch05_checks.py; each says where it comes from. The bases Wrapper and Split are in buggy.py."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tests.ch05.buggy import Split, Wrapper


# ----------------------------------------------------------------------------- behaviour probes (issue 11)
class OutProjBiasFollowsQkvBias(Split):
    """out_proj = nn.Linear(d_out, d_out, bias=qkv_bias): GPT-2's out_proj always has a bias (2,360,064 not 2,359,296)."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out, bias=qkv_bias)


class OutProjNoBias(Split):
    """bias=False on every Linear (seen in LLaMA-style ports), out_proj included."""

    def make_out_proj(self, d_out):
        self.out_proj = nn.Linear(d_out, d_out, bias=False)


class HeadsMergedInterleaved(Split):
    """Merge with permute(0, 2, 3, 1): the features of the heads interleaved instead of side by side."""

    def merge(self, t):
        b, _, n, _ = t.shape
        return t.permute(0, 2, 3, 1).reshape(b, n, self.d_out)


class HeadsMergedInterleavedTwice(Split):
    """The same interleaving written as two transposes."""

    def merge(self, t):
        b, _, n, _ = t.shape
        return t.transpose(1, 2).transpose(2, 3).reshape(b, n, self.d_out)


class HeadDimFromDin(Split):
    """head_dim = d_in // num_heads (d_in and d_out are equal in GPT-2, so the slip hides there)."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, qkv_bias)
        self.head_dim = d_in // num_heads


class ValuesFromKeyLayer(Split):
    """Copy-paste slip: values projected with W_key."""

    def project(self, x):
        return self.W_query(x), self.W_key(x), self.W_key(x)


class MaskOverwrittenSplit(Split):
    """self.mask = self.mask[:n, :n] in the split class (typical student slip)."""

    def apply_mask(self, scores, n):
        self.mask = self.mask[:n, :n]
        return scores.masked_fill(self.mask, -torch.inf)


class InplaceDropoutSplit(Split):
    """nn.Dropout(inplace=True) right after the softmax."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, qkv_bias)
        self.dropout = nn.Dropout(dropout, inplace=True)


class HeadsConcatenatedReversed(Wrapper):
    """Heads joined last-to-first (reversed(self.heads)), so the output columns are in the wrong order."""

    def forward(self, x):
        return torch.cat([head(x) for head in reversed(self.heads)], dim=-1)


class HeadsConcatenatedSliceReversed(Wrapper):
    """The same with a [::-1] left over from debugging."""

    def forward(self, x):
        return torch.cat([head(x) for head in self.heads][::-1], dim=-1)


class SdpaWithTorchMhaMaskSplit(Split):
    """SDPA handed the class's own mask buffer (True = future): SDPA reads True as 'attend'."""

    def forward(self, x):
        n = x.shape[1]
        q, k, v = (self.split(t) for t in self.project(x))
        context = F.scaled_dot_product_attention(
            q, k, v, attn_mask=self.mask[:n, :n], dropout_p=self.dropout.p if self.training else 0.0
        )
        return self.output(self.merge(context))


class SplitLengthAssert(Split):
    """An assert instead of the course's ValueError for a too-long input (typical slip)."""

    def check_length(self, x):
        assert x.shape[1] <= self.context_length, "too long"


class SplitNoLengthCheck(Split):
    """No check at all: the mask slice silently stops at context_length and the shapes clash later."""

    def check_length(self, x):
        pass


# ----------------------------------------------------------------------------- more behaviour probes
# Found by an adversarial review of the checks (2026-11-24): each passed before the probe that now names it.
class SplitReseedsInForward(Split):
    """torch.manual_seed in forward ('to make the notebook reproducible'): the same dropout mask every step."""

    def forward(self, x):
        torch.manual_seed(123)
        return super().forward(x)


class SplitKeysValuesKept(Split):
    """A KV cache without positions (LLMs-from-scratch's use_cache idea, half copied): in eval mode the
    keys and values of the previous call are reused whenever the batch has the same shape."""

    def project(self, x):
        q, k, v = super().project(x)
        kept = getattr(self, "_kv", None)
        if not self.training and kept is not None and kept[0].shape == k.shape:
            k, v = kept
        self._kv = (k.detach(), v.detach())
        return q, k, v


class OutProjBiasFrozen(Split):
    """out_proj.bias.requires_grad_(False) (a 'no bias decay' recipe misread): the bias never trains."""

    def make_out_proj(self, d_out):
        super().make_out_proj(d_out)
        self.out_proj.bias.requires_grad_(False)


class MaskMovedToCpuSplit(Split):
    """self.mask.to('cpu', torch.bool) in forward: fine on the CPU, fails on a GPU."""

    def apply_mask(self, scores, n):
        return scores.masked_fill(self.mask.to("cpu", torch.bool)[:n, :n], -torch.inf)


# Round two. OutProjOnValues: written to the pattern of applying the output projection to the values
# before the split (it runs, shapes agree). ScaleMultiplied: esceptico/perceiver-io#9, scores divided
# by scale = head_dim ** -0.5. KeysValuesSwapped: the projections unpacked in the wrong order.
class OutProjOnValues(Split):
    def project(self, x):
        return self.W_query(x), self.W_key(x), self.out_proj(self.W_value(x))

    def output(self, context):
        return context


class ScaleMultiplied(Split):
    def scale(self, scores):
        return scores / self.head_dim**-0.5


class KeysValuesSwapped(Split):
    def project(self, x):
        return self.W_query(x), self.W_value(x), self.W_key(x)


# Creation order (issue 31): the right computation with out_proj made first; written to the pattern of
# that report. It passed before the check compared the initial weights with the chapter's class.
class OutProjCreatedFirst(Split):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        nn.Module.__init__(self)
        self.make_out_proj(d_out)
        self.check_sizes(d_out, num_heads)
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.store_mask(torch.triu(torch.ones(context_length, context_length), diagonal=1).bool())
        self.context_length = context_length
        self.register_forward_pre_hook(lambda module, args: module.check_length(args[0]))


class HeadsListedInReverse(Wrapper):
    # the heads made first to last, listed last to first: each head holds another head's numbers
    def make_heads(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias):
        return super().make_heads(d_in, d_out, context_length, dropout, num_heads, qkv_bias)[::-1]
