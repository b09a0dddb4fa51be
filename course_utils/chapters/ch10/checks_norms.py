"""Self-checks of chapter 10's own parts: LayerNorm, GELU, RMSNorm, SwiGLU, and ALiBi's slopes and
bias. A wrong result is named by the keyword switch of one reference function that reproduces it
(``c.compare``); every check also probes as a grader would: another shape on a second call, float64,
train mode, gradients against the reference's, large inputs, the caller's tensor and torch's random
state left untouched, another device (the result made there too), bad input."""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from course_utils.checks import _engine as E

from .probes import Calls, call_clean, on_device, overflows


# --------------------------------------------------------------------------- references
def _norm(x, w, b, eps, **s):
    """LayerNorm (center) or RMSNorm (b None) in float64; each switch in s is a known mistake."""
    dims, x = s.get("dims", (-1,)), x.double()
    center = s.get("center", b is not None)
    xc = x - x.mean(dims, keepdim=True) if center or s.get("std_only") else x
    count = 1 if s.get("summed") else math.prod(x.shape[d] for d in dims) - s.get("unbiased", 0)
    eps = 0.0 if s.get("no_eps") else s.get("own_eps", eps)
    square = xc.pow(2).sum(dims, keepdim=True) / count
    root = square.sqrt() + eps if s.get("outside") else (square + eps).sqrt()
    x = xc if center else x
    y = x * root if s.get("inverted") else x / root
    y = y * (1 + w.double() if s.get("one_plus") else w.double()) if s.get("scale", True) else y
    return y + b.double() if s.get("shift", True) and b is not None else y


_NORM_BUGS = [("norm_eps_outside_root", {"outside": 1}), ("norm_eps_missing", {"no_eps": 1})]
_NORM_BUGS += [("norm_weight_ignored", {"scale": 0, "shift": shift}) for shift in (1, 0)]
_NORM_BUGS += [("norm_wrong_axis", {"dims": d}) for d in ((-2,), (0,), (-2, -1))]
_NORM_BUGS += [("norm_eps_hardcoded", {"own_eps": e}) for e in (1e-12, 1e-6, 1e-5)]  # not self.eps
LN_BUGS = [("ln_unbiased_variance", {"unbiased": 1}), ("ln_shift_ignored", {"shift": 0})]
LN_BUGS += [("ln_std_plus_eps", {"unbiased": 1, "outside": 1}), ("ln_not_centred", {"center": 0})]
LN_BUGS += _NORM_BUGS
RMS_BUGS = [("rms_centred", {"center": 1}), ("rms_divides_by_std", {"std_only": 1})]
RMS_BUGS += [("rms_divides_by_std", {"std_only": 1, "unbiased": 1, "outside": o}) for o in (0, 1)]
RMS_BUGS += [("rms_sum_not_mean", {"summed": 1}), ("rms_multiplied_by_rms", {"inverted": 1})]
RMS_BUGS += [("rms_one_plus_weight", {"one_plus": 1}), *_NORM_BUGS]


def _gelu(x, form="none", **s):
    """GELU in float64; each switch in s reproduces one known mistake."""
    x, half = x.double(), s.get("half", 0.5)
    if "sigmoid" in s:  # x * sigmoid(a x): a = 1.702 is the sigmoid approximation, a = 1 is SiLU
        return x * torch.sigmoid(s["sigmoid"] * x)
    if (form == "tanh") != s.get("other", False):
        c1, c2 = s.get("c1", math.sqrt(2 / math.pi)), s.get("c2", 0.044715)
        cdf = half * (1 + torch.tanh(c1 * (x + c2 * x ** s.get("power", 3))))
    else:
        cdf = half * (1 + torch.erf(x * s.get("erf_scale", 1 / math.sqrt(2))))
    return cdf if s.get("cdf_only") else x * cdf


GELU_BUGS = [("gelu_form_swapped", {"other": True}), ("gelu_cdf_only", {"cdf_only": True})]
GELU_BUGS += [("gelu_erf_scale", {"erf_scale": 1.0}), ("gelu_erf_scale", {"erf_scale": 0.5})]
GELU_BUGS += [("gelu_tanh_constants", {"c1": 0.044715, "c2": 0.7978845608})]  # c1 and c2 swapped
GELU_BUGS += [("gelu_tanh_constants", {"c1": math.sqrt(c)}) for c in (2 * math.pi, math.pi / 2)]
GELU_BUGS += [("gelu_tanh_constants", {"power": 2}), ("gelu_half_missing", {"half": 1.0})]
GELU_BUGS += [("gelu_sigmoid_form", {"sigmoid": 1.702}), ("gelu_is_silu", {"sigmoid": 1.0})]


