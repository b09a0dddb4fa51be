"""Self-checks for chapter 08: the training step, temperature sampling, attention with a KV cache.
A wrong answer is named by the variant of the right computation, one mistake each, that reproduces
its numbers (``mistakes.txt`` beside this file)."""

from __future__ import annotations

import math
from functools import partial
from itertools import product
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from course_utils.checks import _engine as E
from course_utils.checks._engine.watch import tree_flatten

# Shortcuts graded answers may call (tools/grading/honesty.py): all (attention itself was 01-05's)
ALLOWED_SHORTCUTS = ("sdpa", "mha", "flex")


# --------------------------------------------------------------------------- train_step
class StepCase(NamedTuple):
    """A model (embedding, dropout, linear) of ``vocab`` tokens and ``width`` features, trained three
    steps (so that gradients left over from step 1 show) on batches of (batch, tokens) token ids."""

    vocab: int
    width: int
    batch: int
    tokens: int
    seed: int


STEP_CASES = (StepCase(7, 5, 3, 6, 801), StepCase(11, 4, 2, 9, 802))
STEP_BUGS = (
    "grad_not_zeroed",
    "loss_on_probabilities",
    "loss_summed",
    "loss_shifted_again",
    "step_eval_mode",
)
# momentum: the optimizer has state; dropout: train mode matters
LR, MOMENTUM, DROPOUT = 0.5, 0.9, 0.3
GRAPH_HINT = (
    "the backward pass needs a graph: compute the logits with gradients on (no torch.no_grad() "
    "around the forward pass, no .detach())."
)


def _reference_step(model, optimizer, inputs, targets, bug=None):
    if bug == "step_eval_mode":
        model.eval()
    logits = model(inputs)  # (b, n, vocab)
    if bug == "loss_shifted_again":
        logits, targets = logits[:, :-1], targets[:, 1:]
    if bug == "loss_on_probabilities":
        logits = torch.softmax(logits, dim=-1)
    reduction = "sum" if bug == "loss_summed" else "mean"
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction=reduction)
    if bug != "grad_not_zeroed":
        optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def _student_step(c: E.Check, step, args: tuple, i: int) -> float:
    """Call i of the student's ``step(*args)``, args being (model, optimizer, inputs, targets), probed:
    inputs kept, a number returned, the weights updated by the optimizer given."""
    model, optimizer, x, y = args
    before = [p.detach().clone() for p in model.parameters()]
    x_kept, y_kept = x.clone(), y.clone()
    backward_ran = []
    for p in model.parameters():  # left on: the model is this check's own, made for three calls
        p.register_hook(lambda g: backward_ran.append(1))
    what = f"train_step(model, optimizer, inputs, targets) (call {i + 1})"
    loss = c.call(step, *args, what=what, hint=GRAPH_HINT)
    if not (torch.equal(x, x_kept) and torch.equal(y, y_kept)):
        raise c.bug("input_modified", f"After {what}:", what="inputs or targets tensor")
    if isinstance(loss, torch.Tensor) and loss.requires_grad:
        raise c.bug("step_returns_graph", f"{what} returned a tensor that requires grad.")
    if math.prod(getattr(loss, "shape", (0,))) == 1:  # one number in a tensor or NumPy array
        loss = loss.item()
    if isinstance(loss, bool) or not isinstance(loss, (int, float)):
        raise c.bug("step_loss_not_returned", f"{what} returned {type(loss).__name__}.")
    if all(torch.equal(b, p) for b, p in zip(before, model.parameters())):
        if not backward_ran:
            bug = "step_no_backward"
        elif all(p.grad is None or not p.grad.any() for p in model.parameters()):
            bug = "step_zero_grad_before_step"
        else:
            bug = "step_no_optimizer_step"
        raise c.bug(bug, f"After {what} the weights did not change.")
    if not optimizer.state:  # SGD with momentum keeps a buffer per weight from its first step on
        raise c.bug(
            "step_optimizer_replaced",
            f"After {what} the weights changed, but the optimizer passed in never stepped.",
        )
    return float(loss)


