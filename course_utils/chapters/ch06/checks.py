"""Self-checks for chapter 06 (from text to next-token logits; matching PyTorch's attention)."""

from __future__ import annotations

import copy

import torch
from torch import nn

from course_utils.checks import _engine as E

from .torch_mha import check_copy_into_torch_mha

# Shortcuts graded answers may call (tools/grading/honesty.py): all (the exercises are the data,
# the embeddings, the model's wiring and nn.MultiheadAttention's weights; attention was 01-05's)
ALLOWED_SHORTCUTS = ("sdpa", "mha", "flex")

# --------------------------------------------------------------------------- dataset
# (number of tokens, context_length, stride). The first case (stride 1) separates the
# off-by-one mistakes; the others have a stride that is neither 1 nor context_length.
_DATASET_CASES = ((20, 4, 1), (23, 5, 3), (24, 5, 3), (17, 8, 8), (9, 8, 2), (30, 6, 4))


def _window_count(n: int, length: int, stride: int) -> int:
    return len(range(0, n - length, stride))


def _item(c: E.Check, ds, i: int, where: str) -> tuple[torch.Tensor, torch.Tensor]:
    """dataset[i], required to be a pair of integer tensors."""
    item = c.call(ds.__getitem__, i, what=f"dataset[{i}]")
    if not isinstance(item, (tuple, list)) or len(item) != 2:
        raise c.bug("dataset_item_not_pair", where=where, i=i, kind=type(item).__name__)
    for label, t in zip(("inputs", "targets"), item):
        if not isinstance(t, torch.Tensor):
            raise c.bug(
                "dataset_item_not_tensor",
                where=where,
                label=label,
                i=i,
                kind=type(t).__name__,
            )
        if t.dtype.is_floating_point or t.dtype == torch.bool:
            raise c.bug("dataset_ids_not_integer", where=where, label=label, i=i, dtype=t.dtype)
    return item


