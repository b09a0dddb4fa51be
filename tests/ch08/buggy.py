"""Wrong answers to chapter 08's exercises, each a mistake the checks must name.

Where each comes from is said beside it: "real code" (a bug reported in a public repository or
forum thread, paraphrased in our own code), "tutorial" (an example in a blog or course), or
"slip" (a typical student slip seen in exercises like these).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


# --------------------------------------------------------------------------- train_step
def step_right(model, optimizer, inputs, targets):
    logits = model(inputs)
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def step_no_zero_grad(model, optimizer, inputs, targets):
    """Real code: the most asked PyTorch training question (forum: "loss explodes after a few steps")."""
    loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
    loss.backward()
    optimizer.step()
    return loss.item()


def step_zero_grad_between(model, optimizer, inputs, targets):
    """Slip: zero_grad moved down 'to clean up', between backward and step."""
    loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
    loss.backward()
    optimizer.zero_grad()
    optimizer.step()
    return loss.item()


def step_no_step(model, optimizer, inputs, targets):
    """Slip: the optimizer is created but never stepped."""
    loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
    optimizer.zero_grad()
    loss.backward()
    return loss.item()


def step_no_backward(model, optimizer, inputs, targets):
    """Slip: backward forgotten, step called on empty gradients."""
    loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
    optimizer.zero_grad()
    optimizer.step()
    return loss.item()


def step_softmax_first(model, optimizer, inputs, targets):
    """Real code: softmax before nn.CrossEntropyLoss, a frequent question on the PyTorch forum."""
    probs = torch.softmax(model(inputs), dim=-1)
    loss = F.cross_entropy(probs.flatten(0, 1), targets.flatten())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def step_sum(model, optimizer, inputs, targets):
    """Slip: reduction='sum' copied from a loss written by hand."""
    loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten(), reduction="sum")
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def step_shift_again(model, optimizer, inputs, targets):
    """Tutorial: a language-model step written for unshifted data (Hugging Face style, which
    shifts inside the loss), fed targets that are already shifted."""
    logits = model(inputs)
    loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), targets[:, 1:].flatten())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def step_no_grad_forward(model, optimizer, inputs, targets):
    """Slip: the evaluation loop's torch.no_grad() copied into training."""
    with torch.no_grad():
        logits = model(inputs)
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def step_returns_nothing(model, optimizer, inputs, targets):
    """Slip: the loss is computed but not returned."""
    step_right(model, optimizer, inputs, targets)


def step_eval_mode(model, optimizer, inputs, targets):
    """Slip: model.eval() copied from the evaluation helper (nanoGPT's estimate_loss switches to eval and
    back to train; here only the first half came along), so dropout is off while training."""
    model.eval()
    return step_right(model, optimizer, inputs, targets)


def step_new_optimizer(model, optimizer, inputs, targets):
    """Slip: a fresh optimizer built inside the step from the given one's learning rate; its momentum
    (or Adam's averages) starts from zero on every call."""
    opt = type(optimizer)(model.parameters(), lr=optimizer.param_groups[0]["lr"])
    return step_right(model, opt, inputs, targets)


def step_returns_graph(model, optimizer, inputs, targets):
    """Real code: returning the loss tensor, which the loop then collects (the PyTorch FAQ's "accumulating
    history across your training loop": total_loss += loss keeps every graph alive)."""
    loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss


def step_stub(model, optimizer, inputs, targets):
    raise NotImplementedError()


# --------------------------------------------------------------------------- sample_next_token
def sample_right(logits, temperature, generator=None):
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def sample_divides_by_zero(logits, temperature, generator=None):
    """Slip: no special case for temperature 0."""
    probs = torch.softmax(logits / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def sample_temperature_after_softmax(logits, temperature, generator=None):
    """Slip (and seen in tutorials): the temperature divides the probabilities."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits, dim=-1) / temperature
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def sample_from_logits(logits, temperature, generator=None):
    """Real code: multinomial on raw logits, "invalid multinomial distribution" in forum threads."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    return torch.multinomial(logits / temperature, 1, generator=generator).squeeze(-1)


def sample_from_log_probs(logits, temperature, generator=None):
    """Slip: log_softmax where softmax was meant."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    return torch.multinomial(
        torch.log_softmax(logits / temperature, dim=-1), 1, generator=generator
    ).squeeze(-1)


def sample_multiplied(logits, temperature, generator=None):
    """Slip: logits * temperature."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits * temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def sample_global_rng(logits, temperature, generator=None):
    """Real code: torch.distributions.Categorical, which cannot take a generator."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    return torch.distributions.Categorical(logits=logits / temperature).sample()


def sample_always_greedy(logits, temperature, generator=None):
    """Slip: the temperature is accepted and ignored."""
    return logits.argmax(dim=-1)


def sample_softmax_dim0(logits, temperature, generator=None):
    """Slip: softmax over dim=0, the batch."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits / temperature, dim=0)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def sample_keeps_dim(logits, temperature, generator=None):
    """Slip: multinomial's (b, 1) returned without the squeeze."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    probs = torch.softmax(logits / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator)


def sample_float_ids(logits, temperature, generator=None):
    """Slip: ids turned into floats on the way."""
    return sample_right(logits, temperature, generator).float()


def sample_greedy_min(logits, temperature, generator=None):
    """Slip: argmin."""
    if temperature == 0:
        return logits.argmin(dim=-1)
    return sample_right(logits, temperature, generator)


def sample_reseeds_global(logits, temperature, generator=None):
    """Tutorial: the book's notebooks call torch.manual_seed(123) before generating; copied inside the
    function, it reseeds the global RNG on every call and the generator is ignored."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    torch.manual_seed(123)
    return torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1).squeeze(-1)


