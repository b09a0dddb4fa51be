"""What a student reads in nbgrader's feedback: diagnoses wrapped, each check named, a timeout in words.

* :func:`wrap`: a diagnosis wrapped to :data:`WIDTH` columns (the feedback page shows tracebacks
  in a ``<pre>`` block that does not wrap; ``nbgrader validate`` cuts every line at 90 characters).
* :class:`FeedbackPage`: the HTML exporter ``nbgrader generate_feedback`` uses in the course
  (``c.GenerateFeedback.exporter_class`` in the course's ``nbgrader_config.py``): nbgrader's own
  feedback template, with each self-check's row of the summary table named by its check and
  exercise (``check_causal_attention(QuietBugFixed)``) instead of "Test cell".
* :func:`timed_out`, :func:`raised_interrupt`, :func:`kernel_died`: the words shown for a cell
  that did not finish (tools/grading/stops.py puts them there).
* :func:`note`: an event of the grading (a tampered cell restored, a kernel that died, a notebook
  nbgrader refused, ...) recorded in the notebook's metadata (``course_grading.events``, read by
  ``make grade``'s summary and ``make report``) and shown in one note cell at its top, which the
  feedback page shows first.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from tools.grading.optional import optional_base

WIDTH = 80  # nbgrader validate cuts lines at 87 columns, after its 4-space indent
NOTE_MARKER = "<!-- course-grader-note -->"  # the first line of the grader's note cell
EVENTS = "course_grading"  # the notebook metadata key holding the events
TEMPLATES = Path(__file__).resolve().parent / "templates"


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


def raised_interrupt(seconds: float) -> str:
    """The words a student reads when the code raised KeyboardInterrupt itself."""
    return (
        "Your code raised KeyboardInterrupt itself: the grader did not stop this cell (its limit "
        f"is {seconds:g} seconds). A KeyboardInterrupt ends the cell like any error, so the code "
        "after it did not run; remove the `raise KeyboardInterrupt` (or the call that raises it)."
    )


def kernel_died() -> str:
    """The words a student reads in the cell during which the kernel died."""
    return (
        "The Python process running this notebook died while this cell ran: the code ended it "
        "(os._exit, a crash inside a library) or used more memory than the grading machine has. "
        "The grader started a new process and ran the notebook again without this cell, so the "
        "cells after it were graded; whatever this cell would have defined was missing for them."
    )


def note(nb, kind: str, text: str) -> None:
    """Record one event of the grading in ``nb`` (see the module text); ``kind`` names it for
    the report ("restored", "kernel-died", "refused", "sandbox", ...), ``text`` says it in words."""
    from nbformat.v4 import new_markdown_cell

    events = nb.metadata.setdefault(EVENTS, {}).setdefault("events", [])
    events.append({"kind": kind, "text": text})
    body = "\n".join(f"- {inert(e['text'])}" for e in events)
    source = (
        f"{NOTE_MARKER}\n**From the grader.** What happened to this notebook before and while "
        f"it was graded:\n\n{body}"
    )
    cell = next(
        (c for c in nb.cells[:1] if c.cell_type == "markdown" and NOTE_MARKER in c.source), None
    )
    if cell is None:
        nb.cells.insert(0, new_markdown_cell(source))
    else:
        cell.source = source


def inert(text: str) -> str:
    """``text`` as markdown that renders as the same words and nothing else: the grader's notes
    quote what students wrote (a file name, a cell's first line), and the feedback page and the
    class report are HTML, where a quoted ``<script>`` would run. ``<``, ``>`` and ``&`` become
    entities; backticks (code spans, which show entities as typed) become quotes."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("`", "'")


def cell_label(nb, index: int) -> str:
    """``cell 12 (`ch01_check_softmax`)`` or ``cell 12 (first line ...)``, numbered as in the notebook
    handed in (the grader's note cell at the top not counted)."""
    cell = nb.cells[index]
    first = (
        bool(nb.cells) and nb.cells[0].cell_type == "markdown" and NOTE_MARKER in nb.cells[0].source
    )
    grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    text = cell.source.strip().split("\n")[0][:60]
    return f"cell {index - first} (" + (f"`{grade_id}`" if grade_id else f"`{text}`") + ")"


def events(nb) -> list[dict]:
    """The events :func:`note` recorded in ``nb`` (a notebook, or its metadata as a dict)."""
    meta = nb.get("metadata", {}) if isinstance(nb, dict) else nb.metadata
    return list(meta.get(EVENTS, {}).get("events", []))


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
    c.GenerateFeedback.exporter_class = "tools.grading.feedback.FeedbackPage"
    c.FeedbackPage.template_name = "course_feedback"  # based on nbgrader's "feedback"
    c.FeedbackPage.extra_template_basedirs = [str(TEMPLATES), str(templates)]


class FeedbackPage(optional_base("nbconvert.exporters", "HTMLExporter")):
    """nbgrader's feedback page, extended by ``templates/course_feedback`` (beside this file)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.template_file = (
            "page.html.j2"  # extends the next index.html.j2 on the path: nbgrader's
        )

    def default_filters(self):
        yield from super().default_filters()
        yield "name_the_checks", name_the_checks
