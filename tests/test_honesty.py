"""The grader's guard (tools/grading/honesty.py): points must be earned.

Guarded as the grader's judge calls them, a check refuses the course's own object for its exercise
(the object, a subclass that adds nothing, a copy of its code) and the library shortcuts its
chapter does not allow (chapters 01-05: no F.scaled_dot_product_attention, no
nn.MultiheadAttention, no FlexAttention), which the student process watches for while the check
runs (the answers here live in such a process: tests/judged_plugin.py); the same checks still
accept honest answers, including ones that use an earlier chapter's exported code. A wrapper that
delegates to the course's code finds none to delegate to in the graded student process
(tests/test_nbgrader_guard.py plants it).
"""

import types

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import course_utils as cu
from course_utils.checks import CheckFailure
from course_utils.checks._engine.core import handed_in
from tests.ch02 import correct as correct02
from tests.ch04 import correct as correct04
from tests.ch05 import correct as correct05
from tests.check_helpers import assert_names_bug, assert_passes
from tests.judged_plugin import _remote, _session
from tools.grading.honesty import SHORTCUTS, guarded_checks

C = cu.chapters
G = guarded_checks()


@pytest.fixture(scope="module")
def judged():
    """The checks as the judge has them, and the answers in a student process."""
    session = _session()
    yield guarded_checks(session), lambda obj: _remote(session, obj)
    session.end_check()


def _refused(check, given, bug):
    with pytest.raises(CheckFailure) as info:
        check(given)
    assert info.value.bug == bug, str(info.value)
    return str(info.value)


class _Sub(C.CausalAttention):
    pass


_Copy = type("_Copy", (nn.Module,), dict(vars(C.CausalAttention)))


@pytest.mark.parametrize(
    ("check", "given", "how"),
    [
        (G.check_causal_attention, C.CausalAttention, ""),
        (G.check_causal_attention, _Sub, "a subclass of CausalAttention that adds nothing"),
        (G.check_causal_attention, _Copy, "a copy of its code"),
        (G.check_multihead_wrapper, C.MultiHeadAttentionWrapper, ""),
        (G.check_multihead_attention, C.MultiHeadAttention, ""),
        (G.check_tiny_gpt, C.TinyGPT, ""),
        (G.check_train_step, C.train_step, ""),
        (G.check_repeat_kv, C.repeat_kv, ""),
        (G.check_transformer_block, C.TransformerBlock, ""),
    ],
)
def test_the_courses_own_code_is_refused_with_a_reason(check, given, how):
    message = _refused(check, given, "course_code_handed_in")
    assert "the course's own code for this exercise" in message and how in message


def _context_by_sdpa(inputs):
    x = inputs[None]  # (1, n, d)
    return F.scaled_dot_product_attention(x, x, x, scale=1.0)[0]


def _blockwise_by_sdpa(q, k, v, block_size):
    return F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True)[0]


@pytest.mark.parametrize(
    ("check", "given"),
    [
        ("check_context_vectors", _context_by_sdpa),
        ("check_self_attention_v1", correct02.V1Sdpa),
        ("check_causal_attention", correct04.CausalSdpa),
        ("check_multihead_attention", correct05.SplitSdpa),
    ],
)
def test_sdpa_is_refused_where_the_chapter_asks_for_attention_by_hand(judged, check, given):
    checks, remote = judged
    message = _refused(getattr(checks, check), remote(given), "shortcut_not_allowed")
    assert "F.scaled_dot_product_attention" in message


# SDPA and MHA under the names of the ATen operators they run on: a stranger's attack scored chapter
# 01's point with torch.ops.aten._scaled_dot_product_attention_math; each of these scored on commit
# d38d486 (torch._C._nn.scaled_dot_product_attention and F.__dict__[...] were already refused).
_ATEN, _DK = torch.ops.aten, torch._C.DispatchKey


def _bhnd(x):
    return x[None, None]  # (1, 1, n, d)


