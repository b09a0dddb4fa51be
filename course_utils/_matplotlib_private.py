"""The one module that uses matplotlib's private API, each name with a fallback for a matplotlib
without it (``tests/test_plotting.py`` draws with each name renamed away). The explorers paste
cached text images (``_render.py``) exactly where matplotlib draws a text; without one of these
names a text is drawn by matplotlib itself: right, only slower."""

from __future__ import annotations

LINESPACING, CHECK_XY, SET_GC_CLIP = "_linespacing", "_check_xy", "_set_gc_clip"


def linespacing(text) -> float:
    """Line spacing of ``text`` (public as ``get_linespacing`` from matplotlib 3.11)."""
    getter = getattr(text, "get_linespacing", None)
    return getter() if getter is not None else getattr(text, LINESPACING, 1.2)


def annotation_in_view(annotation, renderer) -> bool | None:
    """Whether an annotation's point is drawn (``Annotation.draw``'s first test); None: unknown."""
    check = getattr(annotation, CHECK_XY, None)
    return None if check is None else bool(check(renderer))


def clip_like_text(text, gc) -> bool:
    """Give ``gc`` the clipping ``text`` is drawn with; False when this matplotlib cannot."""
    clip = getattr(text, SET_GC_CLIP, None)
    return clip is not None and clip(gc) is None
