"""Right and wrong answers to chapter 03's exercises, each wrong one a mistake students make."""

import torch


# --------------------------------------------------------------------------- causal_mask(n)
# Sources: typical slips with torch.triu/tril (diagonal included, keep-mask instead of hide-mask,
# float mask, a fixed size); the book builds its mask with tril (section 3.5.1).
def mask_right(n):
    return torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)


def mask_right_by_comparison(n):
    positions = torch.arange(n)
    return positions[None, :] > positions[:, None]


def mask_with_diagonal(n):
    return torch.triu(torch.ones(n, n, dtype=torch.bool))


def mask_tril(n):
    return torch.tril(torch.ones(n, n, dtype=torch.bool), diagonal=-1)


def mask_keep(n):
    return torch.tril(torch.ones(n, n)).bool()


def mask_float(n):
    return torch.triu(torch.ones(n, n), diagonal=1)


def mask_fixed_size(n):
    return torch.triu(torch.ones(6, 6, dtype=torch.bool), diagonal=1)


def mask_flat(n):
    return torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1).flatten()


def mask_additive(n):
    # PyTorch's nn.Transformer.generate_square_subsequent_mask(n) returns this float mask (0 below,
    # -inf above the diagonal), a common answer; it once crashed the check (IndexError inside it).
    return torch.nn.Transformer.generate_square_subsequent_mask(n)


def mask_stub(n):
    raise NotImplementedError()


# --------------------------------------------------------------------------- way 1: after the softmax
# Sources: the book's first masking method (section 3.5.1) with one slip each; renormalising over
# dim=1 is the book's own code, right only for a 2-d matrix.
def _future(scores):
    n = scores.shape[-1]
    return torch.triu(torch.ones(n, n, dtype=torch.bool, device=scores.device), diagonal=1)


def after_right(scores, d_k):
    weights = torch.softmax(scores / d_k**0.5, dim=-1)
    weights = weights * torch.tril(torch.ones_like(weights))
    return weights / weights.sum(dim=-1, keepdim=True)


def after_no_renormalise(scores, d_k):
    weights = torch.softmax(scores / d_k**0.5, dim=-1)
    return weights * torch.tril(torch.ones_like(weights))


def after_diagonal_masked(scores, d_k):
    weights = torch.softmax(scores / d_k**0.5, dim=-1)
    weights = weights * torch.tril(torch.ones_like(weights), diagonal=-1)
    return weights / weights.sum(dim=-1, keepdim=True)


def after_transposed(scores, d_k):
    weights = torch.softmax(scores / d_k**0.5, dim=-1)
    weights = weights * torch.triu(torch.ones_like(weights))
    return weights / weights.sum(dim=-1, keepdim=True)


def after_no_scaling(scores, d_k):
    weights = torch.softmax(scores, dim=-1)
    weights = weights * torch.tril(torch.ones_like(weights))
    return weights / weights.sum(dim=-1, keepdim=True)


def after_scores_zeroed(scores, d_k):
    """Multiplies the *scores* by the 0/1 mask, then softmax: the future scores become 0."""
    scores = scores * torch.tril(torch.ones_like(scores))
    return torch.softmax(scores / d_k**0.5, dim=-1)


def after_softmax_dim1(scores, d_k):
    weights = torch.softmax(scores / d_k**0.5, dim=1)
    weights = weights * torch.tril(torch.ones_like(weights))
    return weights / weights.sum(dim=-1, keepdim=True)


# --------------------------------------------------------------------------- way 2: before the softmax
# Sources: the book's -inf method (section 3.5.1) with one typical slip each (zero fill, wrong
# diagonal, scale by d_k, -inf or zeros applied after the softmax).
def before_right(scores, d_k):
    masked = scores.masked_fill(_future(scores), float("-inf"))
    return torch.softmax(masked / d_k**0.5, dim=-1)


def before_additive(scores, d_k):
    n = scores.shape[-1]
    additive = torch.zeros(n, n, device=scores.device).masked_fill(_future(scores), float("-inf"))
    return torch.softmax((scores + additive) / d_k**0.5, dim=-1)


def before_large_negative(scores, d_k):
    """Also accepted: a huge negative number instead of -inf gives the same weights here."""
    masked = scores.masked_fill(_future(scores), -1e9)
    return torch.softmax(masked / d_k**0.5, dim=-1)


def before_zero_fill(scores, d_k):
    masked = scores.masked_fill(_future(scores), 0.0)
    return torch.softmax(masked / d_k**0.5, dim=-1)


def before_diagonal_masked(scores, d_k):
    n = scores.shape[-1]
    masked = scores.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool)), float("-inf"))
    return torch.softmax(masked / d_k**0.5, dim=-1)


def before_transposed(scores, d_k):
    masked = scores.masked_fill(_future(scores).T, float("-inf"))
    return torch.softmax(masked / d_k**0.5, dim=-1)


def before_scale_by_d_k(scores, d_k):
    masked = scores.masked_fill(_future(scores), float("-inf"))
    return torch.softmax(masked / d_k, dim=-1)


def before_softmax_dim1(scores, d_k):
    masked = scores.masked_fill(_future(scores), float("-inf"))
    return torch.softmax(masked / d_k**0.5, dim=1)


def before_fill_after_softmax(scores, d_k):
    weights = torch.softmax(scores / d_k**0.5, dim=-1)
    return weights.masked_fill(_future(scores), float("-inf"))


def before_zero_after_softmax(scores, d_k):
    weights = torch.softmax(scores / d_k**0.5, dim=-1)
    return weights.masked_fill(_future(scores), 0.0)


def before_stub(scores, d_k):
    raise NotImplementedError()


def after_renormalise_dim1(scores, d_k):
    """The book's own slip (section 3.5.1): the masked weights renormalised with sum(dim=1), which is
    the key axis only for a 2-d matrix; on a batch (b, n, n) it sums over the queries."""
    weights = torch.softmax(scores / d_k**0.5, dim=-1)
    weights = weights * torch.tril(torch.ones_like(weights))
    return weights / weights.sum(dim=1, keepdim=True)


# Round two: the book's row_sums without keepdim=True (written to the pattern of dropping it): right
# shape for a square matrix, each column divided by one row's sum; a crash on most batches.
def after_renormalise_no_keepdim(scores, d_k):
    weights = torch.softmax(scores / d_k**0.5, dim=-1)
    weights = weights * torch.tril(torch.ones_like(weights))
    return weights / weights.sum(dim=-1)


def before_scale_multiplied(scores, d_k):
    # perceiver-io (esceptico/perceiver-io#9): scores divided by scale = d_k ** -0.5, a multiplication.
    return torch.softmax(scores.masked_fill(_future(scores), -torch.inf) / d_k**-0.5, dim=-1)
