"""The build: solutions/ into everything generated from them.

``notebooks`` (the notebooks on disk, the answer markers: a leaf), ``nbtools`` (``make
exercises``, ``make solutions``, ``make headers``: the exercise generator and its CLI),
``export`` (a chapter's ``#| export`` cells into ``course_utils/chapters/chNN/__init__.py``),
``headers`` and ``config`` (the Colab badge and setup cell), ``attachments`` (figures embedded
into notebooks), ``listings`` (the README's generated tables), ``render_check_messages`` (the
mistake catalogue), ``scaffold`` (``make chapter``, its templates in ``templates/``).
"""
