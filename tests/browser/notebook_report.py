"""What the browser test reports about one notebook, and the pure-Python rules it applies to
the saved notebook (errors, figure references, explorer cells). Part of run_browser_tests."""

from __future__ import annotations

import re
import statistics
import time
from dataclasses import dataclass, field

STUB_LINE = re.compile(r"raise\s+NotImplementedError\(\)")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
MARKDOWN_IMAGE = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)")
HTML_IMAGE = re.compile(r"<img\b[^>]*\bsrc\s*=\s*[\"']([^\"']+)", re.IGNORECASE)
EXPLORER_CALL = re.compile(r"\b\w+_explorer\s*\(")
WIDGET_AS_TEXT = re.compile(r"\b[A-Z]\w*\(children=\(")
EXPLORER_TAG = "explorer"


# ----------------------------------------------------------------------------- reports
@dataclass
class NotebookReport:
    path: str
    exercise: bool
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    screenshot: str | None = None
    figures: int = 0
    explorers: int = 0
    controls_moved: int = 0
    saved: object | None = field(default=None, repr=False)  # the notebook as saved after the run
    timings: dict[str, float] = field(default_factory=dict)  # seconds per phase
    latencies: dict[str, list[float]] = field(
        default_factory=dict
    )  # explorer -> ms from a move to its picture

    def lap(self, phase: str, since: list[float]) -> None:
        now = time.monotonic()
        self.timings[phase] = round(now - since[0], 1)
        since[0] = now

    @property
    def ok(self) -> bool:
        return not self.problems

    def format(self) -> str:
        head = (
            f"{'PASS' if self.ok else 'FAIL'} {self.path} ({self.seconds:.1f} s; {self.figures} figures, "
            f"{self.explorers} explorers, {self.controls_moved} controls moved)"
        )
        lines = (
            [head]
            + [f"    problem: {p}" for p in self.problems]
            + [f"    note: {n}" for n in self.notes]
        )
        if self.screenshot:
            lines.append(f"    screenshot: {self.screenshot}")
        if self.timings:
            lines.append("    seconds: " + ", ".join(f"{k} {v}" for k, v in self.timings.items()))
        lines += [f"    latency: {line}" for line in self.latency_lines()]
        return "\n".join(lines)

    def latency_lines(self) -> list[str]:
        """One line per explorer: the median and each move's time from the control to the new picture."""
        return [
            f"{name}: median {statistics.median(ms):.0f} ms over {len(ms)} moves "
            f"({', '.join(f'{m:.0f}' for m in ms)})"
            for name, ms in self.latencies.items()
            if ms
        ]


def strip_ansi(text: str) -> str:
    return ANSI.sub("", text)


def _first_line(text: str, limit: int = 160) -> str:
    line = next((s for s in strip_ansi(text).splitlines() if s.strip()), "")
    return line[:limit]


def execution_problems(nb, exercise: bool) -> tuple[list[str], list[str]]:
    """Problems and notes about errors in an executed notebook (a pure function of the outputs).

    A solution must run every code cell without error output or stderr. An exercise may stop at
    its first exercise stub: a NotImplementedError whose traceback shows ``raise NotImplementedError()``.
    """
    problems: list[str] = []
    notes: list[str] = []
    code = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    first_error = None
    for index, cell in code:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                if first_error is None:
                    first_error = (index, out)
                else:
                    problems.append(
                        f"cell {index}: another error: {out.get('ename')}: {out.get('evalue')}"
                    )
            elif out.get("output_type") == "stream" and out.get("name") == "stderr":
                problems.append(
                    f"cell {index}: wrote to stderr: {_first_line(out.get('text', ''))!r}"
                )
    stop = len(nb.cells)
    if first_error is not None:
        index, out = first_error
        stop = index
        traceback = strip_ansi("\n".join(out.get("traceback", [])))
        ename, evalue = out.get("ename", "?"), out.get("evalue", "")
        stub_above = any(STUB_LINE.search(c.source) for i, c in code if i <= index)
        raised = ename == "NotImplementedError" and STUB_LINE.search(traceback)
        reported = "NotImplementedError" in f"{evalue}\n{traceback}" and stub_above
        if exercise and (raised or reported):
            later = sum(1 for i, c in code if i > index and c.source.strip())
            notes.append(
                f"Run All stopped at the exercise stub's NotImplementedError in cell {index} "
                f"(expected); {later} later code cells not run"
            )
        elif exercise:
            problems.append(
                f"cell {index}: {ename}: {evalue} (the only error allowed in an exercise is "
                f"the NotImplementedError raised by an exercise stub)"
            )
        else:
            problems.append(f"cell {index}: {ename}: {evalue}")
    never_ran = [
        i for i, c in code if i < stop and c.source.strip() and c.get("execution_count") is None
    ]
    if never_ran:
        problems.append(f"code cells never ran: {never_ran}")
    return problems, notes


def figure_references(nb) -> list[str]:
    """Picture references of the notebook's markdown: into figures/, inline data: or a cell attachment."""
    refs = []
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for ref in MARKDOWN_IMAGE.findall(cell.source) + HTML_IMAGE.findall(cell.source):
            if ref.startswith(("attachment:", "data:image/")) or (
                "figures/" in ref and not re.match(r"^[a-z]+:", ref)
            ):
                refs.append(ref)
    return refs


def explorer_cells(nb) -> list[int]:
    return [
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code"
        and (EXPLORER_TAG in c.metadata.get("tags", []) or EXPLORER_CALL.search(c.source))
    ]
