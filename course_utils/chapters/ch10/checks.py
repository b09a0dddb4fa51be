"""Self-checks for chapter 10: the transformer block (pre- and post-norm) and the decoder block (the
sinusoidal table and the packed mask: checks_tables.py; the norms, GELU, SwiGLU, ALiBi:
checks_norms.py). A block is recomputed from the student's
own parts (one reference function, rewired by a table of switches per known mistake), in eval mode
(the wiring) and in training with dropout (where the dropout goes). In training the masks are
captured: every dropout call of the student's forward is recorded with the tensor it dropped, and
the reference drops a tensor with the mask recorded for an equal tensor (else the next unused mask
of its shape), so the comparison is exact whatever the order of the draws."""

from __future__ import annotations

import inspect
from typing import NamedTuple

import torch
from torch import nn

from course_utils.checks import _engine as E

from .probes import on_device

# Shortcuts graded answers may call (tools/grading/honesty.py): all (the wiring is graded)
ALLOWED_SHORTCUTS = ("sdpa", "mha", "flex")


# --------------------------------------------------------------------------- the two blocks
class BlockCase(NamedTuple):
    """A block built as (d_model, num_heads, d_ff, context_length), run on (batch, n, d_model);
    the decoder's ``m``: source tokens (its ``causal`` unused: the decoder is always causal)."""

    d_model: int
    num_heads: int
    d_ff: int
    context_length: int
    batch: int
    n: int
    causal: bool = True
    seed: int = 0
    m: int = 0


BLOCK_CASES = (
    BlockCase(8, 2, 16, 6, 2, 6, True, 1301),  # n == context_length, causal
    BlockCase(12, 3, 20, 9, 1, 5, False, 1302),  # batch 1, encoder
    BlockCase(8, 4, 32, 7, 3, 1, True, 1303),  # batch 3, one token
)
# the first has n == m, so that queries and keys swapped still run and can be named
DECODER_CASES = (
    BlockCase(8, 2, 16, 8, 2, 5, seed=1311, m=5),
    BlockCase(12, 3, 24, 9, 3, 1, seed=1312, m=7),  # one target token, a longer source
)
P = 0.3  # the dropout the blocks are built with (not 0.5: 1 - p would pass for p)
_PARTS = {
    False: ("attn", "norm1", "norm2", "ff", "drop"),
    True: ("self_attn", "cross_attn", "norm1", "norm2", "norm3", "ff", "drop"),
}
_WANTED = {"ff": "nn.Sequential(Linear, GELU, Linear)", "drop": "nn.Dropout(dropout)"}
ALL = (0, 1, 2)


def _wired(p: dict, nf: bool, x, mem=None, real=None, **sw) -> torch.Tensor:
    """The block (``mem`` None) or the decoder block computed from the student's parts ``p``; each
    switch of ``sw`` rewires it the way one known mistake does (sub-layer groups: -1 is the FFN)."""
    nf, drop, keep = nf != sw.get("flip", False), p["drop"], (lambda t: t)
    on_branch, drop_at, q_prev = sw.get("on_branch"), sw.get("drop_at"), sw.get("q_prev")
    first = p["attn" if mem is None else sw.get("sa_module", "self_attn")]
    if sw.get("kv_raw"):  # keys and values from the un-normalised x
        fs = [lambda h: first(h, x0)]
    else:
        fs = [lambda h: first(h, None, real) if sw.get("sa_mask") else first(h)]
    if mem is not None:
        ca, n2 = p[sw.get("ca_module", "cross_attn")], p["norm2"]
        args = {
            "": lambda h: (h, mem, real),
            "swap": lambda h: (mem, h, real),
            "swap_bare": lambda h: (mem, h),
            "self": lambda h: (h,),
            "unmasked": lambda h: (h, mem),
            "norm_mem": lambda h: (h, n2(mem), real),
            "inverted": lambda h: (h, mem, ~real),  # nn.MultiheadAttention's key_padding_mask
        }[sw.get("cross", "")]
        fs.append(lambda h: ca(*args(h)))
        fs = fs[1::-1] if sw.get("cross_first") else fs  # cross-attention, then self-attention
    fs.append(p["ff"])
    ns = [p[k] for k in sw.get("norms", ("norm1", "norm2", "norm3")[: len(fs)])]
    x0 = s = x
    y = None
    for i, (f, n) in enumerate(zip(fs, ns)):
        at = lambda key, i=i: i in sw.get(key, ()) or i - len(fs) in sw.get(key, ())
        d = keep if at("undropped") else drop
        src = x0 if at("parallel") else x  # GPT-J's parallel block: every sub-layer reads x0
        h = src if not nf or at("bare") or on_branch else n(src)
        base = mem if sw.get("res_mem") and i == 1 else x0 if at("from_x") else x
        base = h if nf and at("after_norm") else s if sw.get("sum_res") and not nf else base
        out = raw = (
            h if at("unused") else src if at("discard") else f(y if q_prev and i == 1 else h)
        )
        if on_branch:  # x + norm(f(x))
            out = n(d(out)) if on_branch == "in" else d(n(out))
        elif drop_at != "sum" and (drop_at != "norm" or nf):
            out = d(out)
        base = 2 * base if at("twice") else raw if at("own") else out if at("out") else base
        y, x = out, out if at("no_res") else base + out
        x = d(x) if drop_at == "sum" else x
        if not nf and not on_branch:
            s, x = x, n(x)
            x = d(x) if drop_at == "norm" else x
    return drop(x) if sw.get("drop_end") else x


