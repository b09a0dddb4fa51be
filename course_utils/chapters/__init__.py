"""The code the chapters teach, one module per chapter: ``cu.chapters.MultiHeadAttention``.

Generated from the `#| export` cells of solutions/NN_*.ipynb by `make exercises`; do not edit: edit the notebook.
"""

from . import ch01, ch02, ch03, ch04, ch05, ch06, ch07, ch08, ch09, ch10, ch11
from .ch01 import *  # noqa: F403
from .ch02 import *  # noqa: F403
from .ch03 import *  # noqa: F403
from .ch04 import *  # noqa: F403
from .ch05 import *  # noqa: F403
from .ch06 import *  # noqa: F403
from .ch07 import *  # noqa: F403
from .ch08 import *  # noqa: F403
from .ch09 import *  # noqa: F403
from .ch10 import *  # noqa: F403
from .ch11 import *  # noqa: F403

# each name is listed once, in its chapter's __all__
__all__ = [name for module in (ch01, ch02, ch03, ch04, ch05, ch06, ch07, ch08, ch09, ch10, ch11) for name in module.__all__]