def _mha_args(x):  # one head whose projections give softmax(x @ x.T) @ x (q scaled by sqrt(d))
    d, eye = x.shape[-1], torch.eye(x.shape[-1])
    qkv = torch.cat([eye * x.shape[-1] ** 0.5, eye, eye])
    return x[None], x[None], x[None], d, 1, qkv, torch.zeros(3 * d), eye, torch.zeros(d)


_MATH = _ATEN._scaled_dot_product_attention_math.default
ROUTES = {
    "torch.ops.aten._scaled_dot_product_attention_math": lambda x: (
        _ATEN._scaled_dot_product_attention_math(x, x, x, scale=1.0)[0]
    ),
    "torch.ops.aten.scaled_dot_product_attention.default": lambda x: (
        _ATEN.scaled_dot_product_attention.default(x, x, x, scale=1.0)
    ),
    "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu": lambda x: (
        _ATEN._scaled_dot_product_flash_attention_for_cpu(*[_bhnd(x)] * 3, scale=1.0)[0][0, 0]
    ),
    "OpOverload._op": lambda x: _MATH._op(x, x, x, scale=1.0)[0],
    "OpOverload.decompose": lambda x: _MATH.decompose(x, x, x, scale=1.0)[0],
    "OpOverload.redispatch": lambda x: _MATH.redispatch(
        torch._C.DispatchKeySet(_DK.CPU), x, x, x, scale=1.0
    )[0],
    "OpOverload._op_dk": lambda x: _MATH._op_dk(_DK.CompositeImplicitAutograd, x, x, x, scale=1.0)[
        0
    ],
    "torch._C._VariableFunctions._scaled_dot_product_attention_math": lambda x: (
        torch._C._VariableFunctions._scaled_dot_product_attention_math(x, x, x, scale=1.0)[0]
    ),
    "torch._scaled_dot_product_flash_attention_for_cpu": lambda x: (
        torch._scaled_dot_product_flash_attention_for_cpu(*[_bhnd(x)] * 3, scale=1.0)[0][0, 0]
    ),
    "torch._C._nn.scaled_dot_product_attention": lambda x: (
        torch._C._nn.scaled_dot_product_attention(x, x, x, scale=1.0)
    ),
    "F.__dict__['scaled_dot_product_attention']": lambda x: F.__dict__[
        "scaled_dot_product_attention"
    ](x, x, x, scale=1.0),
    "torch._native_multi_head_attention": lambda x: torch._native_multi_head_attention(
        *_mha_args(x)
    )[0][0],
    "torch.ops.aten._native_multi_head_attention.default": lambda x: (
        _ATEN._native_multi_head_attention.default(*_mha_args(x))[0][0]
    ),
}
for _name, _route in ROUTES.items():  # the student process finds each by module and name
    _route.__name__ = _route.__qualname__ = "route_" + "".join(
        c if c.isalnum() else "_" for c in _name
    )
    globals()[_route.__name__] = _route


@pytest.mark.parametrize("route", ROUTES)
def test_sdpa_and_mha_under_an_aten_operators_name_are_refused(judged, route):
    """Each route computes chapter 01's context vectors right (so it would score), and is refused."""
    checks, remote = judged
    if route == "OpOverload.redispatch" and not hasattr(_MATH, "redispatch"):
        pytest.skip("this torch's OpOverload has no redispatch: the route does not exist here")
    x = torch.randn(5, 3)
    torch.testing.assert_close(ROUTES[route](x), torch.softmax(x @ x.T, -1) @ x)
    message = _refused(checks.check_context_vectors, remote(ROUTES[route]), "shortcut_not_allowed")
    expected = (
        "nn.MultiheadAttention" if "multi_head" in route else "F.scaled_dot_product_attention"
    )
    assert expected in message and "chapter 01" in message