_BLOCK_BUGS = [  # (mistake id, switches of _wired), tried in this order on a wrong output
    ("block_norm_placement", {"flip": True}),
    ("block_residual_after_norm", {"after_norm": ALL}),
    ("block_residual_after_norm", {"after_norm": (-1,)}),
    ("block_residual_after_norm", {"after_norm": (0,)}),
    ("block_norm_on_branch", {"on_branch": "in"}),
    ("block_norm_on_branch", {"on_branch": "out"}),
    ("block_residual_skips_norm", {"sum_res": True}),
    ("block_ffn_no_residual", {"no_res": (-1,)}),
    ("block_attn_no_residual", {"no_res": (0,)}),
    ("block_ffn_residual_from_input", {"from_x": (-1,)}),
    ("block_ffn_output_unused", {"unused": (-1,)}),
    ("block_ffn_output_unused", {"discard": (-1,)}),
    ("block_residual_twice", {"twice": (-1,)}),
    ("block_residual_twice", {"twice": ALL}),
    ("block_residual_overwritten", {"out": (0,)}),
    ("block_residual_overwritten", {"own": ALL}),
    ("block_keys_not_normalised", {"kv_raw": True}),
    ("block_parallel_residual", {"parallel": ALL}),
    ("block_norm_reused", {"norms": ("norm1",) * 3}),
    ("block_dropout_after_residual", {"drop_at": "sum"}),
    ("block_dropout_after_residual", {"drop_at": "norm"}),
    ("block_dropout_missing", {"undropped": ALL}),
    ("block_dropout_missing", {"undropped": (0,)}),
    ("block_dropout_missing", {"undropped": (-1,)}),
    ("block_output_dropped", {"drop_end": True}),
]
_ONLY = {
    False: [("block_norms_exchanged", {"norms": ("norm2", "norm1")})],
    True: [
        ("decoder_cross_swapped", {"cross": "swap"}),
        ("decoder_cross_swapped", {"cross": "swap_bare"}),
        ("decoder_memory_unused", {"cross": "self"}),
        ("decoder_padding_ignored", {"cross": "unmasked"}),
        ("decoder_memory_real_inverted", {"cross": "inverted"}),
        ("decoder_cross_before_self", {"cross_first": 1}),
        ("decoder_cross_before_self", {"cross_first": 1, "norms": ("norm2", "norm1", "norm3")}),
        ("decoder_masks_swapped", {"cross": "unmasked", "sa_mask": True}),
        ("decoder_memory_normalised", {"cross": "norm_mem"}),
        ("decoder_cross_not_normalised", {"bare": (1,)}),
        ("decoder_cross_queries_from_sublayer", {"q_prev": True}),
        ("decoder_cross_residual_from_memory", {"res_mem": True}),
        ("decoder_self_attention_not_causal", {"sa_module": "cross_attn"}),
        ("decoder_cross_uses_self_attn", {"ca_module": "self_attn"}),
        ("block_norm_reused", {"norms": ("norm1", "norm1", "norm3")}),
        ("decoder_norm1_reused_raw_queries", {"norms": ("norm1", "norm1", "norm3"), "q_prev": 1}),
    ],
}
# what a mistake that rewires the norms names, for each norm_first
_NORMS = {
    True: {"wanted": "pre-norm", "got": "post-norm"},
    False: {"wanted": "post-norm", "got": "pre-norm"},
}


