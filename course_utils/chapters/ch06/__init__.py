"""Code taught by chapter 06, exported from its `#| export` cells.

Generated from solutions/06_putting_it_together.ipynb by `make exercises`; do not edit: edit the notebook.
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

import course_utils as cu

__all__ = [
    "SlidingWindowDataset", "InputEmbedding", "TinyGPT", "split_heads", "merge_heads", "attention_via_sdpa",
    "copy_into_torch_mha", "torch_mha_mask",
]


class SlidingWindowDataset(Dataset):
    """Windows of `context_length` token ids, `stride` tokens apart, with next-token targets."""

    def __init__(self, token_ids, context_length, stride):
        ids = torch.tensor(token_ids)  # (N,)
        starts = range(0, len(ids) - context_length, stride)
        self.inputs = [ids[s : s + context_length] for s in starts]  # each (context_length,)
        self.targets = [ids[s + 1 : s + 1 + context_length] for s in starts]  # each (context_length,)

    def __len__(self):
        return len(self.inputs)

    def __getitem__(self, i):
        return self.inputs[i], self.targets[i]


class InputEmbedding(nn.Module):
    """Token embeddings plus position embeddings: (b, n) ids -> (b, n, d_model) vectors."""

    def __init__(self, vocab_size, context_length, d_model):
        super().__init__()
        self.context_length = context_length
        self.tok_emb = nn.Embedding(vocab_size, d_model)  # weight (vocab_size, d_model)
        self.pos_emb = nn.Embedding(context_length, d_model)  # weight (context_length, d_model)

    def forward(self, token_ids):
        n = token_ids.shape[1]
        if n > self.context_length:
            raise ValueError(
                f"the input has {n} tokens, but this model has position vectors for at most "
                f"context_length={self.context_length} tokens; shorten the input"
            )
        positions = torch.arange(n, device=token_ids.device)  # (n,)
        return self.tok_emb(token_ids) + self.pos_emb(positions)  # (b, n, d_model)


class TinyGPT(nn.Module):
    """Embeddings -> one multi-head causal attention layer -> next-token logits."""

    def __init__(self, vocab_size, context_length, d_model, num_heads, dropout=0.1):
        super().__init__()
        self.embed = InputEmbedding(vocab_size, context_length, d_model)
        self.attn = cu.chapters.MultiHeadAttention(d_model, d_model, context_length, dropout,
                                                   num_heads)
        self.head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, token_ids):
        """token_ids: (b, n) -> next-token logits (b, n, vocab_size)."""
        vectors = self.embed(token_ids)  # (b, n, d_model)
        context = self.attn(vectors)  # (b, n, d_model)
        return self.head(context)  # (b, n, vocab_size)


def split_heads(t, num_heads):
    b, n, d = t.shape
    return t.view(b, n, num_heads, d // num_heads).transpose(1, 2)  # (b, heads, n, head_dim)


def merge_heads(t):
    b, heads, n, head_dim = t.shape
    return t.transpose(1, 2).reshape(b, n, heads * head_dim)  # (b, n, d)


def attention_via_sdpa(attn, vectors, **sdpa_args):
    """Our layer's projections and output projection around PyTorch's fused attention."""
    q = split_heads(attn.W_query(vectors), attn.num_heads)  # (b, heads, n, head_dim)
    k = split_heads(attn.W_key(vectors), attn.num_heads)  # (b, heads, n, head_dim)
    v = split_heads(attn.W_value(vectors), attn.num_heads)  # (b, heads, n, head_dim)
    context = F.scaled_dot_product_attention(q, k, v, **sdpa_args)  # (b, heads, n, head_dim)
    return attn.out_proj(merge_heads(context))  # (b, n, d)


def copy_into_torch_mha(ours, theirs):
    """Copy our MultiHeadAttention's weights into an nn.MultiheadAttention (in place)."""
    with torch.no_grad():
        packed = torch.cat([ours.W_query.weight, ours.W_key.weight, ours.W_value.weight], dim=0)  # (3d, d)
        theirs.in_proj_weight.copy_(packed)
        if ours.W_query.bias is None:
            theirs.in_proj_bias.zero_()  # (3d,)
        else:
            theirs.in_proj_bias.copy_(torch.cat([ours.W_query.bias, ours.W_key.bias, ours.W_value.bias]))  # (3d,)
        theirs.out_proj.weight.copy_(ours.out_proj.weight)  # (d, d)
        theirs.out_proj.bias.copy_(ours.out_proj.bias)  # (d,)


def torch_mha_mask(n):
    """Causal attn_mask for nn.MultiheadAttention: True where a query must NOT attend."""
    return torch.ones(n, n, dtype=torch.bool).triu(diagonal=1)  # (n, n): True above the diagonal
