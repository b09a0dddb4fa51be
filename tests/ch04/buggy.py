"""CausalAttention classes for tests/test_checks_ch04.py: right ones, and one class per known bug.

``Correct`` is written independently of ``course_utils.chapters`` and split into small hooks;
every buggy class overrides exactly one hook (or ``forward``) with a mistake students make.
The ``CORRECT`` list holds other right ways of writing the layer, which the check must accept.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Correct(nn.Module):
    """A right causal attention layer, written in small overridable steps."""

    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.W_query = self.make_linear(d_in, d_out, qkv_bias)
        self.W_key = self.make_linear(d_in, d_out, qkv_bias)
        self.W_value = self.make_linear(d_in, d_out, qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.store_mask(self.make_mask(context_length))
        self.context_length = context_length
        # The course's length rule, as a pre-hook so that classes which rewrite forward keep it.
        self.register_forward_pre_hook(lambda module, args: module.check_length(args[0]))

    def check_length(self, x):
        if x.shape[1] > self.context_length:
            raise ValueError(f"{x.shape[1]} tokens, but context_length is {self.context_length}")

    def make_linear(self, d_in, d_out, qkv_bias):
        return nn.Linear(d_in, d_out, bias=qkv_bias)

    def make_mask(self, size):
        return torch.triu(torch.ones(size, size), diagonal=1)  # float 0/1, as in the book

    def store_mask(self, mask):
        self.register_buffer("mask", mask)

    def project(self, x):
        return self.W_query(x), self.W_key(x), self.W_value(x)

    def scores(self, q, k):
        return q @ k.transpose(1, 2)

    def apply_mask(self, scores, n):
        return scores.masked_fill(self.mask.bool()[:n, :n], -torch.inf)

    def scale(self, scores, d_k):
        return scores / d_k**0.5

    def normalise(self, scores):
        return torch.softmax(scores, dim=-1)

    def drop(self, weights):
        return self.dropout(weights)

    def forward(self, x):
        n = x.shape[1]
        q, k, v = self.project(x)
        scores = self.scale(self.apply_mask(self.scores(q, k), n), k.shape[-1])
        weights = self.drop(self.normalise(scores))
        return weights @ v


# ----------------------------------------------------------------------------- right, written differently
class BoolMaskInPlace(Correct):
    """Bool buffer, in-place masked_fill_, scaling before masking."""

    def make_mask(self, size):
        return torch.ones(size, size, dtype=torch.bool).triu(1)

    def forward(self, x):
        n = x.shape[1]
        q, k, v = self.project(x)
        scores = (q @ k.mT) / k.size(-1) ** 0.5
        scores.masked_fill_(self.mask[:n, :n], float("-inf"))
        return self.dropout(torch.softmax(scores, dim=2)) @ v


class RenormalisedAfterSoftmax(Correct):
    """Zero the future after the softmax, then renormalise each row (the same numbers)."""

    def forward(self, x):
        n = x.shape[1]
        q, k, v = self.project(x)
        weights = torch.softmax(self.scale(self.scores(q, k), k.shape[-1]), dim=-1)
        weights = weights.masked_fill(self.mask.bool()[:n, :n], 0.0)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        return self.dropout(weights) @ v


class FunctionalDropout(Correct):
    def drop(self, weights):
        return F.dropout(weights, self.dropout.p, self.training)


class MaskWithBatchAxis(Correct):
    """The buffer has a leading batch axis: (1, context_length, context_length)."""

    def make_mask(self, size):
        return torch.triu(torch.ones(1, size, size), diagonal=1).bool()

    def apply_mask(self, scores, n):
        return scores.masked_fill(self.mask[:, :n, :n], -torch.inf)


class LengthCheck(Correct):
    """Refuses inputs longer than context_length with a clear message."""

    def forward(self, x):
        if x.shape[1] > self.mask.shape[0]:
            raise ValueError(f"{x.shape[1]} tokens, but context_length is {self.mask.shape[0]}")
        return super().forward(x)


CORRECT = [
    Correct,
    BoolMaskInPlace,
    RenormalisedAfterSoftmax,
    FunctionalDropout,
    MaskWithBatchAxis,
    LengthCheck,
]


# ----------------------------------------------------------------------------- one bug each
# Sources: the book's CausalAttention (section 3.5.3) with one typical slip each; DropoutInEval is
# PyTorch's documented F.dropout default (training=True); MaskNotSliced forgets the book's [:n, :n].
class SoftmaxOverQueries(Correct):
    def normalise(self, scores):
        return torch.softmax(scores, dim=1)


class SoftmaxOverBatch(Correct):
    def normalise(self, scores):
        return torch.softmax(scores, dim=0)


class NoScaling(Correct):
    def scale(self, scores, d_k):
        return scores


class ScaleByDk(Correct):
    def scale(self, scores, d_k):
        return scores / d_k


class ScaleByDin(Correct):
    def scale(self, scores, d_k):
        return scores / self.W_query.in_features**0.5


class ScaleAfterSoftmax(Correct):
    def forward(self, x):
        n = x.shape[1]
        q, k, v = self.project(x)
        weights = torch.softmax(self.apply_mask(self.scores(q, k), n), dim=-1) / k.shape[-1] ** 0.5
        return self.dropout(weights) @ v


class MaskAfterSoftmax(Correct):
    def forward(self, x):
        n = x.shape[1]
        q, k, v = self.project(x)
        weights = torch.softmax(self.scale(self.scores(q, k), k.shape[-1]), dim=-1)
        weights = weights.masked_fill(self.mask.bool()[:n, :n], 0.0)
        return self.dropout(weights) @ v


class MaskAfterSoftmaxInf(Correct):
    def forward(self, x):
        n = x.shape[1]
        q, k, v = self.project(x)
        weights = torch.softmax(self.scale(self.scores(q, k), k.shape[-1]), dim=-1)
        return self.dropout(self.apply_mask(weights, n)) @ v


class NoMask(Correct):
    def apply_mask(self, scores, n):
        return scores


class MaskWithDiagonal(Correct):
    def make_mask(self, size):
        return torch.triu(torch.ones(size, size))


class MaskLeaksNextToken(Correct):
    def make_mask(self, size):
        return torch.triu(torch.ones(size, size), diagonal=2)


class MaskHidesPast(Correct):
    def make_mask(self, size):
        return torch.tril(torch.ones(size, size), diagonal=-1)


class MaskFilledWithZero(Correct):
    def apply_mask(self, scores, n):
        return scores.masked_fill(self.mask.bool()[:n, :n], 0.0)


class MaskNotSliced(Correct):
    def apply_mask(self, scores, n):
        return scores.masked_fill(self.mask.bool(), -torch.inf)


class MaskNotBuffer(Correct):
    def store_mask(self, mask):
        self.mask = mask


class MaskAsParameter(Correct):
    def store_mask(self, mask):
        self.mask = nn.Parameter(mask, requires_grad=False)


class MaskBuiltInForward(Correct):
    """Right numbers, but no buffer: the mask is rebuilt on every call."""

    def store_mask(self, mask):
        pass

    def apply_mask(self, scores, n):
        return scores.masked_fill(torch.ones(n, n).triu(1).bool(), -torch.inf)


class NoLengthLimit(Correct):
    """Has the buffer but builds the mask from n, so any length goes through."""

    def check_length(self, x):
        pass

    def apply_mask(self, scores, n):
        return scores.masked_fill(torch.ones(n, n, device=scores.device).triu(1).bool(), -torch.inf)


class KeysFromQuery(Correct):
    def project(self, x):
        return self.W_query(x), self.W_query(x), self.W_value(x)


class ValuesFromQuery(Correct):
    def project(self, x):
        return self.W_query(x), self.W_key(x), self.W_query(x)


class ScoresTransposed(Correct):
    def scores(self, q, k):
        return k @ q.transpose(1, 2)


class BiasAlwaysOn(Correct):
    def make_linear(self, d_in, d_out, qkv_bias):
        return nn.Linear(d_in, d_out)


class DropoutIgnored(Correct):
    def drop(self, weights):
        return weights


class DropoutResultUnused(Correct):
    def drop(self, weights):
        self.dropout(weights)
        return weights


class DropoutInEval(Correct):
    def drop(self, weights):
        return F.dropout(weights, self.dropout.p)


class DropoutFixedP(Correct):
    def drop(self, weights):
        return F.dropout(weights, 0.5, self.training)


class DropoutOnContext(Correct):
    def forward(self, x):
        n = x.shape[1]
        q, k, v = self.project(x)
        scores = self.scale(self.apply_mask(self.scores(q, k), n), k.shape[-1])
        return self.dropout(self.normalise(scores) @ v)


class DropoutBeforeSoftmax(Correct):
    def forward(self, x):
        n = x.shape[1]
        q, k, v = self.project(x)
        scores = self.scale(self.apply_mask(self.scores(q, k), n), k.shape[-1])
        return self.normalise(self.dropout(scores)) @ v


class DropoutOnInputs(Correct):
    def forward(self, x):
        return super().forward(self.dropout(x))


class NamedDifferently(Correct):
    """W_q instead of the book's W_query."""

    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, dropout, qkv_bias)
        self.W_q = self.W_query
        del self.W_query

    def project(self, x):
        return self.W_q(x), self.W_key(x), self.W_value(x)


