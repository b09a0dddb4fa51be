"""More wrong answers to chapter 06's exercises (tests/ch06/buggy.py is at the 500-line limit),
each with where it comes from."""

import torch
from torch import nn

from tests.ch06.buggy import DatasetRight, EmbeddingRight, TinyGPTRight, copy_right


class DatasetNoLen(torch.utils.data.Dataset):
    """The book's GPTDatasetV1 typed without __len__ (a DataLoader then cannot count its batches)."""

    __init__ = DatasetRight.__init__
    __getitem__ = DatasetRight.__getitem__


class DatasetReturnsDict(DatasetRight):
    """Hugging Face style items, {"input_ids": ..., "labels": ...}, where the chapter's DataLoader
    and training loop unpack a pair (the datasets library returns dicts)."""

    def __getitem__(self, i):
        inputs, targets = super().__getitem__(i)
        return {"input_ids": inputs, "labels": targets}


class DatasetFloatIds(DatasetRight):
    """torch.FloatTensor(token_ids), an old-style constructor that stores ids as floats."""

    def __getitem__(self, i):
        inputs, targets = super().__getitem__(i)
        return inputs.float(), targets.float()


class EmbeddingTablesTransposed(EmbeddingRight):
    """Both tables built (d_model, rows), arguments swapped as in nn.Linear(in, out) thinking."""

    def __init__(self, vocab_size, context_length, d_model):
        super().__init__(vocab_size, context_length, d_model)
        self.tok = nn.Embedding(d_model, vocab_size)
        self.pos = nn.Embedding(d_model, context_length)


class EmbeddingPositionsOnly(EmbeddingRight):
    """Returns the positional part alone: the token embedding computed, then overwritten by a
    re-used variable name (written for the course)."""

    def forward(self, token_ids):
        x = self.tok(token_ids)
        x = self.pos(torch.arange(token_ids.shape[1], device=token_ids.device))
        return x.expand(token_ids.shape[0], -1, -1)


# --------------------------------------------------------------------------- copy into nn.MultiheadAttention
def copy_in_proj_side_by_side(ours, theirs):
    """Constructed: the three matrices joined with torch.cat(..., dim=1), side by side, and the
    result assigned as a new Parameter (copy_ would have refused the shape)."""
    with torch.no_grad():
        blocks = [ours.W_query.weight, ours.W_key.weight, ours.W_value.weight]
        theirs.in_proj_weight = nn.Parameter(torch.cat(blocks, dim=1).clone())  # (d, 3d)
        theirs.out_proj.weight.copy_(ours.out_proj.weight)
        theirs.out_proj.bias.copy_(ours.out_proj.bias)


def copy_into_separate_projections(ours, theirs):
    """nn.MultiheadAttention's q_proj_weight, k_proj_weight and v_proj_weight (in its own source,
    torch/nn/modules/activation.py) serve only when kdim or vdim differ from embed_dim; assigned here
    they become new, unused Parameters and in_proj_weight keeps its random start (public conversion
    code assigns them the same way, e.g. `fp.q_proj_weight = nn.Parameter(wQ)`)."""
    for name in ("query", "key", "value"):
        weight = getattr(ours, f"W_{name}").weight.detach().clone()
        setattr(theirs, f"{name[0]}_proj_weight", nn.Parameter(weight))
    with torch.no_grad():
        theirs.out_proj.weight.copy_(ours.out_proj.weight)
        theirs.out_proj.bias.copy_(ours.out_proj.bias)


def copy_in_bias_from_out_bias(ours, theirs):
    """Constructed: a layer without query/key/value biases, and "the bias" copied anyway, from the
    only one ours has (out_proj's), repeated for the three parts."""
    copy_right(ours, theirs)
    if ours.W_query.bias is None:
        with torch.no_grad():
            theirs.in_proj_bias.copy_(ours.out_proj.bias.repeat(3))


def mask_for_context_length(n):
    """The mask built once for the book's context length (6) and returned whatever n is asked."""
    return torch.triu(torch.ones(6, 6, dtype=torch.bool), diagonal=1)


# --------------------------------------------------------------------------- TinyGPT
class TinyGPTTokenTableSwapped(TinyGPTRight):
    """nn.Embedding(d_model, vocab_size): its two arguments swapped, the slip devs-atlas/atlas makes
    for its position table (src/posts/vqgan/snippets/gpt.py: nn.Embedding(embedding_dim,
    max_context_length))."""

    def __init__(self, vocab_size, context_length, d_model, num_heads, dropout=0.1):
        super().__init__(vocab_size, context_length, d_model, num_heads, dropout)
        self.embed.tok = nn.Embedding(d_model, vocab_size)


class TinyGPTHeadSwapped(TinyGPTRight):
    """Constructed: the same swap in the head, nn.Linear(vocab_size, d_model, bias=False)."""

    def __init__(self, vocab_size, context_length, d_model, num_heads, dropout=0.1):
        super().__init__(vocab_size, context_length, d_model, num_heads, dropout)
        self.head = nn.Linear(vocab_size, d_model, bias=False)


class TinyGPTTorchAttention(TinyGPTRight):
    """Constructed: PyTorch's nn.MultiheadAttention (with a causal mask) in place of the chapter's
    layer: a right model, but not the exercise's (no W_query, W_key, W_value to read)."""

    def __init__(self, vocab_size, context_length, d_model, num_heads, dropout=0.1):
        super().__init__(vocab_size, context_length, d_model, num_heads, dropout)
        self.attn = nn.MultiheadAttention(d_model, num_heads, dropout, batch_first=True)

    def forward(self, token_ids):
        x = self.embed(token_ids)  # (b, n, d_model)
        n = x.shape[1]
        future = torch.triu(torch.ones(n, n, dtype=torch.bool, device=x.device), diagonal=1)
        return self.head(self.attn(x, x, x, attn_mask=future, need_weights=False)[0])
