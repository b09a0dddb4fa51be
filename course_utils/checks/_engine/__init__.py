"""The one engine behind every self-check (chapter files hold only their cases and checks).

A check either prints one ``✓`` line or raises :class:`CheckFailure` naming a mistake of
``checks/mistakes.py``. Mistakes are recognised *by behaviour*: when the student's output
differs from the reference, the one functional attention pipeline (:func:`attention`) is
re-run with one switch of a :class:`Recipe` changed at a time, and the recipe that reproduces
the student's numbers names the bug. Layer checks also run behaviour probes
(:func:`probe_layer`): another device, a longer second call, a training step, gradients,
the parameter count and the caller's input left untouched.

``core`` holds everything but nn.Module handling, which is in ``layers``.
"""

from ..mistakes import MISTAKES, Bug
from .core import *  # noqa: F403
from .core import __all__ as _core_all
from .layers import *  # noqa: F403
from .layers import __all__ as _layers_all

__all__ = ["MISTAKES", "Bug", *_core_all, *_layers_all]
