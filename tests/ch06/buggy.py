"""Answers to chapter 06's exercises: one right version each, then mistakes students make."""

import torch
from torch import nn


# --- SlidingWindowDataset(token_ids, context_length, stride)
# Sources: the book's GPTDatasetV1 (chapter 2) with typical off-by-one slips in the window range,
# the target shift and the stride.
class DatasetRight(torch.utils.data.Dataset):
    def __init__(self, token_ids, context_length, stride):
        ids = torch.tensor(token_ids)
        self.starts = list(range(0, len(token_ids) - context_length, stride))
        self.inputs = [ids[s : s + context_length] for s in self.starts]
        self.targets = [ids[s + 1 : s + context_length + 1] for s in self.starts]

    def __len__(self):
        return len(self.starts)

    def __getitem__(self, i):
        return self.inputs[i], self.targets[i]


class _Windows(torch.utils.data.Dataset):
    """Parametrised by where the windows start and how the targets are taken."""

    target_shift = 1
    swap = False

    def __init__(self, token_ids, context_length, stride):
        self.ids = torch.tensor(token_ids)
        self.length, self.stride = context_length, stride
        self.starts = self.make_starts(len(token_ids), context_length, stride)

    def make_starts(self, n, length, stride):
        return list(range(0, n - length, stride))

    def __len__(self):
        return len(self.starts)

    def __getitem__(self, i):
        s = self.starts[i]
        x = self.ids[s : s + self.length]
        t = s + self.target_shift
        y = self.ids[t : t + self.length]
        return (y, x) if self.swap else (x, y)


class DatasetNoShift(_Windows):
    target_shift = 0


class DatasetSwapped(_Windows):
    swap = True


class DatasetShiftedBack(_Windows):
    target_shift = -1


class DatasetExtraWindow(_Windows):
    def make_starts(self, n, length, stride):
        return list(range(0, n - length + 1, stride))


class DatasetMissingWindow(_Windows):
    def make_starts(self, n, length, stride):
        return list(range(0, n - length - 1, stride))


class DatasetFloorCount(_Windows):
    def __len__(self):
        return (len(self.ids) - self.length) // self.stride


class DatasetStrideIgnored(_Windows):
    def make_starts(self, n, length, stride):
        return list(range(0, n - length))


class DatasetStepByContext(_Windows):
    def make_starts(self, n, length, stride):
        return list(range(0, n - length, length))


class DatasetStrideIgnoredInGetitem(_Windows):
    def __getitem__(self, i):
        return self.ids[i : i + self.length], self.ids[i + 1 : i + self.length + 1]


class DatasetLengthIsTokens(_Windows):
    # __len__ returns the number of tokens instead of the number of windows, a slip seen when a
    # Dataset is written by hand from a plain list of ids.
    def __len__(self):
        return len(self.ids)


class DatasetLists(_Windows):
    def __getitem__(self, i):
        x, y = super().__getitem__(i)
        return x.tolist(), y.tolist()


class DatasetStub(torch.utils.data.Dataset):
    def __init__(self, token_ids, context_length, stride):
        raise NotImplementedError()


# --- InputEmbedding(vocab_size, context_length, d_model)
# Sources: the book's chapter 2 embeddings with typical slips (positions sized by the vocabulary,
# not sliced to n, multiplied or concatenated instead of added, torch.arange without device=).
class EmbeddingRight(nn.Module):
    def __init__(self, vocab_size, context_length, d_model):
        super().__init__()
        self.context_length = context_length
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(context_length, d_model)

    def forward(self, token_ids):
        n = token_ids.shape[1]
        if n > self.context_length:
            raise ValueError(f"{n} tokens, but context_length is {self.context_length}")
        return self.tok(token_ids) + self.pos(torch.arange(n, device=token_ids.device))


class EmbeddingPosSizedByVocab(EmbeddingRight):
    def __init__(self, vocab_size, context_length, d_model):
        super().__init__(vocab_size, context_length, d_model)
        self.pos = nn.Embedding(vocab_size, d_model)


class EmbeddingPosNotSliced(EmbeddingRight):
    def forward(self, token_ids):
        return self.tok(token_ids) + self.pos.weight


class EmbeddingPosAllRows(EmbeddingRight):
    def forward(self, token_ids):
        return self.tok(token_ids) + self.pos(torch.arange(self.context_length))


class EmbeddingNoPositions(EmbeddingRight):
    def forward(self, token_ids):
        return self.tok(token_ids)


