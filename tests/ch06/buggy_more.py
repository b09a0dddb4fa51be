"""More wrong answers to chapter 06's dataset and embedding exercises (tests/ch06/buggy.py is at
the 500-line limit), each with where it comes from."""

import torch
from torch import nn

from tests.ch06.buggy import DatasetRight, EmbeddingRight


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
