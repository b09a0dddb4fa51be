"""A proof must be able to fail: each `assert` of solutions/10_transformer.ipynb that a sentence of
the chapter relies on is run here from the notebook's own cells, once with a planted wrong part
(a swapped norm, a leaky mask, an untrained model, ...) and shown to fail.

The cells are found by a line they contain, so the test follows the notebook as it is edited."""

from __future__ import annotations

import os

import pytest
import torch

from tools.build import nbtools

os.environ.setdefault("COURSE_STATIC_WIDGETS", "1")  # no progress bars from the training cells
SOLUTION = nbtools.SOLUTIONS / "10_transformer.ipynb"
CELLS = [c.source for c in nbtools.read(SOLUTION).cells if c.cell_type == "code"]
BASE = (
    "import course_utils as cu",
    "device = cu.seed_everything",
    "MultiHeadAttention = cu.chapters",
)


def cell(marker: str) -> str:
    found = [source for source in CELLS if marker in source]
    assert len(found) == 1, f"{len(found)} code cells contain {marker!r}"
    return found[0]


def run(*markers: str, ns: dict | None = None, **planted) -> dict:
    """Run the cells holding ``markers`` in order, in ``ns`` (a fresh namespace with the chapter's
    imports by default); ``planted`` names replace the notebook's own before the last cell runs."""
    if ns is None:
        ns = {"__name__": "__main__"}
        for marker in BASE:
            exec(cell(marker), ns)
    for i, marker in enumerate(markers):
        if i == len(markers) - 1:
            ns.update(planted)
        exec(cell(marker), ns)
    return ns


DEFINITIONS = (
    "class Attention(MultiHeadAttention)",
    "class LayerNorm(nn.Module)",
    "def gelu(x, approximate",
    "class GELU(nn.Module)",
    "class TransformerBlock(nn.Module)",
    "def copy_into_encoder_layer",
)


@pytest.fixture(scope="module")
def chapter():
    """The namespace after the chapter's definitions of section 1 (no training)."""
    ns = run(*DEFINITIONS)
    return run("class RMSNorm(nn.Module)", "class SwiGLU(nn.Module)", ns=ns)


def _fresh(chapter: dict) -> dict:
    return dict(chapter)


# ----------------------------------------------------------------------------- section 1
def test_the_block_proof_passes_and_fails_with_the_tanh_gelu(chapter):
    run("def same_as_torch", ns=_fresh(chapter))  # the notebook's own block passes
    ns = _fresh(chapter)

    class TanhBlock(ns["TransformerBlock"]):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.ff[1] = ns["GELU"]("tanh")  # GPT-2's form where PyTorch's "gelu" is exact

    with pytest.raises(AssertionError):
        run("def same_as_torch", ns=ns, TransformerBlock=TanhBlock)


def test_the_causal_block_proof_fails_with_a_block_that_sees_the_future(chapter):
    ns = run("def same_as_torch", ns=_fresh(chapter))
    right = ns["TransformerBlock"]

    class NeverCausal(right):
        def __init__(self, *args, causal=True, **kwargs):
            super().__init__(*args, causal=False, **kwargs)

    with pytest.raises(AssertionError):
        run(
            "forward, backward = same_as_torch(norm_first=True", ns=ns, TransformerBlock=NeverCausal
        )


def test_gpt2_count_fails_with_a_wider_ffn(chapter):
    ns = _fresh(chapter)
    run("gpt2_block = TransformerBlock(768", "token_table, position_table", ns=ns)  # passes
    right = ns["TransformerBlock"]
    ns["TransformerBlock"] = lambda d, h, d_ff, ctx: right(d, h, 2 * d_ff, ctx)
    with pytest.raises(AssertionError):
        run("gpt2_block = TransformerBlock(768", "token_table, position_table", ns=ns)


def test_rms_equals_layer_norm_only_when_centred_fails_for_a_centring_rms(chapter):
    run("same_centred = torch.allclose", ns=_fresh(chapter))
    ns = _fresh(chapter)

    class CentredRMS(ns["RMSNorm"]):
        def forward(self, x):
            return super().forward(x - x.mean(-1, keepdim=True))

    with pytest.raises(AssertionError):
        run("same_centred = torch.allclose", ns=ns, RMSNorm=CentredRMS)


def test_llama_count_fails_without_the_up_projection(chapter):
    run("class LlamaBlock(TransformerBlock)", ns=_fresh(chapter))
    ns = _fresh(chapter)

    class TwoMatrixFFN(ns["SwiGLU"]):
        def __init__(self, d_model, d_ff):
            super().__init__(d_model, d_ff)
            del self.w3

    with pytest.raises(AssertionError):
        run("class LlamaBlock(TransformerBlock)", ns=ns, SwiGLU=TwoMatrixFFN)


