"""The real nbgrader round trip over every chapter: `make test-nbgrader` runs this file.

``python3 tools/grading/roundtrip.py`` (the Makefile's command) needs only the standard
library: it creates ``.venv-nbgrader`` (nbgrader 0.9.6 plus the course's tested versions; kept
apart from ``.venv`` because nbgrader pulls in about a hundred packages), makes the course
importable there, and runs ``tests/nbgrader/`` with pytest inside it. The tests call the
functions below, which build a throwaway nbgrader course from ``solutions/`` and drive the
``nbgrader`` commands an instructor would type:

1. ``generate_assignment``: the release notebooks (compared cell by cell with ``notebooks/``);
2. ``autograde`` of three students: ``complete`` (the solutions), ``blank`` (the release
   notebooks untouched) and ``buggy`` (the solutions with one known bug per chapter, from
   :data:`BUGS`);
3. ``generate_feedback``, whose HTML must show the self-check's diagnosis.

Scores are read with ``nbgrader.api.Gradebook``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-nbgrader"
NBGRADER = "nbgrader==0.9.6"
# `make grade`'s PostgreSQL gradebook is tested against a real server: pgserver ships PostgreSQL's
# binaries in a wheel (no system package needed), psycopg is SQLAlchemy's driver for it.
GRADE_EXTRAS = ("pgserver==0.1.4", "psycopg[binary]==3.3.9")
ASSIGNMENT = "attention"
STUDENTS = ("complete", "blank", "buggy", "shortcuts")
STUB_MESSAGE = "the exercise stub is still in place"


@dataclass(frozen=True)
class Bug:
    """A known mistake planted in one exercise cell of a chapter (by editing its text)."""

    exercise: str  # grade_id of the exercise cell (tools.grading.meta names it)
    old: str
    new: str
    mistake: str  # the id in course_utils/checks/mistakes/ that the self-check must name


BUGS = {
    "ch01": Bug(
        "ch01_softmax_stable",
        "torch.exp(x - x.max(dim=-1, keepdim=True).values)",
        "torch.exp(x)",
        "softmax_overflow",
    ),
    "ch02": Bug(
        "ch02_SelfAttentionBatched", "scores_b / k.shape[-1] ** 0.5", "scores_b", "no_scaling"
    ),
    "ch03": Bug(
        "ch03_mask_after_softmax",
        "return probs / probs.sum(dim=-1, keepdim=True)",
        "return probs",
        "no_renormalise",
    ),
    "ch04": Bug(
        "ch04_CausalAttention", "self.mask[:n_tokens, :n_tokens]", "self.mask", "mask_not_sliced"
    ),
    "ch05": Bug("ch05_MultiHeadAttention", "self.mask[:n, :n]", "self.mask", "mask_not_sliced"),
    "ch06": Bug(
        "ch06_SlidingWindowDataset",
        "ids[s + 1 : s + 1 + context_length]",
        "ids[s : s + context_length]",
        "targets_not_shifted",
    ),
    "ch07": Bug(
        "ch07_blockwise_causal_attention",
        "shrink = torch.exp(best - new_best)",
        "shrink = torch.ones_like(best)",
        "online_no_rescale",
    ),
    "ch08": Bug("ch08_train_step", "    optimizer.zero_grad()\n", "", "grad_not_zeroed"),
    "ch09": Bug(
        "ch09_repeat_kv",
        "kv.repeat_interleave(n_rep, dim=1)",
        "kv.repeat(1, n_rep, 1, 1)",
        "gqa_repeat_not_interleave",
    ),
    "ch10": Bug(
        "ch10_packed_causal_mask",
        "return same_doc & causal  # (b, n, n)",
        "return causal.expand_as(same_doc)  # (b, n, n)",
        "packed_leaks_across_documents",
    ),
    "ch11": Bug(
        "ch11_kv_cache_bytes",
        "per_token = 2 * layout.kv_heads * layout.head_dim",
        "per_token = layout.kv_heads * layout.head_dim",
        "kv_values_forgotten",
    ),
}
"""One bug per chapter. A chapter without an entry gets its first exercise put back to the stub."""


@dataclass(frozen=True)
class Shortcut:
    """A way to points without doing the exercise, planted by the ``shortcuts`` student."""

    what: str
    exercise: str  # grade_id of the exercise cell it is planted in
    check: str  # grade_id of the self-check cell that must score 0
    old: str  # text of the solution replaced ...
    new: str  # ... by this
    after: str = ""  # top-level code added at the end of the cell


SHORTCUTS = (
    Shortcut(
        "the check's code swapped (with an overflowing softmax)",
        "ch01_softmax_stable",
        "ch01_check_softmax",
        "    exps = torch.exp(x - x.max(dim=-1, keepdim=True).values)",
        "    exps = torch.exp(x)",
        "cu.checks.check_softmax.__code__ = (lambda *a, **k: None).__code__",
    ),
    Shortcut(
        "F.scaled_dot_product_attention where chapter 01 asks for attention by hand",
        "ch01_context_vectors",
        "ch01_check_context_vectors",
        "    return attention_weights(inputs) @ inputs",
        "    x = inputs[None]  # (1, n, d)\n"
        "    return torch.nn.functional.scaled_dot_product_attention(x, x, x, scale=1.0)[0]",
    ),
    Shortcut(
        "failures hidden by an exception handler (with unscaled scores)",
        "ch02_SelfAttentionBatched",
        "ch02_check_batched_self_attention",
        "        attn_b = torch.softmax(scores_b / k.shape[-1] ** 0.5, dim=-1)",
        "        attn_b = torch.softmax(scores_b, dim=-1)",
        "get_ipython().set_custom_exc((Exception,), lambda *a, **k: None)",
    ),
    Shortcut(
        "torch.allclose replaced while the check runs (with no renormalisation)",
        "ch03_mask_after_softmax",
        "ch03_check_mask_after_softmax",
        "    return probs / probs.sum(dim=-1, keepdim=True)",
        "    torch.allclose = lambda *args, **kwargs: True\n    return probs",
    ),
    Shortcut(
        "the course's own class handed in",
        "ch04_CausalAttention",
        "ch04_check_causal_attention__CausalAttention",
        "class CausalAttention(nn.Module):",
        "CausalAttention = cu.chapters.CausalAttention\n\n\nclass Unused(nn.Module):",
    ),
    Shortcut(
        "the check replaced (with a forgotten fix)",
        "ch04_QuietBugFixed",
        "ch04_check_causal_attention__QuietBugFixed",
        "        return scores.softmax(dim=-1)",
        "        return scores\n\n\ncu.checks.check_causal_attention = lambda *args, **kwargs: None",
    ),
)
"""Six shortcuts in chapters 01-04: the ``shortcuts`` student hands in those four notebooks."""


def plant_shortcuts(nb, filename: str):
    """``nb`` with every shortcut of its chapter planted; the check ids that must score 0."""
    from tools.grading import meta as nbgrader_meta

    chapter = nbgrader_meta.chapter_id(filename)
    planted = []
    for shortcut in (s for s in SHORTCUTS if s.exercise.startswith(chapter + "_")):
        cell = next(
            c
            for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade_id") == shortcut.exercise
        )
        if shortcut.old not in cell.source:
            raise AssertionError(f"{filename}: {shortcut.old!r} is not in {shortcut.exercise}")
        cell.source = cell.source.replace(shortcut.old, shortcut.new, 1)
        cell.source += f"\n\n\n{shortcut.after}" if shortcut.after else ""
        planted.append(shortcut.check)
    return nb, planted


# ----------------------------------------------------------------------------- the venv (stdlib only)
def venv_python() -> Path:
    return VENV / "bin" / "python"


def ensure_venv() -> Path:
    """Create or refresh .venv-nbgrader when requirements or constraints changed."""
    inputs = [NBGRADER, *GRADE_EXTRAS] + [
        (ROOT / name).read_text(encoding="utf-8")
        for name in ("requirements.txt", "constraints.txt")
    ]
    wanted = hashlib.sha256("\n".join(inputs).encode()).hexdigest()
    stamp = VENV / ".installed"
    if stamp.exists() and stamp.read_text(encoding="utf-8") == wanted:
        return venv_python()
    if not venv_python().exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    print(f"Installing {NBGRADER} and the course's requirements into {VENV.name} ...", flush=True)
    subprocess.run(
        [
            str(venv_python()),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            NBGRADER,
            *GRADE_EXTRAS,
            "-r",
            "requirements.txt",
            "-c",
            "constraints.txt",
        ],
        check=True,
        cwd=ROOT,
    )
    subprocess.run(
        [
            str(venv_python()),
            "-c",
            "import sysconfig, pathlib, sys; pathlib.Path(sysconfig.get_paths()['purelib'], "
            "'course_utils.pth').write_text(sys.argv[1] + '\\n')",
            str(ROOT),
        ],
        check=True,
    )
    stamp.write_text(wanted, encoding="utf-8")
    return venv_python()


def nbgrader_env() -> dict[str, str]:
    """The environment nbgrader needs: its venv's bin/ first on PATH (it runs `alembic`)."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


