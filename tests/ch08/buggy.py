"""Wrong answers to chapter 08's exercises, each a mistake the checks must name.

Where each comes from is said beside it: "real code" (a bug reported in a public repository or
forum thread, paraphrased in our own code), "tutorial" (an example in a blog or course), or
"slip" (a typical student slip seen in exercises like these).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


# --------------------------------------------------------------------------- train_step
def _loss(logits, targets, **kwargs):
    """Cross-entropy of (b, n, vocab) logits against (b, n) targets, over all positions."""
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), **kwargs)


def _update(optimizer, loss, *, zero_grad=True, backward=True, step=True):
    """The right update (each switch off leaves its call out): clear the gradients, backward, step;
    the loss as a number."""
    if zero_grad:
        optimizer.zero_grad()
    if backward:
        loss.backward()
    if step:
        optimizer.step()
    return loss.item()


def step_right(model, optimizer, inputs, targets):
    return _update(optimizer, _loss(model(inputs), targets))


def step_no_zero_grad(model, optimizer, inputs, targets):
    """Real code: the most asked PyTorch training question (forum: "loss explodes after a few steps")."""
    return _update(optimizer, _loss(model(inputs), targets), zero_grad=False)


def step_zero_grad_between(model, optimizer, inputs, targets):
    """Slip: zero_grad moved down 'to clean up', between backward and step."""
    loss = _loss(model(inputs), targets)
    loss.backward()
    optimizer.zero_grad()
    optimizer.step()
    return loss.item()


def step_no_step(model, optimizer, inputs, targets):
    """Slip: the optimizer is created but never stepped."""
    return _update(optimizer, _loss(model(inputs), targets), step=False)


def step_no_backward(model, optimizer, inputs, targets):
    """Slip: backward forgotten, step called on empty gradients."""
    return _update(optimizer, _loss(model(inputs), targets), backward=False)


def step_softmax_first(model, optimizer, inputs, targets):
    """Real code: softmax before nn.CrossEntropyLoss, a frequent question on the PyTorch forum."""
    return _update(optimizer, _loss(torch.softmax(model(inputs), dim=-1), targets))


def step_sum(model, optimizer, inputs, targets):
    """Slip: reduction='sum' copied from a loss written by hand."""
    return _update(optimizer, _loss(model(inputs), targets, reduction="sum"))


def step_shift_again(model, optimizer, inputs, targets):
    """Tutorial: a language-model step written for unshifted data (Hugging Face style, which
    shifts inside the loss), fed targets that are already shifted."""
    logits = model(inputs)
    return _update(optimizer, _loss(logits[:, :-1], targets[:, 1:]))


def step_no_grad_forward(model, optimizer, inputs, targets):
    """Slip: the evaluation loop's torch.no_grad() copied into training."""
    with torch.no_grad():
        logits = model(inputs)
    return _update(optimizer, _loss(logits, targets))


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
    loss = _loss(model(inputs), targets)
    _update(optimizer, loss)
    return loss


def step_stub(model, optimizer, inputs, targets):
    raise NotImplementedError()


# --------------------------------------------------------------------------- sample_next_token
def _draw(probs, generator):
    """torch.multinomial: one token id per row of (b, vocab) probabilities (or weights): (b,)."""
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def sample_right(logits, temperature, generator=None):
    if temperature == 0:
        return logits.argmax(dim=-1)
    return _draw(torch.softmax(logits / temperature, dim=-1), generator)


def sample_divides_by_zero(logits, temperature, generator=None):
    """Slip: no special case for temperature 0."""
    return _draw(torch.softmax(logits / temperature, dim=-1), generator)


def sample_temperature_after_softmax(logits, temperature, generator=None):
    """Slip (and seen in tutorials): the temperature divides the probabilities."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    return _draw(torch.softmax(logits, dim=-1) / temperature, generator)


def sample_from_logits(logits, temperature, generator=None):
    """Real code: multinomial on raw logits, "invalid multinomial distribution" in forum threads."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    return _draw(logits / temperature, generator)


def sample_from_log_probs(logits, temperature, generator=None):
    """Slip: log_softmax where softmax was meant."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    return _draw(torch.log_softmax(logits / temperature, dim=-1), generator)


def sample_multiplied(logits, temperature, generator=None):
    """Slip: logits * temperature."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    return _draw(torch.softmax(logits * temperature, dim=-1), generator)


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
    return _draw(torch.softmax(logits / temperature, dim=0), generator)


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
    return _draw(torch.zeros_like(probs).scatter(-1, index, sorted_probs), generator)


def sample_divides_in_place(logits, temperature, generator=None):
    """Slip: logits.div_(temperature) changes the caller's logits."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    return _draw(torch.softmax(logits.div_(temperature), -1), generator)


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