def _build(c: E.Check, cls: type, case: BlockCase, nf: bool, decoder: bool):
    """The student's block under the case's seed, its parts (each norm nudged off scale 1 and shift
    0, so that the norms differ; the attention layers' own weight dropout off: chapter 04's)."""
    d, h, d_ff, ctx = case[:4]
    kw = {"norm_first": nf} if decoder else {"norm_first": nf, "causal": case.causal}
    what = f"{cls.__name__}(d_model={d}, num_heads={h}, d_ff={d_ff}, context_length={ctx}, "
    what += f"dropout={P}, " + ", ".join(f"{k}={v}" for k, v in kw.items()) + ")"
    module = E.construct(c, cls, d, h, d_ff, ctx, P, what=what, seed=case.seed, **kw)
    parts = {}
    for name in _PARTS[decoder]:
        wanted = _WANTED.get(name, "LayerNorm(d_model)" if "norm" in name else "an Attention")
        parts[name] = E.find_attribute(c, module, name, what, wanted)
        if not callable(parts[name]):
            raise c.bug("not_a_module", what=f"{what}.{name}", kind=type(parts[name]).__name__)
    if isinstance(parts["drop"], nn.Dropout) and parts["drop"].p != P:
        try:  # where the fifth positional argument, the dropout, lands
            landed = list(inspect.signature(cls).bind_partial(d, h, d_ff, ctx, P).arguments)[4]
        except (TypeError, ValueError, IndexError):
            landed = "dropout"
        how = "__init__ does not give it to nn.Dropout" if landed == "dropout" else ""
        how = how or f"your __init__'s fifth parameter is {landed!r}, so {P} lands there"
        raise c.bug("block_dropout_argument_lost", what=what, p=parts["drop"].p, how=how)
    g = E.generator(case.seed + 7)
    with torch.no_grad():
        for name, part in parts.items():
            for sub in part.modules() if isinstance(part, nn.Module) else ():
                if "attn" in name and isinstance(sub, nn.Dropout):
                    sub.p = 0.0
                for param in sub.parameters(recurse=False) if "norm" in name else ():
                    param.add_(0.5 * torch.randn(param.shape, generator=g))
    return module, parts, what


def _grads(c: E.Check, out: torch.Tensor, weights: list, where: str) -> list:
    if not out.requires_grad:
        raise c.bug("block_gradient_differs", f"{where} the output does not require a gradient.")
    loss = (out * torch.linspace(-1, 1, out.numel()).view(out.shape)).sum()
    return list(torch.autograd.grad(loss, weights, allow_unused=True, retain_graph=True))


