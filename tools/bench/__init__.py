"""The benchmark: ``make bench`` and ``make bench-explorers``.

``cli`` (``make bench``: the command line, ``--compare``), ``sweep`` (every chapter 07 variant
checked, then timed, and its memory), ``rounds`` (interleaved timing rounds and what their spreads
may rank), ``report`` (the CSV, tables, plots and rankings), ``explorers`` (``make
bench-explorers``: each explorer from a control change to its new picture). What chapter 07's
notebook itself measures with (check a variant, time a call, the machine's ceilings) is the
chapter's own code, ``course_utils/chapters/ch07/bench.py``, which the sweep builds on.
"""
