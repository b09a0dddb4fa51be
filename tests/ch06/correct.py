"""Right but unusual answers to chapter 06's exercises: every one must pass its check."""

import torch
from torch import nn

import course_utils as cu


class DatasetUnfold(torch.utils.data.Dataset):
    """All windows at once with Tensor.unfold (inputs from ids[:-1], targets from ids[1:])."""

    def __init__(self, token_ids, context_length, stride):
        ids = torch.tensor(token_ids)
        self.inputs = ids[:-1].unfold(0, context_length, stride)  # (windows, context_length)
        self.targets = ids[1:].unfold(0, context_length, stride)  # (windows, context_length)

    def __len__(self):
        return self.inputs.shape[0]

    def __getitem__(self, i):
        return self.inputs[i], self.targets[i]


class EmbeddingSlicedWeight(nn.Module):
    """Positions as the first n rows of the table's weight: no torch.arange, so no device to get wrong."""

    def __init__(self, vocab_size, context_length, d_model):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(context_length, d_model)

    def forward(self, token_ids):
        n = token_ids.shape[-1]
        if n > self.pos.num_embeddings:
            raise ValueError(f"{n} tokens, but only {self.pos.num_embeddings} positions")
        return self.tok(token_ids) + self.pos.weight[:n]


class EmbeddingPositionBuffer(nn.Module):
    """The position ids kept in a non-persistent buffer, which follows the module to any device."""

    def __init__(self, vocab_size, context_length, d_model):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(context_length, d_model)
        self.register_buffer("positions", torch.arange(context_length), persistent=False)

    def forward(self, token_ids):
        n = token_ids.shape[1]
        if n > len(self.positions):
            raise ValueError(f"{n} tokens, context_length {len(self.positions)}")
        return self.tok(token_ids) + self.pos(self.positions[:n])


def copy_load_state_dict(ours, theirs):
    """One load_state_dict with the stacked weights (zeros for the in-projection bias when ours has none)."""
    q, k, v = ours.W_query, ours.W_key, ours.W_value
    d = q.out_features
    bias = torch.cat([q.bias, k.bias, v.bias]) if q.bias is not None else torch.zeros(3 * d)
    theirs.load_state_dict(
        {
            "in_proj_weight": torch.cat([q.weight, k.weight, v.weight]),
            "in_proj_bias": bias,
            "out_proj.weight": ours.out_proj.weight,
            "out_proj.bias": ours.out_proj.bias,
        }
    )


def mask_additive(n):
    """A float mask: 0 where attending is allowed, -inf above the diagonal."""
    return torch.full((n, n), float("-inf")).triu(1)


class TinyGPTTied(nn.Module):
    """GPT-2's weight tying: the head shares its weight with the token table."""

    def __init__(self, vocab_size, context_length, d_model, num_heads, dropout=0.1):
        super().__init__()
        self.embed = cu.chapters.InputEmbedding(vocab_size, context_length, d_model)
        self.attn = cu.chapters.MultiHeadAttention(
            d_model, d_model, context_length, dropout, num_heads
        )
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.embed.tok_emb.weight

    def forward(self, token_ids):
        return self.head(self.attn(self.embed(token_ids)))


class TinyGPTSequential(nn.Module):
    """The three parts registered by name, run in order by nn.Sequential's loop."""

    def __init__(self, vocab_size, context_length, d_model, num_heads, dropout=0.1):
        super().__init__()
        self.embed = EmbeddingPositionBuffer(vocab_size, context_length, d_model)
        self.attn = cu.chapters.MultiHeadAttention(
            d_model, d_model, context_length, dropout, num_heads
        )
        self.head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, token_ids):
        return nn.Sequential(self.embed, self.attn, self.head)(token_ids)


ANSWERS = [
    ("check_sliding_window_dataset", (DatasetUnfold,)),
    ("check_input_embedding", (EmbeddingSlicedWeight,)),
    ("check_input_embedding", (EmbeddingPositionBuffer,)),
    ("check_copy_into_torch_mha", (copy_load_state_dict, mask_additive)),
    ("check_tiny_gpt", (TinyGPTTied,)),
    ("check_tiny_gpt", (TinyGPTSequential,)),
]
