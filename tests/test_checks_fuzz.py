"""Fuzz: every public self-check, given something that is not an answer, raises CheckFailure
(a plain diagnosis) and never any other exception: no crash inside a check."""

import inspect
import re

import numpy as np
import pytest
import torch
from torch import nn

import course_utils as cu
from course_utils.checks import CheckFailure
from tests.ch06 import buggy as b6


class InitRaises(nn.Module):
    def __init__(self, *args, **kwargs):
        raise RuntimeError("broken constructor")


class ForwardRaises(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()
        self.W_query = nn.Linear(1, 1)

    def forward(self, *args, **kwargs):
        raise IndexError("broken forward")


class ForwardTuple(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x, *args, **kwargs):
        return x, x


class ForwardNumpy(ForwardTuple):
    def forward(self, x, *args, **kwargs):
        return np.zeros((2, 3))


class ForwardList(ForwardTuple):
    def forward(self, x, *args, **kwargs):
        return [[0.0, 1.0]]


class NoParameters(ForwardTuple):
    """A module with no parameters at all: forward hands its input back."""

    def forward(self, x, *args, **kwargs):
        return x


class ForwardIntegers(ForwardTuple):
    def forward(self, x, *args, **kwargs):
        return x.long() if isinstance(x, torch.Tensor) else x


class ForwardNarrow(ForwardTuple):
    """The right batch and token axes, one feature only."""

    def forward(self, x, *args, **kwargs):
        return x[..., :1] if isinstance(x, torch.Tensor) else x


class ForwardInf(ForwardTuple):
    def forward(self, x, *args, **kwargs):
        return (
            torch.full_like(x, float("inf"))
            if isinstance(x, torch.Tensor) and x.is_floating_point()
            else x
        )


class NoArguments(nn.Module):
    def __init__(self):
        super().__init__()


class NoSuperInit(nn.Module):
    def __init__(self, *args, **kwargs):
        self.W_query = nn.Linear(2, 2)


class BadRepr:
    """Not callable, and even printing it fails."""

    def __repr__(self):
        raise RuntimeError("no repr")


def returns_tuple(*args, **kwargs):
    return torch.zeros(2, 2), torch.zeros(2, 2)


def returns_numpy(*args, **kwargs):
    return np.ones((2, 2))


def returns_none(*args, **kwargs):
    return None


def returns_nan(*args, **kwargs):
    first = next((a for a in args if isinstance(a, torch.Tensor)), torch.zeros(2, 2))
    return torch.full_like(first, float("nan")) if first.is_floating_point() else torch.zeros(2, 2)


def returns_integers(*args, **kwargs):
    return torch.zeros(2, 2, dtype=torch.int64)


def returns_meta(*args, **kwargs):
    return torch.empty(2, 2, device="meta")


def returns_complex(*args, **kwargs):
    return torch.zeros(2, 2, dtype=torch.complex64)


def identity(*args, **kwargs):
    return args[0] if args else None


def raises(*args, **kwargs):
    raise ZeroDivisionError("broken function")


def raises_stub(*args, **kwargs):
    raise NotImplementedError()


JUNK = {
    "None": None,
    "list": [1, 2, 3],
    "ndarray": np.zeros((2, 3)),
    "string": "answer",
    "int": 3,
    "bool": True,
    "tuple": (2, 3),
    "wrong_shape_tensor": torch.zeros(2, 3),
    "empty_tensor": torch.zeros(0),
    "module_instance": nn.Linear(2, 2),
    "class_init_raises": InitRaises,
    "class_forward_raises": ForwardRaises,
    "class_forward_tuple": ForwardTuple,
    "class_forward_numpy": ForwardNumpy,
    "class_forward_list": ForwardList,
    "class_no_parameters": NoParameters,
    "class_forward_integers": ForwardIntegers,
    "class_forward_narrow": ForwardNarrow,
    "class_forward_inf": ForwardInf,
    "class_no_arguments": NoArguments,
    "class_no_super_init": NoSuperInit,
    "plain_class": dict,
    "bad_repr": BadRepr(),
    "fn_returns_tuple": returns_tuple,
    "fn_returns_numpy": returns_numpy,
    "fn_returns_none": returns_none,
    "fn_returns_nan": returns_nan,
    "fn_returns_integers": returns_integers,
    "fn_returns_meta": returns_meta,
    "fn_returns_complex": returns_complex,
    "fn_identity": identity,
    "fn_raises": raises,
    "fn_stub": raises_stub,
}

CHECKS = sorted(name for name in dir(cu.checks) if name.startswith("check_"))


def _arity(check) -> int:
    return sum(
        1
        for p in inspect.signature(check).parameters.values()
        if p.default is inspect.Parameter.empty
    )


def test_every_public_check_is_fuzzed():
    assert len(CHECKS) >= 30, CHECKS


@pytest.mark.parametrize("junk", list(JUNK), ids=list(JUNK))
@pytest.mark.parametrize("name", CHECKS)
def test_junk_in_every_argument_gives_a_check_failure(name, junk, capsys):
    check = getattr(cu.checks, name)
    args = [JUNK[junk]] * _arity(check)
    try:
        check(*args)
    except CheckFailure as failure:
        assert str(failure).startswith(f"{name} found a problem."), str(failure)
        assert not re.search(r"\{[a-z_]+\}", str(failure)), f"an unfilled placeholder: {failure}"
    else:  # only a real answer passes: none of these is one
        pytest.fail(f"{name} accepted {junk}: {capsys.readouterr().out}")


# The checks with several arguments: junk in one place, a right answer in the others.
_MIXED = [
    ("check_copy_into_torch_mha", lambda junk: (b6.copy_right, junk)),
    ("check_copy_into_torch_mha", lambda junk: (junk, b6.mask_right)),
    ("check_shape_prediction", lambda junk: (junk, nn.Linear(4, 5), torch.zeros(2, 4))),
    ("check_shape_prediction", lambda junk: ((2, 5), junk, torch.zeros(2, 4))),
    ("check_shape_prediction", lambda junk: ((2, 5), nn.Linear(4, 5), junk)),
]


@pytest.mark.parametrize("junk", list(JUNK), ids=list(JUNK))
@pytest.mark.parametrize(
    ("name", "make_args"), _MIXED, ids=[f"{n}-{i}" for i, (n, _) in enumerate(_MIXED)]
)
def test_junk_beside_right_arguments_gives_a_check_failure(name, make_args, junk):
    with pytest.raises(CheckFailure):
        getattr(cu.checks, name)(*make_args(JUNK[junk]))


# check_causal_mask given every dtype and many values of a mask of the right shape: a ✓ only for
# the bool mask, a CheckFailure for everything else, never a crash inside the check (an additive
# 0/-inf float mask, as nn.Transformer.generate_square_subsequent_mask returns, once fell through).
_MASK_DTYPES = (
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
)
_MASK_VALUES = {
    "future_true": lambda n: torch.ones(n, n).triu(1),
    "additive_minus_inf": lambda n: torch.full((n, n), float("-inf")).triu(1),
    "additive_minus_1e9": lambda n: torch.full((n, n), -1e9).triu(1),
    "keep_mask": lambda n: torch.ones(n, n).tril(),
    "additive_keep": lambda n: torch.full((n, n), float("-inf")).tril(-1),
    "nan_future": lambda n: torch.full((n, n), float("nan")).triu(1),
    "all_nan": lambda n: torch.full((n, n), float("nan")),
    "zeros": lambda n: torch.zeros(n, n),
    "ones": lambda n: torch.ones(n, n),
    "random": lambda n: torch.randn(n, n, generator=torch.Generator().manual_seed(n)),
    "inf_everywhere": lambda n: torch.full((n, n), float("inf")),
}


@pytest.mark.parametrize("values", list(_MASK_VALUES))
@pytest.mark.parametrize("dtype", _MASK_DTYPES, ids=str)
def test_check_causal_mask_survives_every_mask_dtype_and_value(dtype, values, capsys):
    def mask(n):
        return _MASK_VALUES[values](n).to(dtype)

    try:
        cu.checks.check_causal_mask(mask)
    except CheckFailure as failure:
        assert str(failure).startswith("check_causal_mask found a problem."), str(failure)
        assert failure.bug is not None or "should be" in str(failure), str(failure)
    else:
        right = (_MASK_VALUES[values](4) != 0) == torch.ones(4, 4, dtype=torch.bool).triu(1)
        assert dtype == torch.bool and bool(right.all()), (
            values
        )  # bool() of the floats: True = nonzero
        assert capsys.readouterr().out.startswith("✓ check_causal_mask")
