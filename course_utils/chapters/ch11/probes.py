"""Probes of a function answer that chapter 11's checks share. Generic: moves to the engine when the
core has room (the core is at its cap; tests/test_house.py counts this file in the chapter until then).
Each probes what a grader would: the caller's tensors, dicts and random state untouched, a cache handed
back, a second text of the same shape, a training step compared with a reference's gradients, float64
kept, large inputs, a huge future token."""

from dataclasses import is_dataclass, replace
from itertools import combinations

import torch

from course_utils.checks import _engine as E
from course_utils.checks._engine.watch import tree_flatten

f64 = lambda t: t.cpu().double()  # a tensor in float64 on the CPU (a reference keeps its graph)
leaves = lambda a: filter(torch.is_tensor, tree_flatten(vars(a) if is_dataclass(a) else a)[0])
first = lambda got: got[0] if isinstance(got, (tuple, list)) else got  # an output, or (output, ...)


def cast(a, fn):
    """``a`` with ``fn`` applied to each of its tensors (in tuples, lists, dicts and dataclasses)."""
    if torch.is_tensor(a):
        return fn(a)
    if is_dataclass(a):
        return replace(a, **{k: fn(t) for k, t in vars(a).items() if torch.is_tensor(t)})
    if isinstance(a, (tuple, list)):
        return type(a)(cast(t, fn) for t in a)
    return {k: cast(t, fn) for k, t in a.items()} if isinstance(a, dict) else a


def variants(reference, bugs, *args, pairs=False):
    """c.compare's (id, reference(*args, **switches)[0]) for bugs and, with pairs, each two of them."""
    both = [(a, {**s, **t}) for (a, s), (_, t) in combinations(bugs, 2)] if pairs else []
    return [(bug, lambda s=s: reference(*args, **s)[0]) for bug, s in (*bugs, *both)]


def call(c: E.Check, fn, args, names, what: str, pair=None, crash=None):
    """fn(*args), after which every tensor the caller gave (in containers and MLA weights too), each
    dict's entries and torch's global random state must be unchanged; ``pair``: the mistake when fn
    returns no pair; ``crash``: the one a crash names."""
    before = [(name, t, t.clone()) for name, a in zip(names, args) for t in leaves(a)]
    dicts, rng = [(a, dict(a)) for a in args if isinstance(a, dict)], torch.get_rng_state()
    try:
        got = c.call(fn, *args, what=what)
    except E.CheckFailure as failure:
        if crash and failure.bug is None:
            raise c.bug(crash, f"For {what}:", error=str(failure.__cause__)) from None
        raise
    for name, t, old in before:
        if not torch.equal(t, old):
            bug = "recurrence_state_modified" if name == "state" else "input_modified"
            raise c.bug(bug, f"After {what}:", what=f"{name} tensor")
    if any(a.keys() != old.keys() or any(a[k] is not old[k] for k in old) for a, old in dicts):
        raise c.bug("share_cache_modified", f"After {what}:")
    if not torch.equal(rng, torch.get_rng_state()):
        raise c.bug("global_rng_changed", f"After {what}:")
    if pair and not (isinstance(got, (tuple, list)) and len(got) == 2):
        raise c.bug(pair, got=E.shown(got))
    return got


