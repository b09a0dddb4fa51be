"""More wrong answers to chapter 05's exercises (the wrapper's heads, the shape predictions, dropout
in a loop over heads), for tests/ch05/test_ch05_more_mistakes.py; each says where it comes from.
The bases Wrapper and Split are in buggy.py."""

from __future__ import annotations

import torch
from torch import nn

import course_utils as cu
from tests.ch05.buggy import Split, Wrapper


# ----------------------------------------------------------------------------- the wrapper's heads
class HeadsInGenerator(Wrapper):
    """Constructed: the book's list comprehension typed with parentheses, a generator expression
    (no module registered, and it would be used up by the first forward)."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        nn.Module.__init__(self)
        self.heads = (
            self.head_class(d_in, d_out, context_length, dropout, qkv_bias)
            for _ in range(num_heads)
        )


class TwoHeadsAlways(Wrapper):
    """Constructed: range(2) copied from the book's example call (num_heads=2) instead of
    range(num_heads); right whenever two heads are asked for."""

    def make_heads(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias):
        return super().make_heads(d_in, d_out, context_length, dropout, 2, qkv_bias)


# ----------------------------------------------------------------------------- dropout in a head loop
class DropoutSkipsFirstHead(Split):
    """Constructed: heads computed one at a time, the first one before the loop to start the
    torch.cat accumulator, and the dropout line written only in the loop body (a peeled first
    iteration that misses a line): head 0's weights are never dropped in training."""

    def forward(self, x):
        n = x.shape[1]
        q, k, v = (self.split(t) for t in self.project(x))  # (b, heads, n, head_dim)
        scores = self.scale(self.apply_mask(q @ k.transpose(2, 3), n))  # (b, heads, n, n)
        context = (torch.softmax(scores[:, 0], dim=-1) @ v[:, 0])[:, None]  # (b, 1, n, head_dim)
        for h in range(1, self.num_heads):
            weights = self.dropout(torch.softmax(scores[:, h], dim=-1))  # (b, n, n)
            context = torch.cat([context, (weights @ v[:, h])[:, None]], dim=1)
        return self.output(self.merge(context))  # (b, n, d_out)


# ----------------------------------------------------------------------------- shape predictions
class ReturnsWeightsToo(cu.chapters.MultiHeadAttention):
    """forward returns (context, attention weights), as many public layers do (e.g.
    IronTony-Stark/TransGAN, tmp.py: `return out, (attn.detach(),)`)."""

    def forward(self, x):
        return super().forward(x), None


def shape_layer_and_input():
    """The exercise's setting, smaller: 3 heads of width 4 concatenated, on a (2, 5, 6) batch."""
    torch.manual_seed(0)
    layer = cu.chapters.MultiHeadAttentionWrapper(6, 4, 5, 0.0, 3).eval()
    return layer, torch.randn(2, 5, 6)  # layer(x): (2, 5, 12)


# (predicted, layer, x) as a student passes them; each names the mistake in the comment
def prediction_one_head_width():
    """(2, 5, 4): the wrapper's width taken as d_out, its heads' concatenation forgotten."""
    layer, x = shape_layer_and_input()
    return (2, 5, 4), layer, x


def prediction_arguments_swapped():
    """check_shape_prediction(layer, x, predicted): the order of the call's arguments changed."""
    layer, x = shape_layer_and_input()
    return layer, x, (2, 5, 12)


def prediction_with_true_division():
    """(2, 5, 3 * 12 / 3): `/` gives a float, so the prediction is not whole numbers."""
    layer, x = shape_layer_and_input()
    return (2, 5, 3 * 12 / 3), layer, x


def prediction_of_a_tuple_output():
    """A layer whose forward returns (context, weights): no tensor shape to compare."""
    torch.manual_seed(0)
    return (2, 5, 6), ReturnsWeightsToo(6, 6, 5, 0.0, 3).eval(), torch.randn(2, 5, 6)
