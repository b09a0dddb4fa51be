"""Test machinery for instructors: runners and pytest plugins that sit beside ``make test``.

``nbval_plugin``: the pytest plugin (``conftest.py``) that lets nbval's comparison tolerate a
last printed digit and nothing more.
``colab_replica``: ``make test-colab``, every notebook alone in a replica of Colab's runtime.
``gpu``: ``make test-gpu``, the course on one CUDA machine in one command.
``tally``: a pytest plugin that writes one line per finished test, so a run stopped at a time
limit still says what it passed and failed.
``behaviour``: records every check's verdict on every fixture and the hashes of everything
generated, so a change that should change nothing (a move of tools/) can be shown to.
"""
