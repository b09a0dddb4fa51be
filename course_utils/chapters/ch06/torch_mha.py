"""Chapter 06's check of nn.MultiheadAttention loaded with the course's weights (``check_copy_into_torch_mha``,
re-exported by ``checks.py``): the copied weights, their layout and the mask, each named when wrong."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch
from torch import nn

from course_utils.checks import _engine as E

# --------------------------------------------------------------------------- nn.MultiheadAttention
# (d_model, num_heads, qkv_bias, context_length, batch, n_tokens)
_MHA_CASES = (
    (8, 2, False, 6, 2, 5),
    (12, 3, True, 4, 3, 4),
    (16, 4, False, 8, 1, 8),
    (6, 1, True, 5, 2, 3),
)
_QKV = ("query", "key", "value")


def _mask_bug(mask: torch.Tensor, n: int) -> str | None:
    """The mistake a (CPU) mask for n tokens shows, in nn.MultiheadAttention's convention."""
    future = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)  # (n, n)
    with_diagonal = torch.triu(torch.ones(n, n, dtype=torch.bool))  # (n, n)
    if mask.dtype == torch.bool:
        known = (
            (future, None),
            (~future, "torch_mask_inverted"),
            (torch.tril(~future, diagonal=-1), "torch_mask_inverted"),
            (with_diagonal, "mask_diagonal"),
        )
    elif mask.is_floating_point():

        def hide(hidden):
            return torch.zeros(n, n, dtype=mask.dtype).masked_fill(hidden, float("-inf"))

        known = (
            (hide(future), None),
            (future.to(mask.dtype), "float_mask_ones"),
            ((~future).to(mask.dtype), "float_mask_ones"),
            (hide(~future), "torch_mask_inverted"),
            (hide(with_diagonal), "mask_diagonal"),
        )
    else:
        return None
    return next((bug for want, bug in known if torch.equal(mask, want)), None)


