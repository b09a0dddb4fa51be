"""Reproducibility: seeding, device choice, and random numbers that match on every machine.

Two facts shape this module:

* ``torch.manual_seed`` makes CPU draws repeatable on one machine, but some CPU kernels
  (dropout's Bernoulli masks among them) differ between operating systems and torch
  releases, and CUDA uses a different generator altogether.
* Python's ``random.Random(seed).random()`` is guaranteed by the Python docs to give the
  same sequence on every platform and version. The *portable* helpers below build their
  tensors from it, so a printed mask is identical on a laptop, a CI runner and a GPU box.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Sequence

import numpy as np  # a requirement of the course (requirements.txt)
import torch

from .validation import CourseInputError, expect_int, expect_probability

DEVICE_ENV_VAR = "COURSE_DEVICE"
GRADING_ENV_VAR = "NBGRADER_EXECUTION"  # nbgrader sets it to "autograde" or "validate"


def light_run() -> bool:
    """True while nbgrader autogrades or validates the notebook: cells that only time or train
    for show then run a quick version (no self-check depends on them)."""
    return os.environ.get(GRADING_ENV_VAR) in ("autograde", "validate")


def get_device(prefer: str | None = None) -> torch.device:
    """Return the best available device: ``cuda``, then ``mps``, then ``cpu``.

    ``prefer`` (or the ``COURSE_DEVICE`` environment variable) forces a choice, e.g.
    ``COURSE_DEVICE=cpu`` on a GPU machine.
    """
    choice = prefer or os.environ.get(DEVICE_ENV_VAR)
    if choice:
        if choice not in ("cpu", "cuda", "mps"):
            raise CourseInputError(
                f"device must be one of 'cpu', 'cuda' or 'mps', but got {choice!r}."
            )
        if choice == "cuda" and not torch.cuda.is_available():
            raise CourseInputError("device 'cuda' was requested, but CUDA is not available here.")
        if choice == "mps" and not _mps_available():
            raise CourseInputError("device 'mps' was requested, but MPS is not available here.")
        return torch.device(choice)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if _mps_available():
        return torch.device("mps")
    return torch.device("cpu")


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def _use_full_fp32_matmul() -> None:
    """Turn TF32 off so CUDA matmuls give the same digits as the CPU."""
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def seed_everything(seed: int = 123, device: str | None = None) -> torch.device:
    """Seed Python, NumPy and torch (CPU and every GPU); return the device.

    Also switches CUDA matmuls to full fp32 (no TF32), so values printed on a GPU
    match the CPU's. Create random data and parameters on the CPU after this call,
    then move them with ``.to(device)``: the CPU and CUDA generators differ.
    """
    expect_int(seed, "seed", minimum=0)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    _use_full_fp32_matmul()
    return get_device(device)


def _shape_tuple(shape: Sequence[int] | int) -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    if not dims:
        raise CourseInputError("shape must have at least one dimension, but got ().")
    for d in dims:
        expect_int(d, "each dimension of shape", minimum=1)
    return dims


def portable_rand(shape: Sequence[int] | int, seed: int) -> torch.Tensor:
    """Uniform [0, 1) float32 numbers that are identical on every OS, torch version and device.

    Drawn with Python's Mersenne Twister (whose sequence Python guarantees), so unlike
    ``torch.rand`` on CUDA or dropout's CPU kernels, the values never depend on the machine.
    Meant for small teaching tensors, not for training.
    """
    dims = _shape_tuple(shape)
    expect_int(seed, "seed", minimum=0)
    count = math.prod(dims)
    if count > 1_000_000:
        raise CourseInputError(
            f"portable_rand is for small teaching tensors (at most 1,000,000 numbers), "
            f"but shape {dims} holds {count}."
        )
    rng = random.Random(seed)
    values = [rng.random() for _ in range(count)]
    return torch.tensor(values, dtype=torch.float64).reshape(dims).float()


def portable_dropout_mask(shape: Sequence[int] | int, p: float, seed: int) -> torch.Tensor:
    """A dropout *keep* mask scaled like ``nn.Dropout``: entries are 0 or 1/(1-p).

    Each entry is dropped independently with probability ``p``, using
    :func:`portable_rand`, so the mask is the same on every machine. Multiply it into
    a tensor to apply dropout exactly as ``nn.Dropout(p)`` does in training mode.
    """
    p = expect_probability(p, "p")
    keep = portable_rand(shape, seed) >= p
    return keep.float() / (1.0 - p)
