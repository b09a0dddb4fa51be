"""Wrong answers to chapter 01's exercises, each a mistake students really make."""

import math

import torch


# --- attention_scores(query, inputs)
# Sources: typical slips of the book's section 3.3.1 exercise (elementwise product without the sum,
# summing over the wrong axis, all pairs instead of one query, cosine similarity from other courses).
def scores_right(query, inputs):
    return inputs @ query


def scores_no_sum(query, inputs):
    return inputs * query


def scores_sum_over_tokens(query, inputs):
    return (inputs * query).sum(dim=0)


def scores_cosine(query, inputs):
    return torch.nn.functional.cosine_similarity(inputs, query.unsqueeze(0), dim=-1)


def scores_all_pairs(query, inputs):
    return inputs @ inputs.T


def scores_stub(query, inputs):
    raise NotImplementedError()


# --- softmax(x)
# Sources: softmax_naive is the book's own first softmax (section 3.3.1), which overflows on large
# scores; the others are typical slips (no max subtraction, keepdim forgotten, wrong axis).
def softmax_right(x):
    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1, keepdim=True)


def softmax_naive(x):
    return torch.exp(x) / torch.exp(x).sum(dim=-1, keepdim=True)


def softmax_divide_by_sum(x):
    return x / x.sum(dim=-1, keepdim=True)


def softmax_no_normalise(x):
    return torch.exp(x - x.max(dim=-1, keepdim=True).values)


def softmax_dim0(x):
    e = torch.exp(x - x.max())
    return e / e.sum(dim=0, keepdim=True)


def softmax_no_keepdim(x):
    e = torch.exp(x - x.max())
    return e / e.sum(dim=-1)


# --- attention_weights(inputs)
# Sources: typical slips (raw scores used as weights, column softmax, dividing by the sum as the book's
# first normalisation does, section 3.3.1).
def weights_right(inputs):
    return torch.softmax(inputs @ inputs.T, dim=-1)


def weights_raw(inputs):
    return inputs @ inputs.T


def weights_columns(inputs):
    return torch.softmax(inputs @ inputs.T, dim=0)


def weights_divide_by_sum(inputs):
    s = inputs @ inputs.T
    return s / s.sum(dim=-1, keepdim=True)


# --- context_vectors(inputs)
# Sources: typical slips (transposed weights, raw scores, returning the weights).
def context_right(inputs):
    return torch.softmax(inputs @ inputs.T, dim=-1) @ inputs


def context_transposed(inputs):
    return torch.softmax(inputs @ inputs.T, dim=-1).T @ inputs


def context_raw_scores(inputs):
    return (inputs @ inputs.T) @ inputs


def context_columns(inputs):
    return torch.softmax(inputs @ inputs.T, dim=0) @ inputs


def context_returns_weights(inputs):
    return torch.softmax(inputs @ inputs.T, dim=-1)


def softmax_global_max(x):
    """Subtracts the maximum of the whole tensor, not of each row: stable only when rows are alike."""
    e = torch.exp(x - x.max())
    return e / e.sum(dim=-1, keepdim=True)


def softmax_global_amax(x):
    """The same slip with amax() and no dim (a tutorial's 1-d softmax reused on a matrix)."""
    e = (x - x.amax()).exp()
    return e / e.sum(dim=-1, keepdim=True)


def scores_list(query, inputs):
    """The book's loop without the final torch.stack / torch.tensor: a Python list of 0-d tensors."""
    return [torch.dot(x_i, query) for x_i in inputs]


def weights_numpy(inputs):
    """Computed with NumPy (a NumPy tutorial's softmax): an ndarray comes back."""
    scores = (inputs @ inputs.T).numpy()
    e = scores - scores.max(axis=-1, keepdims=True)
    import numpy as np

    e = np.exp(e)
    return e / e.sum(axis=-1, keepdims=True)


# Sources for the softmax exercise's second round: the exercise says "Do not call torch.softmax"
# (a library call gives the right numbers and must still be refused), and a 1-d-only softmax written
# to the pattern of a Python loop over the scores (right on a vector, a crash on a matrix).
def softmax_library(x):
    return torch.softmax(x, dim=-1)


def softmax_functional(x):
    return torch.nn.functional.log_softmax(x, dim=-1).exp()


def softmax_1d_only(x):
    top = max(float(v) for v in x)
    exps = torch.tensor([math.exp(float(v) - top) for v in x])
    return exps / exps.sum()