class EmbeddingMultiplied(EmbeddingRight):
    def forward(self, token_ids):
        return self.tok(token_ids) * self.pos(torch.arange(token_ids.shape[1]))


class EmbeddingConcatenated(EmbeddingRight):
    def forward(self, token_ids):
        tok = self.tok(token_ids)
        pos = self.pos(torch.arange(token_ids.shape[1])).expand_as(tok)
        return torch.cat([tok, pos], dim=-1)


class EmbeddingLastPositions(EmbeddingRight):
    def forward(self, token_ids):
        n = token_ids.shape[1]
        if n > self.context_length:
            raise ValueError("too long")
        return self.tok(token_ids) + self.pos.weight[self.context_length - n :]


class EmbeddingPositionsFromOne(EmbeddingRight):
    # Written to the pattern of 1-based positions (torch.arange(1, n + 1)), as in models whose
    # padding token holds position 0 (fairseq's learned positions start at padding_idx + 1); here the
    # table has context_length rows, so a full-length input runs past it.
    def forward(self, token_ids):
        n = token_ids.shape[1]
        if n > self.context_length:
            raise ValueError("too long")
        return self.tok(token_ids) + self.pos(torch.arange(1, n + 1, device=token_ids.device))


class EmbeddingNoLengthCheck(EmbeddingRight):
    def forward(self, token_ids):
        return self.tok(token_ids) + self.pos(
            torch.arange(token_ids.shape[1], device=token_ids.device)
        )


class EmbeddingPositionsOnCPU(EmbeddingRight):
    """The book's chapter 2 looks positions up with torch.arange(context_length): no device=."""

    def forward(self, token_ids):
        n = token_ids.shape[1]
        if n > self.context_length:
            raise ValueError("too long")
        return self.tok(token_ids) + self.pos(torch.arange(n))


class EmbeddingAssertsLength(EmbeddingRight):
    """Typical slip: an assert instead of the course's ValueError."""

    def forward(self, token_ids):
        n = token_ids.shape[1]
        assert n <= self.context_length, "too long"
        return self.tok(token_ids) + self.pos(torch.arange(n, device=token_ids.device))


class EmbeddingClampsLongInput(EmbeddingRight):
    def forward(self, token_ids):
        n = token_ids.shape[1]
        positions = torch.arange(n, device=token_ids.device).clamp(max=self.context_length - 1)
        return self.tok(token_ids) + self.pos(positions)


# --- copy_into_torch_mha(ours, theirs) and torch_mha_mask(n)
# Sources: typical slips when porting weights into nn.MultiheadAttention (in_proj order, transposes,
# biases forgotten, no torch.no_grad) and its inverted mask convention (True = do not attend).
def copy_right(ours, theirs):
    with torch.no_grad():
        theirs.in_proj_weight.copy_(
            torch.cat([ours.W_query.weight, ours.W_key.weight, ours.W_value.weight], dim=0)
        )
        if ours.W_query.bias is not None:
            theirs.in_proj_bias.copy_(
                torch.cat([ours.W_query.bias, ours.W_key.bias, ours.W_value.bias], dim=0)
            )
        else:
            theirs.in_proj_bias.zero_()
        theirs.out_proj.weight.copy_(ours.out_proj.weight)
        theirs.out_proj.bias.copy_(ours.out_proj.bias)


def copy_right_by_assignment(ours, theirs):
    """Replacing the parameters (instead of copying into them) is fine too."""
    w = torch.cat([ours.W_query.weight, ours.W_key.weight, ours.W_value.weight]).detach().clone()
    theirs.in_proj_weight = nn.Parameter(w)
    if ours.W_query.bias is not None:
        b = torch.cat([ours.W_query.bias, ours.W_key.bias, ours.W_value.bias]).detach().clone()
        theirs.in_proj_bias = nn.Parameter(b)
    theirs.out_proj.load_state_dict(ours.out_proj.state_dict())


def _copy(
    ours,
    theirs,
    order=("query", "key", "value"),
    transpose=False,
    out_proj=True,
    out_bias=True,
    in_bias=True,
):
    with torch.no_grad():
        blocks = [getattr(ours, f"W_{p}").weight for p in order]
        theirs.in_proj_weight.copy_(torch.cat([b.T if transpose else b for b in blocks], dim=0))
        if in_bias and ours.W_query.bias is not None:
            theirs.in_proj_bias.copy_(torch.cat([getattr(ours, f"W_{p}").bias for p in order]))
        if out_proj:
            theirs.out_proj.weight.copy_(ours.out_proj.weight)
        if out_bias:
            theirs.out_proj.bias.copy_(ours.out_proj.bias)


