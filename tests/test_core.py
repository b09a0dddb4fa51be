"""Reproducibility helpers, the running example and input validation."""

import random
import re

import pytest
import torch

import course_utils as cu
from course_utils.validation import expect_int, expect_probability


def test_example_matches_the_book_and_is_a_fresh_copy():
    x = cu.example_inputs()
    assert x.shape == (6, 3) and x.dtype == torch.float32
    assert x[1].tolist() == pytest.approx([0.55, 0.87, 0.66])
    assert x[5].tolist() == pytest.approx([0.05, 0.80, 0.55])
    x[0, 0] = 100.0
    assert cu.example_inputs()[0, 0].item() == pytest.approx(0.43)
    assert len(cu.EXAMPLE_TOKENS) == 6 and " ".join(cu.EXAMPLE_TOKENS) == cu.EXAMPLE_SENTENCE


def test_seed_everything_repeats_draws_and_returns_a_device():
    device = cu.seed_everything(7)
    a = (torch.rand(3), random.random())
    assert cu.seed_everything(7) == device
    b = (torch.rand(3), random.random())
    assert torch.equal(a[0], b[0]) and a[1] == b[1]
    assert device.type in ("cpu", "cuda", "mps")
    assert torch.backends.cuda.matmul.allow_tf32 is False
    assert torch.get_float32_matmul_precision() == "highest"


def test_book_seed_reproduces_book_values():
    # SelfAttention_v1's query matrix in the book: seed 123, torch.rand(3, 2), first row.
    cu.seed_everything(123)
    assert torch.rand(3, 2)[0].tolist() == pytest.approx([0.2961, 0.5166], abs=1e-4)


def test_device_can_be_forced_and_bad_choice_is_explained(monkeypatch):
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    assert cu.get_device() == torch.device("cpu")
    monkeypatch.setenv("COURSE_DEVICE", "tpu")
    with pytest.raises(cu.CourseInputError, match="one of 'cpu', 'cuda' or 'mps', but got 'tpu'"):
        cu.get_device()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on machines without CUDA")
@pytest.mark.parametrize(
    "value, light", [("autograde", True), ("validate", True), ("", False), (None, False)]
)
def test_light_run_follows_nbgraders_execution_variable(monkeypatch, value, light):
    """nbgrader 0.9.6 sets NBGRADER_EXECUTION to "autograde" or "validate" around a notebook."""
    if value is None:
        monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    else:
        monkeypatch.setenv("NBGRADER_EXECUTION", value)
    assert cu.light_run() is light


def test_forcing_missing_cuda_is_explained():
    with pytest.raises(cu.CourseInputError, match="CUDA is not available"):
        cu.get_device("cuda")


def test_portable_rand_is_pythons_mersenne_twister():
    # Python guarantees random.Random(seed).random()'s sequence across versions and platforms.
    values = cu.portable_rand((2, 2), seed=0)
    rng = random.Random(0)
    expected = torch.tensor([rng.random() for _ in range(4)], dtype=torch.float64).float()
    assert torch.equal(values.flatten(), expected)
    assert values[0, 0].item() == pytest.approx(0.8444218515250481)


def test_portable_dropout_mask_values_and_rate():
    mask = cu.portable_dropout_mask((6, 6), p=0.5, seed=123)
    assert set(mask.unique().tolist()) <= {0.0, 2.0}
    assert torch.equal(mask, cu.portable_dropout_mask((6, 6), p=0.5, seed=123))
    assert not torch.equal(mask, cu.portable_dropout_mask((6, 6), p=0.5, seed=124))
    big = cu.portable_dropout_mask((200, 200), p=0.3, seed=1)
    assert abs((big == 0).float().mean().item() - 0.3) < 0.01
    assert big.max().item() == pytest.approx(1 / 0.7)
    # Expectation is kept: the mean of mask * x is close to x.
    assert abs(big.mean().item() - 1.0) < 0.02


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: cu.portable_dropout_mask((2, 2), p=1.0, seed=0),
            r"p must be in \[0, 1\).*got 1.0",
        ),
        (lambda: cu.portable_dropout_mask((2, 2), p="0.5", seed=0), "p must be a number"),
        (lambda: cu.portable_rand((2, 0), seed=0), "at least 1, but got 0"),
        (lambda: cu.portable_rand((2, 2), seed=-1), "seed must be at least 0, but got -1"),
        (lambda: cu.portable_rand((2000, 2000), seed=0), "at most 1,000,000 numbers"),
        (lambda: cu.seed_everything(1.5), "seed must be an int, but got a float"),
    ],
)
def test_bad_input_gets_a_clear_message(call, message):
    with pytest.raises(cu.CourseInputError, match=message):
        call()


