"""Points that must be earned: when a class is graded, every check refuses the course's own code
for its exercise, and the library shortcuts its chapter does not allow.

Instructor machinery: the guard's judge (``tools/grading/guard.py``) calls each check through
:func:`guard`. The course's own code for the exercise is out of the student's reach there: the
student process that runs the notebook (``tools/grading/student.py``) has no exported code of the
chapter being graded or of any later one, no checks and no solutions, so a name, a wrapper, a
subclass, a copy of its source or a file read of it finds nothing; the judge names what was
reached for (the engine's ``course_code_handed_in``). :func:`guard` still refuses a course object
given to a check directly (the engine's ``handed_in``), as ``Check.ensure_callable`` does in a
student's own kernel.

The shortcuts: each chapter states in its ``checks.py`` the library shortcuts its exercises may
use, ``ALLOWED_SHORTCUTS`` (names of :data:`SHORTCUTS`). While a check runs, the student process
watches the student's code for the others (a torch function mode under the student's own, and a
profile hook for those written in Python, such as FlexAttention), under each name it has: the
public function and the ATen operators it runs on, called as ``torch.ops.aten.X`` (with or without
an overload, or through the overload's ``_op``, ``decompose`` or ``redispatch``), ``torch.X`` or
``torch._C._VariableFunctions.X`` (a raw dispatcher handle's ``redispatch_boxed`` or
``torch._C._dispatch_call_boxed`` passes unseen), and reports each to the judge, which fails the
check with ``shortcut_not_allowed``; on a torch that lacks the shortcut (FlexAttention before 2.5)
the student's import of it is named, where it caused the check's failure. That watch runs where
the student's code runs: it names a shortcut taken openly, and a student who works at hiding one
from it can; the result itself is still checked by the judge.
"""

from __future__ import annotations

import contextlib
import functools
import io
import re
import sys
import types

from course_utils.checks._engine.core import Check, CheckFailure, handed_in, shown

IMPORTED = "import:"  # tools/grading/student_server.py's mark of a failed import of a shortcut
# A chapter's ALLOWED_SHORTCUTS names these keys: (the torch functions watched, what students call).
# Each shortcut under all its names: the public function, and the ATen operators it runs on (a
# stranger's attack scored with torch.ops.aten._scaled_dot_product_attention_math, reached as
# torch.ops.aten.X, torch.ops.aten.X.default, torch.X or torch._C._VariableFunctions.X).
SHORTCUTS = {
    "sdpa": (
        (
            "scaled_dot_product_attention",
            "_scaled_dot_product_attention_math",
            "_scaled_dot_product_attention_math_for_mps",
            "_scaled_dot_product_flash_attention",
            "_scaled_dot_product_flash_attention_for_cpu",
            "_scaled_dot_product_efficient_attention",
            "_scaled_dot_product_cudnn_attention",
            "_scaled_dot_product_fused_attention_overrideable",
            "_flash_attention_forward",
            "_flash_attention_forward_no_dropout_inplace",
            "_efficient_attention_forward",
            "_cudnn_attention_forward",
            "_triton_scaled_dot_attention",
        ),
        "F.scaled_dot_product_attention",
    ),
    "mha": (
        (
            "multi_head_attention_forward",
            "_native_multi_head_attention",
            "_triton_multi_head_attention",
            "_transformer_encoder_layer_fwd",
        ),
        "nn.MultiheadAttention",
    ),
    "flex": (("flex_attention",), "FlexAttention"),
}


def chapter_of(module_name: str) -> str | None:
    """``"course_utils.chapters.ch04.checks"`` -> ``"ch04"``."""
    match = re.search(r"\bch(\d\d)\b", module_name)
    return f"ch{match.group(1)}" if match else None


def forbidden_for(check) -> dict[str, str]:
    """{torch function name: what students call} of the shortcuts ``check``'s chapter forbids."""
    allowed = getattr(sys.modules[check.__module__], "ALLOWED_SHORTCUTS", tuple(SHORTCUTS))
    return {n: call for k, (names, call) in SHORTCUTS.items() if k not in allowed for n in names}


def guard(check, session=None):
    """``check`` refusing the course's own code and the shortcuts its chapter does not allow;
    ``session``: the judge's session with the student process (``tools/grading/session.py``),
    which watches for the shortcuts and names the hidden code the notebook reached for."""
    chapter = chapter_of(check.__module__)
    if chapter is None:
        return check
    forbidden, name = forbidden_for(check), check.__name__

    @functools.wraps(check)
    def guarded(*args, **kwargs):
        __tracebackhide__ = True
        given = args[0] if args else next(iter(kwargs.values()), None)
        how = handed_in(given, chapter)
        if how is not None:
            raise Check(name).bug("course_code_handed_in", shown=shown(given), how=how)
        seen = len(session.seen) if session is not None else 0
        if session is not None:
            session.forbidden = tuple(forbidden)
        printed, failure = io.StringIO(), None
        try:
            with contextlib.redirect_stdout(printed):
                result = check(*args, **kwargs)
        except CheckFailure as exc:
            failure = exc
        finally:
            if session is not None:
                session.forbidden = ()
        taken = session.seen[seen:] if session is not None else []
        imported = [t[len(IMPORTED) :] for t in taken if t.startswith(IMPORTED)]
        if failure is not None and not imported:  # the check's own diagnosis names what it found
            raise failure
        taken = imported or [t for t in taken if not t.startswith(IMPORTED)]
        if taken:  # called, or (on a torch without it) imported and the failure's cause
            raise Check(name).bug(
                "shortcut_not_allowed",
                function=forbidden[taken[0]],
                chapter=f"chapter {chapter[2:]}",
            )
        print(printed.getvalue(), end="")
        return result

    return guarded


def hidden_code(check: str, attempts: list[str]) -> CheckFailure:
    """The failure that names the course's code the notebook reached for (and did not get)."""
    reached = ", ".join(dict.fromkeys(a.replace("course_utils.", "cu.") for a in attempts))
    how = " (your notebook reached for it; while the chapter is graded it is not there)"
    return Check(check).bug("course_code_handed_in", shown=reached, how=how)


def guarded_checks(session=None):
    """Every ``cu.checks.check_*``, guarded (a namespace to stand in for ``cu.checks``)."""
    import course_utils.checks as checks

    return types.SimpleNamespace(
        **{n: guard(getattr(checks, n), session) for n in dir(checks) if n.startswith("check_")}
    )
