"""The class `make test-grade` grades (tests/nbgrader/test_grade.py): who hands in what.

Two short chapters (01, 03) keep it to minutes. Besides right answers, the untouched release and
planted mistakes, each way a notebook can go wrong for the grader is planted once or twice: a
hanging function, a hang in a cell of the student's own that the guard's fresh run needs, a
KeyboardInterrupt the code raises, a kernel that dies (twice in one notebook), a notebook that is
not JSON, a renamed notebook, tampered cells (an edited locked check, changed points, a copied
check, a deleted check, stripped metadata, a cell with an unknown id, a check's grade flag off),
a check replaced by a cheat, and mistakes whose failures cascade into a later check.
"""

import copy
import shutil
from collections import Counter
from pathlib import Path

from nbformat.v4 import new_code_cell

from tools.build import nbtools
from tools.grading import meta as nbgrader_meta
from tools.grading import roundtrip as rt

ASSIGNMENT = "week1"
CHAPTERS = ("01", "03")
CH01, CH03 = "01_toy_attention", "03_causal_masking"
# name: (notebook, exercise grade_id, old text, new text, the mistake the check must name)
MISTAKES = {
    "softmax": (CH01, "ch01_softmax_stable", "torch.exp(x - x.max(dim=-1, keepdim=True).values)", "torch.exp(x)", "softmax_overflow"),
    "no_sum": (CH01, "ch01_attention_scores", "(inputs * query).sum(dim=-1)", "inputs * query", "scores_no_sum"),
    "renorm": (CH03, "ch03_mask_after_softmax", "return probs / probs.sum(dim=-1, keepdim=True)", "return probs", "no_renormalise"),
    "zero_fill": (CH03, "ch03_mask_before_softmax", 'masked_fill(hidden, float("-inf"))', "masked_fill(hidden, 0.0)", "mask_zero_fill"),
    # these two cascade: context_vectors calls attention_weights, both masks call causal_mask
    "weights_dim": (CH01, "ch01_attention_weights", "torch.softmax(pairwise, dim=1)", "torch.softmax(pairwise, dim=0)", "softmax_over_columns"),
    "diagonal": (CH03, "ch03_causal_mask", "positions.unsqueeze(0) > positions.unsqueeze(1)", "positions.unsqueeze(0) >= positions.unsqueeze(1)", "mask_diagonal"),
}  # fmt: skip
CASCADES = {  # mistake: the checks that fail after it, though their own exercise is right
    "weights_dim": ["ch01_check_context_vectors"],
    "diagonal": ["ch03_check_mask_after_softmax", "ch03_check_mask_before_softmax"],
}
HANG = (
    CH03,
    "ch03_mask_before_softmax",
    "    hidden = ",
    "    while True:\n        pass\n    hidden = ",
)
CRASH = (
    CH03,
    "ch03_mask_before_softmax",
    "    hidden = ",
    "    import os\n    os._exit(1)\n    hidden = ",
)
RAISE = (
    CH03,
    "ch03_mask_after_softmax",
    "    visible = ",
    "    raise KeyboardInterrupt  # stop here\n    visible = ",
)


