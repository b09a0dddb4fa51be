"""Grading behind a boundary: the sandbox (``sandbox``), and the wire between the judge that runs
the checks and the student process that runs the notebook (``wire``, ``judge``, ``student``)."""