def _swiglu(p, x, act=F.silu, **s):
    """w2(act(w1 x) * w3 x) from the parts p; each switch in s reproduces one known mistake."""
    gate, up = (p["w3"](x), p["w1"](x)) if s.get("swap") else (p["w1"](x), p["w3"](x))
    if s.get("ungated") or s.get("after"):
        return p["w2"](act(gate * up if s.get("after") else gate))
    up = act(up) if s.get("both") else up
    return p["w2"](act(gate) + up if s.get("add") else act(gate) * up)


SWIGLU_BUGS = [("swiglu_gate_swapped", {"swap": True}), ("swiglu_act_after_product", {"after": 1})]
SWIGLU_BUGS += [("swiglu_no_gate", {"ungated": True}), ("swiglu_act_on_both", {"both": True})]
SWIGLU_BUGS += [("swiglu_sum", {"add": True})]
SWIGLU_BUGS += [("swiglu_geglu_tanh", {"act": partial(F.gelu, approximate="tanh")})]  # Gemma's
SWIGLU_BUGS += [("swiglu_wrong_activation", {"act": a}) for a in (torch.sigmoid, F.gelu, F.relu)]


def _slopes(h, **s):
    """ALiBi's slopes as the authors' code makes them; each switch in s is one known mistake."""
    if s.get("one_line") or s.get("from_zero"):
        return 2.0 ** (-8.0 * (torch.arange(h, dtype=torch.float64) + (not s.get("from_zero"))) / h)
    p = 2 ** math.floor(math.log2(h))
    base = 2.0 ** (-8.0 * torch.arange(1, p + 1, dtype=torch.float64) / p)
    extra = 2.0 ** (-4.0 * torch.arange(1, 2 * p + 1, dtype=torch.float64) / p)  # 2p heads' slopes
    extra = (base if s.get("extra_base") else extra)[s.get("extra_stride", 0) :: 2][: h - p]
    both = torch.cat([extra, base]) if s.get("extra_first") else torch.cat([base, extra])
    return both.flip(0) if s.get("reversed") else both


SLOPE_BUGS = [
    ("alibi_one_line_slopes", {"one_line": 1}),
    ("alibi_slopes_reversed", {"reversed": 1}),
]
SLOPE_BUGS += [
    ("alibi_slopes_from_zero", {"from_zero": 1}),
    ("alibi_extra_first", {"extra_first": 1}),
]
SLOPE_BUGS += [("alibi_extra_slopes_wrong", {k: 1}) for k in ("extra_base", "extra_stride")]


def _bias(n, h, slopes=None, **s):
    """ALiBi's (h, n, n) bias in float64; each switch in s reproduces one known mistake."""
    d = torch.arange(n)[:, None] - torch.arange(n)[None, :]  # (n, n): i - j
    d = d.T if s.get("swap_ij") else d
    m = _slopes(h) if slopes is None else slopes
    bias = s.get("sign", -1) * m[:, None, None] * (d.abs() if s.get("symmetric") else d)
    hidden = d <= 0 if s.get("diagonal") else d < 0
    return bias if s.get("symmetric") or s.get("unmasked") else bias.masked_fill(hidden, -torch.inf)


BIAS_BUGS = [("alibi_bias_sign", {"sign": 1}), ("alibi_bias_not_causal", {"symmetric": 1})]
BIAS_BUGS += [("alibi_bias_not_causal", {"unmasked": 1}), ("alibi_bias_transposed", {"swap_ij": 1})]
BIAS_BUGS += [("alibi_bias_hides_diagonal", {"diagonal": 1})]


# torch's own norms (F.layer_norm, nn.LayerNorm, F.rms_norm, nn.RMSNorm, torch.ops.aten ones) by the
# names a forward calls them under: the exercises ask for the formula
_NORM_CALLS = ("layer_norm", "native_layer_norm", "rms_norm", "_fused_rms_norm", "group_norm")
_NORM_CALLS += ("native_group_norm", "batch_norm", "native_batch_norm", "instance_norm")


