"""Every assert a sentence of chapter 11 relies on can fail: the solution's own asserting cells
run again with one thing planted wrong (a wrong count, a cache that forgets, an untrained model,
the future let into a top-k...) must stop with an AssertionError; unplanted, they pass.

The solution's code cells run once, in order, in one namespace (no kernel; the training cell,
explorer and self-checks left out); each fault copies that namespace, replaces one name and runs
the cells that assert. Cells are found by a phrase they print or a name they bind, not by index.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import re
import sys
import types

import pytest
import torch

import course_utils as cu
from tools.build import nbtools

SOLUTION = nbtools.SOLUTIONS / "11_past_the_kv_wall.ipynb"
SKIPPED_TAGS = {"setup", "explorer", "self-check"}
TRAINING = (
    "RECALL_RUN = {"  # the training cell: for show, and slow; its asserts get a planted model
)
ASSERTS = re.compile(r"^\s*assert\b", re.MULTILINE)


def _code_cells() -> list[str]:
    nb = nbtools.read(SOLUTION)
    return [
        c.source
        for c in nb.cells
        if c.cell_type == "code" and not SKIPPED_TAGS & set(c.metadata.get("tags", []))
    ]


def cell(marker: str) -> str:
    """The one code cell whose source holds ``marker``."""
    found = [source for source in _code_cells() if marker in source]
    assert len(found) == 1, f"{len(found)} cells hold {marker!r}"
    return found[0]


def run(source: str, ns: dict) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(source, "<chapter 11 cell>", "exec"), ns)


@pytest.fixture(scope="module")
def chapter() -> dict:
    """The namespace after every code cell but the training one (and what needs its numbers)."""
    threads = torch.get_num_threads()
    module = types.ModuleType("chapter11_solution")  # dataclasses look their module up
    sys.modules[module.__name__] = module
    ns = module.__dict__
    for source in _code_cells():
        if TRAINING not in source and 'once["softmax"]' not in source:
            run(source, ns)
    torch.set_num_threads(threads)
    return ns


# ----------------------------------------------------------------------------- wrong versions
def absorbed_scaled_by_latent(x, w, cache=None):
    """mla_absorbed scaled by sqrt(dc + dr): the absorbed scores live at width dc, the scale does not."""
    b, n, _ = x.shape
    h, hd, dr, dc = w.heads, w.head_dim, w.rope_dim, w.latent_dim
    start = 0 if cache is None else cache[0].shape[1]
    positions = torch.arange(start, start + n, device=x.device)
    rope = cu.chapters.apply_rope
    latent, rope_keys = x @ w.w_dkv.T, rope(x @ w.w_kr.T, positions)
    if cache is not None:
        latent, rope_keys = torch.cat([cache[0], latent], 1), torch.cat([cache[1], rope_keys], 1)
    N = latent.shape[1]
    q = (x @ w.w_q.T).view(b, n, h, hd).transpose(1, 2) @ w.w_uk.view(h, hd, dc)
    q_rope = rope((x @ w.w_qr.T).view(b, n, h, dr).transpose(1, 2), positions)
    scores = (q @ latent[:, None].mT + q_rope @ rope_keys[:, None].mT) / math.sqrt(dc + dr)
    allowed = torch.ones(n, N, dtype=torch.bool, device=x.device).tril(N - n)
    weights = torch.softmax(scores.masked_fill(~allowed, -torch.inf), dim=-1)
    context = (weights @ latent[:, None]) @ w.w_uv.view(h, hd, dc).mT
    return context.transpose(1, 2).reshape(b, n, h * hd) @ w.w_o.T, (latent, rope_keys)


def delta_rule_without_the_delta(q, k, v, alpha, beta, state=None):
    """The gate and the step, but the write adds beta v k^T: the linear sum, not a correction."""
    b, h, n, dk = k.shape
    S = k.new_zeros(b, h, v.shape[-1], dk) if state is None else state
    outs = []
    for t in range(n):
        S = alpha[:, :, t, None, None] * S + beta[:, :, t, None, None] * (
            v[:, :, t, :, None] * k[:, :, t, None, :]
        )
        outs.append((S @ q[:, :, t, :, None]).squeeze(-1))
    return torch.stack(outs, dim=2), S


def sparse_topk_before_the_mask(q, k, v, index_scores, topk):
    """Top-k over every position, the causal mask after: later keys take places the earlier lose."""
    n, N = q.shape[-2], k.shape[-2]
    causal = torch.ones(n, N, dtype=torch.bool, device=q.device).tril(N - n)
    chosen = index_scores.sort(dim=-1, descending=True, stable=True).indices[..., :topk]
    keep = torch.zeros_like(index_scores, dtype=torch.bool).scatter(-1, chosen, True) & causal
    scores = (q @ k.mT / math.sqrt(q.shape[-1])).masked_fill(~keep[:, None], -torch.inf)
    return torch.nan_to_num(torch.softmax(scores, dim=-1)) @ v


def _wrong_decode_cost(real, kind_of_fault):
    def cost(kind, N, d, heads, head_dim, kv_heads=None, window=None, **mla):
        flops, weights, cached = real(kind, N, d, heads, head_dim, kv_heads, window, **mla)
        g, h, hd = kv_heads or heads, heads, head_dim
        if kind_of_fault == "window of W keys" and kind == "gqa" and window and N > window:
            return flops - 4 * h * hd, weights, cached - 2 * g * hd  # the old count: W keys
        if kind_of_fault == "shared layer projects keys" and kind == "shared":
            return real("gqa", N, d, heads, head_dim, kv_heads, window)
        if kind_of_fault == "sparse attends to all" and kind == "sparse":
            return flops + 4 * h * hd * (N - min(N, mla["topk"])), weights, cached
        if kind_of_fault == "W_uv forgotten" and kind == "mla_absorbed":
            return flops - 2 * h * hd * mla["latent_dim"], weights, cached
        if kind_of_fault == "state grows" and kind in ("linear", "delta"):
            return flops + 2 * h * hd * N, weights, cached
        if kind_of_fault == "no query latent" and kind.startswith("mla"):
            mla = {**mla, "query_latent_dim": 0}
            return real(kind, N, d, heads, head_dim, kv_heads, window, **mla)
        if kind_of_fault == "cached keys count the latent" and kind == "mla_kv_cache":
            return flops, weights, N * (mla["latent_dim"] + mla["rope_dim"])
        if kind_of_fault == "absorbed form at the cached keys' width" and kind == "mla_absorbed":
            dc, dr = mla["latent_dim"], mla["rope_dim"]
            return flops - 2 * h * N * (2 * dc + dr) + 2 * h * N * (2 * hd + dr), weights, cached
        return flops, weights, cached

    return cost


# ----------------------------------------------------------------------------- the faults
def _plant_recall_untrained(ns):
    """The recall asserts fed an untrained model's accuracies (what a broken training gives)."""
    test_keys, test_values, answers, overwritten = ns["recall_texts"](
        2000, torch.Generator().manual_seed(999)
    )
    recall = {}
    for mixer in ("softmax", "linear attention", "delta rule"):
        torch.manual_seed(0)
        with torch.no_grad():
            right = (ns["RecallModel"](mixer)(test_keys, test_values).argmax(-1) == answers).float()
        recall[mixer] = right[~overwritten].mean().item(), right[overwritten].mean().item()
    ns["recall"] = recall


