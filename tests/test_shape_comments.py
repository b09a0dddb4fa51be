"""Every shape comment of every solution, checked against the real shape while the notebook runs
(numbers exactly, symbols by rank; see tests/shape_comments.py). One kernel run per chapter."""

import pytest

from tests.shape_comments import instrument, mismatch, parse_spec, run_notebook
from tools import nbtools

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


def test_mismatch_numbers_exactly_symbols_by_rank():
    assert mismatch((2, 6, 4), [2, "n", "d"]) is None
    assert mismatch((2, 6, 4), [2, "n", 5]) == "size 4 where the comment says 5"
    assert mismatch((2, 6), ["b", "n", "d"]) == "rank 2, the comment says 3"
    assert mismatch((3, 2, 5, 4), [3, 2, 5, 5])  # chapter 09's cell 16 before issue 25
    assert mismatch((7, 3, 4, 4), ["...", "n", "n"]) is None
    assert mismatch((4,), ["...", "n", "n"])


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
    assert "__shape_check__(3, 3, '# (b, m, vocab)', out)" in code


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
    report = run_notebook(path)
    assert report["comments"] > 0
    assert not report["unchecked"], (
        "shape comments on lines the test cannot check (put them on an assignment, a return "
        "or a print):\n" + "\n".join(report["unchecked"])
    )
    wrong = [f"cell {where}: {why}" for where, why in sorted(report["wrong"].items())]
    assert not wrong, "shape comments that disagree with the code:\n" + "\n".join(wrong)
