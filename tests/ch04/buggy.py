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