# --------------------------------------------------------------------------- probes
def _probe(c, run, x, expected, where, variants, params=None, large=None, library=()):
    """``run`` (the student's layer or function) against ``expected`` (float64) on ``x``, on a
    second call of another shape and on ``large`` ((input, words, the mistake a difference there
    names)); the caller's tensor and random state, float64, train mode, gradients to x and to
    ``params`` ({name: parameter}), another device."""
    __tracebackhide__ = True
    calls = [(x, "", None), (x[0, 1:].contiguous(), "", None), *([large] if large else [])]
    for i, (xi, how, bug) in enumerate(calls):
        what = f"{where} on a tensor of shape {tuple(xi.shape)}{how}"
        with E.isolated():
            try:
                with (seen := Calls()):
                    got = call_clean(c, run, [xi], what=what)
                got = c.expect_tensor_output(got, what, xi.shape)
            except E.CheckFailure as failure:
                if not failure.bug and seen.dropped_keepdim():
                    raise c.bug(
                        "norm_keepdim_missing", f"{what}:", error=failure.diagnosis
                    ) from None
                if i != 1 or failure.bug:
                    raise
                raise c.bug("layer_fixed_rank", what=where, error=failure.diagnosis) from None
            want = expected(xi)
            named = [(b, partial(v, xi)) for b, v in variants] if i < 2 else []
            named += [("layer_overflows", partial(overflows, got, want))]  # after the formulas
            named += [(bug, lambda: got)] if bug else []  # large: right before, wrong only here
            atol = 2e-3 if how else E.ATOL  # float32 sums of numbers near 1e3 or 1e4
            c.compare(got, want, f"{what}:", named, atol=atol, detail={"what": "Its output"})
    mod, params = (run if isinstance(run, nn.Module) else None), params or {}
    with E.isolated():
        run64, x64 = mod.double() if mod else run, x.double()
        with (seen := Calls()):
            got = c.call(run64, x64, what=f"{where} on float64 input")
        want = expected(x.double())  # the parameters are float64 too, for the moment
        if mod:
            mod.float()
        if getattr(got, "dtype", None) != torch.float64:
            found = f"a {getattr(got, 'dtype', type(got).__name__)} result"
            raise c.bug("layer_dtype_changed", what=where, found=found)
        if not E.same(got, want, atol=1e-9, rtol=1e-9):
            err = f"{((got - want).abs() / (want.abs() + 1)).max().item():.1e}"
            if not seen.below(torch.float64):  # float64 throughout: the formula's own numbers
                raise c.bug("layer_constant_rounded", what=where, err=err)
            bug = "layer_upcast_float32" if seen.cast_back() else "layer_dtype_changed"
            raise c.bug(bug, what=where, found="float64 with float32's precision")
        if mod and not E.same(c.call(mod.train(), x, what=f"{where} in train mode"), expected(x)):
            raise c.bug("layer_train_mode_differs", what=where)
    names = ["the input x", *params]
    for xi, how, _ in calls[::2]:  # gradients on x and on the large input
        xg, shape = xi.clone().requires_grad_(), tuple(xi.shape)
        where_how = f"{where} on a tensor of shape {shape}{how}, in training:"
        atol = 2e-3 if how else E.ATOL
        with E.preserved_rng(), torch.enable_grad():
            want = torch.autograd.grad(
                expected(xg).sum(), [xg, *params.values()], allow_unused=True
            )
            out = c.call(run, xg, what=f"{where} in training")
            if not getattr(out, "requires_grad", False):
                raise c.bug("gradient_blocked", where_how, detail="the output carries no gradient")
            try:
                got = torch.autograd.grad(out.sum(), [xg, *params.values()], allow_unused=True)
            except RuntimeError as exc:
                raise c.bug("inplace_breaks_autograd", where_how, error=str(exc)[:80]) from None
        for name, g, w in zip(names, got, want):
            if g is not None and w is not None and overflows(g, w) is not None:
                raise c.bug("layer_overflows", where_how, what=f"The gradient of {name}")
            if (g is None) != (w is None) or (g is not None and not E.same(g, w, atol=atol)):
                raise c.bug("gradient_blocked", where_how, detail=f"{name} gets a wrong gradient")
    owned = [*mod.parameters(), *mod.buffers()] if mod else []
    on_device(c, mod or run, [x], f"{where}, on another device:", owned)
    with E.isolated(), torch.no_grad(), (seen := Calls()):
        run(x)  # right in every probe above: now, is it the formula or torch's own layer?
    if library and (call := seen.called(library)):
        raise c.bug("layer_library_call", what=where, call=call)


