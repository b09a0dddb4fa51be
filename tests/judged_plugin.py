"""A pytest plugin that runs the chapters' check tests as the grader's judge runs the checks: every
function or class a test hands to a ``cu.checks.check_*`` lives in a separate student process
(``tools/grading/student_server.py``, not sandboxed here, with the whole course), and the check
gets proxies of them (``tools/grading/judge.py``). A check that accepts a right answer in-process
must accept it there too; ``tests/test_sandbox.py`` runs chapters' tests through it.

    python -m pytest -p tests.judged_plugin tests/ch04
"""

from __future__ import annotations

import functools
import importlib
import inspect

import pytest

_STATE: dict = {}


def _session():
    from tools.grading import session as S

    if "session" not in _STATE:
        template = S.StudentTemplate(sandboxed=False)  # the test modules are in no sandbox's view
        template.start()
        setup = {"real": True, "env": {}}
        _STATE["template"], _STATE["session"] = template, S.Session(template.fork(setup), 99)
    return _STATE["session"]


def _remote(session, obj):
    """A proxy of ``obj`` when the student process can import it by name, else ``obj``."""
    if not (inspect.isfunction(obj) or inspect.isclass(obj)):
        return obj
    module, name = getattr(obj, "__module__", ""), getattr(obj, "__qualname__", "")
    if "<" in name or not module or module == "__main__":
        return obj
    try:
        found = importlib.import_module(module)
        for part in name.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return obj
    if found is not obj:
        return obj
    from tools.grading.judge import StudentError

    try:
        return session.op("import", module, name)
    except (StudentError, ImportError):  # a test module the student process cannot import
        return obj


def _judged(check):
    @functools.wraps(check)
    def judged(*args, **kwargs):
        session = _session()
        args = [_remote(session, a) for a in args]
        kwargs = {k: _remote(session, v) for k, v in kwargs.items()}
        try:
            return check(*args, **kwargs)
        finally:
            session.end_check()

    judged.__judged__ = True
    return judged


def pytest_configure(config) -> None:
    import course_utils.checks as checks

    for name in dir(checks):
        if name.startswith("check_") and not getattr(getattr(checks, name), "__judged__", False):
            setattr(checks, name, _judged(getattr(checks, name)))


def pytest_unconfigure(config) -> None:
    if "session" in _STATE:
        _STATE.pop("session").close()
        _STATE.pop("template").stop()


@pytest.fixture
def judged_session():
    return _session()