@pytest.fixture(scope="module")
def training(chapter):
    """Section 1's data, TinyLM and trainer."""
    return run(
        "raw = (Path(cu.__file__)",
        "class PositionedAttention",
        "def text_windows",
        ns=_fresh(chapter),
    )


def test_sdpa_attention_proof_fails_with_rope_switched_on(training):
    ns = dict(training)
    run("sdpa_attention = PositionedAttention", ns=ns)
    right = ns["PositionedAttention"]
    with pytest.raises(AssertionError):
        run(
            "sdpa_attention = PositionedAttention",
            ns=ns,
            PositionedAttention=lambda *a, **k: right(*a, **k, rope=True),
        )


def test_warm_up_asserts_fail_when_post_norm_trains_at_a_gentle_rate(training):
    """At lr = 0.01 every stack learns (the chapter's own measurement): the post-norm stack without
    warm-up no longer stays at the character frequencies, and the first assert fails."""
    ns = dict(training)
    source = cell('WARMUP_RUN = {"steps": 100').replace('"lr": 0.03', '"lr": 0.01')
    exec(source, ns)
    with pytest.raises(AssertionError):
        exec(cell('assert final_loss["post-norm, no warm-up"]'), ns)


def test_gradient_asserts_fail_when_both_stacks_are_pre_norm(training):
    ns = dict(training)
    right = ns["TinyLM"]
    ns["TinyLM"] = lambda *args, norm_first=True, **kwargs: right(*args, norm_first=True, **kwargs)
    exec(cell("def last_block_gradient").replace("(2, 4, 8, 16)", "(4, 16)"), ns)
    with pytest.raises(AssertionError):
        exec(cell("ratio = {layers: last_grad"), ns)


# The gradient norms the chapter stored (post-norm, pre-norm at 2, 4, 8, 16 blocks): the ratio rises
# at every doubling, the post-norm one dips at 8 and the pre-norm one rises from 8 to 16.
STORED_GRADIENTS = {2: (0.372, 0.261), 4: (0.422, 0.276), 8: (0.394, 0.231), 16: (0.482, 0.237)}


def _gradients(table):
    return {(n, norm_first): table[n][norm_first] for n in table for norm_first in (0, 1)}


def test_gradient_asserts_hold_for_the_stored_curves_that_are_not_monotone():
    """The text claims the ratio, not monotone curves: the stored rows (not monotone) pass."""
    exec(
        cell("ratio = {layers: last_grad"),
        {"depths": (2, 4, 8, 16), "last_grad": _gradients(STORED_GRADIENTS)},
    )


@pytest.mark.parametrize(
    "planted",
    [
        {
            **STORED_GRADIENTS,
            8: (0.330, 0.231),
        },  # the ratio falls from 4 to 8 blocks (1.53 -> 1.43)
        {
            **STORED_GRADIENTS,
            16: (0.560, 0.280),
        },  # pre-norm larger at 16 blocks than at 4 (ratio still rising)
        {**STORED_GRADIENTS, 16: (0.400, 0.190)},  # post-norm smaller at 16 blocks than at 4
    ],
    ids=["ratio-dips", "pre-norm-grows", "post-norm-shrinks"],
)
def test_gradient_asserts_fail_on_each_planted_wrong_claim(planted):
    with pytest.raises(AssertionError):
        exec(
            cell("ratio = {layers: last_grad"),
            {"depths": (2, 4, 8, 16), "last_grad": _gradients(planted)},
        )


# ----------------------------------------------------------------------------- section 2
@pytest.fixture(scope="module")
def positions(training):
    return run("def sinusoidal_positions", "def alibi_slopes", ns=dict(training))


def test_slope_asserts_fail_with_the_one_line_formula(positions):
    ns = dict(positions)
    run("def one_line_slopes", ns=ns)  # passes
    one_line = lambda h: 2.0 ** (-8.0 * torch.arange(1, h + 1) / h)  # noqa: E731
    with pytest.raises(AssertionError):
        run("def one_line_slopes", ns=ns, alibi_slopes=one_line)


def test_length_asserts_fail_when_alibi_is_swapped_for_sinusoids(positions):
    ns = dict(positions)  # the "alibi" model gets sinusoids instead
    source = cell('LENGTH_RUN = {"steps": 150').replace(
        '"alibi": {"positions": "none", "scores_bias": alibi_bias}',
        '"alibi": {"positions": sinusoidal_positions}',
    )
    exec(source, ns)
    with pytest.raises(AssertionError):
        exec(cell('assert [n for n, loss in length_loss["learned"]'), ns)


