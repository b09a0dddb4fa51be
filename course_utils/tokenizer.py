"""GPT-2's byte-pair encoding, built offline from ranks shipped with the course.

``tiktoken.get_encoding("gpt2")`` downloads its vocabulary the first time it runs,
which fails on machines without internet. The same ranks ship with this package
(``data/gpt2.tiktoken``, from the MIT-licensed ``openai-whisper`` package; see
``data/gpt2.tiktoken.LICENSE``), so we build the identical ``tiktoken.Encoding``
from them.
"""

from __future__ import annotations

import base64
import functools
import hashlib
from pathlib import Path

RANKS_FILE = Path(__file__).with_name("data") / "gpt2.tiktoken"
RANKS_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"

# GPT-2's pre-tokenisation pattern (contractions, letters, numbers, other runs, spaces).
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
END_OF_TEXT = "<|endoftext|>"
END_OF_TEXT_ID = 50256


@functools.lru_cache(maxsize=1)
def gpt2_tokenizer():
    """Return GPT-2's tokenizer as a ``tiktoken.Encoding``, without touching the network.

    >>> tok = gpt2_tokenizer()
    >>> tok.encode("Hello, world")
    [15496, 11, 995]

    As with ``tiktoken``, special tokens must be allowed explicitly:
    ``tok.encode(text, allowed_special={"<|endoftext|>"})``.
    """
    import tiktoken

    if not RANKS_FILE.is_file():
        raise FileNotFoundError(
            f"GPT-2's BPE ranks were expected at {RANKS_FILE}, but the file is missing. "
            "Reinstall the course or restore course_utils/data/gpt2.tiktoken from git."
        )
    data = RANKS_FILE.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != RANKS_SHA256:
        raise ValueError(
            f"{RANKS_FILE} has sha256 {digest}, but GPT-2's ranks have {RANKS_SHA256}; "
            "the file is damaged. Restore it from git."
        )
    # One "base64(token bytes) rank" pair per line, the format tiktoken's own loader reads.
    ranks = {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in data.splitlines() if line)
    }
    return tiktoken.Encoding(
        name="gpt2",
        explicit_n_vocab=END_OF_TEXT_ID + 1,
        pat_str=GPT2_PATTERN,
        mergeable_ranks=ranks,
        special_tokens={END_OF_TEXT: END_OF_TEXT_ID},
    )