def test_the_watch_names_the_gpu_only_attention_operators():
    """The GPU's SDPA operators (flash, memory-efficient, cuDNN) cannot run on this machine's CPU;
    their meta kernels run here, and the student process's watch names each as SDPA."""
    from tools.grading import student

    forbidden = {n: call for names, call in SHORTCUTS.values() for n in names}
    q = torch.randn(1, 1, 4, 8, device="meta")
    calls = {  # an older supported torch may lack some: those are not there to be called
        "_scaled_dot_product_efficient_attention": (q, q, q, None, False),
        "_scaled_dot_product_flash_attention": (q, q, q),
        "_scaled_dot_product_cudnn_attention": (q, q, q, None, False),
        "_scaled_dot_product_fused_attention_overrideable": (q, q, q),
        "_flash_attention_forward": (q, q, q, None, None, 4, 4, 0.0, False, False),
    }
    there = [n for n in calls if hasattr(_ATEN, n)]
    assert len(there) >= 2  # flash and memory-efficient: in every supported torch
    checked = 0
    for name, args in ((n, calls[n]) for n in there):
        recorder = student.Recorder(None, False, tuple(forbidden))
        try:
            with recorder:
                getattr(_ATEN, name).default(*args)
        except NotImplementedError:  # torch 2.3: no meta kernel for it, so nothing runs it here
            continue
        except RuntimeError as exc:  # torch 2.3's cuDNN operator takes other arguments
            if "Expected a value of type" not in str(exc):
                raise
            continue
        assert [forbidden[s] for s in recorder.seen] == ["F.scaled_dot_product_attention"]
        checked += 1
    if checked == 0:
        pytest.skip("this torch has no meta kernel for any GPU-only SDPA operator")


def test_chapter_07_refuses_sdpa_itself_and_the_guard_keeps_its_diagnosis(judged):
    checks, remote = judged
    _refused(checks.check_blockwise_attention, remote(_blockwise_by_sdpa), "blockwise_uses_sdpa")


def test_each_chapter_states_its_shortcuts():
    """Every chapter states them. Where attention is the exercise (01-05, and 07's block-by-block
    attention, whose check also names SDPA itself) none is allowed; 06, 08 and 11 grade other things
    (data, wiring, training, sampling, caches) and 09 and 10 teach with PyTorch's attention: all."""
    import importlib

    from course_utils import registry

    allowed = {
        folder.name: getattr(
            importlib.import_module(f"course_utils.chapters.{folder.name}.checks"),
            "ALLOWED_SHORTCUTS",
            None,
        )
        for folder in registry.chapter_folders()
        if (folder / "checks.py").is_file()
    }
    unstated = {
        ch: v for ch, v in allowed.items() if not isinstance(v, tuple) or set(v) - set(SHORTCUTS)
    }
    assert unstated == {}, f"state ALLOWED_SHORTCUTS, a tuple of {list(SHORTCUTS)}: {unstated}"
    # what this course's chapters allow; a chapter added later (make chapter) states its own
    expected = {
        **{ch: () for ch in ("ch01", "ch02", "ch03", "ch04", "ch05", "ch07")},
        **{ch: tuple(SHORTCUTS) for ch in ("ch06", "ch08", "ch09", "ch10", "ch11")},
    }
    assert {ch: allowed.get(ch) for ch in expected} == expected


def _blockwise_by_flex(q, k, v, block_size):
    from torch.nn.attention.flex_attention import flex_attention

    def causal(score, b, h, i, j):
        return torch.where(j <= i, score, -float("inf"))

    return flex_attention(q[None, None], k[None, None], v[None, None], score_mod=causal)[0, 0]


def test_chapter_07_refuses_flex_attention_as_the_blocks(judged):
    """Chapter 07 states no shortcut: FlexAttention's blocks are not the student's."""
    checks, remote = judged
    message = _refused(
        checks.check_blockwise_attention, remote(_blockwise_by_flex), "shortcut_not_allowed"
    )
    assert "FlexAttention" in message and "chapter 07" in message


def _imports_something_else(q, k, v, block_size):
    import torch.nn.attention.no_such_module  # noqa: F401 - not a shortcut: a crash is a crash


