"""`make test-colab` finds a Python 3.13 that runs, not a pyenv shim that exits 127."""

from __future__ import annotations

import os
import stat
import sys

from tools.testing import colab_replica


def test_a_shim_that_does_not_run_is_passed_over(tmp_path, monkeypatch):
    shim = tmp_path / "bin" / "python9.9"
    shim.parent.mkdir()
    shim.write_text("#!/bin/sh\necho 'pyenv: python9.9: command not found' >&2\nexit 127\n")
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    real = tmp_path / "root" / "versions" / "9.9.1" / "bin" / "python"
    real.parent.mkdir(parents=True)
    real.symlink_to(sys.executable)
    fake_pyenv = tmp_path / "bin" / "pyenv"
    fake_pyenv.write_text(f"#!/bin/sh\necho {tmp_path / 'root'}\n")
    fake_pyenv.chmod(fake_pyenv.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{shim.parent}{os.pathsep}{os.environ['PATH']}")
    assert colab_replica.find_python("9.9") == str(real)


def test_no_python_of_that_version_is_a_plain_message(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    try:
        colab_replica.find_python("9.8")
    except SystemExit as stop:
        assert "Python 9.8 (Colab's version) was not found" in str(stop)
    else:
        raise AssertionError("find_python found a Python 9.8")
