"""House rules that keep students' package and instructors' machinery apart."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMPORTS_TOOLS = re.compile(r"^\s*(?:from\s+tools[\s.]|import\s+tools\b)", re.MULTILINE)


def test_course_utils_never_imports_tools():
    """Students import course_utils on Colab, where tools/ (instructor machinery) is not needed."""
    offenders = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "course_utils").rglob("*.py"))
        if IMPORTS_TOOLS.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == [], f"course_utils must not import tools/: {offenders}"


def test_tools_modules_stay_small():
    """No instructor module grows past the house limit of about 500 lines."""
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in (ROOT / "tools").glob("*.py")}
    assert all(n <= 520 for n in sizes.values()), sizes