def _run_steps(step, case: StepCase, c: E.Check | None = None):
    """The losses of three calls of ``step`` on the case's model (made afresh from its seed, dropout
    seeded per call), then its final weights, in one tensor; with ``c``: the student's step, probed."""
    torch.manual_seed(case.seed)
    model = nn.Sequential(
        nn.Embedding(case.vocab, case.width), nn.Dropout(DROPOUT), nn.Linear(case.width, case.vocab)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    g, losses = E.generator(case.seed), []
    for i in range(3):
        x = torch.randint(case.vocab, (case.batch, case.tokens), generator=g)  # (b, n)
        y = torch.randint(case.vocab, (case.batch, case.tokens), generator=g)  # (b, n)
        y[:, :2] = -100  # positions without a target, as in the look-back task
        torch.manual_seed(case.seed + i)
        args = (model, optimizer, x, y)
        losses.append(_student_step(c, step, args, i) if c else step(*args))
    weights = [p.detach().flatten() for p in model.parameters()]
    return torch.cat([torch.tensor(losses, dtype=torch.float64), *weights])


def check_train_step(train_step) -> None:
    """Check ``train_step(model, optimizer, inputs, targets) -> float`` over three SGD steps."""
    __tracebackhide__ = True
    c = E.Check("check_train_step")
    c.ensure_callable(train_step, "a function train_step(model, optimizer, inputs, targets)")
    with E.preserved_rng():
        for case in STEP_CASES:
            where = (
                f"With a {case.vocab}-token model (dropout {DROPOUT}, in train mode), batches of "
                f"shape {(case.batch, case.tokens)}, three steps of SGD(lr={LR}, momentum={MOMENTUM}):"
            )
            got = _run_steps(train_step, case, c)
            want = _run_steps(_reference_step, case)
            if E.same(got, want):
                continue
            for bug in STEP_BUGS:
                if E.same(got, _run_steps(partial(_reference_step, bug=bug), case)):
                    raise c.bug(bug, where)
            if not E.same(got[:3], want[:3]):
                raise c.fail(
                    f"{where} your losses were {[round(v, 4) for v in got[:3].tolist()]}, "
                    f"expected {[round(v, 4) for v in want[:3].tolist()]}.",
                    "F.cross_entropy(logits.flatten(0, 1), targets.flatten()): the mean over all "
                    "positions.",
                )
            raise c.bug("step_weights_wrong", where=where)
    c.passed(f"losses and updated weights match over three steps on {len(STEP_CASES)} models")


# --------------------------------------------------------------------------- sample_next_token
DRAWS = 20_000
Z = 7.0  # how many standard errors a cumulative frequency may stray from its probability
SAMPLE_LOGITS = ((1.5, 0.5, 0.0, -0.5, -2.0), (3.0, 2.0, 1.0, 0.5, 0.25))
TEMPERATURES = (1.0, 0.5, 2.0, 0.25)
# 200 tokens with Zipf-like probabilities 1/rank: the 150 least likely hold 23% and the last 1% is spread over
# 12 of them, so a hidden top-k (k=50) or top-p (p=0.99) filter shows. VAST: 1,000 tokens, whose 800 least
# likely hold 21%, so that nanoGPT's top_k = 200 (sample.py) shows too; VAST_DRAWS keep it fast.
WIDE = tuple((-torch.arange(1, 201, dtype=torch.float64).log()).tolist())
VAST, VAST_DRAWS = tuple((-torch.arange(1, 1001, dtype=torch.float64).log()).tolist()), 2_000


def _draw(c, sample, logits, temperature, seed, what):
    """The student's draw: a tensor of integer ids, one per row, the caller's logits left unchanged;
    a crash is named when multinomial refused the probabilities."""
    try:
        got = c.call_pure(sample, [logits], temperature, E.generator(seed), what=what)
    except E.CheckFailure as failure:
        error = failure.__cause__
        refusals = ("probability tensor contains", "invalid multinomial distribution")
        if isinstance(error, RuntimeError) and any(words in str(error) for words in refusals):
            bug = "greedy_divides_by_zero" if temperature == 0 else "sampled_from_logits"
            raise c.bug(bug, f"{what} raised RuntimeError: {error}") from None
        raise
    got = c.expect_tensor_output(got, what, (len(logits),))
    if got.is_floating_point() or got.is_complex() or got.dtype == torch.bool:
        raise c.bug("sample_not_ids", f"{what} returned dtype {got.dtype}.")
    return got


def _distance(cum_freq, probs, draws=DRAWS):
    """The largest gap between cumulative frequencies and probabilities (both in the same order of the
    tokens), in standard errors of DRAWS draws: about 2 for right draws, Z at most."""
    cum = probs.cumsum(-1)
    spread = ((cum * (1 - cum)).clamp(min=0) + 1 / draws).sqrt() / math.sqrt(draws)
    return ((cum_freq - cum).abs() / spread).amax(-1)


def _check_frequencies(c, sample, row, temperature, probe=False, draws=DRAWS):
    """``draws`` draws from one row of logits, with the frequencies of softmax(row / T); ``probe``:
    also require them repeatable with the same seed, other with another, the global random state
    untouched."""
    vocab = len(row)
    batch = torch.tensor(row).repeat(draws, 1)  # (draws, vocab): the same row many times
    shown_row = list(row) if vocab <= 10 else f"of {vocab} tokens"
    what = f"sample_next_token(logits, temperature={temperature}, generator) with rows {shown_row}"
    state = torch.random.get_rng_state()
    first = _draw(c, sample, batch, temperature, 5, what)
    if probe:
        if not torch.equal(first, _draw(c, sample, batch, temperature, 5, what)):
            raise c.bug(
                "generator_ignored",
                f"Two calls of {what}, each with a generator seeded 5, drew different tokens.",
            )
        if not torch.equal(state, torch.random.get_rng_state()):
            raise c.bug("sample_global_rng_changed", f"After {what}:")
    ids = first.long().cpu()
    ids = torch.where((ids >= 0) & (ids < vocab), ids, vocab)  # an id out of range: no token
    freq = torch.bincount(ids, minlength=vocab + 1)[:vocab].double() / draws
    logits = torch.tensor(row, dtype=torch.float64)
    expected = torch.softmax(logits / temperature, dim=-1)
    order = expected.argsort(descending=True)
    cum_freq = freq[order].cumsum(-1)
    if _distance(cum_freq, expected[order], draws) <= Z:
        if probe and torch.equal(first, _draw(c, sample, batch, temperature, 6, what)):
            raise c.bug(
                "sample_generator_replaced",
                f"Calls of {what} with generators seeded 5 and 6 drew the same tokens.",
            )
        return
    if vocab <= 10:
        shown = (
            f"For {what}: the tokens came up with frequencies {[round(f, 3) for f in freq.tolist()]}, "
            f"expected {[round(p, 3) for p in expected.tolist()]}."
        )
    else:
        k = int(((cum_freq - expected[order].cumsum(-1)).abs()).argmax())
        shown = (
            f"For {what}: the {k + 1} most likely tokens came up {cum_freq[k]:.3f} of the time, expected "
            f"{expected[order][: k + 1].sum():.3f}."
        )
    greedy = "always_greedy" if temperature == TEMPERATURES[0] else "greedy_at_low_temperature"
    top = (order.argsort() <= torch.arange(vocab)[:, None]) * expected  # row m: m + 1 likeliest
    variants = [  # each mistake's probabilities: one row, or one per filter (top-k, top-p)
        (greedy, F.one_hot(logits.argmax(), vocab).double()),
        ("temperature_after_softmax", torch.softmax(logits, dim=-1)),
        ("temperature_multiplied", torch.softmax(logits * temperature, dim=-1)),
        ("sample_softmax_over_batch", torch.full((vocab,), 1 / vocab, dtype=torch.float64)),
        ("sampled_from_logits", logits.clamp(min=0) / logits.clamp(min=0).sum()),
        ("sample_filtered_top_tokens", top / top.sum(-1, keepdim=True)),
    ]
    for bug, probs in variants:
        distances = _distance(cum_freq, probs[..., order], draws)
        if distances.min() <= Z:
            kept = int(distances.argmin()) + 1
            raise c.bug(bug, shown, temperature=temperature, kept=kept, vocab=vocab)
    raise c.fail(
        shown,
        "draw with torch.multinomial and the generator given, from the softmax of logits / "
        "temperature over the last axis.",
    )


def check_sample_next_token(sample) -> None:
    """Check ``sample_next_token(logits, temperature, generator)``: greedy at 0, else the
    softmax of logits / temperature, drawn repeatably from the generator."""
    __tracebackhide__ = True
    c = E.Check("check_sample_next_token")
    c.ensure_callable(sample, "a function sample_next_token(logits, temperature, generator)")
    with E.preserved_rng(), torch.no_grad():
        logits = E.randn(6, 9, seed=811)  # (6, 9)
        what = "sample_next_token(logits of shape (6, 9), temperature=0, generator)"
        got = _draw(c, sample, logits, 0, 1, what)
        if not torch.equal(got.cpu().long(), logits.argmax(dim=-1)):
            raise c.bug("greedy_not_argmax", f"For {what}:")
        for i, (row, temperature) in enumerate(product(SAMPLE_LOGITS, TEMPERATURES)):
            _check_frequencies(c, sample, row, temperature, probe=i == 0)
        _check_frequencies(c, sample, WIDE, 1.0)
        _check_frequencies(c, sample, VAST, 1.0, draws=VAST_DRAWS)
    c.passed(
        f"greedy at temperature 0; at temperatures 0.5, 1 and 2 the frequencies of {DRAWS:,} "
        "draws match softmax(logits / T), and the same generator seed gives the same draws",
    )


# --------------------------------------------------------------------------- attend_with_cache
# MultiHeadAttention(d_in, d_out, context_length, 0.0, num_heads, qkv_bias) (E.Case: batch, n, d_in,
# d_out, context_length, num_heads, qkv_bias, seed) on a batch of texts whose n tokens arrive a chunk
# at a time (how many new tokens each call brings)
CACHE_CASES = (
    (E.Case(2, 8, 6, 8, 10, 2, True, 821), (3, 1, 1, 2, 1)),
    (E.Case(1, 7, 4, 12, 8, 3, False, 822), (1, 1, 1, 1, 1, 1, 1)),
    (E.Case(2, 7, 5, 4, 7, 1, False, 823), (4, 3)),
)
# (mistake, shift): the cached step with that mistake switched on, its mask's rows moved by shift
CACHE_VARIANTS = (
    ("cache_attend_before_append", 0),
    ("cache_not_accumulated", 0),
    ("cache_mask_top_left", 0),
    ("cache_chunk_unmasked", 0),
    ("cache_not_scaled", 0),
    ("cache_values_from_keys", 0),
    ("cache_heads_interleaved", 0),
    ("cache_no_out_proj", 0),
    ("cache_qkv_bias_dropped", 0),
    ("cache_mask_offset", 1),
    ("cache_mask_offset", -1),
)


def _cached_variant(attn, x, cache, i, bug=None, shift=0):
    """Cached step i, right or with the mistake ``bug`` (``shift``: the mask's rows off by it)."""
    b, m, _ = x.shape
    h, hd = attn.num_heads, attn.head_dim

    def project(layer):  # (b, m, d_out) -> (b, h, m, hd)
        bias = None if bug == "cache_qkv_bias_dropped" else layer.bias
        return F.linear(x, layer.weight, bias).view(b, m, h, hd).transpose(1, 2)

    values = attn.W_key if bug == "cache_values_from_keys" else attn.W_value
    q, k, v = project(attn.W_query), project(attn.W_key), project(values)  # (b, h, m, hd) each
    old_k, old_v = cache if cache is not None else (k[:, :, :0], v[:, :, :0])
    all_k, all_v = torch.cat([old_k, k], dim=2), torch.cat([old_v, v], dim=2)  # (b, h, t, hd)
    before_append = bug == "cache_attend_before_append" and cache is not None
    seen_k, seen_v = (old_k, old_v) if before_append else (all_k, all_v)
    t, past = seen_k.shape[2], all_k.shape[2] - m
    rows = torch.arange(m)[:, None] + (0 if bug == "cache_mask_top_left" else past + shift)
    hidden = None if bug == "cache_chunk_unmasked" else torch.arange(t) > rows  # (m, t)
    recipe = E.Recipe(scale="none" if bug == "cache_not_scaled" else "sqrt_d_k", mask="none")
    context = E.attention(q, seen_k, seen_v, recipe, mask=hidden)  # (b, h, m, hd)
    if bug != "cache_heads_interleaved":
        context = context.transpose(1, 2)  # (b, m, h, hd)
    merged = context.reshape(b, m, h * hd)
    new_cache = (k, v) if bug == "cache_not_accumulated" else (all_k, all_v)
    return (merged if bug == "cache_no_out_proj" else attn.out_proj(merged)), new_cache


def _run_cached(step, attn, x, chunks, new_weights=False):
    """``step(attn, x_new, cache, i)`` over x's chunks, threading the cache: the outputs joined.
    ``new_weights``: W_key and W_value get new weights before each call, so that a cache, which keeps
    the earlier tokens' keys and values as they were projected, differs from their recomputation."""
    outs, cache = [], None
    for i, x_new in enumerate(x.split(chunks, dim=1)):
        if new_weights:
            for layer in (attn.W_key, attn.W_value):
                layer.weight.copy_(E.randn(*layer.weight.shape, seed=830 + i))
        out, cache = step(attn, x_new, cache, i)
        outs.append(out)
    return torch.cat(outs, dim=1)


def check_attend_with_cache(attend_with_cache) -> None:
    """Check ``attend_with_cache(attn, x_new, cache) -> (out, cache)`` against the full layer."""
    __tracebackhide__ = True
    c = E.Check("check_attend_with_cache")
    c.ensure_callable(attend_with_cache, "a function attend_with_cache(attn, x_new, cache)")
    cache_dtypes = set()

    def student(attn, x_part, cache, i):
        x_new = x_part.clone()
        what = f"attend_with_cache(attn, x_new of shape {tuple(x_new.shape)}, cache) (call {i + 1})"
        try:
            result = c.call(attend_with_cache, attn, x_new, cache, what=what)
        except E.CheckFailure as failure:  # scores (m, past + m) met a mask cut to another shape
            if cache is not None and "must match the size" in str(failure.__cause__):
                raise c.bug("cache_mask_wrong_shape", failure.diagnosis) from None
            raise
        if not torch.equal(x_new, x_part):
            raise c.bug("input_modified", f"After {what}:", what="x_new tensor")
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise c.bug("cache_not_returned", f"{what} returned {type(result).__name__}.")
        out, cache = result
        tensors = [t for t in tree_flatten(cache)[0] if isinstance(t, torch.Tensor)]
        cache_dtypes.update(t.dtype for t in tensors if t.is_floating_point())
        shape = (*x_part.shape[:2], attn.out_proj.out_features)  # (b, m, d_out)
        return c.expect_tensor_output(out, f"the output of {what}", shape), cache

    with E.preserved_rng(), torch.no_grad():
        for case, chunks in CACHE_CASES:
            attn = E.build(c, E.chapters().MultiHeadAttention, case).eval()
            x = E.randn(case.batch, case.n, case.d_in, seed=case.seed)  # (b, n, d_in)
            want = attn(x)  # (b, n, d_out): the whole text at once
            where = (
                f"With {case.num_heads} head(s), d_out={case.d_out}, qkv_bias={case.qkv_bias}, "
                f"tokens arriving {list(chunks)} per call:"
            )
            got = _run_cached(student, attn, x, chunks)
            if not E.same(got, want):
                if torch.isnan(got).all():
                    raise c.bug("cache_mask_times_inf", where)
                for bug, shift in CACHE_VARIANTS:
                    step = partial(_cached_variant, bug=bug, shift=shift)
                    if E.same(got, _run_cached(step, attn, x, chunks)):
                        raise c.bug(bug, where)
                if cache_dtypes - {x.dtype}:
                    raise c.bug("cache_dtype_changed", where, dtypes=sorted(map(str, cache_dtypes)))
                # the first token whose output differs (NaN counts as differing)
                close = torch.isclose(got.double(), want.double(), rtol=E.RTOL, atol=E.ATOL)
                first = int((~close).any(dim=2).any(dim=0).int().argmax())
                raise c.fail(
                    f"{where} the outputs differ from the full layer's, first at token {first}.",
                    "project only x_new, torch.cat the cached keys/values in front (dim=2), and mask "
                    "with rows past .. past + m - 1 of attn.mask.",
                )
            # a second text, from an empty cache again
            x = E.randn(case.batch, case.n, case.d_in, seed=case.seed + 1)
            try:
                second = _run_cached(student, attn, x, chunks)
            except E.CheckFailure as failure:  # a crash too: the first text passed
                second = failure
            if not E.same(second, attn(x)):
                raise c.bug("cache_kept_outside", where)
            # W_key and W_value given new weights before each call: cached keys and values keep theirs
            want = _run_cached(_cached_variant, attn, x, chunks, new_weights=True)
            if not E.same(_run_cached(student, attn, x, chunks, new_weights=True), want):
                raise c.bug("cache_recomputes_keys", where)

        def prompt_then_more(prompt, more):
            return attend_with_cache(attn, more, attend_with_cache(attn, prompt, None)[1])

        where = f"With {case.num_heads} head(s), a prompt of 2 tokens, then 2 more:"
        E.probe_device(c, attn, (x[:, :2], x[:, 2:4]), where, fn=prompt_then_more)
    c.passed(
        f"equals the full layer token by token on {len(CACHE_CASES)} cases (prompts of 1 to 4 "
        "tokens, then one or more at a time), using the cached keys and values of earlier tokens",
    )


__all__ = ["check_attend_with_cache", "check_sample_next_token", "check_train_step"]