class Stub(nn.Module):
    """What the exercise notebook hands out."""

    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        raise NotImplementedError()


# ----------------------------------------------------------------------------- behaviour probes (issue 11)
# Right numbers on the first call, wrong behaviour elsewhere: the probes name them.
class MaskOverwritten(Correct):
    """Typical student slip: 'cache' the cut mask by assigning it back (the next, longer call breaks)."""

    def apply_mask(self, scores, n):
        self.mask = self.mask[:n, :n]
        return scores.masked_fill(self.mask.bool(), -torch.inf)


class MaskReregisteredCut(Correct):
    """Typical student slip: re-register the buffer at the current length inside forward."""

    def apply_mask(self, scores, n):
        self.register_buffer("mask", self.mask[:n, :n])
        return scores.masked_fill(self.mask.bool(), -torch.inf)


class MaskBuiltOnCpu(Correct):
    """The lecture's on-the-fly mask, torch.triu(torch.ones(n, n)), without device= (fails on a GPU)."""

    def apply_mask(self, scores, n):
        return scores.masked_fill(torch.triu(torch.ones(n, n), diagonal=1).bool(), -torch.inf)


class MaskFromArangeOnCpu(Correct):
    """Positions compared with torch.arange(n) (common in GPT ports) without device=."""

    def apply_mask(self, scores, n):
        positions = torch.arange(n)
        return scores.masked_fill(positions[None, :] > positions[:, None], -torch.inf)