def sample_fresh_generator(logits, temperature, generator=None):
    """Slip: a generator of its own, seeded 0 on every call, instead of the caller's."""
    return sample_right(logits, temperature, torch.Generator().manual_seed(0))


def sample_top_k_50(logits, temperature, generator=None, top_k=50):
    """Real code: top-k filtering as in nanoGPT's generate, with Hugging Face's default k=50."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / temperature
    kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, [-1]]
    return sample_right(logits.masked_fill(logits < kth, float("-inf")), 1.0, generator)


def sample_top_k_200(logits, temperature, generator=None):
    """Real code: nanoGPT's sample.py keeps top_k = 200 (karpathy/nanoGPT, sample.py), invisible to a
    vocabulary of 200 tokens or fewer."""
    return sample_top_k_50(logits, temperature, generator, top_k=200)


def sample_ignores_temperature(logits, temperature, generator=None):
    """Written to the pattern of a sampler whose temperature argument is accepted and never used."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    return sample_right(logits, 1.0, generator)


def sample_top_p_099(logits, temperature, generator=None, top_p=0.99):
    """Real code: nucleus (top-p) filtering as in Hugging Face's TopPLogitsWarper, left on at 0.99."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits / temperature, dim=-1)
    sorted_probs, index = probs.sort(dim=-1, descending=True)
    sorted_probs[sorted_probs.cumsum(-1) - sorted_probs > top_p] = 0
    kept = torch.zeros_like(probs).scatter(-1, index, sorted_probs)
    return torch.multinomial(kept, 1, generator=generator).squeeze(-1)


def sample_divides_in_place(logits, temperature, generator=None):
    """Slip: logits.div_(temperature) changes the caller's logits."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    return torch.multinomial(
        torch.softmax(logits.div_(temperature), -1), 1, generator=generator
    ).squeeze(-1)


