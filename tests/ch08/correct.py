"""Right but unusual answers to chapter 08's exercises: every one must pass its check."""

from __future__ import annotations

import torch
import torch.nn.functional as F


# --------------------------------------------------------------------------- train_step
def step_zero_grad_last(model, optimizer, inputs, targets):
    """Clears the gradients after the step instead of before (the next step starts clean)."""
    loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()


def step_model_zero_grad(model, optimizer, inputs, targets):
    """model.zero_grad(set_to_none=False) and the K-dimensional form of cross_entropy."""
    model.zero_grad(set_to_none=False)
    logits = model(inputs)  # (b, n, vocab)
    loss = F.cross_entropy(logits.permute(0, 2, 1), targets)  # classes on dim 1
    loss.backward()
    optimizer.step()
    return float(loss.detach())


def step_nll(model, optimizer, inputs, targets):
    """log_softmax + nll_loss, returning the loss tensor (detached)."""
    optimizer.zero_grad()
    log_probs = torch.log_softmax(model(inputs), dim=-1).reshape(-1, model[-1].out_features)
    loss = F.nll_loss(log_probs, targets.reshape(-1))
    loss.backward()
    optimizer.step()
    return loss.detach()


def step_masked_mean(model, optimizer, inputs, targets):
    """Masks the -100 targets by hand and averages over the real ones."""
    optimizer.zero_grad()
    logits = model(inputs).flatten(0, 1)
    flat = targets.flatten()
    real = flat != -100
    loss = F.cross_entropy(logits[real], flat[real], reduction="sum") / real.sum()
    loss.backward()
    optimizer.step()
    return loss.item()


def step_numpy_loss(model, optimizer, inputs, targets):
    """Returns the loss as a NumPy number (loss.detach().numpy()): a number all the same."""
    loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.detach().numpy()