class InplaceDropoutAfterSoftmax(Correct):
    """nn.Dropout(inplace=True) on the softmax output, which softmax's backward needs (a memory 'optimisation')."""

    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, dropout, qkv_bias)
        self.dropout = nn.Dropout(dropout, inplace=True)


class InplaceRenormalise(Correct):
    """Masking after the softmax done in place (masked_fill_, /=): autograd's saved softmax output is changed."""

    def forward(self, x):
        n = x.shape[1]
        q, k, v = self.project(x)
        weights = torch.softmax(self.scale(self.scores(q, k), k.shape[-1]), dim=-1)
        weights.masked_fill_(self.mask.bool()[:n, :n], 0.0)
        weights /= weights.sum(dim=-1, keepdim=True)
        return self.drop(weights) @ v


class InputScaledInPlace(Correct):
    """Typical student slip: 'pre-scale' the inputs in place, changing the caller's tensor."""

    def project(self, x):
        x /= x.shape[-1] ** 0.5
        x *= x.shape[-1] ** 0.5
        return super().project(x)


class InputCenteredInPlace(Correct):
    """x -= x.mean(...) in place: the numbers of this call may be fine, the caller's batch is not."""

    def project(self, x):
        q, k, v = super().project(x)
        x -= x.mean()
        return q, k, v


class DropoutAlwaysTraining(Correct):
    """F.dropout with training=True hard-coded (copied from a training script): dropout in eval mode too."""

    def drop(self, weights):
        return F.dropout(weights, self.dropout.p, training=True)


class KeysDetached(Correct):
    """'.detach() to save memory' on the keys: W_key never learns."""

    def project(self, x):
        q, k, v = super().project(x)
        return q, k.detach(), v


class WeightsDetached(Correct):
    """Weights computed under torch.no_grad (copied from an inference snippet): no gradient for W_query, W_key."""

    def normalise(self, scores):
        with torch.no_grad():
            return torch.softmax(scores, dim=-1)


class SdpaWithTorchMhaMask(Correct):
    """SDPA given nn.MultiheadAttention's mask (True = hidden there, True = attend in SDPA)."""

    def forward(self, x):
        n = x.shape[1]
        q, k, v = self.project(x)
        return F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=self.mask.bool()[:n, :n],
            dropout_p=self.dropout.p if self.training else 0.0,
        )


class LeftoverLinear(Correct):
    """A half-finished refactoring: an unused fused projection left in __init__ (extra parameters)."""

    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, dropout, qkv_bias)
        self.qkv = nn.Linear(d_in, 3 * d_out, bias=qkv_bias)


class LengthAssert(Correct):
    """An assert instead of the course's ValueError (the book's GPT code has no check at all)."""

    def check_length(self, x):
        assert x.shape[1] <= self.context_length, "too long"


