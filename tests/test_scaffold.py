"""`make chapter` scaffolds a chapter that the house accepts: built from nothing in a throwaway copy.

The copy gets ``python -m tools.build.scaffold NN temperature``, NN the first free chapter number
(what ``make chapter NN=.. NAME=temperature`` runs), then ``make exercises`` and ``make solutions``
for that notebook, then the house tests and a strict nbval of the new notebook. Adding the chapter
must create at most 7 hand-written files and edit none; everything else it changes must be generated.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NN = f"{max(int(p.name[:2]) for p in (ROOT / 'solutions').glob('[0-9][0-9]_*.ipynb')) + 1:02d}"
HOUSE_TESTS = [
    f"tests/ch{NN}",
    "tests/test_house.py",
    "tests/test_core.py",
    "tests/test_mistake_catalogue.py",
    "tests/test_export.py",
    "tests/test_figures.py",
    "tests/test_notebooks.py",
    "tests/test_nbgrader_meta.py",
    "tests/test_widgets.py",
    "tests/test_attachments.py",
]
GENERATED = (
    "notebooks/",
    "figures/",
    "course_utils/chapters/__init__.py",
    f"course_utils/chapters/ch{NN}/__init__.py",
    f"solutions/{NN}_temperature.ipynb",  # its nbgrader metadata, attachments and outputs
    "README.md",  # its generated listings (checked below: nothing else changed)
    "docs/instructors.md",  # its points table (checked below)
)


def _snapshot(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def _run(copy: Path, *args: str, timeout: int = 600) -> str:
    env = {**os.environ, "PYTHONPATH": str(copy), "COURSE_STATIC_WIDGETS": "1"}
    done = subprocess.run(
        [sys.executable, *args], cwd=copy, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, (
        f"{' '.join(args)} failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    )
    return done.stdout


def copy_of_the_course(folder: Path) -> Path:
    """``folder``/course: a copy of every file git tracks or would track (the working tree as it is)."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    copy = folder / "course"
    for rel in filter(None, listed):
        if (ROOT / rel).is_file():
            (copy / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, copy / rel)
    return copy


def test_a_scaffolded_chapter_passes_the_house_tests(tmp_path):
    copy = copy_of_the_course(tmp_path)
    before = _snapshot(copy)

    _run(copy, "-m", "tools.build.scaffold", NN, "temperature")
    scaffolded = _snapshot(copy)
    created = sorted(set(scaffolded) - set(before))
    edited = sorted(k for k in before if scaffolded.get(k) != before[k])
    assert len(created) <= 7 and edited == [], (created, edited)

    _run(copy, "-m", "tools.build.nbtools", "exercises")
    _run(copy, "-m", "tools.build.nbtools", "execute", f"solutions/{NN}_temperature.ipynb")
    built = _snapshot(copy)
    changed = sorted(k for k in built if scaffolded.get(k) != built[k])
    assert [k for k in changed if not k.startswith(GENERATED)] == [], changed
    readme = (copy / "README.md").read_text(encoding="utf-8")
    row = (
        f"| {NN} | [Temperature](notebooks/{NN}_temperature.ipynb) | temperature: one exercise and "
        "its self-check | temperature explorer |\n"
    )
    assert row in readme
    assert readme.replace(row, "") == (ROOT / "README.md").read_text(encoding="utf-8")
    guide = (copy / "docs" / "instructors.md").read_text(encoding="utf-8")
    assert f"| {NN}_temperature | 1 | 2 |" in guide
    grown = guide.replace(f"| {NN}_temperature | 1 | 2 |\n", "")
    # only the listings grew
    assert grown == (ROOT / "docs" / "instructors.md").read_text(encoding="utf-8")

    # the limit only stops a hang: measured 5-8 min at load 8-15 on 2 cores, over 15 at load 9-11
    # beside three other suites (2026-11-28), so it is generous; -n 2 uses both cores
    _run(
        copy, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider", *HOUSE_TESTS, timeout=2400
    )
    _run(
        copy,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--nbval",
        "--nbval-current-env",
        "--nbval-sanitize-with",
        "tests/nbval_sanitize.cfg",
        f"solutions/{NN}_temperature.ipynb",
    )