# --------------------------------------------------------------------------- sample_next_token
def sample_gumbel(logits, temperature, generator=None):
    """The Gumbel-max trick: argmax of logits / T plus Gumbel noise from the generator."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    u = torch.rand(logits.shape, generator=generator).clamp_min(1e-20)
    return (logits / temperature - torch.log(-torch.log(u))).argmax(dim=-1)


def sample_exp_weights(logits, temperature, generator=None):
    """multinomial normalises by itself, so exp of the shifted logits is enough."""
    if not temperature:
        return torch.max(logits, dim=-1).indices
    scaled = logits / temperature
    weights = torch.exp(scaled - scaled.amax(dim=-1, keepdim=True))
    return torch.multinomial(weights, num_samples=1, generator=generator)[:, 0]


def sample_inverse_cdf(logits, temperature, generator=None):
    """One uniform number per row, looked up in the cumulative probabilities."""
    if temperature == 0:
        return logits.argmax(-1)
    probs = F.softmax(logits / temperature, dim=-1)
    cdf = probs.cumsum(dim=-1)
    u = torch.rand(logits.shape[0], 1, generator=generator)
    return torch.searchsorted(cdf, u).squeeze(-1).clamp_max(logits.shape[-1] - 1)


# --------------------------------------------------------------------------- attend_with_cache
def cache_dict(attn, x_new, cache=None):
    """A dict cache, keys and values kept in (b, t, d_out) before the head split, SDPA for the maths."""
    b, m, _ = x_new.shape
    cache = dict(cache or {})
    for name, layer in (("k", attn.W_key), ("v", attn.W_value)):
        new = layer(x_new)
        cache[name] = new if name not in cache else torch.cat([cache[name], new], dim=1)
    t = cache["k"].shape[1]

    def heads(z):
        return z.reshape(b, z.shape[1], attn.num_heads, attn.head_dim).transpose(1, 2)

    keep = ~attn.mask[t - m : t, :t]
    out = F.scaled_dot_product_attention(
        heads(attn.W_query(x_new)), heads(cache["k"]), heads(cache["v"]), attn_mask=keep
    )
    return attn.out_proj(out.transpose(1, 2).reshape(b, m, -1)), cache


def cache_einsum_preallocated(attn, x_new, cache=None):
    """An explicit position counter and einsum, a bool mask built from positions."""
    b, m, _ = x_new.shape
    h, hd = attn.num_heads, attn.head_dim
    q = attn.W_query(x_new).view(b, m, h, hd)
    k = attn.W_key(x_new).view(b, m, h, hd)
    v = attn.W_value(x_new).view(b, m, h, hd)
    past = 0 if cache is None else cache["length"]
    if cache is not None:
        k = torch.cat([cache["k"], k], dim=1)
        v = torch.cat([cache["v"], v], dim=1)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / hd**0.5
    query_pos = torch.arange(past, past + m, device=x_new.device)[:, None]
    key_pos = torch.arange(past + m, device=x_new.device)[None, :]
    scores = scores.masked_fill(key_pos > query_pos, float("-inf"))
    out = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v).reshape(b, m, h * hd)
    return attn.out_proj(out), {"k": k, "v": v, "length": past + m}


def cache_list(attn, x_new, cache=None):
    """A list [keys, values] grown in place, and an additive float mask."""
    b, m, _ = x_new.shape

    def split(z):
        return z.view(b, m, attn.num_heads, attn.head_dim).permute(0, 2, 1, 3)

    k, v = split(attn.W_key(x_new)), split(attn.W_value(x_new))
    if cache is None:
        cache = [k, v]
    else:
        cache = [torch.cat((cache[0], k), 2), torch.cat((cache[1], v), 2)]
    t = cache[0].shape[2]
    additive = torch.zeros(m, t, device=x_new.device).masked_fill(
        attn.mask[t - m : t, :t], float("-inf")
    )
    weights = torch.softmax(
        split(attn.W_query(x_new)) @ cache[0].transpose(-1, -2) * attn.head_dim**-0.5 + additive,
        dim=-1,
    )
    return attn.out_proj((weights @ cache[1]).permute(0, 2, 1, 3).reshape(b, m, -1)), cache


def cache_flinear(attn, x_new, cache=None):
    """Projects with F.linear on the layers' weights and biases instead of calling the layers."""
    b, m, _ = x_new.shape
    q, k, v = (
        F.linear(x_new, w.weight, w.bias).view(b, m, attn.num_heads, attn.head_dim).transpose(1, 2)
        for w in (attn.W_query, attn.W_key, attn.W_value)
    )
    if cache is not None:
        k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
    t = k.shape[2]
    scores = (q @ k.transpose(2, 3) / attn.head_dim**0.5).masked_fill(
        attn.mask[t - m : t, :t], float("-inf")
    )
    return attn.out_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, m, -1)), (k, v)


def cache_fused_qkv(attn, x_new, cache=None):
    """One fused QKV projection (as GPT-2's c_attn): the three weights concatenated, one matmul, split."""
    b, m, _ = x_new.shape
    layers = (attn.W_query, attn.W_key, attn.W_value)
    qkv = x_new @ torch.cat([w.weight for w in layers]).T  # (b, m, 3 * d_out)
    if attn.W_query.bias is not None:
        qkv = qkv + torch.cat([w.bias for w in layers])
    q, k, v = (
        z.reshape(b, m, attn.num_heads, attn.head_dim).transpose(1, 2) for z in qkv.chunk(3, dim=-1)
    )
    if cache is not None:
        k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
    t = k.shape[2]
    context = F.scaled_dot_product_attention(
        q, k, v, attn_mask=~attn.mask[t - m : t, :t]
    )  # (b, h, m, hd)
    return attn.out_proj(context.transpose(1, 2).reshape(b, m, -1)), (k, v)


def cache_projects_new_keys_twice(attn, x_new, cache=None):
    """Applies W_key to the new tokens twice (once to check a shape): no cached token is projected."""
    assert attn.W_key(x_new).shape[:2] == x_new.shape[:2]
    k, v = (
        layer(x_new).unflatten(-1, (attn.num_heads, -1)).transpose(1, 2)
        for layer in (attn.W_key, attn.W_value)
    )
    if cache is not None:
        k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
    t, m = k.shape[2], x_new.shape[1]
    q = attn.W_query(x_new).unflatten(-1, (attn.num_heads, -1)).transpose(1, 2)
    context = F.scaled_dot_product_attention(q, k, v, attn_mask=~attn.mask[t - m : t, :t])
    return attn.out_proj(context.transpose(1, 2).flatten(2)), (k, v)
