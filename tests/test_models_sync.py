"""The classes written in the chapter 04 and 05 solutions behave exactly like course_utils.models.

Later chapters, the explorers and the benchmark import ``cu.models`` instead of the notebooks,
so the two must stay in step: same parameters from the same seed, same outputs (with and
without dropout), same refusals.
"""

from __future__ import annotations

import ast

import pytest
import torch
from torch import nn

import course_utils as cu
from tools import nbtools

CLASSES = [
    ("04_dropout.ipynb", "CausalAttention"),
    ("05_multihead.ipynb", "MultiHeadAttentionWrapper"),
    ("05_multihead.ipynb", "MultiHeadAttention"),
]
CHECKS = {
    "CausalAttention": cu.checks.check_causal_attention,
    "MultiHeadAttentionWrapper": cu.checks.check_multihead_wrapper,
    "MultiHeadAttention": cu.checks.check_multihead_attention,
}
# (d_in, d_out, context_length, num_heads, qkv_bias); num_heads is ignored by CausalAttention
CONFIGS = [(3, 2, 6, 2, False), (5, 6, 8, 3, True), (4, 8, 5, 2, False)]


def notebook_class(notebook: str, name: str) -> type:
    """Execute only the solution notebook's ``class <name>`` definition and return the class."""
    namespace = {"torch": torch, "nn": nn, "cu": cu}
    found = []
    for cell in nbtools.read(nbtools.SOLUTIONS / notebook).cells:
        if cell.cell_type != "code":
            continue
        for node in ast.parse(cell.source).body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                found.append(node)
    assert len(found) == 1, f"solutions/{notebook} should define class {name} exactly once"
    exec(compile(ast.Module(body=found, type_ignores=[]), notebook, "exec"), namespace)
    return namespace[name]


def build(cls: type, config, dropout: float, multihead: bool, seed: int = 11) -> nn.Module:
    d_in, d_out, context_length, num_heads, qkv_bias = config
    args = (d_in, d_out, context_length, dropout)
    if multihead:
        args = (*args, num_heads)
    torch.manual_seed(seed)
    return cls(*args, qkv_bias=qkv_bias)


@pytest.fixture(params=CLASSES, ids=[name for _, name in CLASSES])
def pair(request):
    notebook, name = request.param
    return notebook_class(notebook, name), getattr(cu.models, name)


def build_both(pair, config, dropout: float) -> list[nn.Module]:
    multihead = pair[1] is not cu.models.CausalAttention
    return [build(cls, config, dropout, multihead) for cls in pair]


@pytest.mark.parametrize("config", CONFIGS)
def test_same_parameters_and_buffers_from_the_same_seed(pair, config):
    ours, reference = build_both(pair, config, 0.0)
    mine, theirs = ours.state_dict(), reference.state_dict()
    assert list(mine) == list(theirs)
    for key in theirs:
        assert torch.equal(mine[key], theirs[key].to(mine[key].dtype)), key


@pytest.mark.parametrize("config", CONFIGS)
def test_same_outputs_in_eval_and_train_mode(pair, config):
    d_in, _, context_length, _, _ = config
    for dropout, mode in ((0.0, "eval"), (0.5, "eval"), (0.5, "train")):
        ours, reference = (layer.train(mode == "train") for layer in build_both(pair, config, dropout))
        for batch, n in ((1, context_length), (3, context_length - 2)):
            x = torch.randn(batch, n, d_in, generator=torch.Generator().manual_seed(n))
            outputs = []
            for layer in (ours, reference):
                torch.manual_seed(5)  # the same dropout masks for both
                outputs.append(layer(x))
            assert torch.allclose(*outputs, atol=1e-6), (dropout, mode, batch, n)


def test_both_refuse_inputs_longer_than_context_length(pair):
    config = CONFIGS[0]
    x = torch.randn(1, config[2] + 1, config[0])
    for layer in build_both(pair, config, 0.0):
        with pytest.raises(ValueError, match=r"7 tokens.*context_length=6"):
            layer(x)


def test_split_classes_refuse_widths_the_heads_cannot_share():
    ours = notebook_class("05_multihead.ipynb", "MultiHeadAttention")
    for cls in (ours, cu.models.MultiHeadAttention):
        with pytest.raises(ValueError, match=r"d_out=5.*num_heads=2"):
            cls(3, 5, 6, 0.0, 2)


def test_book_values():
    batch = torch.stack((cu.example_inputs(), cu.example_inputs()))  # (2, 6, 3)
    expected = {
        "CausalAttention": ((3, 2, 6, 0.0), [-0.4519, 0.2216]),
        "MultiHeadAttentionWrapper": ((3, 2, 6, 0.0, 2), [-0.4519, 0.2216, 0.4772, 0.1063]),
        "MultiHeadAttention": ((3, 2, 6, 0.0, 2), [0.3190, 0.4858]),
    }
    for notebook, name in CLASSES:
        args, first_row = expected[name]
        for cls in (notebook_class(notebook, name), getattr(cu.models, name)):
            torch.manual_seed(123)
            with torch.no_grad():
                out = cls(*args)(batch)
            assert torch.allclose(out[0, 0], torch.tensor(first_row), atol=5e-5), (cls, out[0, 0])


@pytest.mark.parametrize(("notebook", "name"), CLASSES, ids=[name for _, name in CLASSES])
def test_named_checks_accept_the_notebook_classes(notebook, name, capsys):
    CHECKS[name](notebook_class(notebook, name))
    assert capsys.readouterr().out.startswith(f"✓ {CHECKS[name].__name__}:")


@pytest.mark.parametrize(("notebook", "name", "bug"), [
    ("04_dropout.ipynb", "QuietBug", "softmax_queries"),
    ("05_multihead.ipynb", "SharedProjection", "keys_values_from_query"),
])
def test_checks_name_the_bugs_of_the_spot_the_bug_exercises(notebook, name, bug):
    from course_utils.checks.ch04 import BUGS

    check = CHECKS["CausalAttention" if notebook.startswith("04") else "MultiHeadAttention"]
    with pytest.raises(cu.checks.CheckFailure) as info:
        check(notebook_class(notebook, name))
    assert BUGS[bug].diagnosis in str(info.value)
