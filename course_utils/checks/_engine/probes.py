"""The behaviour probes every layer check runs: another device, a second longer call, dropout,
a training step with gradients, the length limit; and :func:`check_layer`, which runs them all."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from .core import Check, describe_difference, isolated, preserved_rng, same
from .layers import Case, build, run
from .pipeline import NO_DROP, RIGHT, Recipe, Trace
from .watch import DeviceMix, Placement, Watch


def expect_value_error(
    c: Check,
    fn: Callable[[], object],
    where: str,
    stub: str,
    *,
    refusal: type[Exception] = ValueError,
    bug: str = "no_length_check",
) -> None:
    """``fn()`` feeds a too-long input: it must raise ValueError (the course's one rule); ``refusal``
    and ``bug`` serve other inputs that must be refused."""
    __tracebackhide__ = True
    try:
        fn()
    except NotImplementedError:
        raise c.stub(stub) from None
    except refusal:
        return
    except Exception as exc:  # noqa: BLE001 - the wrong kind of refusal
        raise c.bug("length_error_not_value_error", where, error=type(exc).__name__) from None
    raise c.bug(bug, where)


def check_too_long(c: Check, cls: type, case: Case) -> None:
    """An input longer than context_length must raise ValueError (the course's one rule)."""
    __tracebackhide__ = True
    module, n = build(c, cls, case), case.context_length + 1
    expect_value_error(
        c,
        lambda: module(case.inputs(n)),
        f"{case.describe(cls)} on a batch of {n} tokens:",
        case.describe(cls),
    )


def probe_second_call(
    c: Check,
    module: nn.Module,
    inputs: Callable[[int], torch.Tensor],
    expected: Callable[[torch.Tensor], torch.Tensor],
    context_length: int,
    where: str,
    on_first: Callable[[int], None] | None = None,
) -> None:
    """Calls with a short input, another short one of the same shape, a full-length one, then the
    first again must all match ``expected``: catches a forward that keeps something from an earlier
    call (keys stored on self) or overwrites its stored mask (self.mask = self.mask[:n, :n])."""
    __tracebackhide__ = True
    short = max(1, context_length // 3)
    other = inputs(context_length)[
        :, -short:
    ].contiguous()  # same shape as inputs(short), other numbers
    for i, x in enumerate((inputs(short), other, inputs(context_length), inputs(short))):
        try:
            ok = same(module(x), expected(x))
        except Exception:  # noqa: BLE001 - a crash on a later call is what is looked for
            ok = False
        if not ok and i == 0 and on_first is not None:
            on_first(short)  # the first call is already wrong: report that difference instead
        if not ok and i == 1:
            raise c.bug(
                "state_between_calls",
                f"{where} two calls with different batches of {short} tokens:",
            )
        if not ok:
            raise c.bug(
                "mask_overwritten",
                f"{where} calls with {short}, then {context_length}, then {short} tokens:",
            )


# --------------------------------------------------------------------------- dropout
DROPOUT_P = 0.3


def _dropped(trace: Trace, inp: torch.Tensor) -> tuple[int, int | None] | None:
    """(unit, head) when ``inp`` is a unit's attention weights (head None) or one head's slice."""
    for unit, w in enumerate(trace.weights):
        if same(inp, w):
            return unit, None
        if w.dim() == 4 and inp.dim() == 3:
            for head in range(w.shape[1]):
                if same(inp, w[:, head]):
                    return unit, head
    return None


def _dropout_calls(c: Check, module: nn.Module, x, where: str, plain, seed: int):
    """Eval mode gives the plain output; two train-mode calls draw new masks and keep train mode.
    Returns the first train-mode output and the dropout calls it made."""
    module.eval()
    if not same(run(c, module, x, f"{where} in eval mode:"), plain):
        raise c.bug("dropout_in_eval", f"{where} after .eval():")
    module.train()
    watch = Watch()
    with preserved_rng():
        torch.manual_seed(seed)
        got = run(c, module, x, f"{where} in train mode:", watch=watch)
        again = run(c, module, x, f"{where} in train mode, a second call:")
    if not module.training:
        raise c.bug("mode_changed_in_forward", f"{where}:")
    if same(got, again) and not same(got, plain):
        raise c.bug("dropout_same_mask", f"{where} two calls in train mode:")
    return got, watch


def _no_dropout_seen(c: Check, watch: Watch, unchanged: bool, where: str) -> None:
    """No dropout call seen: right only when scaled_dot_product_attention dropped with p=DROPOUT_P."""
    if unchanged:
        raise c.bug("dropout_ignored", f"{where} in train mode:")
    sdpa_p = watch.sdpa_dropout()
    if abs(sdpa_p - DROPOUT_P) < 1e-9:
        return  # scaled_dot_product_attention drops the weights inside, with the right p
    if sdpa_p > 0:
        raise c.bug(
            "dropout_wrong_p",
            f"{where}: the layer was built with dropout={DROPOUT_P}, "
            f"but scaled_dot_product_attention got dropout_p={sdpa_p:g}.",
        )
    raise c.bug("dropout_not_seen", where=where)


def _dropped_weights(c: Check, trace: Trace, plain, active, where: str) -> dict:
    """Each unit's dropped-out attention weights (whole, or its heads stacked); dropout on another
    tensor, with another p, or on some heads only is named."""
    places = [
        (trace.scores, "dropout_before_softmax"),
        (trace.context + [plain], "dropout_on_context"),
        (trace.projections, "dropout_on_projections"),
    ]
    dropped: dict[int, dict[int | None, torch.Tensor]] = {}
    for inp, p, out in active:
        found = _dropped(trace, inp)
        if found is None:
            bug = next((bug for tensors, bug in places if any(same(inp, t) for t in tensors)), None)
            if bug:
                raise c.bug(bug, f"{where} in train mode:")
            raise c.bug("dropout_on_other_tensor", where=where, shape=tuple(inp.shape))
        if abs(p - DROPOUT_P) > 1e-9:
            raise c.bug(
                "dropout_wrong_p",
                f"{where}: the layer was built with dropout={DROPOUT_P}, "
                f"but its dropout used p={p:g}.",
            )
        dropped.setdefault(found[0], {})[found[1]] = out
    full = {}
    for unit, parts in dropped.items():
        if None in parts:
            full[unit] = parts[None]
        elif len(parts) == trace.weights[unit].shape[1]:  # one head at a time, inside a loop
            full[unit] = torch.stack([parts[h] for h in sorted(parts)], dim=1)
    if len(full) < len(trace.weights):
        raise c.bug("dropout_some_heads", where=where)
    return full


def check_dropout(
    c: Check,
    module: nn.Module,
    x: torch.Tensor,
    where: str,
    reference: Callable[..., torch.Tensor],
    seed: int,
) -> None:
    """``module`` was built with dropout=DROPOUT_P; ``reference(drop=..., trace=...)`` recomputes it.
    Eval mode must give the plain output; train mode must route every attention-weight tensor,
    and nothing else, through dropout with p=DROPOUT_P, and use what it returns."""
    __tracebackhide__ = True
    trace = Trace()
    plain = reference(drop=NO_DROP, trace=trace)
    got, watch = _dropout_calls(c, module, x, where, plain, seed)
    active = watch.dropouts()
    if not active:
        _no_dropout_seen(c, watch, same(got, plain), where)
        return
    full = _dropped_weights(c, trace, plain, active, where)
    expected = reference(drop=lambda w, unit: full[unit])
    if same(got, expected):
        return
    if same(got, plain):
        raise c.bug("dropout_unused", f"{where} in train mode:")
    raise c.fail(
        f"{where} in train mode, with the dropout mask your layer drew: "
        f"{describe_difference(expected, got.detach())}.",
        "multiply the dropped-out weights with the values: self.dropout(weights) @ values.",
    )


# --------------------------------------------------------------------------- a whole layer check
Read = Callable[[Check, nn.Module, str, Case], object]  # (check, module, owner, case) -> weights


@dataclass(frozen=True)
class Layer:
    """What a layer check knows of the layer it checks: ``read(c, module, owner, case)`` finds the
    student's weights, ``compute(weights, x, recipe=RIGHT, drop=NO_DROP, trace=None)`` recomputes
    the output from them, ``variants`` are the (mistake id, Recipe) pairs tried on a wrong output,
    and ``reference`` is the chapter's own class (parameter count, creation order), if any."""

    read: Read
    compute: Callable
    variants: Sequence[tuple[str, Recipe]] = ()
    reference: type | None = None


def _compare(c, cls, case, layer: Layer, pairs, module=None, n=None):
    read, compute = layer.read, layer.compute
    module = module or build(c, cls, case)
    owner, weights = case.describe(cls), read(c, module, case.describe(cls), case)
    module.eval()
    x = case.inputs(n)
    where = f"With {owner} on a batch of shape {tuple(x.shape)}:"
    full = case.inputs(case.context_length) if x.shape[1] < case.context_length else None
    watch = Watch()
    got = run(c, module, x, where, full, watch)
    expected = compute(weights, x)
    if not same(got, expected):
        sdpa = any(
            call[0] == "scaled_dot_product_attention" for call in watch.calls
        )  # its bool mask means keep
        pairs = [("sdpa_mask_inverted" if sdpa and b == "keep_mask" else b, r) for b, r in pairs]
        candidates = [(b, lambda r=r: compute(weights, x, r)) for b, r in pairs]
        c.compare(got, expected, where, candidates)
    return module, weights


def probe_device(
    c: Check, module: nn.Module | None, x: torch.Tensor, where: str, fn: Callable | None = None
) -> None:
    """Run as if the module and its input were on another device (:class:`Placement`): a tensor
    made on the CPU inside forward (or inside ``fn``) that meets them is named."""
    __tracebackhide__ = True
    args = list(x) if isinstance(x, (list, tuple)) else [x]
    owned = [] if module is None else [*module.parameters(), *module.buffers()]
    try:
        with preserved_rng(), torch.no_grad(), Placement([*args, *owned]):
            (fn if fn is not None else module)(*args)
    except DeviceMix as exc:
        raise c.bug("cpu_tensor_in_forward", where, error=str(exc)) from None
    except Exception:  # noqa: BLE001 - other failures are reported by the other probes
        pass


def probe_layer(c: Check, cls: type, case: Case, layer: Layer) -> None:
    """The behaviour probes every layer check runs: another device, a longer second call and
    back, one training step with dropout, gradients, the parameter count."""
    __tracebackhide__ = True
    read, compute, reference_cls = layer.read, layer.compute, layer.reference
    where = f"With {case.describe(cls)}:"
    module = build(c, cls, case)
    if reference_cls is not None:
        with preserved_rng():
            want = sum(
                p.numel() for p in reference_cls(*case.args(), qkv_bias=case.qkv_bias).parameters()
            )
        have = sum(p.numel() for p in module.parameters())
        if have != want:
            raise c.bug(
                "parameter_count",
                where,
                detail=f"your layer has {have:,} parameters; "
                f"the chapter's class built with the same arguments has {want:,}.",
            )
    module.eval()
    weights = read(
        c, module, where, case
    )  # read before the calls: a forward may replace its own buffers
    probe_second_call(
        c,
        module,
        case.inputs,
        lambda x: compute(weights, x),
        case.context_length,
        where,
        lambda n: _compare(c, cls, case, layer, (), module=module, n=n),
    )
    probe_device(c, build(c, cls, case).eval(), case.inputs(), where)
    x = case.inputs()
    probe_backward(c, build(c, cls, case, DROPOUT_P), x, where)
    module = build(c, cls, case)
    probe_backward(c, module, x, where, lambda: compute(read(c, module, where, case), x))


INPUT = "the input x"  # how probe_backward names the input beside the parameters


def _train_step(c: Check, module: nn.Module, x, params: list, reference, where: str):
    """One forward and backward in train mode; returns the reference's gradients (None without
    one). Another output than the reference's, or a backward that fails, is named."""
    with torch.enable_grad(), preserved_rng():
        wanted, expected = None, None
        if reference is not None:
            expected = reference()
            wanted = torch.autograd.grad(expected.sum(), [p for _, p in params], allow_unused=True)
        try:
            got = module(x)
            if expected is not None and not same(got, expected):  # built with dropout=0
                raise c.bug("dropout_hard_coded", f"{where} in train mode:")
            got.sum().backward()
        except RuntimeError as exc:
            if "inplace" in str(exc):
                raise c.bug(
                    "inplace_breaks_autograd", where, error=str(exc).split(":")[0]
                ) from None
            raise c.fail(
                f"{where} backward() through your layer raised RuntimeError: {exc}"
            ) from None
    return wanted


def _expect_gradients(c: Check, params: list, wanted, where: str) -> None:
    """Every parameter (and a watched input) gets the reference's gradient."""
    for (name, p), g in zip(params, wanted or ()):
        if p.grad is None and g is not None:
            later = ", so the layers before this one would never learn" if name == INPUT else ""
            raise c.bug("gradient_blocked", where, detail=f"{name} gets no gradient{later}")
        if p.grad is not None and (g is None or not same(p.grad, g)):
            detail = (
                f"the gradient of {name} differs from the reference "
                f"({describe_difference(g, p.grad) if g is not None else 'which has none'})"
            )
            raise c.bug("gradient_blocked", where, detail=detail)


def probe_backward(
    c: Check,
    module: nn.Module,
    x: torch.Tensor,
    where: str,
    reference: Callable[[], torch.Tensor] | None = None,
) -> None:
    """One training step: every parameter must be trainable, backward() must work, and with
    ``reference`` (recomputed from the same parameters and ``x``) every parameter and a float input
    must get the reference's gradient."""
    __tracebackhide__ = True
    module.train()
    frozen = [name for name, p in module.named_parameters() if not p.requires_grad]
    if frozen:
        raise c.bug("parameter_frozen", where, names=", ".join(frozen))
    params = list(module.named_parameters())
    watch_input = x.is_floating_point() and x.is_leaf  # earlier layers learn through x's gradient
    if watch_input:
        params.append((INPUT, x.requires_grad_(True)))
    try:
        _expect_gradients(c, params, _train_step(c, module, x, params, reference, where), where)
    finally:
        if watch_input:
            x.requires_grad_(False).grad = None


def check_layer(
    c: Check, cls: type, layer: Layer, cases: Sequence[Case], dropout_case: Case
) -> None:
    """Everything a layer check does: outputs on every case, probes, length limit, dropout."""
    __tracebackhide__ = True
    with isolated():
        for case in cases:
            _compare(c, cls, case, layer, layer.variants)
        module = build(c, cls, dropout_case, DROPOUT_P)
        weights = layer.read(c, module, dropout_case.describe(cls, DROPOUT_P), dropout_case)
        x = dropout_case.inputs()
        check_dropout(
            c,
            module,
            x,
            f"With {dropout_case.describe(cls, DROPOUT_P)}",
            seed=dropout_case.seed,
            reference=lambda drop, trace=None: layer.compute(weights, x, RIGHT, drop, trace),
        )
        probe_layer(c, cls, cases[-1], layer)
        check_too_long(c, cls, cases[-1])
        if layer.reference is not None:
            check_creation_order(c, cls, cases[0], layer.reference)


def check_creation_order(c: Check, cls: type, case: Case, reference_cls: type) -> None:
    """Under the case's seed the layer must draw the chapter's class's initial weights, parameter by
    parameter: a ✓ then means the book's printed numbers come out (creation order included)."""
    __tracebackhide__ = True
    module = build(c, cls, case)
    with preserved_rng():
        torch.manual_seed(case.seed)
        reference = reference_cls(*case.args(), qkv_bias=case.qkv_bias)
    ours, wanted = dict(module.named_parameters()), dict(reference.named_parameters())
    if all(n in ours and same(ours[n].detach(), p.detach()) for n, p in wanted.items()):
        return
    layers = dict.fromkeys(
        n.split(".")[-2] for n in wanted
    )  # W_query, W_key, ... in creation order
    order = ", ".join(layers) + (
        ", head by head" if any(n.startswith("heads.") for n in wanted) else ""
    )
    where = f"With {case.describe(cls)} built after torch.manual_seed({case.seed}):"

    def values(params):
        return sorted(tuple(p.detach().flatten().tolist()) for p in params)

    bug = (
        "layer_init_order"
        if values(ours.values()) == values(wanted.values())
        else "layer_init_differs"
    )
    raise c.bug(bug, where, order=order, seed=case.seed)


__all__ = [
    "DROPOUT_P",
    "Layer",
    "Read",
    "check_creation_order",
    "check_dropout",
    "check_layer",
    "check_too_long",
    "expect_value_error",
    "probe_backward",
    "probe_device",
    "probe_layer",
    "probe_second_call",
]
