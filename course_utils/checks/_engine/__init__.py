"""The one engine behind every self-check (chapter files hold only their cases and checks).

A check either prints one ``✓`` line or raises :class:`CheckFailure` naming a mistake of
``checks/mistakes``. Mistakes are recognised *by behaviour*: when the student's output
differs from the reference, the one functional attention pipeline (:func:`attention`) is
re-run with one switch of a :class:`Recipe` changed at a time, and the recipe that reproduces
the student's numbers names the bug. Layer checks also run behaviour probes
(:func:`probe_layer`): another device, a longer second call, a training step, gradients,
the parameter count and the caller's input left untouched.

``core``: failures, comparing, calling student code; ``watch``: torch-call recorders;
``pipeline``: the attention recipes; ``layers``: building and reading nn.Modules; ``probes``.
"""

from ..mistakes import MISTAKES, Bug
from . import core, layers, pipeline, probes, watch
from .core import *  # noqa: F403
from .layers import *  # noqa: F403
from .pipeline import *  # noqa: F403
from .probes import *  # noqa: F403
from .watch import *  # noqa: F403

__all__ = [
    "MISTAKES",
    "Bug",
    *core.__all__,
    *watch.__all__,
    *pipeline.__all__,
    *layers.__all__,
    *probes.__all__,
]
