"""Every shape comment of every solution, checked against the real shape while the notebook runs
(numbers exactly, each symbol one size where it is used; see tests/shape_comments.py and
tests/shape_sizes.py). One kernel run per chapter."""

import textwrap

import pytest
import torch

from tests.shape_comments import (
    Ledger,
    assert_clean,
    instrument,
    mismatch,
    new_scope,
    parse_spec,
    record,
    run_notebook,
)
from tools.build import nbtools

SOLUTIONS = nbtools.chapter_files(nbtools.SOLUTIONS)


@pytest.mark.parametrize(
    "comment, dims",
    [
        ("# (b, n, d_out)", ["b", "n", "d_out"]),
        ("# (20, 100, 3 * 768)", [20, 100, 2304]),
        ("# (2, 6, 3) -> (2, 6, 2)", [2, 6, 2]),
        ("# (6, 3) @ (3,) -> (6,)", [6]),
        ("# (): the query's weight on itself", []),
        ("# (..., n, hd/2)", ["...", "n", "hd/2"]),
        ("# (2, len(prompt))", [2, "len(prompt)"]),
        ("# (variant, n) -> cu.bench.Timing", None),
        ("# (1)", None),
        ("# the scores", None),
    ],
)
def test_parse_spec(comment, dims):
    assert parse_spec(comment) == dims


def test_mismatch_numbers_exactly_symbols_one_size_each():
    assert mismatch((2, 6, 4), [2, "n", "d"]) is None
    assert mismatch((2, 6, 4), [2, "n", 5]) == "size 4 where the comment says 5"
    assert mismatch((2, 6), ["b", "n", "d"]) == "rank 2, the comment says 3"
    assert mismatch((3, 2, 5, 4), [3, 2, 5, 5])  # chapter 09's cell 16 before issue 25
    assert mismatch((7, 3, 4, 4), ["...", "n", "n"]) is None
    assert mismatch((4,), ["...", "n", "n"])
    assert mismatch((4, 5), ["n", "n"]) == "n is 5 here, but 4 earlier in this comment"
    assert mismatch((3, 2), ["layers", "h"], names={"layers": 2}) == (
        "layers is 3 here, but the variable layers is 2"
    )
    assert mismatch((3, 2), ["layers", "h"], names={"layers": True}) is None  # a bool is no size
    assert mismatch((3, 2), ["layers", "h"], names={"layers": "two"}) is None


@pytest.mark.parametrize(
    "shape, dims, names, why",
    [
        ((4, 5), ["n", "n + 1"], {}, None),
        ((4, 6), ["n", "n + 1"], {}, "size 6 where n + 1 = 5"),
        ((8, 4), ["hd", "hd/2"], {}, None),
        ((8, 5), ["hd", "hd/2"], {}, "size 5 where hd/2 = 4"),
        ((4, 12), ["d", "3d"], {}, None),  # `3d` is 3 * d
        ((4, 8), ["d", "3d"], {}, "size 8 where 3d = 12"),
        ((1, 5), [1, "len(prompt)"], {"prompt": "hello"}, None),
        ((1, 4), [1, "len(prompt)"], {"prompt": "hello"}, "size 4 where len(prompt) = 5"),
        ((2, 3), ["b", "min(topk, N)"], {"topk": 3, "N": 9}, None),
        ((2, 4), ["b", "min(topk, N)"], {"topk": 3, "N": 9}, "size 4 where min(topk, N) = 3"),
        ((4, 5), ["dk", "dk|dv"], {"dv": 5}, None),
        ((4, 6), ["dk", "dk|dv"], {"dv": 5}, "size 6 where the comment says dk|dv"),
        ((3,), ["<= window"], {"window": 3}, None),
        ((4,), ["<= window"], {"window": 3}, "size 4 > window = 3"),
        ((6, 8), ["n", "dk=8"], {}, None),
        ((6, 7), ["n", "dk=8"], {}, "size 7 where the comment says dk=8"),
        ((3, 4), ["n", "lengths[i]"], {"lengths": [1, 4], "i": 1}, None),
        ((3, 4), ["n", "n * prompt"], {"prompt": "abcd"}, None),  # an object is no number: waits
    ],
)
def test_arithmetic_is_evaluated_once_its_symbols_are_known(shape, dims, names, why):
    assert mismatch(shape, dims, names=names) == why