def test_chapter_07_refuses_flex_attention_on_a_torch_without_it(judged):
    """torch 2.3 and 2.4 (supported) have no FlexAttention: the attempt dies in its import, before
    any call the student process could watch, and is still refused by name (it was a relayed
    crash). The student process is made to lack the module, as on 2.3.1."""
    checks, remote = judged
    session = _session()
    name = "torch.nn.attention.flex_attention"
    session.run_cell(
        f"import sys\n_kept = sys.modules.get({name!r})\nsys.modules[{name!r}] = None", 30
    )
    try:
        message = _refused(
            checks.check_blockwise_attention, remote(_blockwise_by_flex), "shortcut_not_allowed"
        )
        assert "FlexAttention" in message and "chapter 07" in message
        crash = remote(_imports_something_else)
        assert _refused(checks.check_blockwise_attention, crash, None)
    finally:
        session.run_cell(
            f"if _kept is None:\n    sys.modules.pop({name!r}, None)\n"
            f"else:\n    sys.modules[{name!r}] = _kept",
            30,
        )


def test_honest_answers_keep_their_points(capsys):
    class Wrapper(nn.Module):  # chapter 05's exercise, built on chapter 04's exported class
        def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
            super().__init__()
            self.heads = nn.ModuleList(
                C.CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)
                for _ in range(num_heads)
            )

        def forward(self, x):
            return torch.cat([head(x) for head in self.heads], dim=-1)

    assert_passes(G.check_multihead_wrapper, Wrapper, capsys=capsys)
    assert_passes(
        cu.checks.check_context_vectors,
        lambda x: torch.softmax(x @ x.T, dim=-1) @ x,
        capsys=capsys,
    )


@pytest.mark.parametrize(
    "check, given, how",
    [
        (cu.checks.check_causal_attention, C.CausalAttention, "own code for this exercise: <class"),
        (cu.checks.check_causal_attention, C.ch04.CausalAttention, "own code"),  # an alias
        (cu.checks.check_causal_attention, _Sub, "a subclass of CausalAttention that adds nothing"),
        (cu.checks.check_causal_attention, _Copy, "a copy of its code"),
        (cu.checks.check_causal_mask, C.causal_mask, "own code"),
        (cu.checks.check_causal_mask, types.FunctionType(C.causal_mask.__code__, {}), "a copy"),
        (cu.checks.check_sinusoidal_positions, C.sinusoidal_positions, "own code"),
    ],
    ids=lambda v: getattr(v, "__name__", "")[:24],
)
def test_the_students_own_kernel_refuses_the_course_code_too(check, given, how):
    """Unguarded, as a student runs it in JupyterLab: the engine's ensure_callable/ensure_class."""
    assert how in str(assert_names_bug(check, given, bug="course_code_handed_in"))


def test_the_students_own_kernel_accepts_another_chapters_export(capsys):
    """Later chapters use earlier chapters' code: chapter 05's wrapper of chapter 04's class."""
    assert_passes(cu.checks.check_multihead_wrapper, correct05.WrapperConcat, capsys=capsys)
    assert handed_in(C.CausalAttention, "ch05") is None and handed_in(C.causal_mask, "ch04") is None


def test_a_forbidden_layer_class_cannot_cross_to_the_judge():
    """nn.MultiheadAttention (or a subclass) handed to the judge by name is refused where the
    chapter forbids it: the table was keyed "mha" while the session holds torch function names,
    so it never matched (found by a helper reading the judge)."""
    from tools.grading import session, wire
    from tools.grading.judge import JudgeCodec

    ref = ("torch.nn.modules.activation", "MultiheadAttention")
    forbids = JudgeCodec(
        session.Session(None, chapter=1, forbidden=["multi_head_attention_forward"])
    )
    with pytest.raises(wire.WireError, match="shortcut this chapter does not allow"):
        forbids.find_class((*ref, []))
    assert (
        JudgeCodec(session.Session(None, chapter=9)).find_class((*ref, [])) is nn.MultiheadAttention
    )
