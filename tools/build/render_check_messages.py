"""Print every mistake the self-checks can name, and the README's example failure.

The catalogue itself (each chapter's ``mistakes.txt`` and ``course_utils/checks/mistakes/engine.txt``)
is the reviewed text; this prints it resolved (shared hints filled in, wrapped lines joined), sorted
by id, for reading it in one place. The golden copy it used to keep in ``tests/golden/`` duplicated
the catalogue (a 934-line second copy every new mistake had to edit) and guarded nothing the
catalogue's own tests (tests/test_mistake_catalogue.py) and the checks' tests by id do not.

Usage::

    python -m tools.build.render_check_messages            # print the whole catalogue
    python -m tools.build.render_check_messages --readme   # print the README's example failure message
"""

from __future__ import annotations

import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEADER = "# Every mistake the self-checks can name: id, diagnosis, hint (sorted by id).\n"


def render_catalogue() -> str:
    """The whole catalogue as text: one block per mistake."""
    from course_utils.checks.mistakes import MISTAKES

    blocks = [
        f"== {bug.name}\n{bug.diagnosis}\nHint: {bug.hint}\n" for _, bug in sorted(MISTAKES.items())
    ]
    return HEADER + "\n" + "\n".join(blocks)


def readme_example() -> str:
    """What check_causal_attention prints for a layer whose softmax runs over the queries
    (the README's example under "## Chapters"): the real check run on a real wrong class."""
    import torch
    from torch import nn

    import course_utils as cu

    class SoftmaxOverQueries(nn.Module):  # the chapter's layer with torch.softmax(..., dim=1)
        def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
            super().__init__()
            self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.dropout = nn.Dropout(dropout)
            self.register_buffer(
                "mask", torch.ones(context_length, context_length, dtype=torch.bool).triu(1)
            )

        def forward(self, x):
            n = x.shape[1]
            q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
            scores = (q @ k.transpose(1, 2)).masked_fill(self.mask[:n, :n], -torch.inf)
            return self.dropout(torch.softmax(scores / k.shape[-1] ** 0.5, dim=1)) @ v

    try:
        cu.checks.check_causal_attention(SoftmaxOverQueries)
    except cu.checks.CheckFailure as failure:
        return str(failure)
    raise RuntimeError("check_causal_attention accepted a softmax over the queries")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.build.render_check_messages",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--readme", action="store_true", help="print the README's example failure message"
    )
    args = parser.parse_args(argv)
    if args.readme:
        print(readme_example())
        return 0
    print(render_catalogue(), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