def copy_kqv_order(ours, theirs):
    _copy(ours, theirs, order=("key", "query", "value"))


def copy_vkq_order(ours, theirs):
    _copy(ours, theirs, order=("value", "key", "query"))


def copy_transposed(ours, theirs):
    _copy(ours, theirs, transpose=True)


def copy_no_out_proj(ours, theirs):
    _copy(ours, theirs, out_proj=False, out_bias=False)


def copy_no_out_bias(ours, theirs):
    _copy(ours, theirs, out_bias=False)


def copy_no_in_bias(ours, theirs):
    _copy(ours, theirs, in_bias=False)


def copy_out_proj_transposed(ours, theirs):
    _copy(ours, theirs)
    with torch.no_grad():
        theirs.out_proj.weight.copy_(ours.out_proj.weight.T)


def copy_without_no_grad(ours, theirs):
    theirs.in_proj_weight.copy_(
        torch.cat([ours.W_query.weight, ours.W_key.weight, ours.W_value.weight])
    )


def copy_wrong_direction(ours, theirs):
    with torch.no_grad():
        q, k, v = theirs.in_proj_weight.chunk(3)
        ours.W_query.weight.copy_(q)
        ours.W_key.weight.copy_(k)
        ours.W_value.weight.copy_(v)


def copy_stub(ours, theirs):
    raise NotImplementedError()


def mask_right(n):
    return torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)


def mask_right_float(n):
    return torch.zeros(n, n).masked_fill(mask_right(n), float("-inf"))


def mask_inverted(n):
    """scaled_dot_product_attention's convention (True = attend), given to nn.MultiheadAttention."""
    return torch.tril(torch.ones(n, n, dtype=torch.bool))


def mask_diagonal_masked(n):
    return torch.triu(torch.ones(n, n, dtype=torch.bool))


def mask_float_ones(n):
    return torch.triu(torch.ones(n, n), diagonal=1)


def mask_list(n):
    return mask_right(n).tolist()


# --- TinyGPT(vocab_size, context_length, d_model, num_heads, dropout=0.1) (optional exercise)
def _mha(d_model, context_length, dropout, num_heads):
    from course_utils.chapters import MultiHeadAttention

    return MultiHeadAttention(d_model, d_model, context_length, dropout, num_heads)


class TinyGPTRight(nn.Module):
    def __init__(self, vocab_size, context_length, d_model, num_heads, dropout=0.1):
        super().__init__()
        self.embed = EmbeddingRight(vocab_size, context_length, d_model)
        self.attn = _mha(d_model, context_length, dropout, num_heads)
        self.head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, token_ids):
        return self.head(self.attn(self.embed(token_ids)))


class TinyGPTHeadBias(TinyGPTRight):
    """Typical slip: nn.Linear's default bias=True kept for the output head."""

    def __init__(self, vocab_size, context_length, d_model, num_heads, dropout=0.1):
        super().__init__(vocab_size, context_length, d_model, num_heads, dropout)
        self.head = nn.Linear(d_model, vocab_size)


class TinyGPTSoftmax(TinyGPTRight):
    """Typical slip (seen in many 'GPT from scratch' tutorials' generate code moved into forward):
    probabilities returned instead of logits."""

    def forward(self, token_ids):
        return torch.softmax(super().forward(token_ids), dim=-1)


class TinyGPTTokenTableOnly(TinyGPTRight):
    """Typical slip: the embedding forgot its position table altogether."""

    def __init__(self, vocab_size, context_length, d_model, num_heads, dropout=0.1):
        super().__init__(vocab_size, context_length, d_model, num_heads, dropout)
        self.embed = nn.Embedding(vocab_size, d_model)


class TinyGPTPositionsUnused(TinyGPTRight):
    """Typical slip: the position table exists but forward looks up only the tokens."""

    def forward(self, token_ids):
        if token_ids.shape[1] > self.embed.context_length:
            raise ValueError("too long")
        return self.head(self.attn(self.embed.tok(token_ids)))


class TinyGPTNotCausal(TinyGPTRight):
    """Typical slip: the mask buffer emptied ('the model trains faster without it')."""

    def __init__(self, vocab_size, context_length, d_model, num_heads, dropout=0.1):
        super().__init__(vocab_size, context_length, d_model, num_heads, dropout)
        self.attn.mask.zero_()


