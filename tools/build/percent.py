"""Percent format <-> solution notebook, by jupytext (an authoring tool, in ``.venv-authoring``).

    python -m tools.build.nbtools to-percent solutions/12_topic.ipynb /tmp/12.py
    python -m tools.build.nbtools from-percent /tmp/12.py solutions/12_topic.ipynb

jupytext (pinned in ``tools/build/requirements-authoring.txt``) writes and reads the text with the
course's options, :data:`OPTIONS`, which the text's header records: the header carries the
notebook's ``course`` metadata (the README's chapter table) and kernelspec; a cell's marker carries
its tags, not the nbgrader metadata ``make exercises`` generates. Back onto a notebook that exists,
jupytext's ``--update``: every cell it finds again keeps its id, outputs and nbgrader metadata, the
notebook its ``language_info`` (all 11 solutions come back byte-identical: tests/test_percent.py).
An edited cell keeps its old outputs until ``make solutions``. What jupytext adds for its own text
round trip (the notebook's ``jupytext`` metadata, a cell's ``lines_to_next_cell``) stays out of the
notebook, and a cell new to the notebook is numbered ``cNNN`` (as ``make chapter`` numbers them).

jupytext is not in the students' .venv: it installs a JupyterLab extension and a contents manager
into the environment that runs ``make lab``. Run from there, the two commands run themselves in
``.venv-authoring`` (:func:`in_authoring_venv`), made (or refreshed when the pins change) on first
use.
"""

from __future__ import annotations

import copy
import hashlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-authoring"
REQUIREMENTS = Path(__file__).with_name("requirements-authoring.txt")
FORMAT = "py:percent"
OPTIONS = {
    "notebook_metadata_filter": "course,-jupytext.text_representation",
    "cell_metadata_filter": "-nbgrader",
}
"""jupytext's filters: the header keeps ``course`` (and jupytext's default, the kernelspec) but not
jupytext's version stamp; cells keep every metadata but nbgrader's."""
HEADERLESS_FILTER = "jupytext,-all"
"""The notebook filter of a text without a header (jupytext's: ``-all``): it keeps the notebook's
metadata as ``-all`` does, and makes jupytext's ``--update`` read the text's cell filter, which
restores what the text does not show (nbgrader's), not the notebook's (none: nbgrader's lost)."""
JUPYTEXT_CELL_METADATA = ("cell_marker", "lines_to_next_cell", "lines_to_end_of_cell_marker")
"""What jupytext stores in a cell to write its text back the same (its ``_JUPYTEXT_CELL_METADATA``
less two keys of older tools); never part of a course notebook."""


def to_percent(nb) -> str:
    """The percent-format text of ``nb`` (not modified)."""
    import jupytext

    nb = copy.deepcopy(nb)
    nb.metadata["jupytext"] = dict(OPTIONS)
    return jupytext.writes(nb, fmt=FORMAT)


def from_percent(text: str, existing=None):
    """The notebook of percent-format ``text``; onto ``existing`` (the notebook it replaces) as
    ``jupytext --update`` does: the cells found again keep their ids, outputs and filtered metadata."""
    import jupytext
    from jupytext.combine import combine_inputs_with_outputs

    nb = jupytext.reads(text, fmt=FORMAT)
    options = nb.metadata.setdefault("jupytext", {})
    if options.get("notebook_metadata_filter") == "-all":  # a text without a header
        options["notebook_metadata_filter"] = HEADERLESS_FILTER
    if existing is not None:
        nb = combine_inputs_with_outputs(nb, existing, fmt=FORMAT)
    nb.metadata.pop("jupytext", None)
    kept = {cell.id for cell in existing.cells} if existing is not None else set()
    taken = {cell.id for cell in nb.cells if cell.id in kept}
    for i, cell in enumerate(nb.cells):
        for key in JUPYTEXT_CELL_METADATA:
            cell.metadata.pop(key, None)
        if cell.id not in kept and f"c{i:03d}" not in taken:
            cell.id = f"c{i:03d}"
        taken.add(cell.id)
    return nb


def in_authoring_venv(argv: list[str]) -> int | None:
    """Where jupytext is missing (the students' .venv): run ``python -m tools.build.nbtools argv``
    in ``.venv-authoring`` and return its exit status; where it is installed: None."""
    try:
        import jupytext  # noqa: F401
    except ImportError:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        cmd = [str(ensure_venv()), "-m", "tools.build.nbtools", *argv]
        return subprocess.run(cmd, env=env).returncode
    return None


def ensure_venv() -> Path:
    """The python of ``.venv-authoring``, created or refreshed when the pins changed."""
    python = VENV / "bin" / "python"
    stamp = VENV / ".installed"
    wanted = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    if stamp.is_file() and stamp.read_text(encoding="utf-8") == wanted and python.exists():
        return python
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    print(f"Installing the authoring tools into {VENV.name} ...", file=sys.stderr, flush=True)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "-r", str(REQUIREMENTS)], check=True)
    stamp.write_text(wanted, encoding="utf-8")
    return python