class LengthIndexError(Correct):
    """Lets the mask slice fail on its own: PyTorch raises a RuntimeError about sizes, not ValueError."""

    def check_length(self, x):
        pass

    def apply_mask(self, scores, n):
        return scores.masked_fill(
            self.mask.bool()[:n, :n], -torch.inf
        )  # (c, c) cannot broadcast to (n, n)


# ----------------------------------------------------------------------------- more behaviour probes
# Found by an adversarial review of the checks (2026-11-24): each passed before the probe that now names it.
class ReseedsInForward(Correct):
    """torch.manual_seed(123) moved from the book's notebook cells into forward: one dropout mask forever."""

    def forward(self, x):
        torch.manual_seed(123)
        return super().forward(x)


class KeysKeptBetweenCalls(Correct):
    """A home-made 'cache' (as in KV-cache tutorials, without the positions): the keys of the previous
    call are reused in eval mode whenever the batch has the same shape."""

    def project(self, x):
        q, k, v = super().project(x)
        kept = getattr(self, "_keys", None)
        if not self.training and kept is not None and kept.shape == k.shape:
            k = kept
        self._keys = k.detach()
        return q, k, v


class InputDetachedInForward(Correct):
    """x.detach() at the top of forward ('attention needs no gradient for its input'): the embeddings
    before the layer would never learn."""

    def forward(self, x):
        return super().forward(x.detach())


class EvalInForward(Correct):
    """forward ends with self.eval(), copied from a generation helper: dropout stays off after one step."""

    def forward(self, x):
        out = super().forward(x)
        self.eval()
        return out


class QueryFrozen(Correct):
    """The book's section 3.4.1 freezes its weights (requires_grad=False) to keep printouts short;
    copied into the class, W_query never trains."""

    def make_linear(self, d_in, d_out, qkv_bias):
        layer = super().make_linear(d_in, d_out, qkv_bias)
        if not hasattr(self, "W_query"):  # the first layer made is W_query
            layer.weight.requires_grad_(False)
        return layer


class KeyIsQuery(Correct):
    """self.W_key = self.W_query (a copy-paste slip), with the old key layer kept under another name,
    so the parameter count still matches."""

    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, dropout, qkv_bias)
        self.W_spare, self.W_key = self.W_key, self.W_query


class MaskMovedToCpu(Correct):
    """self.mask.to('cpu') in forward (from code that once debugged on the CPU): fails on a GPU."""

    def apply_mask(self, scores, n):
        return scores.masked_fill(self.mask.to("cpu").bool()[:n, :n], -torch.inf)


class DropoutRateFixed(Correct):
    """nn.Dropout(0.1) written in __init__ instead of nn.Dropout(dropout) (the book's default value
    typed in): the layer built with dropout=0.0 still drops in training."""

    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, dropout, qkv_bias)
        self.dropout = nn.Dropout(0.1)


class SdpaDropoutRateFixed(Correct):
    """SDPA with dropout_p=0.1 typed in (gated on self.training, as nanoGPT does, but not from the argument)."""

    def forward(self, x):
        n = x.shape[1]
        q, k, v = self.project(x)
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=~self.mask.bool()[:n, :n], dropout_p=0.1 if self.training else 0.0
        )


class DropoutZeroBecomesDefault(Correct):
    """nn.Dropout(dropout or 0.1), 'a default when none is given': Python reads 0.0 as false, so the
    layer built with dropout=0.0 drops 10% in training."""

    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, dropout, qkv_bias)
        self.dropout = nn.Dropout(dropout or 0.1)


# Round two. ScaleNegativeExponent: rasbt/LLMs-from-scratch#856 (`/ keys.shape[-1] ** -0.5`).
# KeysValuesSwapped: written to the pattern of unpacking the projections in the wrong order.
class ScaleNegativeExponent(Correct):
    def scale(self, scores, d_k):
        return scores / d_k**-0.5


class KeysValuesSwapped(Correct):
    def project(self, x):
        return self.W_query(x), self.W_value(x), self.W_key(x)


# Creation order (issue 31): the right computation, W_key made before W_query. It passed before the
# check compared the initial weights with the chapter's class under the same seed; chapter 04 printed
# only the first row, which cannot show the swap. Written to the pattern of that report.
class KeyCreatedFirst(Correct):
    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        nn.Module.__init__(self)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.store_mask(self.make_mask(context_length))
        self.context_length = context_length
        self.register_forward_pre_hook(lambda module, args: module.check_length(args[0]))


class RandomDrawBeforeLayers(KeyCreatedFirst):
    # written to the pattern of a random draw before the layers (a torch.rand mask made then cut)
    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        nn.Module.__init__(self)
        self.noise = torch.rand(1)
        Correct.__init__(self, d_in, d_out, context_length, dropout, qkv_bias)
