"""Self-checks for chapter 08: the training step, temperature sampling, attention with a KV cache.

Wrong answers are named by behaviour: the check re-runs the same inputs through small variants
of the right computation, one mistake each, and names the variant that reproduces the student's
numbers (mistakes: ``mistakes/ch08.txt``).
"""

from __future__ import annotations

import copy
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from . import _engine as E

# --------------------------------------------------------------------------- train_step
# (vocab, width, batch, tokens, seed); three steps each, so gradients left over from step 1 show.
STEP_CASES = ((7, 5, 3, 6, 801), (11, 4, 2, 9, 802))
STEP_BUGS = ("grad_not_zeroed", "loss_on_probabilities", "loss_summed", "loss_shifted_again")
LR = 0.5
GRAPH_HINT = ("loss.backward() needs a graph: compute the logits with gradients on (no torch.no_grad() "
              "around the forward pass, no .detach()).")


def _reference_step(model, optimizer, inputs, targets, bug=None):
    logits = model(inputs)  # (b, n, vocab)
    if bug == "loss_shifted_again":
        logits, targets = logits[:, :-1], targets[:, 1:]
    if bug == "loss_on_probabilities":
        logits = torch.softmax(logits, dim=-1)
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(),
                           reduction="sum" if bug == "loss_summed" else "mean")
    if bug != "grad_not_zeroed":
        optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def _student_step(name, step, model, optimizer, x, y, i):
    """Call i of the student's train_step, probed: inputs kept, a number returned, the weights updated."""
    before = [p.detach().clone() for p in model.parameters()]
    x_kept, y_kept = x.clone(), y.clone()
    backward_ran = []
    hooks = [p.register_hook(lambda g: backward_ran.append(1)) for p in model.parameters()]
    what = f"train_step(model, optimizer, inputs, targets) (call {i + 1})"
    try:
        loss = E.call(name, step, model, optimizer, x, y, what=what, hint=GRAPH_HINT)
    finally:
        for h in hooks:
            h.remove()
    if not (torch.equal(x, x_kept) and torch.equal(y, y_kept)):
        raise E.fail_with(name, "input_modified", f"After {what}:", what="inputs or targets tensor")
    if isinstance(loss, torch.Tensor) and loss.numel() == 1:
        loss = loss.item()
    if isinstance(loss, bool) or not isinstance(loss, (int, float)):
        raise E.fail_with(name, "step_loss_not_returned", f"{what} returned {type(loss).__name__}.")
    if all(torch.equal(b, p) for b, p in zip(before, model.parameters())):
        if not backward_ran:
            bug = "step_no_backward"
        elif all(p.grad is None or not p.grad.any() for p in model.parameters()):
            bug = "step_zero_grad_before_step"
        else:
            bug = "step_no_optimizer_step"
        raise E.fail_with(name, bug, f"After {what} the weights did not change.")
    return float(loss)


def _run_steps(step, base, batches, name=None):
    """Losses and final weights of ``step`` on a copy of ``base``; ``name``: it is the student's, probed."""
    model = copy.deepcopy(base)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    losses = [_student_step(name, step, model, optimizer, x, y, i) if name else step(model, optimizer, x, y)
              for i, (x, y) in enumerate(batches)]
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    return torch.tensor(losses, dtype=torch.float64), weights


def check_train_step(train_step) -> None:
    """Check ``train_step(model, optimizer, inputs, targets) -> float`` over three SGD steps."""
    __tracebackhide__ = True
    name = "check_train_step"
    E.ensure_callable(name, train_step, "a function train_step(model, optimizer, inputs, targets)")
    with E.preserved_rng():
        for vocab, width, b, n, seed in STEP_CASES:
            torch.manual_seed(seed)
            base = nn.Sequential(nn.Embedding(vocab, width), nn.Linear(width, vocab))
            g = E.generator(seed)
            batches = []
            for _ in range(3):
                x = torch.randint(vocab, (b, n), generator=g)  # (b, n)
                y = torch.randint(vocab, (b, n), generator=g)  # (b, n)
                y[:, :2] = -100  # positions without a target, as in the look-back task
                batches.append((x, y))
            where = f"With a {vocab}-token model, batches of shape {(b, n)}, three steps of SGD(lr={LR}):"
            got = _run_steps(train_step, base, batches, name)
            want = _run_steps(_reference_step, base, batches)
            if E.same(got[0], want[0]) and E.same(got[1], want[1]):
                continue
            for bug in STEP_BUGS:
                variant = _run_steps(partial(_reference_step, bug=bug), base, batches)
                if E.same(got[0], variant[0]) and E.same(got[1], variant[1]):
                    raise E.fail_with(name, bug, where)
            if not E.same(got[0], want[0]):
                raise E.fail(name, f"{where} your losses were {[round(v, 4) for v in got[0].tolist()]}, "
                             f"expected {[round(v, 4) for v in want[0].tolist()]}.",
                             "F.cross_entropy(logits.flatten(0, 1), targets.flatten()): the mean over all "
                             "positions.")
            raise E.fail_with(name, "step_weights_wrong", where=where)
    E.passed(name, f"losses and updated weights match over three steps on {len(STEP_CASES)} models")