def _wrap(name, make):
    def plant(ns):
        ns[name] = make(ns[name])

    return plant


class _Swapped:
    """A module seen through one swapped attribute (``cu`` whose ``chapters.x`` is wrong)."""

    def __init__(self, real, **swapped):
        self._real, self._swapped = real, swapped

    def __getattr__(self, name):
        return self._swapped[name] if name in self._swapped else getattr(self._real, name)


def _in_chapters(name, make):
    """Plant a wrong ``cu.chapters.<name>``: section 6 runs the chapter's own functions."""

    def plant(ns):
        chapters = _Swapped(cu.chapters, **{name: make(getattr(cu.chapters, name))})
        ns["cu"] = _Swapped(cu, chapters=chapters)

    return plant


def _source_fault(old, new):
    """Plant a wrong number in the cell's own source (a constant the sentence relies on)."""
    return ("source", old, new)


FAULTS = {
    # section 1: MHA = 4 x GQA 8, pairs halve the cache
    "kv bytes ignore sharing": (
        ["MHA = 4 x GQA-8"],
        _wrap(
            "kv_cache_bytes",
            lambda real: (
                lambda layout, context, batch=1, b=2: real(
                    dataclasses.replace(layout, layers_per_cache=1), context, batch, b
                )
            ),
        ),
    ),
    "MHA keeps the published heads": (
        ["llama_variants = layout_variants", "MHA = 4 x GQA-8"],
        _wrap("layout_variants", lambda real: lambda m: {**real(m), "MHA": real(m)["published"]}),
    ),
    # section 2: one pass == step by step; absorbed == computed keys
    "MLA cache not extended": (
        ["step by step == one pass, and the cache"],
        _wrap(
            "mla_attention",
            lambda real: (
                lambda x, w, cache=None: (
                    real(x, w, cache)[0],
                    real(x, w)[1] if cache is None else cache,
                )
            ),
        ),
    ),
    "absorbed scaled by sqrt(dc + dr)": (
        ["absorbed == keys and values computed"],
        lambda ns: ns.update(mla_absorbed=absorbed_scaled_by_latent),
    ),
    # section 3: three ways, one function; the hand-built recall
    "chunks forget the state": (
        ["quadratic == recurrent"],
        _wrap(
            "linear_attention_chunked",
            lambda real: (
                lambda q, k, v, chunk: torch.cat(
                    [
                        real(
                            q[:, :, lo : lo + chunk],
                            k[:, :, lo : lo + chunk],
                            v[:, :, lo : lo + chunk],
                            chunk,
                        )
                        for lo in range(0, q.shape[2], chunk)
                    ],
                    dim=2,
                )
            ),
        ),
    ),
    "delta rule adds, never corrects": (
        ["recalled = {", "delta rule: exact; linear sum"],
        lambda ns: ns.update(gated_delta_rule=delta_rule_without_the_delta),
    ),
    "softmax sharper than 50 x": (
        ["delta rule: exact; linear sum"],
        lambda ns: ns.update(recalled={**ns["recalled"], "softmax": ns["recalled"]["delta rule"]}),
    ),
    "recall models untrained": (['once["softmax"]'], _plant_recall_untrained),
    # section 4: causal, at most k, dense, cached == one pass
    "top-k before the causal mask": (
        ["equal to dense causal attention"],
        lambda ns: ns.update(sparse_attention=sparse_topk_before_the_mask),
    ),
    "top-k before the mask, cached": (
        ["cached, a prompt of 4 then"],
        lambda ns: ns.update(sparse_attention=sparse_topk_before_the_mask),
    ),
    # section 5: sharing equals explicit, caches only the producing layers
    "kv_source ignored": (
        ["== explicit sharing"],
        _wrap(
            "shared_kv_forward",
            lambda real: (
                lambda x, layers, kv_source, heads, cache=None: real(
                    x, layers, list(range(len(layers))), heads, cache
                )
            ),
        ),
    ),
    "every layer keeps a cache": (
        ["kv_cache_bytes(layers_per_cache=2)"],
        _wrap(
            "shared_kv_forward",
            lambda real: (
                lambda x, layers, kv_source, heads, cache=None: (
                    lambda out: (
                        out[0],
                        {**{i: out[1][s] for i, s in enumerate(kv_source)}, **out[1]},
                    )
                )(real(x, layers, kv_source, heads, cache))
            ),
        ),
    ),
    # section 6: every count against PyTorch's, every read against the tensors, the table's claims
    "window of W keys": (["gqa_counts = {}"], None),
    "shared layer projects keys": (["shared_counts = {}"], None),
    "sparse attends to all": (["sparse_counts[t + 1]"], None),
    "sparse step without the gather": (
        ["sparse_counts[t + 1]"],
        _in_chapters(
            "sparse_decode_step",
            lambda real: lambda x_new, w, cache, topk, heads: real(x_new, w, cache, 10**6, heads),
        ),
    ),
    "shared layer makes keys too": (
        ["shared_counts = {}"],
        _in_chapters(
            "shared_kv_forward",
            lambda real: (
                lambda x, layers, kv_source, heads, cache=None: real(
                    x, layers, list(range(len(layers))), heads, cache
                )
            ),
        ),
    ),
    "absorbed form at the cached keys' width": (["at_32k = {", "cache_heavier"], None),
    "MLP of two matrices": (
        ["cache_heavier"],
        _source_fault("llama_mlp = 3 * 4096 * 14336", "llama_mlp = 2 * 4096 * 14336"),
    ),
    "W_uv forgotten": (["mla_counts = {}"], None),
    "state grows": (["recurrent_counts = {}"], None),
    "window read as what is held": (["derived == the numbers in the tensors"], None),
    "no query latent": (["at_32k = {", "cache_heavier"], None),
    "cached keys count the latent": (["at_32k = {", "cache_heavier"], None),
}
COST_FAULT_OF = {
    "window read as what is held": "window of W keys",
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_each_asserting_cell_fails_on_a_planted_fault(chapter, fault):
    markers, plant = FAULTS[fault]
    sources = [cell(m) for m in markers]
    ns = dict(chapter)
    if plant is None:  # a wrong decode_cost
        ns["decode_cost"] = _wrong_decode_cost(
            chapter["decode_cost"], COST_FAULT_OF.get(fault, fault)
        )
    elif isinstance(plant, tuple):  # a wrong number in the asserting cell itself
        _, old, new = plant
        assert all(old in source for source in sources[-1:]), old
        sources[-1] = sources[-1].replace(old, new)
    else:
        plant(ns)
    with pytest.raises(AssertionError):
        for source in sources:
            run(source, ns)


def test_the_asserting_cells_pass_unplanted(chapter):
    """The control: the same cells, nothing planted (the trained recall is left to the notebook)."""
    ns = dict(chapter)
    for fault, (markers, _) in FAULTS.items():
        if fault != "recall models untrained":
            for m in markers:
                run(cell(m), ns)


def test_every_asserting_cell_has_a_planted_fault():
    """No cell asserts what no test shows it can fail to assert."""
    covered = {cell(m) for markers, _ in FAULTS.values() for m in markers}
    asserting = [s for s in _code_cells() if ASSERTS.search(s)]
    missing = [s.splitlines()[0] for s in asserting if s not in covered]
    assert len(asserting) >= 15 and missing == [], (
        f"asserting cells without a planted fault: {missing}"
    )
