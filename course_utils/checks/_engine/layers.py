"""The engine's layer half: building a student's nn.Module, running it, reading its weights by
the book's names."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch import nn

from .core import Check, CheckFailure, generator, preserved_rng, randn
from .watch import Watch


def chapters():
    """The chapters' own code (the reference classes), exported from the solution notebooks."""
    from ... import chapters as module

    return module


@dataclass(frozen=True)
class Case:
    """One configuration a layer is built with, and the batch it is run on. With ``vocab``, a
    language model (chapter 06's TinyGPT): built as (vocab_size, context_length, d_model=d_in,
    num_heads, dropout), run on token ids."""

    batch: int
    n: int
    d_in: int
    d_out: int
    context_length: int
    num_heads: int | None = None  # None: a single-head layer (chapter 04's constructor)
    qkv_bias: bool = False
    seed: int = 0
    vocab: int | None = None

    def args(self, dropout: float = 0.0) -> tuple:
        if self.vocab is not None:
            return (self.vocab, self.context_length, self.d_in, self.num_heads, dropout)
        base = (self.d_in, self.d_out, self.context_length, dropout)
        return base if self.num_heads is None else (*base, self.num_heads)

    def signature(self) -> str:
        if self.vocab is not None:
            return "(vocab_size, context_length, d_model, num_heads, dropout=0.1)"
        return (
            "(d_in, d_out, context_length, dropout"
            + ("" if self.num_heads is None else ", num_heads")
            + ", qkv_bias=False)"
        )

    def describe(self, cls: type, dropout: float = 0.0) -> str:
        if self.vocab is not None:
            return (
                f"{cls.__name__}(vocab_size={self.vocab}, context_length={self.context_length}, "
                f"d_model={self.d_in}, num_heads={self.num_heads}, dropout={dropout})"
            )
        heads = "" if self.num_heads is None else f", num_heads={self.num_heads}"
        return (
            f"{cls.__name__}(d_in={self.d_in}, d_out={self.d_out}, context_length="
            f"{self.context_length}, dropout={dropout}{heads}, qkv_bias={self.qkv_bias})"
        )

    def inputs(self, n: int | None = None) -> torch.Tensor:
        if self.vocab is not None:
            shape = (self.batch, self.n if n is None else n)
            return torch.randint(0, self.vocab, shape, generator=generator(self.seed))
        return randn(self.batch, self.n if n is None else n, self.d_in, seed=self.seed + 7)


def construct(
    c: Check,
    cls: type,
    *args,
    what: str,
    seed: int | None = None,
    hint: str | None = None,
    **kwargs,
) -> nn.Module:
    """``cls(*args, **kwargs)`` under ``seed`` (the global RNG restored); anything but an nn.Module is diagnosed."""
    __tracebackhide__ = True
    with preserved_rng():
        if seed is not None:
            torch.manual_seed(seed)
        module = c.call(cls, *args, what=what, hint=hint, **kwargs)
    if not isinstance(module, nn.Module):
        raise c.bug("not_a_module", what=what, kind=type(module).__name__)
    return module


def build(c: Check, cls: type, case: Case, dropout: float = 0.0) -> nn.Module:
    """Construct the student's class for a case, under the case's seed."""
    __tracebackhide__ = True
    extra = (
        {} if case.vocab is not None else {"qkv_bias": case.qkv_bias}
    )  # TinyGPT takes no qkv_bias
    return construct(
        c,
        cls,
        *case.args(dropout),
        what=case.describe(cls, dropout),
        seed=case.seed,
        hint=f"the constructor takes {case.signature()}.",
        **extra,
    )


def run(
    c: Check,
    module: nn.Module,
    x: torch.Tensor,
    where: str,
    full_length: torch.Tensor | None = None,
    watch: Watch | None = None,
) -> torch.Tensor:
    """Call forward: a crash, a non-tensor or a changed input becomes a diagnosis. ``full_length``:
    an input of exactly context_length tokens, tried after a crash to recognise an unsliced mask."""
    __tracebackhide__ = True
    before = x.clone()
    try:
        with watch or contextlib.nullcontext():
            got = module(x)
    except NotImplementedError:
        raise c.stub(where.rstrip(":")) from None
    except CheckFailure:
        raise
    except Exception as exc:  # noqa: BLE001 - reported in plain words
        error = f"(The error was {type(exc).__name__}: {exc})"
        if "view size is not compatible" in str(exc):
            raise c.bug("missing_contiguous", f"{where} forward crashed. {error}") from None
        if full_length is not None:
            try:
                module(full_length)
            except Exception:  # noqa: BLE001 - it crashes anyway: not a slicing problem
                pass
            else:
                raise c.bug("mask_not_sliced", f"{where} forward crashed. {error}") from None
        raise c.fail(f"{where} forward raised {type(exc).__name__}: {exc}") from exc
    if not torch.equal(x, before):
        raise c.bug("input_modified", where, what="input x")
    return c.expect_tensor_output(got, f"{where.rstrip(':')} forward")


