"""tools/grading/wire.py's change signatures, directly: a pair whose signature is unchanged is not
sent again, so a change that keeps the signature is lost between the student process and the judge.

A signature named objects by id() only: a new ``.grad`` (or attribute) made where the freed one was
got the same id and looked unchanged (16 of 20 training steps under torch 2.3.1, 1 of 20 under
2.13, in a reviewer's loop of zero_grad and backward)."""

from __future__ import annotations

import types

import torch

from tools.grading.wire import _sig, _tensor_sig


def test_a_new_grad_in_a_freed_ones_place_changes_the_signature():
    w = torch.zeros(3, requires_grad=True)
    changed = 0
    for step in range(20):
        w.grad = torch.full((3,), float(step))
        before = _tensor_sig(w)
        w.grad = None  # zero_grad(set_to_none=True): the old gradient is freed (no cycle: at once)
        w.grad = torch.full((3,), float(step + 1))  # often where the freed one was
        changed += before != _tensor_sig(w)
    assert changed == 20


def test_a_new_attribute_in_a_freed_ones_place_changes_the_signature():
    holder = types.SimpleNamespace(t=torch.ones(2))
    changed = 0
    for _ in range(20):
        before = _sig(vars(holder))
        holder.t = None
        holder.t = torch.ones(2)
        changed += before != _sig(vars(holder))
    assert changed == 20


def test_an_unchanged_object_keeps_its_signature_and_is_not_kept_alive():
    import weakref

    w = torch.zeros(3, requires_grad=True)
    w.grad = torch.ones(3)
    grad = weakref.ref(w.grad)
    assert _tensor_sig(w) == _tensor_sig(w)
    holder = types.SimpleNamespace(t=torch.ones(2), n=3, s={1, 2}, fn=len)
    assert _sig(vars(holder)) == _sig(vars(holder))
    kept = _tensor_sig(w)
    w.grad = None
    assert grad() is None  # the signature held it weakly
    assert kept != _tensor_sig(w)  # and knows it is gone


def test_a_named_tuple_is_signed_by_its_items_and_keeps_nothing_alive():
    """torch.max's return_types (a named tuple: no weak references) is read item by item, so a
    signature neither keeps its tensors alive nor misses a new one; a tuple subclass's own
    __iter__ is never called."""
    import weakref

    holder = types.SimpleNamespace(out=torch.max(torch.randn(3, 4), -1))
    values = weakref.ref(holder.out.values)
    kept = _sig(vars(holder))
    assert kept == _sig(vars(holder))
    holder.out = torch.max(torch.randn(3, 4), -1)
    assert values() is None and kept != _sig(vars(holder))

    class Loud(tuple):
        def __iter__(self):
            raise AssertionError("the signature ran a tuple subclass's __iter__")

    assert _sig(Loud((1, 2))) == _sig(Loud((1, 2)))


def test_a_list_or_dict_subclass_changed_in_place_changes_the_signature():
    """A student's KV cache as a dict subclass on a module is sent by its contents, so an item put
    in place must change its signature (it kept its identity, and was never sent again)."""

    class Cache(dict):
        def items(self):
            raise AssertionError("the signature ran a dict subclass's items")

    class History(list):
        pass

    holder = types.SimpleNamespace(cache=Cache(), history=History())
    before = _sig(vars(holder))
    holder.cache["k"] = torch.ones(1)
    assert before != _sig(vars(holder))
    before = _sig(vars(holder))
    holder.history.append(1)
    assert before != _sig(vars(holder))


def test_a_metaclass_runs_nothing_in_a_signature():
    ran = []

    class Meta(type):
        def __eq__(cls, other):
            ran.append("eq")
            return True

        __hash__ = type.__hash__

        def __repr__(cls):
            ran.append("repr")
            return "Odd"

        @property
        def __weakrefoffset__(cls):
            ran.append("weakrefoffset")
            return 1

    class Odd(metaclass=Meta):
        __slots__ = ()  # no weak references

    odd = Odd()
    assert (
        _sig(odd) == _sig(odd) and _sig(odd)[0] == "@"
    )  # by identity, not taken for a plain value

    class Pair(tuple, metaclass=Meta):  # its class is part of its signature
        pass

    pair = Pair((1, 2))
    assert _sig({odd, 1, pair}) == _sig({pair, odd, 1})  # a set's members put in order
    assert ran == []