def _run_cell(source: str, **namespace) -> Ledger:
    """Instrument one cell, run it, and return what its shape checks found."""
    ledger = Ledger()
    code, _, _ = instrument(textwrap.dedent(source), 7)
    namespace.update(torch=torch, __shape_new_scope__=new_scope)
    namespace["__shape_check__"] = lambda *args, **kw: record(ledger, *args, **kw)
    exec(compile(code, "cell 7", "exec"), namespace)  # noqa: S102 - the test's own cells
    return ledger


HEAD_SCORES = """
    def head_scores(maps, predictable, length):
        rows, queries = predictable.nonzero(as_tuple=True)  # (P,) each
        target = queries - length[rows] + 1  # (P,)
        mean = maps.mean(dim=1)  # (layers, h, n, n)
        induction = maps[:, rows, :, queries, target].mean(dim=INDEX)  # (layers, h)
        return induction

    layers = 2
    maps = torch.rand(layers, 3, 2, 9, 9)  # (layers, b, h, n, n)
    predictable = torch.zeros(3, 9, dtype=torch.bool)  # (b, n)
    predictable[:, 5:] = True
    scores = head_scores(maps, predictable, torch.full((3,), 4))  # (layers, h)
"""


def test_head_scores_old_indexing_is_caught_by_binding():
    """Chapter 10's head_scores (issue 38): advanced indices split by a slice go to the front, so
    `.mean(dim=1)` averaged the layers and left (queries, heads): (12, 2) labelled (layers, h)."""
    ledger = _run_cell(HEAD_SCORES.replace("INDEX", "1"))
    assert ledger.bad == {
        "7:6": "'# (layers, h)': got (12, 2), layers is 12 here, but 2 on line 5 "
        "(# (layers, h, n, n))",
        "7:13": "'# (layers, h)': got (12, 2), layers is 12 here, but the variable layers is 2",
    }
    assert _run_cell(HEAD_SCORES.replace("INDEX", "0")).bad == {}  # the mean over the queries


def test_before_binding_a_wrong_symbol_passed_by_rank():
    """The same planted cell, checked by rank only (the old rule), finds nothing: the test above
    can fail only through the binding."""
    code, _, _ = instrument(textwrap.dedent(HEAD_SCORES.replace("INDEX", "1")), 7)
    assert "(layers, h)" in code and mismatch((12, 2), ["layers", "h"]) is None


def test_a_function_binds_per_call_and_sees_only_the_globals_it_reads():
    cell = """
        N_TOKENS = 10
        n = 6
        def f(x, k):
            y = x[:k]  # (n, d)
            z = torch.cat([y, y])  # (2 * n, d)
            w = torch.zeros(3, 3)  # (d, d)
            t = torch.zeros(N_TOKENS - SHIFT)  # (N_TOKENS,)
            return w  # (m, m)
        f(torch.zeros(10, 4), 2)
        f(torch.zeros(10, 5), 7)
    """
    ledger = _run_cell(cell.replace("SHIFT", "0"))
    assert ledger.bad == {"7:7": "'# (d, d)': got (3, 3), d is 3 here, but 4 on line 5 (# (n, d))"}
    ledger = _run_cell(cell.replace("SHIFT", "1"))
    assert ledger.bad["7:8"] == (
        "'# (N_TOKENS,)': got (9,), N_TOKENS is 9 here, but the global N_TOKENS is 10"
    )


def test_a_method_sees_its_own_int_attributes():
    cell = """
        class Layer:
            def __init__(self, d_out):
                self.d_out = d_out
            def forward(self, x):
                return x[..., :3]  # (b, n, d_out)
        Layer(4).forward(torch.zeros(2, 5, 8))
        Layer(3).forward(torch.zeros(2, 5, 8))
    """
    assert _run_cell(cell).bad == {
        "7:6": "'# (b, n, d_out)': got (2, 5, 3), d_out is 3 here, but self.d_out is 4"
    }