# --------------------------------------------------------------------------- sample_next_token
DRAWS = 20_000
TOLERANCE = 0.02  # more than 5 standard errors of a frequency from 20,000 draws
SAMPLE_LOGITS = ((1.5, 0.5, 0.0, -0.5, -2.0), (3.0, 2.0, 1.0, 0.5, 0.25))


def _draw(name, sample, logits, temperature, seed, what):
    """The student's draw; a crash is named when multinomial refused the probabilities, else by call()."""
    try:
        return sample(logits.clone(), temperature, E.generator(seed))
    except NotImplementedError:
        pass  # the stub: call() below names it
    except RuntimeError as exc:
        text = str(exc)
        if "probability tensor contains" in text or "invalid multinomial distribution" in text:
            bug = "greedy_divides_by_zero" if temperature == 0 else "sampled_from_logits"
            raise E.fail_with(name, bug, f"{what} raised RuntimeError: {text}") from None
    except Exception:  # noqa: BLE001 - call() below reports it in plain words
        pass
    return E.call(name, sample, logits, temperature, E.generator(seed), what=what)


def _check_frequencies(name, sample, row, temperature):
    """DRAWS draws from one row of logits: repeatable, with the frequencies of softmax(row / T)."""
    batch = torch.tensor(row).repeat(DRAWS, 1)  # (20000, 5): the same row many times
    what = f"sample_next_token(logits, temperature={temperature}, generator) with rows {list(row)}"
    first = E.expect_tensor_output(name, _draw(name, sample, batch, temperature, 5, what), what, (DRAWS,))
    second = _draw(name, sample, batch, temperature, 5, what)
    if not (isinstance(second, torch.Tensor) and torch.equal(first, second)):
        raise E.fail_with(name, "generator_ignored", f"Two calls of {what}, each with a generator "
                          "seeded 5, drew different tokens.")
    freq = torch.bincount(first.flatten().long().cpu(), minlength=len(row))[:len(row)].double() / DRAWS
    logits = torch.tensor(row, dtype=torch.float64)
    expected = torch.softmax(logits / temperature, dim=-1)
    if (freq - expected).abs().max() <= TOLERANCE:
        return
    shown = (f"For {what}: the tokens came up with frequencies {[round(f, 3) for f in freq.tolist()]}, "
             f"expected {[round(p, 3) for p in expected.tolist()]}.")
    variants = [("always_greedy", F.one_hot(logits.argmax(), len(row)).double()),
                ("temperature_after_softmax", torch.softmax(logits, dim=-1)),
                ("temperature_multiplied", torch.softmax(logits * temperature, dim=-1)),
                ("sample_softmax_over_batch", torch.full((len(row),), 1 / len(row), dtype=torch.float64)),
                ("sampled_from_logits", logits.clamp(min=0) / logits.clamp(min=0).sum())]
    for bug, probs in variants:
        if (freq - probs).abs().max() <= TOLERANCE:
            raise E.fail_with(name, bug, shown)
    raise E.fail(name, shown, "probs = torch.softmax(logits / temperature, dim=-1), then "
                 "torch.multinomial(probs, num_samples=1, generator=generator).")


def check_sample_next_token(sample) -> None:
    """Check ``sample_next_token(logits, temperature, generator)``: greedy at 0, else the
    softmax of logits / temperature, drawn repeatably from the generator."""
    __tracebackhide__ = True
    name = "check_sample_next_token"
    E.ensure_callable(name, sample, "a function sample_next_token(logits, temperature, generator)")
    with E.preserved_rng(), torch.no_grad():
        logits = E.randn(6, 9, seed=811)  # (6, 9)
        what = "sample_next_token(logits of shape (6, 9), temperature=0, generator)"
        got = E.expect_tensor_output(name, _draw(name, sample, logits, 0, 1, what), what, (6,))
        if got.dtype.is_floating_point or got.dtype == torch.bool:
            raise E.fail_with(name, "sample_not_ids", f"{what} returned dtype {got.dtype}.")
        if not torch.equal(got.cpu().long(), logits.argmax(dim=-1)):
            raise E.fail_with(name, "greedy_not_argmax", f"For {what}:")
        for row in SAMPLE_LOGITS:
            for temperature in (1.0, 0.5, 2.0):
                _check_frequencies(name, sample, row, temperature)
    E.passed(name, f"greedy at temperature 0; at temperatures 0.5, 1 and 2 the frequencies of {DRAWS:,} "
             "draws match softmax(logits / T), and the same generator seed gives the same draws")


# --------------------------------------------------------------------------- attend_with_cache
# (batch, d_in, d_out, heads, context_length, how many new tokens each call brings, seed)
CACHE_CASES = ((2, 6, 8, 2, 10, (3, 1, 1, 2, 1), 821), (1, 4, 12, 3, 8, (1, 1, 1, 1, 1, 1, 1), 822),
               (2, 5, 4, 1, 7, (4, 3), 823))
CACHE_BUGS = ("cache_attend_before_append", "cache_not_accumulated", "cache_mask_top_left",
              "cache_chunk_unmasked", "cache_not_scaled", "cache_values_from_keys", "cache_heads_interleaved",
              "cache_no_out_proj")