def sample_float_ids_when_sampling(logits, temperature, generator=None):
    """Slip: an inverse-CDF draw that counts with floats, so only the sampled ids are float."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    cdf = torch.softmax(logits / temperature, dim=-1).cumsum(-1)
    return (cdf < torch.rand(logits.shape[0], 1, generator=generator)).float().sum(-1)


def sample_greedy_below_threshold(logits, temperature, generator=None):
    """Slip: "low temperatures are greedy anyway", a threshold where only 0 is greedy."""
    if temperature < 0.3:
        return logits.argmax(dim=-1)
    return sample_right(logits, temperature, generator)


# --------------------------------------------------------------------------- attend_with_cache
def _split(attn, t):
    b, m, _ = t.shape
    return t.view(b, m, attn.num_heads, attn.head_dim).transpose(1, 2)


def _finish(attn, weights, v, b, m, *, transpose=True, project=True):
    context = weights @ v
    context = context.transpose(1, 2).reshape(b, m, -1) if transpose else context.reshape(b, m, -1)
    return attn.out_proj(context) if project else context


def cache_right(attn, x_new, cache=None):
    b, m, _ = x_new.shape
    q, k, v = (_split(attn, w(x_new)) for w in (attn.W_query, attn.W_key, attn.W_value))
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    t = k.shape[2]
    scores = (q @ k.transpose(2, 3) / attn.head_dim**0.5).masked_fill(
        attn.mask[t - m : t, :t], float("-inf")
    )
    return _finish(attn, torch.softmax(scores, dim=-1), v, b, m), (k, v)


def cache_attend_then_append(attn, x_new, cache=None):
    """Slip: attend to the cache, then append the new key (the token never sees itself)."""
    b, m, _ = x_new.shape
    q, k, v = (_split(attn, w(x_new)) for w in (attn.W_query, attn.W_key, attn.W_value))
    if cache is None:
        scores = (q @ k.transpose(2, 3) / attn.head_dim**0.5).masked_fill(
            attn.mask[:m, :m], float("-inf")
        )
        return _finish(attn, torch.softmax(scores, dim=-1), v, b, m), (k, v)
    old_k, old_v = cache
    scores = q @ old_k.transpose(2, 3) / attn.head_dim**0.5
    out = _finish(attn, torch.softmax(scores, dim=-1), old_v, b, m)
    return out, (torch.cat([old_k, k], dim=2), torch.cat([old_v, v], dim=2))


def cache_only_new(attn, x_new, cache=None):
    """Slip: the cache returned is the new keys and values only."""
    out, (k, v) = cache_right(attn, x_new, cache)
    m = x_new.shape[1]
    return out, (k[:, :, -m:], v[:, :, -m:])


def cache_mask_top_left(attn, x_new, cache=None):
    """Real code: a causal mask sliced from the top left in cached decoding (pytorch/pytorch#103082
    describes SDPA's is_causal doing the same)."""
    b, m, _ = x_new.shape
    q, k, v = (_split(attn, w(x_new)) for w in (attn.W_query, attn.W_key, attn.W_value))
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    t = k.shape[2]
    scores = (q @ k.transpose(2, 3) / attn.head_dim**0.5).masked_fill(
        attn.mask[:m, :t], float("-inf")
    )
    return _finish(attn, torch.softmax(scores, dim=-1), v, b, m), (k, v)


def cache_mask_square(attn, x_new, cache=None):
    """Written to the pattern of a KV cache that cuts a square block attn.mask[past:t, past:t] for the new
    tokens: right for the prompt, a crash once cached tokens and several new ones meet."""
    b, m, _ = x_new.shape
    q, k, v = (_split(attn, w(x_new)) for w in (attn.W_query, attn.W_key, attn.W_value))
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    t = k.shape[2]
    scores = (q @ k.transpose(2, 3) / attn.head_dim**0.5).masked_fill(
        attn.mask[t - m : t, t - m : t], float("-inf")
    )
    return _finish(attn, torch.softmax(scores, dim=-1), v, b, m), (k, v)


def cache_mask_one_late(attn, x_new, cache=None):
    """Written to the pattern of a 1-based position counter: the mask's rows start at past + 1."""
    b, m, _ = x_new.shape
    q, k, v = (_split(attn, w(x_new)) for w in (attn.W_query, attn.W_key, attn.W_value))
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    t = k.shape[2]
    scores = (q @ k.transpose(2, 3) / attn.head_dim**0.5).masked_fill(
        attn.mask[t - m + 1 : t + 1, :t], float("-inf")
    )
    return _finish(attn, torch.softmax(scores, dim=-1), v, b, m), (k, v)


def cache_no_mask(attn, x_new, cache=None):
    """Real code: many minimal KV-cache tutorials skip the mask, right only one token at a time."""
    b, m, _ = x_new.shape
    q, k, v = (_split(attn, w(x_new)) for w in (attn.W_query, attn.W_key, attn.W_value))
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    scores = q @ k.transpose(2, 3) / attn.head_dim**0.5
    return _finish(attn, torch.softmax(scores, dim=-1), v, b, m), (k, v)


def cache_no_scale(attn, x_new, cache=None):
    """Slip: the scaling forgotten."""
    b, m, _ = x_new.shape
    q, k, v = (_split(attn, w(x_new)) for w in (attn.W_query, attn.W_key, attn.W_value))
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    t = k.shape[2]
    scores = (q @ k.transpose(2, 3)).masked_fill(attn.mask[t - m : t, :t], float("-inf"))
    return _finish(attn, torch.softmax(scores, dim=-1), v, b, m), (k, v)


def cache_values_from_keys(attn, x_new, cache=None):
    """Slip: copy-paste, W_key twice."""
    b, m, _ = x_new.shape
    q, k, v = (_split(attn, w(x_new)) for w in (attn.W_query, attn.W_key, attn.W_key))
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    t = k.shape[2]
    scores = (q @ k.transpose(2, 3) / attn.head_dim**0.5).masked_fill(
        attn.mask[t - m : t, :t], float("-inf")
    )
    return _finish(attn, torch.softmax(scores, dim=-1), v, b, m), (k, v)


def cache_interleaved(attn, x_new, cache=None):
    """Real code: heads merged without the transpose (raised for chapter 05 in issue 11)."""
    b, m, _ = x_new.shape
    q, k, v = (_split(attn, w(x_new)) for w in (attn.W_query, attn.W_key, attn.W_value))
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    t = k.shape[2]
    scores = (q @ k.transpose(2, 3) / attn.head_dim**0.5).masked_fill(
        attn.mask[t - m : t, :t], float("-inf")
    )
    return _finish(attn, torch.softmax(scores, dim=-1), v, b, m, transpose=False), (k, v)


def cache_no_out_proj(attn, x_new, cache=None):
    """Slip: out_proj forgotten."""
    b, m, _ = x_new.shape
    q, k, v = (_split(attn, w(x_new)) for w in (attn.W_query, attn.W_key, attn.W_value))
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    t = k.shape[2]
    scores = (q @ k.transpose(2, 3) / attn.head_dim**0.5).masked_fill(
        attn.mask[t - m : t, :t], float("-inf")
    )
    return _finish(attn, torch.softmax(scores, dim=-1), v, b, m, project=False), (k, v)


def cache_of_inputs(attn, x_new, cache=None):
    """Slip: caches the input vectors and re-projects them all: right numbers, no saving."""
    x_all = x_new if cache is None else torch.cat([cache, x_new], dim=1)
    m = x_new.shape[1]
    return attn(x_all)[:, -m:], x_all


def cache_returns_output_only(attn, x_new, cache=None):
    """Slip: the function returns the output and keeps the cache to itself."""
    return cache_right(attn, x_new, cache)[0]


def cache_mask_times_inf(attn, x_new, cache=None):
    """Slip: an additive mask made as mask.float() * -inf: 0 * -inf is NaN at every visible position."""
    b, m, _ = x_new.shape
    q, k, v = (_split(attn, w(x_new)) for w in (attn.W_query, attn.W_key, attn.W_value))
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    t = k.shape[2]
    scores = q @ k.transpose(2, 3) / attn.head_dim**0.5 + attn.mask[t - m : t, :t].float() * float(
        "-inf"
    )
    return _finish(attn, torch.softmax(scores, dim=-1), v, b, m), (k, v)


def cache_half(attn, x_new, cache=None):
    """Slip: keys and values stored in float16 "to save memory"."""
    old = None if cache is None else (cache[0].float(), cache[1].float())
    out, (k, v) = cache_right(attn, x_new, old)
    return out, (k.half(), v.half())


def cache_softmax_eps(attn, x_new, cache=None):
    """Slip: a softmax written by hand with + 1e-4 in the denominator "for stability" (outputs off by
    less than 1e-4: once crashed the check's report of the first differing token)."""
    b, m, _ = x_new.shape
    q, k, v = (_split(attn, w(x_new)) for w in (attn.W_query, attn.W_key, attn.W_value))
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    t = k.shape[2]
    scores = (q @ k.transpose(2, 3) / attn.head_dim**0.5).masked_fill(
        attn.mask[t - m : t, :t], float("-inf")
    )
    e = (scores - scores.amax(-1, keepdim=True)).exp()
    return _finish(attn, e / (e.sum(-1, keepdim=True) + 1e-4), v, b, m), (k, v)


def cache_on_layer(attn, x_new, cache=None):
    """Real code: the KV cache kept on the layer (LLMs-from-scratch's KV-cache bonus keeps cache_k on the
    module and needs reset_kv_cache() between texts); here the reset is missing and the argument ignored."""
    past = getattr(attn, "_kv", None)
    out, attn._kv = cache_right(attn, x_new, past)
    return out, attn._kv


def cache_cpu_mask(attn, x_new, cache=None):
    """Slip: the mask rebuilt with torch.ones(m, t) without device=: right on the CPU, crashes on a GPU."""
    b, m, _ = x_new.shape
    q, k, v = (_split(attn, w(x_new)) for w in (attn.W_query, attn.W_key, attn.W_value))
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    t = k.shape[2]
    hidden = torch.ones(m, t, dtype=torch.bool).triu(t - m + 1)
    scores = (q @ k.transpose(2, 3) / attn.head_dim**0.5).masked_fill(hidden, float("-inf"))
    return _finish(attn, torch.softmax(scores, dim=-1), v, b, m), (k, v)


def cache_no_qkv_bias(attn, x_new, cache=None):
    """Slip: projections written as x @ layer.weight.T, which drops the biases of a qkv_bias=True layer."""
    b, m, _ = x_new.shape
    q, k, v = (_split(attn, x_new @ w.weight.T) for w in (attn.W_query, attn.W_key, attn.W_value))
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    t = k.shape[2]
    scores = (q @ k.transpose(2, 3) / attn.head_dim**0.5).masked_fill(
        attn.mask[t - m : t, :t], float("-inf")
    )
    return _finish(attn, torch.softmax(scores, dim=-1), v, b, m), (k, v)


def cache_stub(attn, x_new, cache=None):
    raise NotImplementedError()