def _cell(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def _index(nb, grade_id):
    return nb.cells.index(_cell(nb, grade_id))


def plant(nb, grade_id, old, new):
    cell = _cell(nb, grade_id)
    assert old in cell.source, (grade_id, old)
    cell.source = cell.source.replace(old, new, 1)


def hang_in_own_cell(nb, stem):
    """A helper in a cell of the student's own, with a loop left in it: the answer needs the
    helper, so the guard's fresh run runs that cell too (and waited 300 s for it before)."""
    if stem == CH01:
        helper = (
            "def my_softmax(x):\n    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)\n"
            "    return e / e.sum(dim=-1, keepdim=True)\n\n\nt = 0\n"
            "while t < 3:  # t += 1 forgotten\n    my_softmax(torch.randn(3))"
        )
        nb.cells.insert(_index(nb, "ch01_softmax_stable"), new_code_cell(helper))
        _cell(nb, "ch01_softmax_stable").source = "def softmax_stable(x):\n    return my_softmax(x)"


def cheat(nb, stem):
    """An overflowing softmax, and the check replaced so that it passes in the kernel anyway."""
    if stem == CH01:
        plant(nb, *MISTAKES["softmax"][1:4])
        _cell(
            nb, "ch01_softmax_stable"
        ).source += "\n\n\ncu.checks.check_softmax = lambda *args, **kwargs: None"


def tamper_one(nb, stem):
    """An edited locked check, changed points, a copied check."""
    if stem == CH01:
        _cell(nb, "ch01_check_softmax").source = "pass  # no check, no failure"
        _cell(nb, "ch01_check_attention_scores").metadata["nbgrader"]["points"] = 5
    else:
        i = _index(nb, "ch03_check_causal_mask")
        nb.cells.insert(i + 1, copy.deepcopy(nb.cells[i]))


def tamper_two(nb, stem):
    """A deleted check, a check's grade flag off, a cell with an id the release does not have,
    a check whose metadata was stripped."""
    if stem == CH01:
        del nb.cells[_index(nb, "ch01_check_attention_scores")]
        _cell(nb, "ch01_check_context_vectors").metadata["nbgrader"]["grade"] = False
        bonus = copy.deepcopy(_cell(nb, "ch01_check_softmax"))
        bonus.metadata["nbgrader"]["grade_id"], bonus.source = "ch01_bonus", "print('bonus')"
        nb.cells.append(bonus)
    else:
        del _cell(nb, "ch03_check_mask_after_softmax").metadata["nbgrader"]


CLASS = (
    [(f"right{i}", []) for i in range(1, 5)]
    + [("blank1", "blank"), ("blank2", "blank")]
    + [(f"overflow{i}", ["softmax"]) for i in range(1, 4)]
    + [("nosum1", ["no_sum"]), ("nosum2", ["no_sum", "renorm"])]
    + [("renorm1", ["renorm"]), ("zerofill1", ["zero_fill"]), ("zerofill2", ["zero_fill"])]
    + [("hang1", [HANG]), ("hang2", ["softmax", HANG]), ("crash1", [CRASH])]
    + [("renamed1", "renamed"), ("renamed2", "renamed"), ("late_fix", ["softmax"])]
    + [("weights1", ["weights_dim"]), ("diag1", ["diagonal"]), ("cheat1", [cheat])]
    + [("raise1", [RAISE]), ("hang_own", [hang_in_own_cell]), ("notjson1", "notjson")]
    + [("tamper1", [tamper_one]), ("tamper2", [tamper_two])]
)  # fmt: skip
PLANTED = Counter(
    MISTAKES[m][4] for _, bugs in CLASS if isinstance(bugs, list) for m in bugs if m in MISTAKES
)


def build_class(course: Path) -> None:
    """A course with chapters 01 and 03 released, and the submissions of CLASS."""
    sources = nbgrader_meta.make_course(course, ASSIGNMENT, chapters=CHAPTERS)
    rt.nbgrader(course, "generate_assignment", ASSIGNMENT, "--force")
    for student, bugs in CLASS:
        folder = course / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        for path in sources:
            if bugs == "blank":
                shutil.copy(course / "release" / ASSIGNMENT / path.name, folder / path.name)
                continue
            if bugs == "notjson" and path.stem == CH03:
                (folder / path.name).write_text("not json: a file saved by another program")
                continue
            nb = nbtools.read(path)
            for bug in bugs if isinstance(bugs, list) else []:
                if callable(bug):
                    bug(nb, path.stem)
                    continue
                name, grade_id, old, new = MISTAKES[bug][:4] if bug in MISTAKES else bug
                if name == path.stem:
                    plant(nb, grade_id, old, new)
            renamed = bugs == "renamed" and path.stem == CH01
            nbtools.write(nb, folder / (f"{path.stem}-Copy1.ipynb" if renamed else path.name))
