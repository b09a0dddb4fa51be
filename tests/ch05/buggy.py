"""Multi-head classes for tests/test_checks_ch05.py: right ones, and one class per known bug.

``Wrapper`` stacks tests/buggy/ch04.py's ``Correct`` heads; ``Split`` is a right
MultiHeadAttention in small overridable steps. Every buggy class changes one step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tests.ch04 import buggy as ch04


# ============================================================================= the wrapper
# Sources: the book's MultiHeadAttentionWrapper (section 3.6.1) with one typical slip each (a Python
# list of heads, one head shared, concatenation over the wrong axis, d_out split between heads).
class Wrapper(nn.Module):
    head_class = ch04.Correct

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList(
            self.make_heads(d_in, d_out, context_length, dropout, num_heads, qkv_bias)
        )

    def make_heads(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias):
        return [
            self.head_class(d_in, d_out, context_length, dropout, qkv_bias)
            for _ in range(num_heads)
        ]

    def forward(self, x):
        return torch.cat([head(x) for head in self.heads], dim=-1)


class WrapperOfBookStyleHeads(Wrapper):
    head_class = ch04.BoolMaskInPlace


WRAPPER_CORRECT = [Wrapper, WrapperOfBookStyleHeads]


class HeadsInPythonList(Wrapper):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        nn.Module.__init__(self)
        self.heads = self.make_heads(d_in, d_out, context_length, dropout, num_heads, qkv_bias)


class SharedHead(Wrapper):
    def make_heads(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias):
        return [self.head_class(d_in, d_out, context_length, dropout, qkv_bias)] * num_heads


class HeadsDeepCopied(Wrapper):
    """copy.deepcopy of one head (a way to 'repeat a module' found on forums): separate modules with
    identical starting weights, so the heads never learn to differ."""

    def make_heads(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias):
        import copy

        head = self.head_class(d_in, d_out, context_length, dropout, qkv_bias)
        return [copy.deepcopy(head) for _ in range(num_heads)]


class HeadsReseeded(Wrapper):
    """torch.manual_seed(123) from the book's cells moved into the head's constructor: every head
    starts with the same weights."""

    def make_heads(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias):
        heads = []
        for _ in range(num_heads):
            torch.manual_seed(123)
            heads.append(self.head_class(d_in, d_out, context_length, dropout, qkv_bias))
        return heads


class ConcatOverTokens(Wrapper):
    def forward(self, x):
        return torch.cat([head(x) for head in self.heads], dim=1)


class ConcatOverBatch(Wrapper):
    def forward(self, x):
        return torch.cat([head(x) for head in self.heads])


class StackedHeads(Wrapper):
    def forward(self, x):
        return torch.stack([head(x) for head in self.heads])


class DOutSplitBetweenHeads(Wrapper):
    def make_heads(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias):
        return super().make_heads(
            d_in, d_out // num_heads, context_length, dropout, num_heads, qkv_bias
        )


class NoHeadsAttribute(Wrapper):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, qkv_bias)
        self.attention_heads = self.heads
        del self.heads

    def forward(self, x):
        return torch.cat([head(x) for head in self.attention_heads], dim=-1)


def _wrapper_of(head_class):
    return type(f"WrapperOf{head_class.__name__}", (Wrapper,), {"head_class": head_class})


# (wrapper class, bug) pairs whose heads carry a chapter-04 bug
WRAPPERS_OF_BUGGY_HEADS = [
    (_wrapper_of(ch04.SoftmaxOverQueries), "softmax_over_queries"),
    (_wrapper_of(ch04.NoScaling), "no_scaling"),
    (_wrapper_of(ch04.MaskLeaksNextToken), "mask_leak"),
    (_wrapper_of(ch04.MaskNotSliced), "mask_not_sliced"),
    (_wrapper_of(ch04.MaskNotBuffer), "mask_not_buffer"),
    (_wrapper_of(ch04.DropoutOnContext), "dropout_on_context"),
    (_wrapper_of(ch04.DropoutInEval), "dropout_in_eval"),
    (_wrapper_of(ch04.DropoutIgnored), "dropout_ignored"),
]


# ============================================================================= split heads
class Split(nn.Module):
    """A right MultiHeadAttention, written in small overridable steps."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.check_sizes(d_out, num_heads)
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.make_out_proj(d_out)
        self.dropout = nn.Dropout(dropout)
        self.store_mask(torch.triu(torch.ones(context_length, context_length), diagonal=1).bool())
        self.context_length = context_length
        # The course's length rule, as a pre-hook so that classes which rewrite forward keep it.
        self.register_forward_pre_hook(lambda module, args: module.check_length(args[0]))

    def check_length(self, x):
        if x.shape[1] > self.context_length:
            raise ValueError(f"{x.shape[1]} tokens, but context_length is {self.context_length}")

    def check_sizes(self, d_out, num_heads):
        if d_out % num_heads:
            raise ValueError(f"d_out={d_out} is not divisible by num_heads={num_heads}")

    def make_out_proj(self, d_out):
        self.out_proj = nn.Linear(d_out, d_out)

    def store_mask(self, mask):
        self.register_buffer("mask", mask)

    def project(self, x):
        return self.W_query(x), self.W_key(x), self.W_value(x)

    def split(self, t):
        b, n, _ = t.shape
        return t.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)

    def merge(self, t):
        b, _, n, _ = t.shape
        return t.transpose(1, 2).contiguous().view(b, n, self.d_out)

    def apply_mask(self, scores, n):
        return scores.masked_fill(self.mask[:n, :n], -torch.inf)

    def scale(self, scores):
        return scores / self.head_dim**0.5

    def normalise(self, scores):
        return torch.softmax(scores, dim=-1)

    def drop(self, weights):
        return self.dropout(weights)

    def output(self, context):
        return self.out_proj(context)

    def forward(self, x):
        n = x.shape[1]
        q, k, v = (self.split(t) for t in self.project(x))
        scores = self.scale(self.apply_mask(q @ k.transpose(2, 3), n))
        weights = self.drop(self.normalise(scores))
        return self.output(self.merge(weights @ v))


