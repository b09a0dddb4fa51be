"""Self-checks for the exercises: ``cu.checks.check_<thing>(your_function_or_class)``.

Each check prints one line when your code is right, and raises :class:`CheckFailure`
(an ``AssertionError``) with a plain-language diagnosis when it is not. Checks compare
against reference behaviour on several random shapes and seeds, and recognise common
mistakes (wrong softmax axis, missing scaling, a mask applied after the softmax, ...)
by what they produce.

Each chapter's checks live in their own module and are re-exported here.
"""

from ._engine import Bug, CheckFailure
from .ch01 import check_attention_scores, check_attention_weights, check_context_vectors, check_softmax
from .ch02 import (
    check_batched_self_attention,
    check_self_attention_v1,
    check_self_attention_v2,
    check_weight_transfer,
)
from .ch03 import check_causal_mask, check_mask_after_softmax, check_mask_before_softmax
from .ch04 import check_causal_attention, check_causal_batch_output
from .ch05 import (
    check_multihead_attention,
    check_multihead_wrapper,
    check_shape_prediction,
    check_split_batch_output,
    check_wrapper_batch_output,
)
from .ch06 import (
    check_copy_into_torch_mha,
    check_input_embedding,
    check_sliding_window_dataset,
    check_tiny_gpt,
)
from .ch07 import check_blockwise_attention
from .ch08 import check_attend_with_cache, check_sample_next_token, check_train_step
from .ch09 import (
    check_apply_rope,
    check_attend_new_tokens,
    check_padded_causal_attention,
    check_repeat_kv,
    check_sliding_window_mask,
)

__all__ = [
    "Bug", "CheckFailure", "check_attention_scores", "check_attention_weights",
    "check_batched_self_attention", "check_blockwise_attention", "check_causal_attention",
    "check_causal_batch_output", "check_causal_mask", "check_context_vectors", "check_copy_into_torch_mha",
    "check_input_embedding", "check_mask_after_softmax", "check_mask_before_softmax",
    "check_multihead_attention", "check_multihead_wrapper", "check_self_attention_v1",
    "check_shape_prediction", "check_self_attention_v2", "check_sliding_window_dataset", "check_softmax",
    "check_split_batch_output", "check_tiny_gpt", "check_weight_transfer", "check_wrapper_batch_output",
    "check_train_step", "check_sample_next_token", "check_attend_with_cache", "check_padded_causal_attention",
    "check_sliding_window_mask", "check_attend_new_tokens", "check_apply_rope", "check_repeat_kv",
]
