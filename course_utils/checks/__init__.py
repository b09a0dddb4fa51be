"""Self-checks for the exercises: ``cu.checks.check_<thing>(your_function_or_class)``.

Each check prints one line when your code is right, and raises :class:`CheckFailure`
(an ``AssertionError``) with a plain-language diagnosis when it is not. Checks compare
against reference behaviour on several random shapes and seeds, and recognise common
mistakes (wrong softmax axis, missing scaling, a mask applied after the softmax, ...)
by what they produce.

Each chapter's checks live in its folder (``course_utils/chapters/chNN/checks.py``, built on
the shared engine ``_engine``); every ``check_*`` function they list in ``__all__`` is found
there and re-exported here.
"""

from .. import registry
from ._engine import Bug as Bug
from ._engine import CheckFailure as CheckFailure

__getattr__, __dir__ = registry.exports(__name__, "checks", ["Bug", "CheckFailure"])
