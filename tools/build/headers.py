"""The head of every solution notebook, written by ``make headers``: the Colab badge under the
title and the setup cell (tag ``setup``) that makes the notebook run alone on Colab (it clones the
course at the notebook's ``REF`` and installs what Colab lacks). ``tools.build.nbtools`` re-exports it."""

from __future__ import annotations

import re

import nbformat

from tools.build import config

SETUP_TAG = "setup"


class MarkerError(ValueError):
    """A solution notebook's answer markers (or its header) are malformed."""


_BADGE_RE = re.compile(r"^\[!\[Open In Colab\]\(.*\)\]\(.*\)\s*$")


def badge_markdown(folder: str, filename: str, ref: str = config.BRANCH) -> str:
    url = config.colab_url(folder, filename, ref)
    return f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({url})"


_REF_RE = re.compile(r'^REF = "(?P<ref>[^"\n]+)"', re.MULTILINE)
_SAFE_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")


def notebook_ref(nb) -> str:
    """The branch or tag ``nb`` belongs to: what its setup cell says, else the default branch."""
    if len(nb.cells) > 1 and SETUP_TAG in nb.cells[1].metadata.get("tags", []):
        found = _REF_RE.search(nb.cells[1].source)
        if found:
            return found["ref"]
    return config.BRANCH


def setup_cell_source(ref: str = config.BRANCH) -> str:
    if not _SAFE_REF.match(ref) or ".." in ref:
        raise MarkerError(f"REF must be a branch or tag name such as v1.0, not {ref!r}")
    packages = ", ".join(f"({pip!r}, {mod!r})" for pip, mod in config.PACKAGES_FOR_SETUP)
    return f"""# Setup: makes `course_utils` importable and installs only what is missing.
# Locally (make lab) everything is already there and this cell does nothing.
# On Colab it downloads this notebook's version of the course (REF) once and adds it to the path.
import importlib.util
import os
import subprocess
import sys

REPO = "{config.REPO_URL}"
REF = "{ref}"  # the branch or tag this notebook belongs to (written by `make headers`)
if importlib.util.find_spec("torch") is None:
    raise ImportError("This course needs PyTorch: see https://pytorch.org for the install command.")
if importlib.util.find_spec("course_utils") is None:
    here = [p for p in (".", "..") if os.path.isdir(os.path.join(p, "course_utils"))]
    if not here:
        if not os.path.isdir("{config.CLONE_DIR}"):
            def clone(*branch):
                try:
                    return subprocess.run(["git", "clone", "--depth", "1", *branch, REPO + ".git", "{config.CLONE_DIR}"],
                                          capture_output=True, text=True)
                except FileNotFoundError:
                    return None
            git = clone("--branch", REF)
            if git is not None and git.returncode and "Remote branch" in git.stderr and REF != "{config.BRANCH}":
                print(f"This notebook's version of the course ({{REF}}) is no longer on {{REPO}}, "
                      "so the newest version (branch {config.BRANCH}) is used instead.")
                git = clone()
            if git is None or git.returncode:
                said = "" if git is None else git.stderr
                why = ("Git is not installed here." if git is None else
                       "This runtime could not reach the address: it may be offline." if any(
                           s in said for s in ("Could not resolve", "unable to access", "Failed to connect")) else
                       "The repository was not found at that address." if "not found" in said else
                       f"Git stopped with exit status {{git.returncode}}.")
                raise RuntimeError(
                    f"Could not download the course's helper code (course_utils) from {{REPO}}. {{why}} "
                    "Check that this runtime is online and that the address opens in a browser, then run "
                    "this cell again. Or download the repository and open this notebook from its notebooks folder."
                ) from None
        here = ["{config.CLONE_DIR}"]
    sys.path.insert(0, os.path.abspath(here[0]))
missing = [pip for pip, mod in [{packages}] if importlib.util.find_spec(mod) is None]
if missing:
    print(f"Installing {{', '.join(missing)}} (once per runtime, usually under a minute)...", flush=True)
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *missing], capture_output=True, text=True)
    if install.returncode != 0:
        raise RuntimeError(f"Could not install {{', '.join(missing)}}: pip stopped with exit status "
                           f"{{install.returncode}}. Check that this runtime is online, then run this cell again.") from None
    print("Installed.")"""


def set_headers(nb, folder: str, filename: str, ref: str | None = None) -> None:
    """Put the badge under the title (cell 0) and the setup code in cell 1.

    ``ref`` is the branch or tag the notebook belongs to: the badge opens it and the setup cell
    clones it. None keeps the one the notebook's setup cell names (the default branch if none).
    """
    if (
        not nb.cells
        or nb.cells[0].cell_type != "markdown"
        or not nb.cells[0].source.startswith("# ")
    ):
        raise MarkerError(f"{folder}/{filename}: the first cell must be a markdown title '# ...'")
    ref = notebook_ref(nb) if ref is None else ref
    lines = nb.cells[0].source.split("\n")
    title, rest = lines[0], [line for line in lines[1:] if not _BADGE_RE.match(line)]
    while rest and not rest[0].strip():
        rest.pop(0)
    nb.cells[0].source = "\n".join(
        [title, "", badge_markdown(folder, filename, ref), "", *rest]
    ).rstrip()
    setup = nbformat.v4.new_code_cell(setup_cell_source(ref), metadata={"tags": [SETUP_TAG]})
    if len(nb.cells) > 1 and SETUP_TAG in nb.cells[1].metadata.get("tags", []):
        old = nb.cells[1]
        old.source = setup.source
        old.metadata = setup.metadata
    else:
        setup.id = "setup"
        nb.cells.insert(1, setup)
