"""Chapter 11, section 3's trained comparison: the recall texts' answers are the newest writes,
the three mixers give one guess per text and learn; the trained numbers themselves sit in a cell
nbval does not compare, their properties are asserted there (measured over 10 seeds)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import course_utils as cu

ch = cu.chapters


def test_the_answer_is_the_newest_value_written_for_the_query_key():
    keys, values, answers, overwritten = ch.recall_texts(500, torch.Generator().manual_seed(3))
    assert keys.shape == values.shape == (500, 9) and answers.shape == overwritten.shape == (500,)
    assert (values[:, -1] == 16).all() and (
        values[:, :-1] < 16
    ).all()  # the query's value: the blank
    for row in range(500):
        writes = [i for i in range(8) if keys[row, i] == keys[row, -1]]
        assert writes, "the query asks for a key of its text"
        assert answers[row] == values[row, writes[-1]] and overwritten[row] == (len(writes) > 1)
    assert 0.2 < overwritten.float().mean() < 0.6  # both kinds of question are common


@pytest.mark.parametrize("mixer", ["softmax", "linear attention", "delta rule"])
def test_each_mixer_guesses_once_per_text_and_learns(mixer):
    torch.manual_seed(0)
    model = ch.RecallModel(mixer)
    draws = torch.Generator().manual_seed(1)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    keys, values, answers, _ = ch.recall_texts(256, torch.Generator().manual_seed(2))
    before = F.cross_entropy(model(keys, values), answers).item()
    assert model(keys, values).shape == (256, 16)
    for _ in range(40):
        k, v, a, _ = ch.recall_texts(64, draws)
        loss = F.cross_entropy(model(k, v), a)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert (
        F.cross_entropy(model(keys, values), answers).item() < before - 0.15
    )  # measured: 0.2 to 0.56


def test_the_delta_mixer_starts_keeping_and_overwriting():
    gates = torch.sigmoid(ch.RecallModel("delta rule").gates.bias)  # alpha, beta at initialisation
    assert gates[0] > 0.9 and gates[1] > 0.8
