"""Self-checks for the exercises: ``cu.checks.check_<thing>(your_function_or_class)``.

Each check prints one line when your code is right, and raises :class:`CheckFailure`
(an ``AssertionError``) with a plain-language diagnosis when it is not. Checks compare
against reference behaviour on several random shapes and seeds, and recognise common
mistakes (wrong softmax axis, missing scaling, a mask applied after the softmax, ...)
by what they produce.

Each chapter's checks live in their own module and are re-exported here.
"""

from . import _engine
from ._engine import Bug, CheckFailure
from .ch01 import *  # noqa: F403
from .ch02 import *  # noqa: F403
from .ch03 import *  # noqa: F403
from .ch04 import *  # noqa: F403
from .ch05 import *  # noqa: F403
from .ch06 import *  # noqa: F403
from .ch07 import *  # noqa: F403
from .ch08 import *  # noqa: F403
from .ch09 import *  # noqa: F403

# Every check refuses the course's own code and the shortcuts its chapter does not allow.
globals().update(
    {n: _engine.guard(f) for n, f in dict(globals()).items() if n.startswith("check_")}
)

__all__ = ["Bug", "CheckFailure", *(name for name in dir() if name.startswith("check_"))]