def check_sliding_window_dataset(dataset_cls: type) -> None:
    """Check ``dataset_cls(token_ids, context_length, stride)``: windows and shifted targets."""
    __tracebackhide__ = True
    c = E.Check("check_sliding_window_dataset")
    c.ensure_class(dataset_cls, "a Dataset class taking (token_ids, context_length, stride)")
    for case, (n, length, stride) in enumerate(_DATASET_CASES):
        ids = torch.randperm(50257, generator=E.generator(600 + case))[
            :n
        ].tolist()  # distinct GPT-2 ids
        where = f"With {n} tokens, context_length={length}, stride={stride}:"
        ds = c.call(
            dataset_cls,
            list(ids),
            length,
            stride,
            what=f"{dataset_cls.__name__}(token_ids of length {n}, {length}, {stride})",
        )
        for method in ("__len__", "__getitem__"):
            if not hasattr(ds, method):
                raise c.bug("dataset_missing_method", method=method)
        expected_len = _window_count(n, length, stride)
        got_len = c.call(len, ds, what="len(dataset)")
        if got_len != expected_len:
            counts = (
                ("window_stride_ignored", n - length),
                ("window_step_by_context", _window_count(n, length, length)),
                ("window_extra", len(range(0, n - length + 1, stride))),
                ("window_floor_count", (n - length) // stride),
                ("window_missing", len(range(0, n - length - 1, stride))),
            )
            bug = next((key for key, count in counts if count == got_len), "window_count_wrong")
            raise c.bug(
                bug, f"{where} expected {expected_len} windows, your dataset has {got_len}."
            )
        full = torch.tensor(ids)
        # Window 0 last: a target shifted backwards is only recognisable from window 1 on.
        for i in [*range(1, expected_len), 0][:expected_len]:
            start = i * stride
            want_x, want_y = full[start : start + length], full[start + 1 : start + length + 1]
            x, y = _item(c, ds, i, where)
            where_i = f"{where} dataset[{i}] (the window starting at token {start}):"
            if E.same(x, want_x) and E.same(y, want_y):
                continue
            known = (
                ("targets_not_shifted", E.same(x, want_x) and E.same(y, x)),
                ("targets_swapped", E.same(x, want_y) and E.same(y, want_x)),
                (
                    "targets_shifted_back",
                    E.same(x, want_x)
                    and start >= 1
                    and E.same(y, full[start - 1 : start - 1 + length]),
                ),
                (
                    "window_stride_ignored_getitem",
                    stride != 1 and E.same(x, full[i : i + length]),
                ),
            )
            for bug, holds in known:
                if holds:
                    raise c.bug(bug, where_i)
            if not E.same(x, want_x):
                raise c.fail(
                    f"{where_i} inputs should be {want_x.tolist()}, got {x.tolist()}.",
                    "inputs = token_ids[s : s + context_length] with s = i * stride.",
                )
            raise c.fail(
                f"{where_i} targets should be {want_y.tolist()}, got {y.tolist()}.",
                "targets are the inputs shifted by one: token_ids[s + 1 : s + context_length + 1].",
            )
    c.passed(
        f"windows, counts and the one-token shift are right on {len(_DATASET_CASES)} "
        "(length, context_length, stride) cases",
    )


# --------------------------------------------------------------------------- embeddings
# (vocab_size, context_length, d_model, batch); vocab_size != context_length everywhere.
_EMBEDDING_CASES = ((50, 6, 4, 2), (97, 10, 8, 3), (50257, 8, 16, 2))


def _positions_shifted(c, layer, ids, tok_values, pos_values, where) -> None:
    """A crash on a full-length input: positions 1 .. n run past the table. One token shorter, is the
    output token + position rows 1 .. n? Then name it."""
    short = ids[:, :-1]  # (batch, n - 1)
    try:
        got = layer(short)
    except Exception:  # noqa: BLE001 - it crashes for another reason: the caller reports the crash
        return
    if E.same(got, tok_values[short] + pos_values[1 : short.shape[1] + 1]):
        raise c.bug("positions_shifted", f"{where} on {ids.shape[1]} tokens it crashed;")


def _embedding_tables(c: E.Check, layer, vocab: int, length: int, d: int, where: str):
    """The token table (vocab_size, d_model) and position table (context_length, d_model); other
    shapes are named (a position table sized by the vocabulary, or a table missing)."""
    tables = [p for p in layer.parameters() if p.dim() == 2]
    shapes = [tuple(t.shape) for t in tables]
    if shapes.count((vocab, d)) >= 2 and (length, d) not in shapes:
        raise c.bug("pos_sized_by_vocab", f"{where} your tables have shapes {shapes}.")
    if (vocab, d) not in shapes or (length, d) not in shapes:
        raise c.bug(
            "embedding_table_shapes",
            where=where,
            token=(vocab, d),
            position=(length, d),
            shapes=shapes,
        )
    return tables[shapes.index((vocab, d))], tables[shapes.index((length, d))]


def _embed(c: E.Check, layer, ids, values, where: str, after_full: bool) -> object:
    """The layer's output on ``ids``: a crash after the full length worked is positions not sliced,
    any other crash is reported (as positions shifted, when one token fewer shows it)."""
    with torch.no_grad():
        if after_full:
            try:
                return layer(ids)
            except Exception as exc:  # noqa: BLE001 - we report it in words
                raise c.bug(
                    "pos_not_sliced",
                    f"{where} on an input of {ids.shape[1]} tokens it "
                    f"raised {type(exc).__name__}: {exc}",
                ) from None
        try:
            return c.call(layer, ids, what=f"your layer on token ids of shape {tuple(ids.shape)}")
        except E.CheckFailure:
            _positions_shifted(c, layer, ids, *values, where)
            raise


def _expect_embedding(c: E.Check, got, ids, values, length: int, where: str) -> None:
    """The output must be the token rows plus position rows 0 .. n - 1: all positions added,
    concatenated tables and the known wrong sums are named."""
    tok_values, pos_values = values
    (batch, n), d = tuple(ids.shape), tok_values.shape[1]
    token_part, pos_part = tok_values[ids], pos_values[:n]  # (batch, n, d), (n, d)
    expected = token_part + pos_part  # (batch, n, d)
    got = c.expect_tensor_output(got, f"your layer on token ids of shape {(batch, n)}")
    if E.same(got, expected):
        return
    where_n = f"{where} on token ids of shape {(batch, n)}:"
    if n < length and tuple(got.shape) == (batch, length, d):
        raise c.bug(
            "pos_not_sliced",
            f"{where_n} your output has shape "
            f"{tuple(got.shape)}: all {length} positions were added to an input of "
            f"{n} token{'s' if n != 1 else ''}.",
        )
    if tuple(got.shape) == (batch, n, 2 * d):
        raise c.bug("embeddings_concatenated", where_n)
    c.compare(
        got,
        expected,
        where_n,
        [
            ("positions_missing", lambda: token_part),
            ("positions_only", lambda: pos_part.expand(batch, n, d)),
            ("embeddings_multiplied", lambda: token_part * pos_part),
            ("last_positions", lambda: token_part + pos_values[length - n :]),
            ("positions_shifted", lambda: token_part + pos_values[1 : n + 1]),
        ],
        hint="add the token embeddings and the embeddings of positions 0 .. n - 1.",
    )


def check_input_embedding(embedding_cls: type) -> None:
    """Check ``embedding_cls(vocab_size, context_length, d_model)``: token + position embeddings."""
    __tracebackhide__ = True
    c = E.Check("check_input_embedding")
    c.ensure_class(embedding_cls, "an nn.Module class taking (vocab_size, context_length, d_model)")
    for case, (vocab, length, d, batch) in enumerate(_EMBEDDING_CASES):
        layer = E.construct(
            c,
            embedding_cls,
            vocab,
            length,
            d,
            what=f"{embedding_cls.__name__}({vocab}, {length}, {d})",
        )
        where = f"With vocab_size={vocab}, context_length={length}, d_model={d}:"
        tok, pos = _embedding_tables(c, layer, vocab, length, d, where)
        with torch.no_grad():  # known values, so the expected output can be computed
            tok.copy_(E.randn(vocab, d, seed=700 + case))
            pos.copy_(E.randn(length, d, seed=800 + case))
        values = tok.detach().clone(), pos.detach().clone()
        full_ok = False
        for n in (length, 1, max(1, length - 3)):  # full, then short: positions sliced?
            ids = torch.randint(0, vocab, (batch, n), generator=E.generator(900 + case))
            got = _embed(c, layer, ids, values, where, after_full=full_ok and n < length)
            _expect_embedding(c, got, ids, values, length, where)
            full_ok = full_ok or n == length
        E.probe_device(c, copy.deepcopy(layer), ids, where)
        E.probe_backward(c, layer, ids, where, lambda: tok[ids] + pos[: ids.shape[1]])
        ids = torch.randint(0, vocab, (1, length + 1), generator=E.generator(950 + case))
        with torch.no_grad():
            E.expect_value_error(
                c,
                lambda: layer(ids),
                f"{where} an input of {length + 1} tokens:",
                f"{embedding_cls.__name__}(...)",
            )
    c.passed(
        f"token + positional embeddings are right on {len(_EMBEDDING_CASES)} sizes, "
        "for full, short and too-long inputs; both tables train",
    )


# --------------------------------------------------------------------------- TinyGPT (optional exercise)
# (batch, n, d_model, d_model, context_length): TinyGPT(vocab_size, context_length, d_model, num_heads)
_GPT_CASES = (
    E.Case(2, 6, 8, 8, 6, num_heads=2, seed=1300, vocab=50),
    E.Case(1, 5, 12, 12, 8, num_heads=3, seed=1301, vocab=97),
)


def _gpt_parts(c: E.Check, model: nn.Module, case: E.Case, where: str):
    """The student's token and position tables, attention weights and head, checked."""
    vocab, length, d = case.vocab, case.context_length, case.d_in
    for attr in ("embed", "attn", "head"):
        if not isinstance(getattr(model, attr, None), nn.Module):
            raise c.bug("tiny_gpt_submodule_missing", where=where, attr=attr)
    shapes = {tuple(p.shape): p for p in model.embed.parameters() if p.dim() == 2}
    if (vocab, d) not in shapes:
        raise c.bug("tiny_gpt_token_table_missing", where=where, shape=(vocab, d))
    if (length, d) not in shapes:
        raise c.bug(
            "positions_missing",
            f"{where} model.embed has no position table of shape {(length, d)}.",
        )
    head = model.head
    if not isinstance(head, nn.Linear) or (head.in_features, head.out_features) != (d, vocab):
        raise c.bug("tiny_gpt_head_wrong", where=where, d=d, vocab=vocab)
    if head.bias is not None:
        raise c.bug("tiny_gpt_head_bias", where)
    layers = {n: getattr(model.attn, n, None) for n in ("W_query", "W_key", "W_value", "out_proj")}
    if not all(isinstance(layer, nn.Linear) for layer in layers.values()):
        raise c.bug("tiny_gpt_attn_wrong", where=where)
    heads = getattr(model.attn, "num_heads", case.num_heads)
    if heads != case.num_heads:
        raise c.bug("tiny_gpt_num_heads_ignored", where=where, heads=heads, wanted=case.num_heads)
    weights = E.MHAWeights(layers, layers.pop("out_proj"), case.num_heads)
    return shapes[(vocab, d)], shapes[(length, d)], weights, head


def _gpt_logits(parts, ids: torch.Tensor, r=E.RIGHT, positions: bool = True) -> torch.Tensor:
    """Next-token logits recomputed from the student's own weights: (b, n, vocab)."""
    tok, pos, weights, head = parts
    vectors = tok[ids] + (pos[: ids.shape[1]] if positions else 0)  # (b, n, d)
    return head(E.mha_reference(weights, vectors, r))  # (b, n, vocab)


def _probe_gpt_dropout(c: E.Check, model: nn.Module, case: E.Case, ids: torch.Tensor) -> None:
    """Built with dropout=DROPOUT_P: off after .eval() (the logits of its own weights), on in train
    mode, with a new mask on every call; and one training step through it."""
    __tracebackhide__ = True
    where = f"With {case.describe(model.__class__, E.DROPOUT_P)}:"
    model.eval()
    parts = _gpt_parts(c, model, case, where)
    if not E.same(E.run(c, model, ids, f"{where} after .eval():"), _gpt_logits(parts, ids)):
        raise c.bug("dropout_in_eval", f"{where} after .eval():")
    model.train()
    first, second = (E.run(c, model, ids, f"{where} in train mode:") for _ in range(2))
    if E.same(first, _gpt_logits(parts, ids)):
        raise c.bug("tiny_gpt_dropout_ignored", where=where, p=E.DROPOUT_P)
    if E.same(first, second):
        raise c.bug("dropout_same_mask", f"{where} two calls in train mode:")
    E.probe_backward(c, model, ids, where)


def check_tiny_gpt(cls: type) -> None:
    """Check ``TinyGPT(vocab_size, context_length, d_model, num_heads, dropout=0.1)``: ``embed``
    (token + position embeddings), ``attn`` (causal multi-head attention), ``head`` (no bias);
    (b, n) int64 ids -> (b, n, vocab_size) logits, computed from its own weights, causal."""
    __tracebackhide__ = True
    c = E.Check("check_tiny_gpt")
    c.ensure_class(cls, "your class TinyGPT itself")
    for case in _GPT_CASES:
        with E.isolated():
            model = E.build(c, cls, case)
            where = f"With {case.describe(cls)}:"
            parts = _gpt_parts(c, model, case, where)
            tok, pos, _, head = parts
            model.eval()
            ids = case.inputs()
            got = E.run(c, model, ids, where)
            expected = _gpt_logits(parts, ids)
            c.compare(
                got,
                expected,
                where,
                [
                    ("logits_softmaxed", lambda: torch.softmax(expected, dim=-1)),
                    ("positions_missing", lambda: _gpt_logits(parts, ids, positions=False)),
                    (
                        "tiny_gpt_not_causal",
                        lambda: _gpt_logits(parts, ids, E.Recipe(mask="none")),
                    ),
                    (
                        "tiny_gpt_attention_skipped",
                        lambda: head(tok[ids] + pos[: ids.shape[1]]),
                    ),
                ],
                hint="embed the tokens, run the attention layer on them, then apply the head.",
            )
            later = ids.clone()
            later[:, -1] = (later[:, -1] + 1) % case.vocab
            if not E.same(E.run(c, model, later, where)[:, :-1], got[:, :-1]):
                raise c.bug("tiny_gpt_not_causal", where)
            E.probe_second_call(
                c,
                model,
                case.inputs,
                lambda x: _gpt_logits(parts, x),
                case.context_length,
                where,
            )
            E.probe_device(c, copy.deepcopy(model), ids, where)
            _probe_gpt_dropout(c, E.build(c, cls, case, E.DROPOUT_P), case, ids)
            E.probe_backward(c, model, ids, where, lambda: _gpt_logits(parts, ids))
            E.check_too_long(c, cls, case)
    c.passed(
        f"logits match embeddings -> causal attention -> head on {len(_GPT_CASES)} sizes; "
        "causal, dropout only in training, trainable, and too-long inputs refused",
    )


__all__ = [
    "check_copy_into_torch_mha",
    "check_input_embedding",
    "check_sliding_window_dataset",
    "check_tiny_gpt",
]