def find_attribute(c: Check, module: nn.Module, attr: str, owner: str, wanted: str) -> object:
    """``module.attr``, which the check reads by the chapter's name; missing: say what the module has."""
    if not hasattr(module, attr):
        names = sorted(name for name, _ in module.named_parameters())
        found = (
            ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
            or "none"
        )
        raise c.bug("attribute_missing", attr=attr, wanted=wanted, owner=owner, found=found)
    return getattr(module, attr)


def find_linear(
    c: Check, module: nn.Module, attr: str, owner: str, d_in: int, d_out: int, bias: bool | None
) -> nn.Linear:
    """The student's nn.Linear called ``attr``, checked for its sizes and bias."""
    wanted = f"nn.Linear({d_in}, {d_out}" + ("" if bias is None else f", bias={bias}") + ")"
    layer = find_attribute(c, module, attr, owner, wanted)
    if not isinstance(layer, nn.Linear):
        raise c.bug(
            "not_a_linear", owner=owner, attr=attr, kind=type(layer).__name__, wanted=wanted
        )
    if (layer.in_features, layer.out_features) != (d_in, d_out):
        raise c.bug(
            "linear_wrong_size",
            owner=owner,
            attr=attr,
            got_in=layer.in_features,
            got_out=layer.out_features,
            d_in=d_in,
            d_out=d_out,
            wanted=wanted,
        )
    if bias is not None and (layer.bias is not None) != bias:
        state = "has a bias" if layer.bias is not None else "has no bias"
        raise c.bug("qkv_bias_ignored", f"With qkv_bias={bias}, {owner}.{attr} {state}.")
    return layer


def qkv_layers(c: Check, module: nn.Module, owner: str, case: Case) -> dict[str, nn.Linear]:
    """W_query, W_key and W_value: three nn.Linear layers of the case's sizes, none the same as another."""
    layers = {
        name: find_linear(c, module, name, owner, case.d_in, case.d_out, case.qkv_bias)
        for name in ("W_query", "W_key", "W_value")
    }
    for first, second in (("W_query", "W_key"), ("W_query", "W_value"), ("W_key", "W_value")):
        if layers[first].weight is layers[second].weight:
            raise c.bug("projections_shared", owner=owner, first=first, second=second)
    return layers


def check_mask_buffer(c: Check, module: nn.Module, owner: str, context_length: int) -> None:
    """Require a (context_length, context_length) mask registered as a buffer."""

    def is_mask(t: object) -> bool:
        return (
            isinstance(t, torch.Tensor)
            and t.dim() >= 2
            and t.numel() == context_length**2
            and tuple(t.shape[-2:]) == (context_length, context_length)
        )

    if any(is_mask(b) for b in module.buffers()):
        return
    if any(
        is_mask(p) and (not p.requires_grad or "mask" in name.lower())
        for name, p in module.named_parameters()
    ):
        raise c.bug("mask_parameter", f"In {owner}:")
    if any(is_mask(value) for sub in module.modules() for value in vars(sub).values()):
        raise c.bug("mask_not_buffer", f"In {owner}:")
    raise c.bug("mask_buffer_missing", n=context_length, owner=owner)


def causal_layers(c: Check, module: nn.Module, owner: str, case: Case) -> dict[str, nn.Linear]:
    """The W_query, W_key, W_value layers of a causal head, after checking its mask buffer."""
    layers = qkv_layers(c, module, owner, case)
    check_mask_buffer(c, module, owner, case.context_length)
    return layers


def check_output_shape(
    c: Check,
    out: object,
    expected: tuple[int, ...],
    why: str,
    hints: dict[tuple[int, ...], str],
    default_hint: str,
) -> None:
    """A "run a big batch" check: a finite tensor of the ``expected`` shape; ``hints`` maps a
    wrong shape that a known mistake produces to its explanation."""
    __tracebackhide__ = True
    if not isinstance(out, torch.Tensor):
        raise c.bug("output_not_tensor", kind=type(out).__name__)
    shape = tuple(out.shape)
    if shape != expected:
        raise c.fail(
            f"Your output has shape {shape}, expected {expected}: {why}",
            hints.get(shape, default_hint),
        )
    if not torch.isfinite(out).all():
        raise c.bug("output_not_finite")
    c.passed(f"the output has shape {expected}")


__all__ = [
    "Case",
    "build",
    "causal_layers",
    "chapters",
    "check_mask_buffer",
    "check_output_shape",
    "construct",
    "find_attribute",
    "find_linear",
    "qkv_layers",
    "run",
]