def test_expect_tensor_messages_say_expected_and_given():
    with pytest.raises(cu.CourseInputError, match=r"x must be a torch.Tensor, but got a list"):
        cu.expect_tensor([1, 2], "x")
    with pytest.raises(
        cu.CourseInputError, match=r"x must be a 3-d tensor, but got a 2-d tensor of shape \(2, 3\)"
    ):
        cu.expect_tensor(torch.zeros(2, 3), "x", ndim=3)
    with pytest.raises(cu.CourseInputError, match=r"2-d or 3-d tensor, but got a 1-d"):
        cu.expect_tensor(torch.zeros(2), "x", ndim=(2, 3))
    with pytest.raises(
        cu.CourseInputError,
        match=r"shape \(any, 4\), but got shape \(2, 3\) \(axis 1 is 3, expected 4\)",
    ):
        cu.expect_tensor(torch.zeros(2, 3), "x", shape=(None, 4))
    with pytest.raises(cu.CourseInputError, match=r"floating-point .* but got dtype torch.int64"):
        cu.expect_tensor(torch.zeros(2, dtype=torch.long), "x", floating=True)
    ok = torch.zeros(2, 4)
    assert cu.expect_tensor(ok, "x", shape=(None, 4), floating=True) is ok
    assert expect_int(3, "n", minimum=1) == 3
    assert expect_probability(0, "p") == 0.0
    with pytest.raises(cu.CourseInputError, match="n must be an int, but got a bool"):
        expect_int(True, "n")
    assert expect_int(4, "n", minimum=1, maximum=4) == 4
    with pytest.raises(cu.CourseInputError, match="n must be at most 4, but got 5"):
        expect_int(5, "n", minimum=1, maximum=4)


def test_lazy_submodules_and_unknown_attribute():
    assert cu.checks.CheckFailure.__mro__[1] is AssertionError
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        cu.nonsense  # noqa: B018


# --------------------------------------------------------------------------- README example
def test_readme_example_is_what_the_check_prints():
    """The example failure in the README (under "## Chapters") and in the students' guide is a real
    check's output."""
    from pathlib import Path

    from tools.build.render_check_messages import readme_example

    root = Path(__file__).resolve().parents[1]
    for name, heading in (("README.md", "## Chapters"), ("docs/students.md", "## Self-checks")):
        text = (root / name).read_text(encoding="utf-8")
        after = text[text.index(heading) :]
        start = after.index("```text\n") + len("```text\n")
        block = after[start : after.index("```", start)]
        assert block.strip() == readme_example().strip(), (
            f"{name}'s example failure message is stale: paste the output of "
            "`python -m tools.build.render_check_messages --readme` into it"
        )


# --------------------------------------------------------------------------- the device probe
def _slice_unseen(x, n):
    """``x[:n]`` without the mode seeing it, as torch 2.3 slices (its __getitem__ skips modes)."""
    with torch._C.DisableTorchFunction():
        return x[:n]


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x + torch.ones(x.shape, device=x.device),  # explicit device
        lambda x: x + torch.ones(x.shape).to(x.device),  # moved with .to(device)
        lambda x: x + torch.ones(x.shape).to(x),  # moved with .to(tensor)
        lambda x: x + torch.ones_like(x).triu(1),  # made from the input
        lambda x: (
            x[torch.arange(2)] * torch.tensor(2.0)
        ),  # CPU index tensors and 0-d scalars work on a GPU
        lambda x: x @ _slice_unseen(x, 2).T,  # a view of the input is on its device
    ],
    ids=[
        "device_kwarg",
        "to_device",
        "to_tensor",
        "like",
        "index_and_scalar",
        "view_sliced_unseen",
    ],
)
def test_device_probe_accepts_device_safe_code(fn):
    from course_utils.checks._engine import Check, probe_device

    probe_device(Check("check_x"), None, torch.zeros(3, 3), "With x:", fn=fn)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x + torch.ones(x.shape),
        lambda x: x.masked_fill(torch.ones(3, 3, dtype=torch.bool).triu(1), 0.0),
        lambda x: torch.where(torch.arange(3)[None, :] > torch.arange(3)[:, None], x, 0.0),
        lambda x: torch.tensor([[0.0] * 3] * 3) + x,
        lambda x: torch.nn.functional.embedding(torch.arange(3), x),
    ],
    ids=["ones", "masked_fill", "where_arange", "from_lists", "embedding_of_arange"],
)
def test_device_probe_names_cpu_tensors(fn):
    from course_utils.checks._engine import Check, probe_device

    with pytest.raises(cu.checks.CheckFailure) as info:
        probe_device(Check("check_x"), None, torch.zeros(3, 3), "With x:", fn=fn)
    assert info.value.bug == "cpu_tensor_in_forward"


def test_the_private_pytree_import_has_a_working_fallback():
    """watch.py is the one home of torch.utils._pytree; its fallback flattens what calls pass."""
    import torch

    from course_utils.checks._engine import watch

    nested = ((torch.ones(1), [2, {"k": torch.zeros(2)}]), {"x": (3,)})
    leaves = watch._flatten(nested)
    assert [type(x).__name__ for x in leaves] == ["Tensor", "int", "Tensor", "int"]
    assert [id(x) for x in leaves] == [id(x) for x in watch.tree_flatten(nested)[0]]


def test_no_torch_attribute_is_patched_and_private_imports_have_one_home():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "course_utils"
    private = {
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if "torch.utils._" in p.read_text(encoding="utf-8")
        or "torch._C" in p.read_text(encoding="utf-8")
    }
    assert private <= {"checks/_engine/watch.py"}, private
    patched = [
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if re.search(
            r"^\s*torch\.(Tensor|nn\.Module)\.\w+\s*=", p.read_text(encoding="utf-8"), re.M
        )
    ]
    assert patched == [], patched