def _block_case(c: E.Check, cls: type, case: BlockCase, nf: bool, decoder: bool) -> None:
    module, p, what = _build(c, cls, case, nf, decoder)
    b, n, d, m = case.batch, case.n, case.d_model, case.m
    ins = [E.randn(b, n, d, seed=case.seed + 1), E.randn(b, m, d, seed=case.seed + 2)]
    ins = ins[: 1 + decoder]  # x (and the decoder's memory)
    rest = (torch.arange(m) < torch.tensor([m - i for i in range(b)])[:, None],) * decoder  # (b, m)
    call = f"{what}'s forward on x of shape {tuple(ins[0].shape)}"
    call += f", memory {(b, m, d)} with text i padded by i tokens" * decoder
    bugs = _BLOCK_BUGS + _ONLY[decoder]
    ctx = f"With norm_first={nf}"

    def ref(ins: list, parts: dict = p, **switches) -> torch.Tensor:
        return _wired(parts, nf, *ins, *rest, **switches)

    def forward(ins: list, where: str, rest=rest) -> torch.Tensor:
        got = c.call_pure(module, [*ins, *rest], what=f"{call}{where}")
        return c.expect_tensor_output(got, f"{call}{where}", (b, n, d))

    module.eval()
    got = forward(ins, " in eval mode")
    if not E.same(got, forward(ins, ", called again in eval mode")):
        raise c.bug("block_dropout_in_eval", f"{ctx}, in eval mode:")
    variants = [(bug, lambda sw=sw: ref(ins, **sw)) for bug, sw in bugs]
    other = [E.randn(*t.shape, seed=case.seed + 4 + i) for i, t in enumerate(ins)]
    if decoder:  # the output does not change with the memory: the memory is never read
        same = lambda: (
            got if E.same(forward([ins[0], other[1]], " with another memory"), got) else None
        )
        variants.append(("decoder_memory_unused", same))
    c.compare(got, ref(ins), f"{ctx}, {call}:", variants, context=f"{ctx}:", detail=_NORMS[nf])
    if not E.same(forward(other, ", then on another input"), ref(other)):
        raise c.bug("state_between_calls", f"{ctx}, two calls with different inputs in eval mode:")
    owned = [*module.parameters(), *module.buffers()]
    on_device(c, module, [*ins, *rest], f"{ctx}, on another device:", owned)
    if decoder:  # memory_real left at its default, None: every source token is real
        try:
            alone = forward(ins, ", memory_real left out", rest=())
        except E.CheckFailure as failure:
            if failure.bug or failure.__cause__ is None:
                raise
            did = f"raised {type(failure.__cause__).__name__}: {failure.__cause__}"
            raise c.bug("decoder_memory_real_default", f"{ctx}:", did=did) from None
        if not E.same(alone, _wired(p, nf, *ins, None)):
            did = "gave another output than with every source token marked real"
            raise c.bug("decoder_memory_real_default", f"{ctx}:", did=did)
        on_device(c, module, ins, f"{ctx}, memory_real left out, on another device:", owned)
    # training: the reference drops each tensor with the mask your forward drew for an equal one
    # (or, for a tensor you did not drop as such, the next mask of its shape: same order)
    module.train()
    leaves, watch = [t.clone().requires_grad_() for t in ins], E.Watch()
    where = f"{ctx}, in training with dropout={P} (the reference uses your dropout masks):"
    with torch.enable_grad():
        with watch:
            got = forward(leaves, f" in training, dropout={P}")
        masks = watch.dropouts()
        if any(abs(q - P) > 1e-9 for _, q, _ in masks):
            raise c.bug("block_dropout_wrong_p", where, p=[q for _, q, _ in masks])

        seen = []  # every tensor a reference (right or rewired) drops

        def masked(ins: list, **switches) -> torch.Tensor:
            used = []

            def drop(t: torch.Tensor) -> torch.Tensor:  # the mask drawn for an equal tensor, else
                # the next one of t's shape; IndexError: your forward drew none for t
                seen.append(t.detach())
                same = [i for i, (inp, _, _) in enumerate(masks) if E.same(inp, t)]
                free = [i for i, (inp, _, _) in enumerate(masks) if i not in used]
                used.append((same or [i for i in free if masks[i][0].shape == t.shape])[0])
                return t * (masks[used[-1]][2] != 0) / (1 - P)

            return ref(ins, {**p, "drop": drop}, **switches)

        try:
            want = masked(leaves)
        except IndexError:  # a dropout somewhere the reference never drops
            want = None
        variants = [(bug, lambda sw=sw: masked(ins, **sw)) for bug, sw in bugs]
        odd = lambda: any(not any(E.same(inp, t) for t in seen) for inp, _, _ in masks)
        variants.append(("block_dropout_elsewhere", lambda: got if want is None or odd() else None))
        expected = torch.full_like(got, torch.nan) if want is None else want.detach()
        c.compare(got, expected, where, variants, context=where, detail=_NORMS[nf])
        if want is None:  # only an output of NaN passes the comparison above
            raise c.bug("block_dropout_elsewhere", where)
        weights = [*leaves, *(w for w in module.parameters() if w.requires_grad)]
        for got_g, want_g in zip(_grads(c, got, weights, where), _grads(c, want, weights, where)):
            if not (got_g is None and want_g is None or E.same(got_g, want_g)):
                raise c.bug("block_gradient_differs", where)


def _check_blocks(c: E.Check, cls: type, decoder: bool) -> None:
    __tracebackhide__ = True
    c.ensure_class(cls, f"a class such as {'DecoderBlock' if decoder else 'TransformerBlock'}")
    cases = DECODER_CASES if decoder else BLOCK_CASES
    with E.isolated():
        for case in cases:
            for nf in (True, False):
                _block_case(c, cls, case, nf, decoder)
    what = "target as long as its source or 1 token; memory_real given or left out"
    what = what if decoder else "causal and not, 1 token"
    c.passed(
        f"pre-norm and post-norm match on {len(cases)} configurations ({what}), in eval mode, on "
        f"another device and in training with dropout {P} (the reference with your masks), "
        "gradients too",
    )


def check_transformer_block(cls: type) -> None:
    """Check a ``TransformerBlock(d_model, num_heads, d_ff, context_length, dropout, norm_first,
    causal)`` class: pre-norm ``x + drop(f(norm(x)))`` when norm_first, post-norm
    ``norm(x + drop(f(x)))`` otherwise, for attention (norm1) then the FFN (norm2); outputs in
    eval mode and in training, gradients."""
    _check_blocks(E.Check("check_transformer_block"), cls, decoder=False)


def check_decoder_block(cls: type) -> None:
    """Check a ``DecoderBlock(d_model, num_heads, d_ff, context_length, dropout, norm_first)``
    class: causal self-attention (norm1), cross-attention with queries from x and keys/values from
    memory under memory_real (norm2), the FFN (norm3); pre- or post-norm; eval, training, gradients."""
    _check_blocks(E.Check("check_decoder_block"), cls, decoder=True)


__all__ = ["check_decoder_block", "check_transformer_block"]

from . import checks_norms, checks_tables  # noqa: E402  (norms, GELU, SwiGLU, ALiBi; tables, masks)
from .checks_norms import *  # noqa: E402, F403
from .checks_tables import *  # noqa: E402, F403

__all__ += checks_norms.__all__ + checks_tables.__all__
