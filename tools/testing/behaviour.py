"""Record what the course does, so that a change that should change nothing can be shown to.

``record OUT.json`` writes, for the working tree as it is:

* every verdict of every check on every fixture: the chapters' check tests (``tests/chNN`` and the
  engine's own check tests) run under pytest with this module as a plugin, which wraps every
  ``check_*`` function of every chapter's check modules and writes one row per call: the test,
  the call's number in it, the check, the arguments (their names), the outcome (``passed``, or the
  exception's type), the mistake's id and the message (what the check printed, or the failure's
  text), and each test's own outcome;
* the hashes of the stored solutions, the generated notebooks, the chapters' generated code, the
  README and the figures, then the same after ``make exercises`` ran, with what it printed.

``compare A.json B.json`` lists every difference and exits 1 when there is one.

Usage (issue 40: the same command before and after a move of tools/)::

    .venv/bin/python -m tools.testing.behaviour record /tmp/before.json
    .venv/bin/python -m tools.testing.behaviour compare /tmp/before.json /tmp/after.json

Nothing here imports tools/ (whose layout it checks) nor changes a check: a wrapper passes every
argument through, re-raises what the check raised and prints what it printed.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENV = "COURSE_BEHAVIOUR_DIR"
CHECK_TESTS = [
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("ch[0-9][0-9]")),
    "tests/test_checks_fuzz.py",
    "tests/test_checks_hints.py",
    "tests/test_engine_mistakes.py",
    "tests/test_check_display.py",
]
HASHED = (
    "solutions/*.ipynb",
    "notebooks/*.ipynb",
    "course_utils/chapters/__init__.py",
    "course_utils/chapters/ch[0-9][0-9]/__init__.py",
    "README.md",
    "figures/*.png",
)
ADDRESS = re.compile(r"0x[0-9a-f]{6,}")
TIMED = re.compile(r" in [0-9.]+s( \(\d+:\d\d:\d\d\))?")


# ----------------------------------------------------------------------------- the plugin
def _describe(value) -> str:
    """An argument as words that do not depend on the process (no address)."""
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    if name is not None and callable(value):
        return f"{getattr(value, '__module__', '?')}.{name}"
    shape = getattr(value, "shape", None)
    if shape is not None:
        return f"{type(value).__name__}{tuple(shape)}:{getattr(value, 'dtype', '')}"
    if isinstance(value, (int, float, str, bool, type(None))):
        return repr(value)
    return type(value).__name__


class Recorder:
    """Wraps the checks when pytest starts; one JSON line per check call into ``folder``."""

    def __init__(self, folder: str):
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        self.out = open(Path(folder) / f"calls-{worker}.jsonl", "a", encoding="utf-8")  # noqa: SIM115
        self.test = "?"
        self.count = 0
        self.depth = 0

    def pytest_configure(self, config) -> None:
        import course_utils.checks
        from course_utils.registry import chapter_folders

        dir(course_utils.checks)  # the registry puts every chapter's checks into the package

        wrapped: dict[int, object] = {}
        names = [sys.modules["course_utils.checks"]]
        for folder in chapter_folders():
            for path in sorted(folder.glob("*.py")):
                if path.stem in ("__init__", "explorer"):
                    continue
                module = f"course_utils.chapters.{folder.name}.{path.stem}"
                names.append(__import__(module, fromlist=["_"]))
        for module in names:
            for attr, value in list(vars(module).items()):
                if attr.startswith("check_") and callable(value):
                    if id(value) not in wrapped:
                        wrapped[id(value)] = self.wrap(value)
                    setattr(module, attr, wrapped[id(value)])

    def wrap(self, check):
        @functools.wraps(check)
        def recorded(*args, **kwargs):
            self.count += 1
            row = {
                "test": self.test,
                "call": self.count,
                "depth": self.depth,
                "check": check.__name__,
                "args": [_describe(a) for a in args]
                + [f"{k}={_describe(v)}" for k, v in sorted(kwargs.items())],
            }
            printed = io.StringIO()
            self.depth += 1
            try:
                with contextlib.redirect_stdout(printed):
                    result = check(*args, **kwargs)
            except BaseException as error:
                row |= {
                    "outcome": type(error).__name__,
                    "bug": getattr(error, "bug", None),
                    "message": ADDRESS.sub("0x?", str(error)),
                }
                raise
            else:
                row |= {"outcome": "passed", "bug": None}
                return result
            finally:
                self.depth -= 1
                sys.stdout.write(printed.getvalue())
                row["printed"] = ADDRESS.sub("0x?", printed.getvalue())
                self.out.write(json.dumps(row) + "\n")
                self.out.flush()

        return recorded

    def pytest_runtest_setup(self, item) -> None:
        self.test, self.count = item.nodeid, 0

    def pytest_runtest_logreport(self, report) -> None:
        if report.when == "call" or report.outcome != "passed":
            row = {"test": report.nodeid, "when": report.when, "outcome": report.outcome}
            self.out.write(json.dumps(row) + "\n")
            self.out.flush()


def pytest_configure(config) -> None:
    if os.environ.get(ENV):
        recorder = Recorder(os.environ[ENV])
        config.pluginmanager.register(recorder, "course-behaviour")
        recorder.pytest_configure(config)


# ----------------------------------------------------------------------------- recording
def _hashes() -> dict[str, str]:
    return {
        str(p.relative_to(ROOT)): hashlib.sha256(p.read_bytes()).hexdigest()
        for pattern in HASHED
        for p in sorted(ROOT.glob(pattern))
    }


def _verdicts(folder: Path, jobs: int) -> dict:
    env = {**os.environ, ENV: str(folder), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "tools.testing.behaviour"]
    command += ["-n", str(jobs), "--dist", "loadfile"] if jobs > 1 else ["-p", "no:xdist"]
    done = subprocess.run(
        [*command, *CHECK_TESTS], cwd=ROOT, env=env, capture_output=True, text=True
    )
    calls, tests = {}, {}
    for path in sorted(folder.glob("calls-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if "when" in row:
                tests[f"{row['test']} [{row['when']}]"] = row["outcome"]
            else:
                calls[f"{row.pop('test')} #{row.pop('call')}"] = row
    summary = done.stdout.strip().splitlines()[-1:] or [done.stderr[-500:]]
    return {"pytest": _untimed(summary[0]), "calls": dict(sorted(calls.items())), "tests": tests}


def _untimed(summary: str) -> str:
    """pytest's last line without its duration (``... in 1000.38s (0:16:40)``), which no move
    keeps."""
    return TIMED.sub("", summary)


def record(out: Path, jobs: int) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        verdicts = _verdicts(Path(folder), jobs)
    before = _hashes()
    done = subprocess.run(["make", "exercises"], cwd=ROOT, capture_output=True, text=True)
    wrote = [line for line in done.stdout.splitlines() if line.startswith("wrote ")]
    status = subprocess.run(
        ["git", "status", "--porcelain", "--", *HASHED], cwd=ROOT, capture_output=True, text=True
    )
    result = {
        **verdicts,
        "hashes": before,
        "exercises": {"returncode": done.returncode, "wrote": wrote, "hashes": _hashes()},
        "git_status_of_generated": status.stdout.splitlines(),
    }
    out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    n_failed = sum(1 for row in verdicts["calls"].values() if row["outcome"] != "passed")
    print(
        f"{out}: {len(verdicts['calls'])} check calls ({n_failed} named a failure), "
        f"{len(verdicts['tests'])} test outcomes ({verdicts['pytest']}), "
        f"{len(before)} files hashed, make exercises wrote {len(wrote)}"
    )


def compare(a: dict, b: dict, path: str = "") -> list[str]:
    """Every difference between two records, as ``path: before -> after``."""
    if isinstance(a, dict) and isinstance(b, dict):
        found = []
        for key in sorted(set(a) | set(b)):
            where = f"{path}/{key}"
            if key not in a or key not in b:
                found.append(f"{where}: {'missing before' if key not in a else 'missing after'}")
            else:
                found += compare(a[key], b[key], where)
        return found
    return [] if a == b else [f"{path}: {a!r:.200} -> {b!r:.200}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.testing.behaviour", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="record verdicts and hashes into OUT")
    rec.add_argument("out", type=Path)
    rec.add_argument("--jobs", type=int, default=2)
    cmp = sub.add_parser("compare", help="list the differences between two records")
    cmp.add_argument("before", type=Path)
    cmp.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    if args.command == "record":
        record(args.out, args.jobs)
        return 0
    before, after = (json.loads(p.read_text(encoding="utf-8")) for p in (args.before, args.after))
    for made in (before, after):  # records made before the duration was left out
        made["pytest"] = _untimed(made["pytest"])
    differences = compare(before, after)
    print("\n".join(differences) or "identical")
    calls = len(before["calls"])
    print(
        f"{calls} check calls, {len(before['tests'])} test outcomes, {len(before['hashes'])} files"
    )
    return 1 if differences else 0


if __name__ == "__main__":
    raise SystemExit(main())
