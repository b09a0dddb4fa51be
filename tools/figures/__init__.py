"""The figures: every ``figures/*.png`` made by code.

``catalogue`` (``make figures``: the catalogue of every chapter's figures found by scanning, the
rendering, the style and the sizes a figure is shown at, the checks that notebooks point at real
figures) and ``diagrams/`` (``chNN.py``: a chapter's drawing functions and ``FIGURES``, its
alt texts; ``_draw.py``: the pieces they share).
"""