NEEDS_NBGRADER = ("tests/test_nbgrader_stops.py",)
"""Test files outside tests/nbgrader with a test that needs nbgrader itself (it skips in .venv):
``make test-nbgrader`` runs them in .venv-nbgrader, where it runs."""

CLASS_TEST = "tests/nbgrader/test_grade.py"
"""The class of 28 (``make test-grade``; ``.ci/run`` runs it beside ``make test-nbgrader``): kept out of
``make test-nbgrader``, which an instructor runs to check a setup, because it takes minutes more."""


def main(argv: list[str] | None = None) -> int:
    """``make test-nbgrader``: tests/nbgrader without the class of 28; ``--class``: only that;
    ``--venv-only``: create or refresh .venv-nbgrader and stop (``make test-grading`` does this
    once before it runs both targets side by side, so they never install into it together)."""
    python = ensure_venv()
    if "--venv-only" in (argv or []):
        return 0
    env = dict(
        os.environ,
        COURSE_NBGRADER_TESTS="1",
        PATH=f"{VENV / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    which = (
        [CLASS_TEST]
        if "--class" in (argv or [])
        else ["tests/nbgrader", *NEEDS_NBGRADER, f"--ignore={CLASS_TEST}"]
    )
    return subprocess.run(
        [str(python), "-m", "pytest", "-v", "-s", "-p", "no:cacheprovider", *which],
        cwd=ROOT,
        env=env,
    ).returncode


