"""What a student reads in nbgrader's feedback: diagnoses wrapped, each check named, a timeout in words.

* :func:`wrap`: a diagnosis wrapped to :data:`WIDTH` columns (the feedback page shows tracebacks
  in a ``<pre>`` block that does not wrap; ``nbgrader validate`` cuts every line at 90 characters).
* :class:`FeedbackPage`: the HTML exporter ``nbgrader generate_feedback`` uses in the course
  (``c.GenerateFeedback.exporter_class`` in the course's ``nbgrader_config.py``): nbgrader's own
  feedback template, with each self-check's row of the summary table named by its check and
  exercise (``check_causal_attention(QuietBugFixed)``) instead of "Test cell".
* :func:`timed_out`: the words shown when a cell ran past the grader's limit.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from tools.optional import optional_base

WIDTH = 80  # nbgrader validate cuts lines at 87 columns, after its 4-space indent
TEMPLATES = Path(__file__).resolve().parent / "nbgrader_templates"


def wrap(text: str) -> str:
    """A diagnosis wrapped paragraph by paragraph to :data:`WIDTH` columns."""
    return "\n".join(
        textwrap.fill(p, WIDTH, break_long_words=False, break_on_hyphens=False) if p else ""
        for p in text.split("\n")
    )


def timed_out(seconds: float) -> str:
    """The words a student reads when a cell was stopped."""
    return (
        f"This cell was stopped after {seconds:g} seconds, the grader's limit for one cell: the code "
        "it runs did not finish (for example a loop whose condition never becomes false, or a "
        "function that calls itself without end). Run the notebook from the top in your own "
        "kernel; the cell that never finishes is the one to fix."
    )


def check_label(grade_id: str) -> str:
    """``ch04_check_causal_attention__QuietBugFixed`` -> ``check_causal_attention(QuietBugFixed)``."""
    name = re.sub(r"^ch\d\d_", "", grade_id)
    check, _, argument = name.partition("__")
    return f"{check}({argument})" if argument else check


def name_the_checks(html: str) -> str:
    """The feedback page's summary rows of self-checks named by :func:`check_label` (a filter)."""
    return re.sub(
        r'<a href="#([\w.-]+)">Test cell</a>',
        lambda m: f'<a href="#{m.group(1)}">Self-check {check_label(m.group(1))}</a>',
        html,
    )


def configure(c) -> None:
    """Make ``nbgrader generate_feedback`` write :class:`FeedbackPage` (``c``: nbgrader's config).

    The exporter's own config section: nbgrader sets every HTMLExporter's template to its own.
    """
    import nbgrader

    templates = Path(nbgrader.__file__).parent / "server_extensions/formgrader/templates"
    c.GenerateFeedback.exporter_class = "tools.nbgrader_feedback.FeedbackPage"
    c.FeedbackPage.template_name = "course_feedback"  # based on nbgrader's "feedback"
    c.FeedbackPage.extra_template_basedirs = [str(TEMPLATES), str(templates)]


class FeedbackPage(optional_base("nbconvert.exporters", "HTMLExporter")):
    """nbgrader's feedback page, extended by ``nbgrader_templates/course_feedback``."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.template_file = (
            "page.html.j2"  # extends the next index.html.j2 on the path: nbgrader's
        )

    def default_filters(self):
        yield from super().default_filters()
        yield "name_the_checks", name_the_checks