# ----------------------------------------------------------------------------- section 3
@pytest.fixture(scope="module")
def decoder(positions):
    return run("class DecoderBlock(nn.Module)", "def copy_into_decoder_layer", ns=dict(positions))


def test_cross_attention_proof_fails_without_the_padding_mask(decoder):
    ns = dict(decoder)
    run("cross = Attention(16, 16, 10", ns=ns)  # passes
    right = ns["Attention"]

    class Unmasked(right):
        def forward(self, x, memory=None, memory_real=None):
            return super().forward(x, memory)

    with pytest.raises(AssertionError):
        run("cross = Attention(16, 16, 10", ns=ns, Attention=Unmasked)


def test_decoder_proof_fails_when_cross_attention_ignores_the_padding(decoder):
    ns = dict(decoder)
    run("cross = Attention(16, 16, 10", "def decoder_same_as_torch", ns=ns)  # passes
    right = ns["DecoderBlock"]

    class PaddingSeen(right):
        def forward(self, x, memory, memory_real=None):
            return super().forward(x, memory)  # memory_real dropped: the padding is attended to

    with pytest.raises(AssertionError):
        run("def decoder_same_as_torch", ns=ns, DecoderBlock=PaddingSeen)


# ----------------------------------------------------------------------------- section 4
@pytest.fixture(scope="module")
def packing(decoder):
    ns = run("def packed_causal_mask", "def masked_block_attention", ns=dict(decoder))
    return run("doc_lengths = torch.randint(8, 129", ns=ns)


def test_packing_slots_assert_fails_when_every_document_is_as_long_as_the_longest(packing):
    ns = dict(packing)
    with pytest.raises(AssertionError):
        exec(
            cell("doc_lengths = torch.randint(8, 129").replace(
                "torch.randint(8, 129, (64,), generator=g).tolist()", "[127] * 64"
            ),
            ns,
        )


def test_both_layouts_proof_fails_with_the_plain_causal_mask(packing):
    ns = dict(packing)
    run("timed_block = TransformerBlock(32, 4, 128, 256)", ns=ns)  # passes
    plain = lambda ids: torch.ones(*ids.shape, ids.shape[1], dtype=torch.bool).tril()  # noqa: E731
    with pytest.raises(AssertionError):
        run("timed_block = TransformerBlock(32, 4, 128, 256)", ns=ns, packed_causal_mask=plain)


# ----------------------------------------------------------------------------- section 5
def _copiers(chapter: dict, steps: int) -> dict:
    """Section 5 with the two-layer copier trained for ``steps`` steps (the notebook's trainer and
    seed; the one-layer comparison model left out), and its head scores."""
    ns = run(
        "def repeated_spans",
        "class AttentionOnlyLM",
        "def copy_accuracy",
        "def head_scores",
        ns=_fresh(chapter),
    )
    exec(cell("VOCAB, N_CTX, STEPS = 64, 32, 600").replace("64, 32, 600", f"64, 32, {steps}"), ns)
    training = cell("two_layers, losses_two = train_copier(2").split("\n")
    kept = [
        line
        for line in training
        if "_one" not in line and "one_layer" not in line and "print(" not in line
    ]
    exec("\n".join(kept), ns)
    ns["accuracy_two"] = ns["copy_accuracy"](ns["two_layers"], *ns["probe"])
    exec(cell("previous, induction = head_scores(two_layers"), ns)
    return ns


@pytest.fixture(scope="module")
def untrained(chapter):
    return _copiers(chapter, 1)


@pytest.fixture(scope="module")
def trained(chapter):
    return _copiers(chapter, 600)


def test_copy_asserts_fail_for_an_untrained_model(untrained):
    ns = dict(
        untrained, accuracy_one=0.0, losses_one=[0.0]
    )  # the one-layer model is not trained here
    with pytest.raises(AssertionError):
        exec(cell("assert accuracy_two > 0.8"), ns)


def test_head_score_asserts_pass_when_trained_and_fail_untrained(trained, untrained):
    exec(cell("prev_head = int(previous[0].argmax())"), dict(trained))
    with pytest.raises(AssertionError):
        exec(cell("prev_head = int(previous[0].argmax())"), dict(untrained))


def test_ablation_asserts_fail_when_switching_off_changes_nothing(trained):
    ns = dict(trained)
    exec(cell("prev_head = int(previous[0].argmax())"), ns)
    exec(cell("ablated = {}"), ns)
    exec(cell("assert min(ablated, key=ablated.get)"), ns)  # passes
    right = ns["copy_accuracy"]
    ns["copy_accuracy"] = lambda model, ids, predictable, off=(): right(model, ids, predictable)
    exec(cell("ablated = {}"), ns)
    with pytest.raises(AssertionError):
        exec(cell("assert min(ablated, key=ablated.get)"), ns)