def _inputs(d, seed):
    """(2, 4, d) normal draws; row [0, 0] scaled by 1e-3 (eps matters), row [1, 3] constant."""
    x = E.randn(2, 4, d, seed=seed)
    x[0, 0], x[1, 3] = x[0, 0] * 1e-3, 0.5  # 0.5: its mean is exact in float32
    return x


def _layer(c, cls, args, names, seed):
    """``cls(*args)`` built under a fixed seed, in eval mode; its named parts; how to name it."""
    owner = f"{cls.__name__}({', '.join(map(str, args))})"
    with E.preserved_rng():
        torch.manual_seed(seed)
        module = c.call(cls, *args, what=owner)
    if not isinstance(module, nn.Module):
        raise c.bug("not_a_module", what=owner, kind=type(module).__name__)
    parts = {n: E.find_attribute(c, module, n, owner, "the given __init__'s part") for n in names}
    return module.eval(), parts, owner


def _check_norm(c, cls, names, bugs, what, large=None):
    __tracebackhide__ = True
    c.ensure_class(cls, f"a class such as {what}")
    for args, seed in (((8,), 1401), ((13, 1e-4), 1402)):  # eps 1e-4: is self.eps read?
        module, p, owner = _layer(c, cls, args, ("eps", *names), seed)
        d = args[0]
        with torch.no_grad():  # a scale and a shift of their own, so that ignoring one shows
            for i, n in enumerate(names):
                p[n].add_(E.randn(d, seed=seed + 1 + i) * 0.5)
        w, b, eps = p["weight"], p.get("bias"), float(p["eps"])
        variants = [(bug, lambda x, s=s: _norm(x, w, b, eps, **s)) for bug, s in bugs]
        params = {f"the {n}": p[n] for n in names}
        big = (E.randn(2, 4, d, seed=seed) + 1000, " whose features are 1000 ± 1", large)
        ref = lambda x: _norm(x, w, b, eps)  # noqa: E731
        _probe(c, module, _inputs(d, seed), ref, owner, variants, params, big, _NORM_CALLS)
    c.passed(
        "right for d = 8 and 13 (tiny, constant, mean-1000 rows too) on (b, n, d) and (n, d), "
        "float64, training, gradients, on another device"
    )


def check_layer_norm(cls: type) -> None:
    """Check ``LayerNorm(d, eps=1e-5)``: (x - mean) / sqrt(biased var + eps) * weight + bias."""
    c, names = E.Check("check_layer_norm"), ("weight", "bias")
    _check_norm(c, cls, names, LN_BUGS, "LayerNorm", "ln_variance_cancels")


def check_rms_norm(cls: type) -> None:
    """Check ``RMSNorm(d, eps=1e-5)``: x / sqrt(mean(x^2) + eps) * weight, over the last axis."""
    _check_norm(E.Check("check_rms_norm"), cls, ("weight",), RMS_BUGS, "RMSNorm")


def check_gelu(fn: object) -> None:
    """Check ``gelu(x, approximate="none")``: x Phi(x) with erf, or GPT-2's tanh form for "tanh";
    a ValueError for any other ``approximate``."""
    __tracebackhide__ = True
    c = E.Check("check_gelu")
    c.ensure_callable(fn, "a function such as gelu")
    grid = torch.cat([torch.linspace(-6, 6, 23), torch.tensor([-30.0, 30.0, 0.0])])  # (26,)
    x = grid.view(2, 13, 1).expand(2, 13, 3).contiguous()  # (2, 13, 3)
    for form in ("none", "tanh"):
        variants = [(bug, partial(_gelu, form=form, **s)) for bug, s in GELU_BUGS]
        where, run = f"gelu(x, approximate={form!r})", partial(fn, approximate=form)
        _probe(c, run, x, partial(_gelu, form=form), where, variants, library=("gelu",))
    bad = "gelu_bad_approximate_accepted"
    try:
        fn(x, approximate="exact")
    except ValueError:
        pass
    except Exception as exc:  # noqa: BLE001 - the wrong refusal is named, not relayed
        raise c.bug(bad, detail=f"raised {type(exc).__name__}") from None
    else:
        raise c.bug(bad, detail="returned a result")
    c.passed(
        "both forms right from -30 to 30 on 3-D and 2-D inputs, float64, gradients, on another "
        "device; 'exact' refused"
    )


