"""Where the course repository lives, for the Colab badge and setup cell (instructor machinery).

The Colab badge and the setup cell of every notebook are generated from these values
(``python -m tools.build.nbtools headers``), and a test keeps them in step.
"""

from __future__ import annotations

REPO_SLUG = "attention-from-scratch/attention-from-scratch"
"""``owner/name`` of the course repository on GitHub."""

BRANCH = "main"
"""The default branch: the version a notebook belongs to unless `make headers REF=...` says otherwise."""

REPO_URL = f"https://github.com/{REPO_SLUG}"
CLONE_DIR = "attention-from-scratch"
"""Folder the setup cell clones into when ``course_utils`` is not importable (Colab)."""

PACKAGES_FOR_SETUP = (
    # (pip name, import name): installed by the setup cell only when missing.
    ("tiktoken", "tiktoken"),
    ("ipywidgets", "ipywidgets"),
    ("matplotlib", "matplotlib"),
    ("tqdm", "tqdm"),
)


def colab_url(folder: str, filename: str, ref: str = BRANCH) -> str:
    """The "Open in Colab" link for ``folder/filename`` at branch or tag ``ref`` of the repository."""
    return f"https://colab.research.google.com/github/{REPO_SLUG}/blob/{ref}/{folder}/{filename}"
