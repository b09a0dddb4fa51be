"""The code the chapters teach, one module per chapter: ``cu.chapters.MultiHeadAttention``.

Generated from the `#| export` cells of solutions/NN_*.ipynb by `make exercises`; do not edit: edit the notebook.
"""

from .ch01 import attention_scores, attention_weights, context_vectors, softmax_stable
from .ch02 import SelfAttention_v1, SelfAttention_v2, copy_v2_into_v1
from .ch03 import causal_mask, mask_after_softmax, mask_before_softmax
from .ch04 import CausalAttention
from .ch05 import MultiHeadAttention, MultiHeadAttentionWrapper, copy_wrapper_into_split, head_weights
from .ch06 import (
    InputEmbedding,
    SlidingWindowDataset,
    TinyGPT,
    attention_via_sdpa,
    copy_into_torch_mha,
    merge_heads,
    split_heads,
    torch_mha_mask,
)
from .ch09 import (
    GroupedQueryAttention,
    apply_rope,
    apply_rope_interleaved,
    causal_padding_mask,
    padding_mask,
    repeat_kv,
    rope_angles,
    sliding_window_mask,
)

__all__ = [
    "attention_scores",
    "softmax_stable",
    "attention_weights",
    "context_vectors",
    "SelfAttention_v1",
    "SelfAttention_v2",
    "copy_v2_into_v1",
    "causal_mask",
    "mask_after_softmax",
    "mask_before_softmax",
    "CausalAttention",
    "head_weights",
    "MultiHeadAttentionWrapper",
    "MultiHeadAttention",
    "copy_wrapper_into_split",
    "SlidingWindowDataset",
    "InputEmbedding",
    "TinyGPT",
    "split_heads",
    "merge_heads",
    "attention_via_sdpa",
    "copy_into_torch_mha",
    "torch_mha_mask",
    "padding_mask",
    "causal_padding_mask",
    "sliding_window_mask",
    "rope_angles",
    "apply_rope_interleaved",
    "apply_rope",
    "repeat_kv",
    "GroupedQueryAttention",
]