# ----------------------------------------------------------------------------- right, written differently
class SplitWithReshapeAndEinsum(Split):
    """reshape instead of contiguous().view, einsum for the scores, a 4-d mask buffer."""

    def store_mask(self, mask):
        self.register_buffer("mask", mask[None, None])

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = (
            t.reshape(b, n, self.num_heads, self.head_dim).permute(0, 2, 1, 3)
            for t in self.project(x)
        )
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) * self.head_dim**-0.5
        scores = scores.masked_fill(self.mask[..., :n, :n], float("-inf"))
        weights = self.dropout(scores.softmax(-1))
        return self.out_proj((weights @ v).permute(0, 2, 1, 3).reshape(b, n, self.d_out))


class SplitWithAssert(Split):
    def check_sizes(self, d_out, num_heads):
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"


SPLIT_CORRECT = [Split, SplitWithReshapeAndEinsum, SplitWithAssert]


# ----------------------------------------------------------------------------- one bug each
# Sources: the book's MultiHeadAttention (section 3.6.2) with one typical slip each (view without
# transpose, merge without transpose, missing contiguous(): PyTorch's own 'view size is not
# compatible' error, scaling by d_out, out_proj unused).
class SoftmaxOverHeads(Split):
    def normalise(self, scores):
        return torch.softmax(scores, dim=1)


class SoftmaxOverQueries(Split):
    def normalise(self, scores):
        return torch.softmax(scores, dim=2)


class NoScaling(Split):
    def scale(self, scores):
        return scores


class ScaleByHeadDim(Split):
    def scale(self, scores):
        return scores / self.head_dim


class ScaleByDOut(Split):
    def scale(self, scores):
        return scores / self.d_out**0.5


class MaskAfterSoftmax(Split):
    def forward(self, x):
        n = x.shape[1]
        q, k, v = (self.split(t) for t in self.project(x))
        weights = self.normalise(self.scale(q @ k.transpose(2, 3)))
        weights = self.drop(weights.masked_fill(self.mask[:n, :n], 0.0))
        return self.output(self.merge(weights @ v))


class NoMask(Split):
    def apply_mask(self, scores, n):
        return scores


class MaskWithDiagonal(Split):
    def apply_mask(self, scores, n):
        return scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(), -torch.inf)


class MaskLeaksNextToken(Split):
    def apply_mask(self, scores, n):
        return scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(2), -torch.inf)


class MaskNotSliced(Split):
    def apply_mask(self, scores, n):
        return scores.masked_fill(self.mask, -torch.inf)


class MaskNotBuffer(Split):
    def store_mask(self, mask):
        self.mask = mask


class DropoutIgnored(Split):
    def drop(self, weights):
        return weights


class DropoutInEval(Split):
    def drop(self, weights):
        return F.dropout(weights, self.dropout.p)


class DropoutFixedP(Split):
    def drop(self, weights):
        return F.dropout(weights, 0.1, self.training)


class DropoutOnContext(Split):
    def drop(self, weights):
        return weights

    def output(self, context):
        return self.out_proj(self.dropout(context))


class DropoutOnOutput(Split):
    def drop(self, weights):
        return weights

    def output(self, context):
        return self.dropout(self.out_proj(context))


class DropoutBeforeSoftmax(Split):
    def normalise(self, scores):
        return torch.softmax(self.dropout(scores), dim=-1)

    def drop(self, weights):
        return weights


class ViewWithoutTranspose(Split):
    """Splits with a bare view; merges back the book's way."""

    def split(self, t):
        b, n, _ = t.shape
        return t.view(b, self.num_heads, n, self.head_dim)


class ViewWithoutTransposeBothWays(ViewWithoutTranspose):
    """Splits and merges with bare views."""

    def merge(self, t):
        b, _, n, _ = t.shape
        return t.contiguous().view(b, n, self.d_out)


class MergeWithoutTranspose(Split):
    def merge(self, t):
        b, _, n, _ = t.shape
        return t.contiguous().view(b, n, self.d_out)


class MissingContiguous(Split):
    def merge(self, t):
        b, _, n, _ = t.shape
        return t.transpose(1, 2).view(b, n, self.d_out)


class KeysAndValuesFromQuery(Split):
    """The bug of the chapter's last exercise."""

    def project(self, x):
        q = self.W_query(x)
        return q, q, q


class KeysFromQuery(Split):
    def project(self, x):
        return self.W_query(x), self.W_query(x), self.W_value(x)


class OutProjUnused(Split):
    def output(self, context):
        return context


class NoOutProj(Split):
    def make_out_proj(self, d_out):
        pass

    def output(self, context):
        return context


class NoDivisibilityCheck(Split):
    def check_sizes(self, d_out, num_heads):
        pass


class KeyBiasAlwaysOn(Split):
    """qkv_bias ignored: nn.Linear's default bias=True."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, qkv_bias)
        self.W_key = nn.Linear(d_in, d_out)


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
