"""Test machinery for instructors: runners and pytest plugins that sit beside ``make test``.

``gpu``: ``make test-gpu``, the course on one CUDA machine in one command.
``tally``: a pytest plugin that writes one line per finished test, so a run stopped at a time
limit still says what it passed and failed.
"""
