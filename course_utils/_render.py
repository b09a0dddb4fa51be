"""Fast pictures for the live explorers (used by :func:`course_utils.plotting.render_png`).

A control change redraws only the figure's *animated* artists over a kept background. Most of
what changes is text (cell values, bar labels, titles), and drawing a string with matplotlib
lays out and rasterises every glyph each time; here each string is rasterised once, kept as a
small RGBA image (a "sprite") and pasted where it belongs on later frames. The PNG is encoded
without row filters (flat plot backgrounds compress well without them), which takes a fraction
of Pillow's adaptive filtering.
"""

from __future__ import annotations

import math
import struct
import zlib

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.text import Annotation, Text

from ._matplotlib_private import annotation_in_view, clip_like_text, linespacing

MAX_SPRITES = 4096
"""Rendered strings kept (a few hundred per explorer; the cache is emptied when full)."""

_sprites: dict[tuple, tuple[int, int, np.ndarray] | None] = {}
_scratch: list[RendererAgg] = []  # one off-screen renderer, reused while the size stays the same


def _key(text: Text, renderer, anchor: tuple[float, float]) -> tuple | None:
    """What a string's pixels depend on, or None for texts drawn the ordinary way."""
    if (
        type(text) not in (Text, Annotation)
        or text.get_usetex()
        or text.get_wrap()
        or text.get_bbox_patch() is not None
        or text.get_path_effects()
    ):
        return None
    return (
        text.get_text(),
        to_rgba(text.get_color(), text.get_alpha()),
        text.get_fontproperties(),
        text.get_rotation(),
        text.get_rotation_mode(),
        text.get_horizontalalignment(),
        text.get_verticalalignment(),
        linespacing(text),
        text.get_antialiased(),
        renderer.dpi,
        # glyphs sit at fractions of a pixel: the anchor's offset (in quarter pixels) is part of the key
        round(4 * (anchor[0] - round(anchor[0]))),
        round(4 * (anchor[1] - round(anchor[1]))),
    )


def _anchor(text: Text) -> tuple[float, float]:
    x, y = text.get_transform().transform(text.get_unitless_position())
    return float(x), float(y)


def _rasterise(text: Text, renderer) -> tuple[int, int, np.ndarray] | None:
    """Draw ``text`` alone on a transparent canvas of the figure's size and cut out its pixels."""
    width, height = int(renderer.width), int(renderer.height)
    if not _scratch or (_scratch[0].width, _scratch[0].height, _scratch[0].dpi) != (
        width,
        height,
        renderer.dpi,
    ):
        _scratch[:] = [RendererAgg(width, height, renderer.dpi)]  # transparent
    scratch = _scratch[0]
    clip = text.get_clip_on()
    text.set_clip_on(False)  # clipping is applied when the sprite is pasted, at its place then
    try:
        Text.draw(text, scratch)  # the text alone (an annotation's arrow is drawn apart)
        box = Text.get_window_extent(text, scratch)
    finally:
        text.set_clip_on(clip)
    if not (np.isfinite(box.extents).all()):
        scratch.clear()
        return None
    buffer = np.asarray(scratch.buffer_rgba())  # (height, width, 4), top row first
    x0, x1 = max(math.floor(box.x0) - 3, 0), min(math.ceil(box.x1) + 3, width)
    r0, r1 = max(math.floor(height - box.y1) - 3, 0), min(math.ceil(height - box.y0) + 3, height)
    pixels = buffer[
        r1 - 1 : r0 - 1 if r0 else None : -1, x0:x1
    ].copy()  # bottom row first, as draw_image takes it
    buffer[max(r0 - 8, 0) : r1 + 8, max(x0 - 8, 0) : x1 + 8] = (
        0  # transparent again, cheaper than clear()
    )
    if x0 >= x1 or r0 >= r1:
        return None
    x, y = _anchor(text)
    return x0 - round(x), (height - r1) - round(y), pixels


def draw_text(text: Text, renderer) -> None:
    """Draw ``text`` as matplotlib would, from the sprite cache when the same string was drawn before."""
    if not text.get_visible():
        return
    if isinstance(text, Annotation):  # what Annotation.draw does before drawing its text
        in_view = annotation_in_view(text, renderer)
        if in_view is None:
            text.draw(renderer)
            return
        if not in_view:
            return
        text.update_positions(renderer)
        if text.arrow_patch is not None:
            if text.arrow_patch.figure is None:
                text.arrow_patch.set_figure(text.figure)
            text.arrow_patch.draw(renderer)
    if not text.get_text():
        return
    x, y = _anchor(text)
    key = _key(text, renderer, (x, y)) if math.isfinite(x) and math.isfinite(y) else None
    if key is None:
        Text.draw(text, renderer)
        return
    if key not in _sprites:
        if len(_sprites) >= MAX_SPRITES:
            _sprites.clear()
        _sprites[key] = _rasterise(text, renderer)
    sprite = _sprites[key]
    if sprite is None:
        return
    dx, dy, pixels = sprite
    gc = renderer.new_gc()
    if clip_like_text(text, gc):
        renderer.draw_image(gc, round(x) + dx, round(y) + dy, pixels)
    else:
        Text.draw(text, renderer)
    gc.restore()


def encode_png(rgba) -> bytes:
    """An RGB PNG of an (h, w, 4) uint8 buffer (alpha dropped), deflate level 1, no row filters."""
    pixels = np.asarray(rgba)
    h, w = pixels.shape[:2]
    rows = np.zeros((h, 1 + 3 * w), np.uint8)  # each row: filter byte 0 ("none"), then RGB
    rows[:, 1:].reshape(h, w, 3)[...] = pixels[..., :3]

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(rows.tobytes(), 1))
        + chunk(b"IEND", b"")
    )


def render_png(fig: Figure) -> bytes:
    """The figure as PNG bytes; when only ``animated`` artists changed (the figure is not stale), only
    they are drawn again over the kept background (texts from the sprite cache), else all of it."""
    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    background = fig.__dict__.get("_course_background")
    if fig.stale or background is None or background[0] != canvas.get_width_height():
        canvas.draw()
        fig._course_background = (canvas.get_width_height(), canvas.copy_from_bbox(fig.bbox))
    else:
        canvas.restore_region(background[1])
    renderer = canvas.get_renderer()
    animated = [
        a for ax in fig.axes if ax.get_visible() for a in ax.get_children() if a.get_animated()
    ]
    for artist in sorted(animated, key=lambda a: a.get_zorder()):
        if isinstance(artist, Text):
            draw_text(artist, renderer)
        else:
            artist.draw(renderer)
    return encode_png(canvas.buffer_rgba())