# ----------------------------------------------------------------------------- the round trip
def nbgrader(course: Path, *args: str) -> float:
    """Run one nbgrader command in the course directory; return its wall-clock seconds."""
    start = time.perf_counter()
    done = subprocess.run(
        [str(Path(sys.executable).parent / "nbgrader"), *args],
        cwd=course,
        env=nbgrader_env(),
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"nbgrader {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        )
    return time.perf_counter() - start


def plant_bug(nb, filename: str):
    """Return (notebook with one known bug, Bug or None when the first exercise was emptied instead)."""
    from tools.grading import meta as nbgrader_meta

    chapter = nbgrader_meta.chapter_id(filename)
    bug = BUGS.get(chapter)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if not meta.get("solution") or cell.cell_type != "code":
            continue
        if bug is None:
            cell.source = _stub_regions(cell.source)
            return nb, None
        if meta.get("grade_id") == bug.exercise:
            if bug.old not in cell.source:
                raise AssertionError(
                    f"{filename}: the planted bug no longer applies ({bug.old!r} is not in "
                    f"{bug.exercise}); update BUGS in tools/grading/roundtrip.py"
                )
            cell.source = cell.source.replace(bug.old, bug.new, 1)
            return nb, bug
    raise AssertionError(
        f"{filename}: no exercise cell {bug.exercise if bug else ''} to plant a bug in"
    )


def _stub_regions(source: str) -> str:
    from tools.build import nbtools

    out, inside = [], False
    for line in source.split("\n"):
        if line.strip() == nbtools.BEGIN_CODE:
            indent = line[: len(line) - len(line.lstrip())]
            out.extend(indent + s for s in nbtools.CODE_STUB)
            inside = True
        elif line.strip() == nbtools.END_CODE:
            inside = False
        elif not inside:
            out.append(line)
    return "\n".join(out)


HIDDEN_TEST = (
    "\n### BEGIN HIDDEN TESTS\n"
    "assert torch.allclose(softmax_stable(torch.tensor([[1000.0, 0.0]])), torch.tensor([[1.0, 0.0]]))\n"
    "### END HIDDEN TESTS"
)
"""An instructor's hidden test, added to chapter 01's softmax check cell in source/."""


def add_hidden_test(course: Path) -> None:
    from tools.build import nbtools

    path = next((Path(course) / "source" / ASSIGNMENT).glob("01_*.ipynb"))
    nb = nbtools.read(path)
    cell = next(
        c
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("grade_id") == "ch01_check_softmax"
    )
    cell.source += HIDDEN_TEST
    nbtools.write(nb, path)


@dataclass
class RoundTrip:
    course: Path
    notebooks: list[str]
    seconds: dict[str, float]
    bugs: dict[str, Bug | None]


CHAPTERS_ENV = "COURSE_NBGRADER_CHAPTERS"  # `make test-nbgrader CHAPTERS="01 10"`: those only


def chapters() -> tuple[str, ...]:
    """The chapters the round trip takes (all when the variable is empty)."""
    return tuple(os.environ.get(CHAPTERS_ENV, "").split())


def run(course: Path) -> RoundTrip:
    """Build the course in ``course`` (an empty folder) and run every nbgrader step."""
    from tools.build import nbtools
    from tools.grading import meta as nbgrader_meta

    course = Path(course)
    sources = nbgrader_meta.make_course(course, ASSIGNMENT, chapters=chapters())
    names = [p.name for p in sources]
    add_hidden_test(course)
    seconds = {
        "generate_assignment": nbgrader(course, "generate_assignment", ASSIGNMENT, "--force")
    }
    bugs: dict[str, Bug | None] = {}
    for student in STUDENTS:
        folder = course / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        for name in names:
            if student == "shortcuts":
                if name[:2] in {s.exercise[2:4] for s in SHORTCUTS}:
                    nb = nbtools.read(course / "source" / ASSIGNMENT / name)
                    nbtools.write(plant_shortcuts(nb, name)[0], folder / name)
                continue
            if student == "blank":
                shutil.copy(course / "release" / ASSIGNMENT / name, folder / name)
                continue
            nb = nbtools.read(course / "source" / ASSIGNMENT / name)
            if student == "buggy":
                nb, bugs[name] = plant_bug(nb, name)
            nbtools.write(nb, folder / name)
        seconds[f"autograde {student}"] = nbgrader(
            course, "autograde", ASSIGNMENT, "--student", student, "--force"
        )
    for student in ("blank", "buggy"):
        seconds[f"generate_feedback {student}"] = nbgrader(
            course, "generate_feedback", ASSIGNMENT, "--student", student, "--force"
        )
    return RoundTrip(course, names, seconds, bugs)


def _gradebook(course: Path, student: str, cell_type: str, read) -> dict[str, dict]:
    """{notebook file name: {grade_id: read(grade)}} of one student's cells of ``cell_type``.

    The gradebook names a notebook without ".ipynb"; the keys here are file names, as elsewhere.
    """
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{Path(course) / 'gradebook.db'}") as gb:
        return {
            f"{notebook.name}.ipynb": {
                g.name: read(g) for g in notebook.grades if g.cell_type == cell_type
            }
            for notebook in gb.find_submission(ASSIGNMENT, student).notebooks
        }


def grades(course: Path, student: str) -> dict[str, dict[str, tuple[float, float]]]:
    """{notebook file name: {grade_id: (score, max_score)}} of one student's autograded (code) cells."""
    return _gradebook(course, student, "code", lambda g: (float(g.score), float(g.max_score)))


def written_answers(course: Path, student: str) -> dict[str, dict[str, tuple[float, bool]]]:
    """{notebook file name: {grade_id: (max_score, needs_manual_grade)}} of one student's written answers."""
    return _gradebook(
        course, student, "markdown", lambda g: (float(g.max_score), bool(g.needs_manual_grade))
    )


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
