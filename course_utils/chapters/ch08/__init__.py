"""Code taught by chapter 08, exported from its `#| export` cells.

Generated from solutions/08_attention_that_learns.ipynb by `make exercises`; do not edit: edit the notebook.
"""

import torch
import torch.nn.functional as F

__all__ = ["train_step", "sample_next_token", "attend_with_cache", "cached_logits", "generate"]


def train_step(model, optimizer, inputs, targets):
    """One optimisation step on one batch; returns the batch's mean loss as a float."""
    logits = model(inputs)  # (b, n, vocab)
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())  # logits (b*n, vocab), targets (b*n,)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def sample_next_token(logits, temperature, generator=None):
    """Choose the next token id in every row of `logits` (b, vocab): greedy when temperature is 0."""
    if temperature == 0:
        return logits.argmax(dim=-1)  # (b,)
    probs = torch.softmax(logits / temperature, dim=-1)  # (b, vocab)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)  # (b,)


def attend_with_cache(attn, x_new, cache=None):
    """Causal multi-head attention for the m newest tokens, given the cached keys and values."""
    b, m, _ = x_new.shape
    q = attn.W_query(x_new).view(b, m, attn.num_heads, attn.head_dim).transpose(1, 2)  # (b, h, m, hd)
    k = attn.W_key(x_new).view(b, m, attn.num_heads, attn.head_dim).transpose(1, 2)  # (b, h, m, hd)
    v = attn.W_value(x_new).view(b, m, attn.num_heads, attn.head_dim).transpose(1, 2)  # (b, h, m, hd)
    if cache is not None:
        k = torch.cat([cache[0], k], dim=2)  # (b, h, past + m, hd)
        v = torch.cat([cache[1], v], dim=2)  # (b, h, past + m, hd)
    total = k.shape[2]
    scores = q @ k.transpose(2, 3) / attn.head_dim**0.5  # (b, h, m, past + m)
    future = attn.mask[total - m : total, :total]  # (m, past + m): rows of the new positions
    weights = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)  # (b, h, m, past + m)
    context = (weights @ v).transpose(1, 2).reshape(b, m, attn.num_heads * attn.head_dim)  # (b, m, d_out)
    return attn.out_proj(context), (k, v)


def cached_logits(model, new_ids, cache=None):
    """Next-token logits (b, m, vocab) of a TinyGPT for the m newest ids, and the grown cache."""
    past = 0 if cache is None else cache[0].shape[2]
    m = new_ids.shape[1]
    if past + m > model.embed.context_length:
        raise ValueError(f"the cache would hold {past + m} tokens, but the model has positions for "
                         f"at most context_length={model.embed.context_length}")
    positions = torch.arange(past, past + m, device=new_ids.device)  # (m,)
    x = model.embed.tok_emb(new_ids) + model.embed.pos_emb(positions)  # (b, m, d_model)
    out, cache = attend_with_cache(model.attn, x, cache)  # (b, m, d_model)
    return model.head(out), cache  # (b, m, vocab)


@torch.no_grad()
def generate(model, ids, max_new_tokens, temperature=0.0, generator=None, use_cache=True):
    """Continue `ids` (b, n) by `max_new_tokens` tokens with a TinyGPT; greedy when temperature is 0.

    With the cache, the text may grow to the model's context_length; without it, the model
    sees the last context_length tokens (a sliding window) and any length works.
    """
    context_length = model.embed.context_length
    cache = None
    new_ids = ids
    for _ in range(max_new_tokens):
        if use_cache:
            logits, cache = cached_logits(model, new_ids, cache)  # (b, m, vocab)
        else:
            logits = model(ids[:, -context_length:])  # (b, n, vocab)
        choice = sample_next_token(logits[:, -1].cpu(), temperature, generator)  # (b,): drawn on the CPU
        new_ids = choice.to(ids.device)[:, None]  # (b, 1)
        ids = torch.cat([ids, new_ids], dim=1)  # (b, n + 1)
    return ids