def test_each_pass_of_a_loop_binds_afresh_within_what_came_before():
    cell = """
        x = torch.zeros(2, 4)  # (b, d)
        for k in (3, 5):
            y = torch.zeros(k, 4)  # (r, d)
            z = torch.zeros(k, K)  # (r, b)
    """
    assert _run_cell(cell.replace("K", "2")).bad == {}
    assert _run_cell(cell.replace("K", "3")).bad == {
        "7:5": "'# (r, b)': got (3, 3), b is 3 here, but 2 on line 2 (# (b, d))"
    }


def test_arithmetic_waits_for_a_symbol_bound_later_in_the_cell():
    cell = """
        grown = torch.zeros(7)  # (n + 1,)
        ids = torch.zeros(N)  # (n,)
    """
    assert _run_cell(cell.replace("N", "6")).bad == {}
    assert _run_cell(cell.replace("N", "5")).bad == {
        "7:2": "'# (n + 1,)': got (7,), size 7 where n + 1 = 6"
    }
    ledger = _run_cell("grown = torch.zeros(7)  # (n + 1,)\n")
    assert ledger.bad == {} and ledger.waiting == {"7:1": "'# (n + 1,)': n + 1"}


def test_the_items_of_a_list_differ_those_of_a_tuple_agree():
    cell = """
        docs = [torch.zeros(1, length, 4) for length in (5, 3)]  # (1, length, d) each
        q, k = torch.zeros(2, 3), torch.zeros(2, K)  # (b, n) each
    """
    assert _run_cell(cell.replace("K", "3")).bad == {}
    assert _run_cell(cell.replace("K", "4")).bad == {
        "7:3": "'# (b, n) each': got (2, 4), n is 4 here, but 3 on line 3 (# (b, n) each)"
    }


def test_instrument_checks_assignments_returns_prints_and_tuples():
    source = (
        "x = make()  # (b, n)\n"
        "q, k = pair()  # (b, n) each\n"
        "out, cache = step()  # (b, m, vocab)\n"
        "def f(x):\n"
        "    return x  # (n, n)\n"
        "print(x.shape)  # (b, n)\n"
        "layer.register_buffer('mask', m)  # (c, c)\n"
        "total = 0  # a count\n"
    )
    code, checked, comments = instrument(source, 3)
    assert checked == set(comments) == {1, 2, 3, 5, 6, 7}
    assert code.count("__shape_check__(3, 2,") == 2  # q and k
    assert "__shape_check__(3, 3, '# (b, m, vocab)', out, scope=__shape_scope__" in code
    assert code.startswith("__shape_scope__ = __shape_new_scope__()")  # each run of the cell
    assert "__shape_scope__ = __shape_new_scope__(True, globals(), ())" in code  # each call


def test_a_wrong_comment_is_found_when_the_notebook_runs(tmp_path):
    nb = nbtools.nbformat.v4.new_notebook()
    nb.cells = [
        nbtools.nbformat.v4.new_code_cell("import torch"),
        nbtools.nbformat.v4.new_code_cell(
            "x = torch.zeros(2, 3)  # (2, 3)\n"
            "y = x.T  # (2, 3): planted, the real shape is (3, 2)\n"
            "def f(t):\n    return t.sum(dim=0)  # (b, n)\n"
            "z = f(x)  # (3,)\n"
        ),
    ]
    (tmp_path / "solutions").mkdir()
    path = tmp_path / "solutions" / "99_planted.ipynb"
    nbtools.write(nb, path)
    report = run_notebook(path)
    assert report["comments"] == 4 and report["unchecked"] == [] and report["never_run"] == []
    assert report["wrong"] == {
        "1:2": "'# (2, 3): planted, the real shape is (3, 2)': got (3, 2), size 3 where the "
        "comment says 2",
        "1:4": "'# (b, n)': got (3,), rank 1, the comment says 2",
    }


@pytest.mark.parametrize("path", SOLUTIONS, ids=[p.name for p in SOLUTIONS])
def test_every_shape_comment_matches_the_running_code(path):
    """Alone; under nbval the solution's own run checks the same (`solutions/NN.ipynb::shape
    comments`, tests/solution_run.py) and this case is deselected."""
    assert_clean(run_notebook(path))
