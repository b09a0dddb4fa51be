"""check_train_step names step_weights_wrong by its id for a step whose losses are right and whose
updates are not (the fixture lives here: tests/ch08/buggy.py is being edited beside this file)."""

import torch.nn.functional as F

from course_utils.chapters.ch08 import checks
from tests.check_helpers import assert_names_bug


def step_with_l2_penalty(model, optimizer, inputs, targets):
    """An L2 penalty added to the loss that is backpropagated, the plain loss returned: the training
    loop of Deep Learning with PyTorch (deep-learning-with-pytorch/dlwpt-code,
    p1ch8/1_convolution.ipynb, training_loop_l2reg: l2_lambda = 0.001,
    sum(p.pow(2.0).sum() for p in model.parameters())) with the weight decay usual for SGD, 1e-4.
    So small a penalty leaves the losses within the check's tolerance and moves every weight."""
    logits = model(inputs)  # (b, n, vocab)
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    l2_norm = sum(p.pow(2.0).sum() for p in model.parameters())
    optimizer.zero_grad()
    (loss + 1e-4 * l2_norm).backward()
    optimizer.step()
    return loss.item()


def test_right_losses_with_wrong_updates_are_named():
    failure = assert_names_bug(
        checks.check_train_step, step_with_l2_penalty, bug="step_weights_wrong"
    )
    assert "the losses are right but the weights after three steps are not" in str(failure)