def backward(c: E.Check, fn, args, names, learn, what: str, reference) -> None:
    """A training step: backward() from fn's output (weighted by fixed random numbers) must work and
    give every tensor of the arguments named in learn the gradient reference(*args) gives in float64."""
    names = [*names, *[None] * (len(args) - len(names))]
    grown = lambda dtype: [  # the arguments, those in learn as new tensors that require gradients
        cast(a, lambda t: t.detach().to(dtype, copy=True).requires_grad_()) if n in learn else a
        for n, a in zip(names, args)
    ]
    learned = lambda given: [(n, t) for n, a in zip(names, given) if n in learn for t in leaves(a)]
    with torch.enable_grad():
        ours, mine = grown(torch.float64), grown(torch.float32)
        want = first(reference(*ours))
        weights = E.randn(*want.shape, seed=11).double()
        wanted = torch.autograd.grad((want * weights).sum(), [t for _, t in learned(ours)])
        try:
            loss = (first(fn(*mine)).double() * weights).sum()
            if loss.requires_grad:  # else no input gets a gradient: named below
                loss.backward()
        except Exception as exc:  # noqa: BLE001 - the same call ran without gradients: autograd's failure
            raise c.bug("backward_fails", f"For {what}:", error=str(exc).split(":")[0]) from None
    for (name, t), g in zip(learned(mine), wanted):
        if t.grad is None or not t.grad.isfinite().all():
            bug = "gradient_missing" if t.grad is None else "gradient_not_finite"
            raise c.bug(bug, f"For {what}:", what=name)
        if not E.same(t.grad, g, atol=1e-4, rtol=1e-3):
            raise c.bug("gradient_differs", f"For {what}:", what=name)


def keeps_float64(c: E.Check, fn, args, what: str) -> None:
    """Given float64 inputs, every floating-point tensor fn returns must be float64."""
    to64, where = lambda t: t.double() if t.is_floating_point() else t, f"For {what}, in float64:"
    try:
        got = c.call(fn, *cast(list(args), to64), what=f"{what}, in float64")
    except E.CheckFailure as failure:  # a crash only there: a float32 tensor met a float64 one
        if failure.bug:
            raise
        raise c.bug("dtype_not_kept", where, did=f"crashed ({failure.__cause__})") from None
    dtypes = [t.dtype for t in leaves(got) if t.is_floating_point() and t.dtype != torch.float64]
    if dtypes:
        raise c.bug("dtype_not_kept", where, did=f"returned a {dtypes[0]} tensor")


def finite_when_large(c: E.Check, fn, args, what: str) -> None:
    """fn(*args), inputs scaled so that scores reach the hundreds, must give a finite output (the
    reference's is): an exponential of a score above 88 overflows float32."""
    out = first(c.call(fn, *args, what=what))
    if torch.is_tensor(out) and out.is_floating_point() and not out.isfinite().all():
        raise c.bug("softmax_overflow", f"For {what}:")


def replay(c: E.Check, fn, args, expected, what: str) -> None:
    """fn(*args) again with an earlier cache than the last one it returned must give ``expected``."""
    out = first(c.call(fn, *args, what=what))
    if not (torch.is_tensor(out) and E.same(f64(out), expected, atol=1e-4)):
        raise c.bug("cache_kept_between_calls", f"For {what}:")


def second_text(c: E.Check, fn, args, reference, what: str, negate=(0,)) -> None:
    """fn on a second text of the same shapes (the tensors at ``negate`` negated) must give
    reference's answer for it: a result or keys and values kept from an earlier call do not."""
    other = [-a if i in negate else a for i, a in enumerate(args)]
    out = first(c.call(fn, *other, what=f"{what}, on a second text of the same shape"))
    if not (torch.is_tensor(out) and E.same(f64(out), first(reference(*other)), atol=1e-4)):
        raise c.bug("result_kept_between_calls", f"For {what}, on a second text of the same shape:")


def future_hidden(c: E.Check, fn, args, what: str) -> None:
    """fn(*args), args[0] (b, n, d) times 1000, then its last token 1000 times more: the outputs of
    the tokens before it must not move. -inf hides a key whatever the scores; a finite mask lets a
    huge later score through (added) or wins over allowed scores all below it (filled in)."""
    x = 1e3 * args[0]
    xs = (x, torch.cat([x[:, :-1], 1e3 * x[:, -1:]], 1))  # (b, n, d) each
    outs = [first(c.call(fn, t, *args[1:], what=f"{what}, x times 1000")) for t in xs]
    if not (all(map(torch.is_tensor, outs)) and E.same(outs[0][:, :-1], outs[1][:, :-1])):
        raise c.bug(
            "mask_finite", f"For {what}, x times 1000, then its last token 1000 times more:"
        )