def _cached_variant(attn, x, cache, i, bug):
    """Cached step i, with one catalogued mistake switched on."""
    b, m, _ = x.shape
    h, hd = attn.num_heads, attn.head_dim

    def split(t):
        return t.view(b, m, h, hd).transpose(1, 2)  # (b, h, m, hd)

    values = attn.W_key if bug == "cache_values_from_keys" else attn.W_value
    q, k, v = split(attn.W_query(x)), split(attn.W_key(x)), split(values(x))  # (b, h, m, hd) each
    old_k, old_v = cache if cache is not None else (k[:, :, :0], v[:, :, :0])
    all_k, all_v = torch.cat([old_k, k], dim=2), torch.cat([old_v, v], dim=2)  # (b, h, t, hd)
    before_append = bug == "cache_attend_before_append" and cache is not None
    seen_k, seen_v = (old_k, old_v) if before_append else (all_k, all_v)
    t, past = seen_k.shape[2], all_k.shape[2] - m
    rows = torch.arange(m)[:, None] + (0 if bug == "cache_mask_top_left" else past)
    hidden = None if bug == "cache_chunk_unmasked" else torch.arange(t) > rows  # (m, t)
    recipe = E.Recipe(scale="none" if bug == "cache_not_scaled" else "sqrt_d_k", mask="none")
    context = E.attention(q, seen_k, seen_v, recipe, mask=hidden)  # (b, h, m, hd)
    if bug != "cache_heads_interleaved":
        context = context.transpose(1, 2)  # (b, m, h, hd)
    merged = context.reshape(b, m, h * hd)
    new_cache = (k, v) if bug == "cache_not_accumulated" else (all_k, all_v)
    return (merged if bug == "cache_no_out_proj" else attn.out_proj(merged)), new_cache


def _run_cached(step, attn, x, chunks):
    """``step(attn, x_new, cache, i)`` over x's chunks, threading the cache: the outputs joined."""
    outs, cache, start = [], None, 0
    for i, m in enumerate(chunks):
        out, cache = step(attn, x[:, start:start + m], cache, i)
        outs.append(out)
        start += m
    return torch.cat(outs, dim=1)


def check_attend_with_cache(attend_with_cache) -> None:
    """Check ``attend_with_cache(attn, x_new, cache) -> (out, cache)`` against the full layer."""
    __tracebackhide__ = True
    name = "check_attend_with_cache"
    E.ensure_callable(name, attend_with_cache, "a function attend_with_cache(attn, x_new, cache)")

    def student(attn, x_part, cache, i):
        x_new = x_part.clone()
        what = f"attend_with_cache(attn, x_new of shape {tuple(x_new.shape)}, cache) (call {i + 1})"
        result = E.call(name, attend_with_cache, attn, x_new, cache, what=what)
        if not torch.equal(x_new, x_part):
            raise E.fail_with(name, "input_modified", f"After {what}:", what="x_new tensor")
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise E.fail_with(name, "cache_not_returned", f"{what} returned {type(result).__name__}.")
        out, cache = result
        shape = (*x_part.shape[:2], attn.out_proj.out_features)  # (b, m, d_out)
        return E.expect_tensor_output(name, out, f"the output of {what}", shape), cache

    with E.preserved_rng(), torch.no_grad():
        for b, d_in, d_out, heads, context, chunks, seed in CACHE_CASES:
            torch.manual_seed(seed)
            attn = E.chapters().MultiHeadAttention(d_in, d_out, context, 0.0, heads).eval()  # the reference
            x = E.randn(b, sum(chunks), d_in, seed=seed)  # (b, n, d_in)
            want = attn(x)  # (b, n, d_out): the whole text at once
            where = f"With {heads} head(s), d_out={d_out}, tokens arriving {list(chunks)} per call:"
            key_rows = []
            hook = attn.W_key.register_forward_hook(lambda mod, inp, out: key_rows.append(out.shape[1]))
            try:
                got = _run_cached(student, attn, x, chunks)
            finally:
                hook.remove()
            if not E.same(got, want):
                for bug in CACHE_BUGS:
                    if E.same(got, _run_cached(partial(_cached_variant, bug=bug), attn, x, chunks)):
                        raise E.fail_with(name, bug, where)
                first = int((got - want).abs().amax(dim=(0, 2)).gt(1e-4).nonzero()[0])
                raise E.fail(name, f"{where} the outputs differ from the full layer's, first at token {first}.",
                             "project only x_new, torch.cat the cached keys/values in front (dim=2), and mask "
                             "with rows past .. past + m - 1 of attn.mask.")
            if key_rows != list(chunks):
                raise E.fail_with(name, "cache_recomputes_keys", where, rows=key_rows, chunks=list(chunks))
    E.passed(name, f"equals the full layer token by token on {len(CACHE_CASES)} cases (prompts of 1 to 4 "
             "tokens, then one or more at a time), projecting only the new tokens")


__all__ = ["check_attend_with_cache", "check_sample_next_token", "check_train_step"]