def _snapshot(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _copy(c: E.Check, copy_fn: Callable, ours: nn.Module, theirs: nn.Module) -> None:
    """Run the student's copy_fn(ours, theirs); a crash becomes a diagnosis."""
    try:
        copy_fn(ours, theirs)
    except NotImplementedError:
        raise c.stub("copy_fn") from None
    except RuntimeError as exc:
        if "leaf Variable" in str(exc) or "requires grad" in str(exc):
            raise c.bug("copy_without_no_grad", f"copy_fn raised RuntimeError: {exc}") from None
        raise c.fail(f"copy_fn(ours, theirs) raised RuntimeError: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - we report any crash in plain words
        raise c.fail(f"copy_fn(ours, theirs) raised {type(exc).__name__}: {exc}") from exc


def _check_in_proj(c, where, got, init, blocks, what):
    """Diagnose theirs.in_proj_<what> against our three (query, key, value) blocks."""
    expected = torch.cat(blocks, dim=0)
    if E.same(got, expected):
        return
    for order in itertools.permutations(range(3)):
        if order != (0, 1, 2) and E.same(got, torch.cat([blocks[i] for i in order], dim=0)):
            names = ", ".join(_QKV[i] for i in order)
            raise c.bug("in_proj_order", f"{where} your in_proj_{what} holds ({names}).")
    if what == "weight":
        if E.same(got, torch.cat([b.T for b in blocks], dim=0)):
            raise c.bug("copy_transposed", where)
        if E.same(got, init):
            raise c.bug("in_proj_not_copied", where)
    raise c.fail(
        f"{where} in_proj_{what} is wrong: {E.describe_difference(expected, got)}.",
        f"in_proj_{what} holds the query, key and value parts stacked in that order along dim 0.",
    )


def _check_copied(c, where, ours, theirs, before, qkv_bias, d):
    """theirs holds copies (not shares) of ours' weights, in nn.MultiheadAttention's layout."""
    ours_storage = {E.storage(p) for p in ours.parameters()}
    for their_name, p in theirs.named_parameters():
        if E.storage(p) in ours_storage:
            raise c.bug("shared_parameter", where, detail=f"theirs.{their_name}")
    params = {k: p.detach() for k, p in theirs.named_parameters()}
    weight = params["in_proj_weight"]
    if tuple(weight.shape) != (3 * d, d):
        raise c.bug(
            "in_proj_wrong_shape", where=where, shape=tuple(weight.shape), expected=(3 * d, d)
        )
    layers = [getattr(ours, f"W_{p}") for p in _QKV]
    _check_in_proj(
        c, where, weight, before["in_proj_weight"], [q.weight.detach() for q in layers], "weight"
    )
    bias = params.get("in_proj_bias")
    if bias is not None and qkv_bias:
        if E.same(bias, before["in_proj_bias"]):
            raise c.bug("in_bias_not_copied", where)
        _check_in_proj(
            c, where, bias, before["in_proj_bias"], [q.bias.detach() for q in layers], "bias"
        )
    elif bias is not None and not E.same(bias, torch.zeros_like(bias)):
        raise c.bug("in_bias_not_zero", where)
    out_w, want_w = params["out_proj.weight"], ours.out_proj.weight.detach()
    c.compare(
        out_w,
        want_w,
        f"{where} out_proj.weight is wrong:",
        [
            ("out_proj_transposed", lambda: want_w.T),
            ("out_proj_not_copied", lambda: before["out_proj.weight"]),
        ],
        context=where,
    )
    if not E.same(params["out_proj.bias"], ours.out_proj.bias.detach()):
        raise c.bug("out_bias_not_copied", where)


def check_copy_into_torch_mha(copy_fn: Callable, mask_fn: Callable) -> None:
    """Check that ``copy_fn(ours, theirs)`` and ``mask_fn(n)`` make ``nn.MultiheadAttention``
    compute exactly what the course's ``MultiHeadAttention`` computes.

    ``copy_fn`` copies the weights of ``ours`` (``cu.chapters.MultiHeadAttention``) into
    ``theirs`` (``nn.MultiheadAttention(d, heads, batch_first=True)``) in place; ``mask_fn(n)``
    returns the causal ``attn_mask`` for ``n`` tokens in ``nn.MultiheadAttention``'s convention.
    """
    __tracebackhide__ = True
    c = E.Check("check_copy_into_torch_mha")
    c.ensure_callable(copy_fn, "your copy function copy_fn(ours, theirs) as first argument")
    c.ensure_callable(mask_fn, "your mask function mask_fn(n) as second argument")
    for case, (d, heads, qkv_bias, length, batch, n) in enumerate(_MHA_CASES):
        with E.preserved_rng():
            torch.manual_seed(1000 + case)
            ours = (
                E.chapters().MultiHeadAttention(d, d, length, 0.0, heads, qkv_bias=qkv_bias).eval()
            )
            theirs = nn.MultiheadAttention(d, heads, batch_first=True).eval()
        where = f"With d_model={d}, num_heads={heads}, qkv_bias={qkv_bias}:"
        ours_before, theirs_before = (_snapshot(ours), _snapshot(theirs))
        _copy(c, copy_fn, ours, theirs)
        if any(not torch.equal(v, ours_before[k]) for k, v in ours.state_dict().items()):
            raise c.bug("copy_wrong_direction", where)
        _check_copied(c, where, ours, theirs, theirs_before, qkv_bias, d)
        for m in (n, 1, length):
            mask = c.expect_tensor_output(c.call(mask_fn, m, what=f"mask_fn({m})"), f"mask_fn({m})")
            if tuple(mask.shape) != (m, m):
                raise c.bug("mask_wrong_shape", m=m, shape=tuple(mask.shape))
            bug = _mask_bug(mask.cpu(), m)
            if bug:
                raise c.bug(bug, f"For n={m} tokens your mask is:\n{mask.cpu()}")
        x = E.randn(batch, n, d, seed=1100 + case)  # (batch, n, d)
        with torch.no_grad():
            expected = ours(x)  # (batch, n, d)
            got = c.call(
                theirs,
                x,
                x,
                x,
                attn_mask=mask_fn(n),
                need_weights=False,
                what="nn.MultiheadAttention with your weights and mask",
            )[0]
        if not E.same(got, expected):
            raise c.fail(
                f"{where} on input of shape {(batch, n, d)}, "
                f"{E.describe_difference(expected, got)}.",
                "the weights and mask look right one by one; check the mask's dtype "
                "(bool, True = do not attend) and values.",
            )
    c.passed(
        f"nn.MultiheadAttention matches our MultiHeadAttention on {len(_MHA_CASES)} "
        "sizes (with and without qkv biases)",
    )


__all__ = ["check_copy_into_torch_mha"]
