"""Interactive explorers: move a control, watch attention change.

Each explorer is one line in a notebook::

    cu.widgets.query_explorer()      # ch01: one query's scores, weights and context vector
    cu.widgets.scaling_explorer()    # ch02: why scores are divided by sqrt(d_k)
    cu.widgets.mask_explorer()       # ch03: masking before or after softmax
    cu.widgets.dropout_explorer()    # ch04: dropout on the attention weights
    cu.widgets.head_explorer()       # ch05/06: every head's map for a text you type
    cu.widgets.memory_explorer()     # ch07: memory of the (b, h, n, n) score matrix
    cu.widgets.training_explorer(snapshots)  # ch08: a training run, snapshot by snapshot
    cu.widgets.kv_cache_explorer()   # ch09: KV-cache bytes against key/value heads, context, format
    cu.widgets.layer_explorer(snapshots, labels)  # ch10: every layer's and head's map through training

Each one lives in its chapter's folder (``course_utils/chapters/chNN/explorer.py``) and is found
there: a ``*_data`` function (plain data for the control values; unit-tested without a
figure), a ``draw_*(fig, view)`` function (builds the figure on its first call, then only
updates the artists that change) and its controls, put together by
:func:`course_utils.plotting.explorer`, which also gives the static view under nbval
(``COURSE_STATIC_WIDGETS=1``). The attention itself comes from the chapters' own code.
"""

from .. import registry
from .._explorer_parts import format_bytes as format_bytes

__getattr__, __dir__ = registry.exports(__name__, "explorer", ["format_bytes"])
