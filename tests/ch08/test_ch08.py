"""Chapter 08's exported code: the KV cache is exact, generation agrees with and without it,
a single causal head learns the look-back task, the story is ours; and the training explorer."""

import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from matplotlib.figure import Figure
from torch import nn

import course_utils as cu
from course_utils import plotting as P
from course_utils import widgets as W
from course_utils.chapters import (
    CausalAttention,
    TinyGPT,
    attend_with_cache,
    cached_logits,
    generate,
    sample_next_token,
    train_step,
)

STORY = Path(cu.__file__).parent / "data" / "listening_machine.txt"


@pytest.fixture
def shown(monkeypatch):
    """Capture what the explorer displays instead of sending it to a notebook."""
    captured: list = []
    monkeypatch.setattr(P, "_display", captured.append)
    return captured


def tiny_gpt(vocab=13, context=16, d_model=12, heads=3, seed=0):
    torch.manual_seed(seed)
    return TinyGPT(vocab, context, d_model, heads, dropout=0.0).eval()


@pytest.mark.parametrize("chunks", [[1] * 16, [5, 1, 1, 1, 3, 1, 4], [16], [2, 14]])
@pytest.mark.parametrize("heads", [1, 3])
def test_cached_logits_equal_full_recomputation_at_every_step(chunks, heads):
    model = tiny_gpt(heads=heads)
    ids = torch.randint(13, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(ids)  # (2, 16, 13)
        cache, start = None, 0
        for m in chunks:
            logits, cache = cached_logits(model, ids[:, start : start + m], cache)
            assert torch.allclose(logits, full[:, start : start + m], atol=1e-5)
            start += m
            assert cache[0].shape == (2, heads, start, 12 // heads) == cache[1].shape


def test_the_cache_projects_only_new_tokens():
    model = tiny_gpt()
    rows = []
    model.attn.W_key.register_forward_hook(lambda mod, inp, out: rows.append(out.shape[1]))
    ids = torch.randint(13, (1, 10), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        _, cache = cached_logits(model, ids[:, :6])
        for t in range(6, 10):
            _, cache = cached_logits(model, ids[:, t : t + 1], cache)
    assert rows == [6, 1, 1, 1, 1]


def test_a_cache_cannot_outgrow_the_positions():
    model = tiny_gpt(context=8)
    with torch.no_grad():
        _, cache = cached_logits(model, torch.zeros(1, 8, dtype=torch.long))
        with pytest.raises(ValueError, match="context_length=8"):
            cached_logits(model, torch.zeros(1, 1, dtype=torch.long), cache)


@pytest.mark.parametrize("temperature", [0.0, 0.8, 1.5])
def test_generation_is_the_same_with_and_without_the_cache(temperature):
    model = tiny_gpt()
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    runs = [
        generate(model, prompt, 12, temperature, torch.Generator().manual_seed(3), use_cache=use)
        for use in (True, False)
    ]
    assert runs[0].shape == (2, 15)
    assert torch.equal(runs[0], runs[1])
    assert torch.equal(runs[0][:, :3], prompt)


def test_sliding_window_generation_goes_past_the_context():
    model = tiny_gpt(context=8)
    out = generate(model, torch.tensor([[1, 2]]), 20, use_cache=False)
    assert out.shape == (1, 22)


def test_sampling_is_greedy_at_zero_and_repeatable_with_a_seed():
    logits = torch.randn(5, 9, generator=torch.Generator().manual_seed(4))
    assert torch.equal(sample_next_token(logits, 0), logits.argmax(dim=-1))
    draws = [sample_next_token(logits, 1.0, torch.Generator().manual_seed(5)) for _ in range(2)]
    assert torch.equal(draws[0], draws[1]) and draws[0].dtype == torch.long


def test_attend_with_cache_accepts_a_whole_prompt_at_once():
    torch.manual_seed(6)
    attn = cu.chapters.MultiHeadAttention(6, 8, 10, 0.0, 2).eval()
    x = torch.randn(3, 7, 6)
    with torch.no_grad():
        out, (k, v) = attend_with_cache(attn, x)
        assert torch.allclose(out, attn(x), atol=1e-6)
    assert k.shape == v.shape == (3, 2, 7, 4)


class LookBack(nn.Module):
    """The chapter's look-back model: embeddings, one causal head starting at the prefix average."""

    def __init__(self, vocab=10, n=12, d=32):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(n, d)
        self.attn = CausalAttention(d, d, n, 0.0)
        self.out = nn.Linear(d, vocab)
        nn.init.zeros_(self.attn.W_query.weight)

    def embed(self, ids):
        return self.tok(ids) + self.pos(torch.arange(ids.shape[1]))

    def forward(self, ids):
        return self.out(self.attn(self.embed(ids)))


def lookback_weights(model, ids):
    x = model.embed(ids)
    scores = model.attn.W_query(x) @ model.attn.W_key(x).transpose(1, 2) / 32**0.5
    n = ids.shape[1]
    return torch.softmax(scores.masked_fill(model.attn.mask[:n, :n], float("-inf")), dim=-1)


@pytest.mark.parametrize("threads", [1, 2])
def test_one_head_learns_to_look_two_places_back(threads):
    """The facts the notebook prints, on one and two threads: chance loss at the start, near
    zero after training, and every row's weight on t - 2; frozen queries cannot learn it."""
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        results = {}
        for frozen in (False, True):
            torch.manual_seed(123)
            model = LookBack()
            if frozen:
                model.attn.W_query.weight.requires_grad_(False)
            optimizer = torch.optim.Adam(
                [p for p in model.parameters() if p.requires_grad], lr=1e-2
            )
            g = torch.Generator().manual_seed(0)
            losses = []
            for _ in range(150):
                ids = torch.randint(10, (64, 12), generator=g)
                targets = torch.full_like(ids, -100)
                targets[:, 2:] = ids[:, :-2]
                losses.append(train_step(model, optimizer, ids, targets))
            results[frozen] = (model, losses)
    finally:
        torch.set_num_threads(old)
    model, losses = results[False]
    assert abs(losses[0] - 2.30) < 0.15 and losses[-1] < 0.01
    with torch.no_grad():
        w = lookback_weights(
            model, torch.randint(10, (1, 12), generator=torch.Generator().manual_seed(5))
        )[0]
    rows = torch.arange(2, 12)
    assert torch.equal(w[rows].argmax(dim=-1), rows - 2) and (w[rows, rows - 2] > 0.9).all()
    assert results[True][1][-1] > 1.0


def test_the_story_is_original_licensed_and_a_few_thousand_words():
    text = STORY.read_text(encoding="utf-8")
    header = text.split("\n\n", 2)[1]
    assert "original story written for the course" in header and "licence" in header
    assert 2000 <= len(text.split()) <= 5000
    assert set(text) <= set(map(chr, range(32, 127))) | {"\n"}


def test_cross_entropy_skips_the_targets_without_a_position():
    logits = torch.randn(4, 5)
    targets = torch.tensor([-100, 2, -100, 4])
    assert torch.isclose(
        F.cross_entropy(logits, targets), F.cross_entropy(logits[[1, 3]], targets[[1, 3]])
    )


# ----------------------------------------------------------------------------- the training explorer
def fake_snapshots(heads=4, n=6, every=10, count=4):
    """Snapshots shaped like the notebook's: the loss of every step so far, maps, labels, a sample."""
    g = torch.Generator().manual_seed(7)
    losses = (3.0 * 0.97 ** torch.arange(every * (count - 1))).tolist()
    shots = []
    for k in range(count):
        weights = torch.rand(heads, n, n, generator=g).tril()  # (h, n, n)
        shots.append(
            {
                "step": every * k,
                "losses": losses[: every * k],
                "weights": weights / weights.sum(-1, keepdim=True),
                "labels": list("a cat "[:n]),
                "sample": f"sample at step {every * k}",
            }
        )
    return shots


def test_drawing_on_a_figure_that_had_a_layout_engine_warns_nothing():
    """JupyterLab's live figure starts with constrained layout; a warning there is stray output
    (make test-browser failed on one from fig.subplots_adjust)."""
    view = W.training_data(W.training_snapshots(fake_snapshots()), 1)
    fig = Figure(layout="constrained")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        W.draw_training(fig, view)
    assert len(fig.axes) == 4 + 1 + 2  # the maps, the colour bar, the loss and the sample


def test_training_data_replays_a_snapshot_without_retraining():
    shots = fake_snapshots()
    checked = W.training_snapshots(shots)
    view = W.training_data(checked, 2)
    assert view.step == 20 and view.last_step == 30
    assert torch.equal(view.weights, shots[2]["weights"])
    assert view.losses.tolist() == pytest.approx(shots[2]["losses"])
    assert view.loss_top == pytest.approx(3.0)
    assert view.labels == ("a", "␣", "c", "a", "t", "␣")  # spaces made visible
    assert view.sample == "sample at step 20"
    one_head = W.training_snapshots([{**s, "weights": s["weights"][0]} for s in shots])
    assert one_head[0].weights.shape == (1, 6, 6)


def _without(shot, key):
    return {k: v for k, v in shot.items() if k != key}


BAD_SNAPSHOTS = [
    (lambda s: {"step": 0}, "must be a list of dicts"),
    (lambda s: [], "snapshots is empty"),
    (lambda s: [s[0], "step 10"], r"snapshots\[1\] must be a dict"),
    (lambda s: [_without(s[0], "sample")], r"snapshots\[0\] lacks the key\(s\) \['sample'\]"),
    (
        lambda s: [s[1], s[0]],
        r"training order, but snapshots\[1\]\['step'\] = 0 comes after step 10",
    ),
    (lambda s: [{**s[0], "step": -1}], r"\['step'\] must be at least 0, but got -1"),
    (lambda s: [{**s[0], "step": True}], r"\['step'\] must be an int, but got a bool"),
    (
        lambda s: [{**s[1], "losses": s[1]["losses"][:-1]}],
        r"one loss per step so far \(10\), but holds 9",
    ),
    (lambda s: [{**s[1], "losses": ["a"] * 10}], r"\['losses'\] must be a list of finite numbers"),
    (lambda s: [{**s[0], "weights": torch.ones(2, 6, 5)}], r"square \(n, n\) maps.*\(2, 6, 5\)"),
    (lambda s: [{**s[0], "weights": [[1.0]]}], r"\['weights'\] must be a torch.Tensor"),
    (
        lambda s: [s[0], {**s[1], "weights": torch.ones(2, 6, 6)}],
        r"same shape.*\(2, 6, 6\).*\(4, 6, 6\)",
    ),
    (lambda s: [{**s[0], "labels": ["a"]}], r"\['labels'\] must have 6 entries"),
    (lambda s: [{**s[0], "labels": 3}], r"\['labels'\] must be a list of 6 strings"),
    (lambda s: [{**s[0], "sample": None}], r"\['sample'\] must be the generated text"),
]


@pytest.mark.parametrize(("make", "message"), BAD_SNAPSHOTS)
def test_training_explorer_rejects_bad_snapshots_clearly(make, message, shown, monkeypatch):
    monkeypatch.setenv(P.STATIC_ENV_VAR, "1")
    with pytest.raises(cu.CourseInputError, match=message):
        W.training_explorer(make(fake_snapshots()))
    assert shown == []


def test_training_explorer_rejects_a_step_without_a_snapshot(shown, monkeypatch):
    monkeypatch.setenv(P.STATIC_ENV_VAR, "1")
    with pytest.raises(
        cu.CourseInputError,
        match=r"step must be one of the snapshots' steps \[0, 10, 20, 30\], but got 15",
    ):
        W.training_explorer(fake_snapshots(), step=15)
    with pytest.raises(cu.CourseInputError, match="index must be an int from 0 to 3"):
        W.training_data(W.training_snapshots(fake_snapshots()), 4)


def test_training_explorer_static_mode_draws_the_last_snapshot(shown, monkeypatch, capsys):
    monkeypatch.setenv(P.STATIC_ENV_VAR, "1")
    assert W.training_explorer(fake_snapshots()) is None
    assert len(shown) == 1 and isinstance(shown[0], Figure)
    assert capsys.readouterr().out == P.STATIC_NOTE + "\n"
    texts = [t.get_text() for ax in shown[0].axes for t in [ax.title, *ax.texts]]
    assert "step 30: loss 1.24" in texts and "sample at step 30" in texts


def test_training_explorer_live_slider_redraws_only_what_changes(shown, monkeypatch):
    pytest.importorskip("ipywidgets")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    monkeypatch.delenv(P.STATIC_ENV_VAR, raising=False)
    W.training_explorer(fake_snapshots(), step=0)
    (explorer,) = [obj for obj in shown if isinstance(obj, P.Explorer)]
    assert [o for o in explorer.controls["index"].options] == [
        ("0", 0),
        ("10", 1),
        ("20", 2),
        ("30", 3),
    ]
    full_draws = []
    original = FigureCanvasAgg.draw
    monkeypatch.setattr(
        FigureCanvasAgg, "draw", lambda canvas: (full_draws.append(1), original(canvas))
    )
    pictures = [explorer.png]
    for index in (1, 3, 0):
        explorer.controls["index"].value = index
        assert explorer.error is None and explorer.view.index == index
        pictures.append(explorer.png)
    assert (
        len(set(pictures)) == 3 and pictures[0] == pictures[-1]
    )  # back at step 0: the same picture
    assert full_draws == [], "a non-animated artist changed, so the whole figure was drawn again"
    curve = explorer.figure.__dict__["_course_handles"]["curve"]
    assert len(curve.get_xdata()) == 0  # step 0: no loss yet