class TinyGPTPositionsOnCPU(TinyGPTRight):
    """The book's chapter 2 pattern, torch.arange(n) without device=, inside the model."""

    def __init__(self, vocab_size, context_length, d_model, num_heads, dropout=0.1):
        super().__init__(vocab_size, context_length, d_model, num_heads, dropout)
        self.embed = EmbeddingPositionsOnCPU(vocab_size, context_length, d_model)


class TinyGPTNoLengthCheck(TinyGPTRight):
    """Typical slip: the embedding slices its position table and lets a too-long input crash."""

    def __init__(self, vocab_size, context_length, d_model, num_heads, dropout=0.1):
        super().__init__(vocab_size, context_length, d_model, num_heads, dropout)
        self.embed = EmbeddingNoLengthCheck(vocab_size, context_length, d_model)

    def forward(self, token_ids):
        x = self.embed.tok(token_ids) + self.embed.pos.weight[: token_ids.shape[1]]
        return self.head(self.attn(x))


class TinyGPTNoAttn(nn.Module):
    """Typical slip: the attention layer named differently from the exercise's self.attn."""

    def __init__(self, vocab_size, context_length, d_model, num_heads, dropout=0.1):
        super().__init__()
        self.embed = EmbeddingRight(vocab_size, context_length, d_model)
        self.mha = _mha(d_model, context_length, dropout, num_heads)
        self.head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, token_ids):
        return self.head(self.mha(self.embed(token_ids)))


class TinyGPTStub(nn.Module):
    def __init__(self, vocab_size, context_length, d_model, num_heads, dropout=0.1):
        super().__init__()
        raise NotImplementedError()


def copy_out_proj_by_assignment(ours, theirs):
    """Assigns our out_proj Parameters to theirs (seen in weight-porting scripts): both models now share them."""
    copy_right(ours, theirs)
    theirs.out_proj.weight = ours.out_proj.weight
    theirs.out_proj.bias = ours.out_proj.bias


def copy_bias_data_shared(ours, theirs):
    """nn.Parameter(ours.out_proj.bias.data): a new Parameter over the same memory, so training one changes both."""
    copy_right(ours, theirs)
    theirs.out_proj.bias = nn.Parameter(ours.out_proj.bias.data)


def mask_numpy(n):
    """numpy's triu (from a NumPy tutorial): an ndarray, not a tensor."""
    import numpy as np

    return np.triu(np.ones((n, n), dtype=bool), k=1)


class TinyGPTAttentionSkipped(TinyGPTRight):
    """Typical slip while debugging shapes: the attention call commented out, head on the embeddings."""

    def forward(self, token_ids):
        return self.head(self.embed(token_ids))


# Found by an adversarial review of the checks (2026-11-24): each passed before the probe that now names it.
class EmbeddingPositionsData(EmbeddingRight):
    """The position table added through .weight.data (seen in hand-written GPT ports): right numbers,
    but the positions never get a gradient, so they never train."""

    def forward(self, token_ids):
        n = token_ids.shape[1]
        if n > self.context_length:
            raise ValueError(f"{n} tokens, but context_length is {self.context_length}")
        return self.tok(token_ids) + self.pos.weight.data[:n]


class TinyGPTNumHeadsIgnored(TinyGPTRight):
    """num_heads never reaches the attention layer (a head count copied from a config dict)."""

    def __init__(self, vocab_size, context_length, d_model, num_heads, dropout=0.1):
        super().__init__(vocab_size, context_length, d_model, 4 if num_heads != 4 else 2, dropout)


class TinyGPTDropoutIgnored(TinyGPTRight):
    """dropout=0.0 hard-coded for the attention layer: the model trains without dropout."""

    def __init__(self, vocab_size, context_length, d_model, num_heads, dropout=0.1):
        super().__init__(vocab_size, context_length, d_model, num_heads, 0.0)


class TinyGPTDropoutAlwaysOn(TinyGPTRight):
    """F.dropout(x, p) on the embeddings: its training argument defaults to True, so dropout stays on
    after model.eval() (PyTorch's documented default)."""

    def __init__(self, vocab_size, context_length, d_model, num_heads, dropout=0.1):
        super().__init__(vocab_size, context_length, d_model, num_heads, dropout)
        self.p = dropout

    def forward(self, token_ids):
        return self.head(self.attn(nn.functional.dropout(self.embed(token_ids), self.p)))


class TinyGPTReseeds(TinyGPTRight):
    """torch.manual_seed(0) at the top of forward: one dropout mask for every training step."""

    def forward(self, token_ids):
        torch.manual_seed(0)
        return super().forward(token_ids)