def check_swiglu(cls: type) -> None:
    """Check ``SwiGLU(d_model, d_ff)``: w2(silu(w1(x)) * w3(x))."""
    __tracebackhide__ = True
    c = E.Check("check_swiglu")
    c.ensure_class(cls, "a class such as SwiGLU")
    for d, d_ff, seed in ((8, 24, 1411), (12, 20, 1412)):
        module, p, owner = _layer(c, cls, (d, d_ff), ("w1", "w2", "w3"), seed)
        for n, part in p.items():
            if not isinstance(part, nn.Linear):
                kind, wanted = type(part).__name__, "the given nn.Linear(..., bias=False)"
                raise c.bug("not_a_linear", owner=owner, attr=n, kind=kind, wanted=wanted)

        def ref(x, p=p, **s):  # the parts read at each call: .double() in a probe swaps them
            lin = {n: partial(F.linear, weight=v.weight.double()) for n, v in p.items()}
            return _swiglu(lin, x.double(), **s)

        variants = [(bug, partial(ref, **s)) for bug, s in SWIGLU_BUGS]
        params = {f"the weight of {n}": v.weight for n, v in p.items()}
        big = (_inputs(d, seed) * 100, " scaled by 100 (gates past 88)", None)
        _probe(c, module, _inputs(d, seed), ref, owner, variants, params, big)
    c.passed(
        "right on two sizes, on (b, n, d) and (n, d), large inputs, float64, training, gradients "
        "to x, w1, w2, w3, on another device"
    )


def check_alibi(alibi_slopes: object, alibi_bias: object) -> None:
    """Check ``alibi_slopes(num_heads)`` (the authors' rule, any head count) and ``alibi_bias(n,
    num_heads)``: -m_h (i - j) for j <= i, -inf above (up to a constant per row: softmax ignores it)."""
    __tracebackhide__ = True
    c = E.Check("check_alibi")
    c.ensure_callable(alibi_slopes, "a function such as alibi_slopes")
    c.ensure_callable(alibi_bias, "a function such as alibi_bias")
    for h in (1, 2, 3, 4, 6, 8, 12, 16, 20):
        what, p = f"alibi_slopes({h})", 2 ** math.floor(math.log2(h))
        with E.isolated():
            got = c.expect_tensor_output(call_clean(c, alibi_slopes, [], h, what=what), what)
        if got.shape == (p,) != (h,):
            raise c.bug("alibi_closest_power_only", what=what, p=p, h=h)
        if c.expect_tensor_output(got, what, (h,)).dtype != torch.float32:
            raise c.bug("alibi_not_float32", what=what, dtype=got.dtype)
        variants = [(bug, partial(_slopes, h, **s)) for bug, s in SLOPE_BUGS]
        variants += [("alibi_slopes_growing", lambda: got if (got.diff() > 0).all() else None)]
        c.compare(got, _slopes(h), f"{what}:", variants, atol=1e-7)
    for n, h in ((5, 4), (6, 3), (1, 2), (7, 12), (5, 4)):  # (5, 4) twice: a second call
        what = f"alibi_bias({n}, {h})"
        with E.isolated():
            got = call_clean(c, alibi_bias, [], n, h, what=what)
            got = c.expect_tensor_output(got, what, (h, n, n))
        if got.dtype != torch.float32:
            raise c.bug("alibi_not_float32", what=what, dtype=got.dtype)
        own = ("alibi_bias_own_slopes", {"slopes": _slopes(h, one_line=True)})
        soft = [(bug, lambda s=s: _bias(n, h, **s).softmax(-1)) for bug, s in [*BIAS_BUGS, own]]
        where = f"{what}, as softmax weights (a constant per row does not count):"
        c.compare(got.double().softmax(-1), _bias(n, h).softmax(-1), where, soft)
    c.passed(
        "slopes right for 9 head counts from 1 to 20; the bias right as softmax weights for 4 "
        "sizes from 1 to 7 tokens, called twice"
    )


__all__ = ["check_alibi", "check_gelu", "check_layer_norm", "check_rms_norm", "check_swiglu"]
