"""The course directory's ``nbgrader_config.py``: what ``python -m tools.grading.meta course``
writes (:func:`course_config`: a few lines that load the course's settings from
:data:`CONFIG_FILE`, a real nbgrader config file in this folder), and the gradebook every command
of the course uses (:func:`set_db_url`)."""

from __future__ import annotations

from pathlib import Path

CONFIG_FILE = Path(__file__).resolve().with_name("nbgrader_config.py")
ROOT = CONFIG_FILE.parents[2]

# The course directory's own file: the repository on sys.path (CONFIG_FILE imports the course's
# preprocessors from it), then CONFIG_FILE itself. traitlets' load_subconfig skips a missing file
# in silence, so a moved repository is an error here instead of grading with no guard.
COURSE_CONFIG = """\
# nbgrader configuration of an "Attention from Scratch" course directory (written by
# tools/grading/meta.py). The course's settings live in the course repository's
# tools/grading/nbgrader_config.py; a line added below (the gradebook's URL) overrides them.
import os
import sys

sys.path.insert(0, {root!r})
if not os.path.isfile({config!r}):
    raise FileNotFoundError("the course's nbgrader settings are missing: " + {config!r})
c = get_config()  # noqa: F821 - provided by nbgrader
load_subconfig({name!r}, path={folder!r})  # noqa: F821 - provided by nbgrader
"""
DB_LINE = "c.CourseDirectory.db_url = {url!r}"


def course_config(root: Path = ROOT) -> str:
    """The text of a course directory's ``nbgrader_config.py`` for the repository at ``root``."""
    config = Path(root) / CONFIG_FILE.relative_to(ROOT)
    return COURSE_CONFIG.format(
        root=str(root), config=str(config), name=config.name, folder=str(config.parent)
    )


def set_db_url(course: Path, url: str) -> None:
    """Make every nbgrader command of the course (generate_assignment, autograde, generate_feedback,
    the formgrader) and `make grade`/`make report` use the gradebook at ``url``: a line appended
    to its ``nbgrader_config.py`` (a later line wins over an earlier one)."""
    config = Path(course) / "nbgrader_config.py"
    text = config.read_text(encoding="utf-8")
    line = DB_LINE.format(url=url)
    if line not in text.splitlines():
        text += f"# The gradebook every nbgrader command and make grade/report use:\n{line}\n"
        config.write_text(text, encoding="utf-8")
