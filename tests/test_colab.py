"""Colab readiness of every notebook in solutions/ and notebooks/.

* Cell 0 is the title with an "Open in Colab" badge whose link is ``config.colab_url(folder, file)``,
  built from the one configured repository (``tools/build/config.py``).
* Cell 1 is the first code cell: the setup cell. It never pip-installs torch, and it works: each
  distinct setup cell found in the course is executed in a fresh Python, (a) from a folder where
  ``course_utils`` is not importable, with a fake ``git`` first on PATH that "clones" the course
  (a folder holding a link to the real ``course_utils``): afterwards ``course_utils`` imports from
  the clone; (b) with the clone already there (no git), (c) from a clone's ``notebooks/`` folder,
  (d) with everything present: nothing is run and ``sys.path`` is unchanged, (e) with packages
  missing: one pip install of exactly those, (f) with torch missing: a clear ImportError, no install,
  (g) when the clone fails (the fake git refuses, or git is not installed, or a real git is given an
  address that cannot be reached): one short RuntimeError naming the repository, the reason and what
  to do, and none of git's raw output.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tools.build import config, nbtools

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("solutions", "notebooks")
NOTEBOOKS = sorted(p for folder in FOLDERS for p in (ROOT / folder).glob("*.ipynb"))
BADGE = re.compile(r"\[!\[Open In Colab\]\((?P<image>[^)]*)\)\]\((?P<link>[^)]*)\)")
PIP_LINE = re.compile(r"pip", re.IGNORECASE)


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def _read(path: Path):
    return nbformat.read(str(path), as_version=4)


def test_one_configured_repository():
    owner, _, name = config.REPO_SLUG.partition("/")
    assert owner and name and "/" not in name, (
        f"REPO_SLUG must be 'owner/name', not {config.REPO_SLUG!r}"
    )
    assert config.REPO_URL == f"https://github.com/{config.REPO_SLUG}"
    # `git clone URL` creates a folder named after the repository: the setup cell looks for it.
    assert config.CLONE_DIR == name
    assert config.colab_url("notebooks", "01_x.ipynb") == (
        f"https://colab.research.google.com/github/{config.REPO_SLUG}/blob/{config.BRANCH}/notebooks/01_x.ipynb"
    )
    assert "torch" not in {pip for pip, _ in config.PACKAGES_FOR_SETUP}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_id)
def test_title_cell_has_the_colab_badge(path):
    cell = _read(path).cells[0]
    assert cell.cell_type == "markdown" and cell.source.startswith("# "), (
        "cell 0 must be the '# NN · Title'"
    )
    badges = BADGE.findall(cell.source)
    assert len(badges) == 1, (
        f"cell 0 must hold one Open In Colab badge, found {len(badges)}: run `make headers`"
    )
    image, link = badges[0]
    assert link == config.colab_url(path.parent.name, path.name), (
        "badge link is stale: run `make headers`"
    )
    assert image.startswith("https://colab.research.google.com/assets/colab-badge")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_id)
def test_first_code_cell_is_the_setup_cell(path):
    cells = _read(path).cells
    first_code = next(i for i, c in enumerate(cells) if c.cell_type == "code")
    assert first_code == 1, "the setup cell must be the first code cell, right after the title"
    setup = cells[1]
    assert nbtools.SETUP_TAG in setup.metadata.get("tags", []), "cell 1 must be tagged 'setup'"
    for line in setup.source.splitlines():
        if PIP_LINE.search(line):
            assert not re.search(r"\btorch\b", line), (
                f"the setup cell must never pip-install torch: {line!r}"
            )
    assert "course_utils" in setup.source


# ----------------------------------------------------------------------------- running the setup cell
def _setup_sources() -> dict[str, str]:
    """Each distinct setup cell of the course (and the generator's), named by a notebook using it."""
    found = {nbtools.setup_cell_source(): "nbtools"}
    for path in NOTEBOOKS:
        cells = _read(path).cells
        if len(cells) > 1 and cells[1].cell_type == "code":
            found.setdefault(cells[1].source, _id(path))
    return {name: source for source, name in found.items()}


SETUP_SOURCES = _setup_sources()

DRIVER = r"""
import importlib.util, json, os, subprocess, sys

repo = os.path.realpath(sys.argv[1])
scenarios = json.loads(sys.argv[2])
initial_path = list(sys.path)
real = {name: getattr(subprocess, name) for name in ("run", "Popen", "call", "check_call", "check_output")}
real_system, real_find = os.system, importlib.util.find_spec


def forget_course_utils():
    for module in [m for m in sys.modules if m == "course_utils" or m.startswith("course_utils.")]:
        del sys.modules[module]
    importlib.invalidate_caches()


for scenario in scenarios:
    os.chdir(scenario["cwd"])
    os.environ["FAKE_GIT_LOG"] = scenario["git_log"]
    os.environ["FAKE_GIT_FAIL"] = "1" if scenario.get("git_fails") else ""
    os.environ["PATH"] = scenario.get("path", os.environ["PATH"])
    forget_course_utils()
    sys.path[:] = initial_path
    if scenario["hide_repo"]:  # the course's virtualenv puts the repository on sys.path (a .pth file)
        sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != repo]
    calls = []

    def run(cmd, *a, **k):
        calls.append([str(c) for c in cmd])
        if scenario["execute"]:
            return real["run"](cmd, *a, **k)
        return subprocess.CompletedProcess(cmd, 0)

    def forbidden(*a, **k):
        calls.append(["<not subprocess.run>", *map(str, a)])
        raise RuntimeError("the setup cell may only use subprocess.run")

    subprocess.run, os.system = run, forbidden
    if not scenario["execute"]:
        subprocess.Popen = subprocess.call = subprocess.check_call = subprocess.check_output = forbidden
    missing = set(scenario["missing"])
    importlib.util.find_spec = lambda name, package=None: None if name in missing else real_find(name, package)
    result = {"found_before": real_find("course_utils") is not None}
    path_before = list(sys.path)
    try:
        exec(compile(scenario["source"], "<setup cell>", "exec"), {"__name__": "__main__"})
    except BaseException as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        for name, value in real.items():
            setattr(subprocess, name, value)
        os.system, importlib.util.find_spec = real_system, real_find
    result["path_changed"] = sys.path != path_before
    result["calls"] = calls
    if scenario["import"] and "error" not in result:
        import course_utils
        result["course_utils"] = os.path.abspath(course_utils.__file__)
        result["version"] = course_utils.__version__
    print("RESULT " + json.dumps(result), flush=True)
"""

FAKE_GIT = """#!/bin/sh
# A fake git for the test: records its arguments and "clones" by linking the real course_utils.
echo "$@" >> "$FAKE_GIT_LOG"
[ "$1" = clone ] || exit 1
if [ -n "$FAKE_GIT_FAIL" ]; then
  echo "Cloning into 'x'..." >&2
  echo "fatal: repository 'https://example.invalid/x.git/' not found" >&2
  exit 128
fi
for last in "$@"; do :; done
name=$(basename "$last" .git)
mkdir -p "$name" && ln -s "$COURSE_UTILS" "$name/course_utils"
"""

PIPS = [pip for pip, _ in config.PACKAGES_FOR_SETUP]
MODULES = [mod for _, mod in config.PACKAGES_FOR_SETUP]


def _scenarios(tmp: Path) -> dict[str, dict]:
    """Where and how the setup cell is run; folders are made here."""
    content = tmp / "clone" / "content"  # like Colab's /content: nothing of the course there
    content.mkdir(parents=True)
    existing = tmp / "existing" / "content"  # a second run on Colab: the clone is already there
    (existing / config.CLONE_DIR).mkdir(parents=True)
    (existing / config.CLONE_DIR / "course_utils").symlink_to(ROOT / "course_utils")
    checkout = tmp / "checkout"  # a clone opened in Jupyter without `make install`
    (checkout / "notebooks").mkdir(parents=True)
    (checkout / "course_utils").symlink_to(ROOT / "course_utils")
    live = {"hide_repo": True, "execute": True, "missing": [], "import": True}
    dry = {"hide_repo": False, "execute": False, "import": False, "cwd": str(ROOT)}
    return {
        "clone": dict(live, cwd=str(content)),
        "existing": dict(live, cwd=str(existing)),
        "checkout": dict(live, cwd=str(checkout / "notebooks")),
        "present": dict(dry, missing=[]),
        "two_missing": dict(dry, missing=MODULES[:2]),
        "all_missing": dict(dry, missing=MODULES),
        "no_torch": dict(dry, missing=["torch"]),
        "clone_fails": dict(
            live, cwd=str(_fresh(tmp / "fails" / "content")), git_fails=True, **{"import": False}
        ),
        "no_git": dict(
            live,
            cwd=str(_fresh(tmp / "nogit" / "content")),
            path=str(tmp / "empty-bin"),
            **{"import": False},
        ),
    }


def _fresh(folder: Path) -> Path:
    folder.mkdir(parents=True)
    return folder


_RUNS: dict[str, dict[str, dict]] = {}


@pytest.fixture
def runs(request, tmp_path_factory) -> dict[str, dict]:
    """Every scenario's result for one setup cell, from one fresh Python (torch is imported once)."""
    name = request.node.callspec.params["name"]
    if name not in _RUNS:
        tmp = tmp_path_factory.mktemp("setup-cell")
        scenarios = _scenarios(tmp)
        for key, scenario in scenarios.items():
            scenario.update(source=SETUP_SOURCES[name], git_log=str(tmp / f"git-{key}.log"))
        bin_dir = tmp / "fake-bin"
        bin_dir.mkdir()
        (tmp / "empty-bin").mkdir()
        (bin_dir / "git").write_text(FAKE_GIT)
        (bin_dir / "git").chmod(0o755)
        env = dict(
            os.environ,
            PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            COURSE_UTILS=str(ROOT / "course_utils"),
        )
        env.pop("PYTHONPATH", None)
        proc = subprocess.run(
            [sys.executable, "-c", DRIVER, str(ROOT), json.dumps(list(scenarios.values()))],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        lines = [
            json.loads(line[7:]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")
        ]
        assert proc.returncode == 0 and len(lines) == len(scenarios), (
            f"driver failed:\n{proc.stdout}\n{proc.stderr}"
        )
        _RUNS[name] = {}
        for (key, scenario), result in zip(scenarios.items(), lines):
            log = Path(scenario["git_log"])
            result["git"] = log.read_text().splitlines() if log.exists() else []
            result["cwd"] = scenario["cwd"]
            _RUNS[name][key] = result
    return _RUNS[name]


def test_setup_sources_found():
    assert "nbtools" in SETUP_SOURCES


@pytest.mark.parametrize("name", SETUP_SOURCES)
def test_setup_cell_clones_the_course_when_course_utils_is_missing(name, runs):
    result = runs["clone"]
    assert result["found_before"] is False
    assert "error" not in result, result
    assert result["git"] == [
        f"clone --depth 1 --branch {config.BRANCH} {config.REPO_URL}.git {config.CLONE_DIR}"
    ]
    assert [c[0] for c in result["calls"]] == ["git"], (
        "only git may run when all packages are present"
    )
    # The fake git names the folder after the URL, as git does: the cell must look there.
    clone = Path(result["cwd"]) / config.REPO_URL.rsplit("/", 1)[1]
    assert result["course_utils"] == str(clone / "course_utils" / "__init__.py")


@pytest.mark.parametrize("name", SETUP_SOURCES)
def test_setup_cell_reuses_an_existing_clone(name, runs):
    result = runs["existing"]
    assert "error" not in result, result
    assert result["git"] == [] and result["calls"] == []
    assert result["course_utils"] == str(
        Path(result["cwd"]) / config.CLONE_DIR / "course_utils" / "__init__.py"
    )


@pytest.mark.parametrize("name", SETUP_SOURCES)
def test_setup_cell_finds_the_course_from_its_notebooks_folder(name, runs):
    result = runs["checkout"]
    assert "error" not in result, result
    assert result["git"] == [] and result["calls"] == []
    assert result["course_utils"] == str(
        Path(result["cwd"]).parent / "course_utils" / "__init__.py"
    )


@pytest.mark.parametrize("name", SETUP_SOURCES)
def test_setup_cell_does_nothing_when_everything_is_present(name, runs):
    result = runs["present"]
    assert (result["found_before"], result["path_changed"], result["calls"], result["git"]) == (
        True,
        False,
        [],
        [],
    )
    assert "error" not in result, result


@pytest.mark.parametrize("name", SETUP_SOURCES)
def test_setup_cell_installs_only_what_is_missing(name, runs):
    result = runs["two_missing"]
    assert "error" not in result, result
    assert result["calls"] == [[sys.executable, "-m", "pip", "install", "--quiet", *PIPS[:2]]]
    # Even with every optional package missing, torch is never part of an install.
    result = runs["all_missing"]
    assert result["calls"] == [[sys.executable, "-m", "pip", "install", "--quiet", *PIPS]]


@pytest.mark.parametrize("name", SETUP_SOURCES)
def test_setup_cell_never_installs_torch(name, runs):
    result = runs["no_torch"]
    assert result["error"].startswith("ImportError") and "pytorch.org" in result["error"], result
    assert result["calls"] == []


FETCH_FAILED = (
    f"RuntimeError: Could not download the course's helper code (course_utils) from "
    f"{config.REPO_URL}. "
)
WHAT_TO_DO = (
    " Check that this runtime is online and that the address opens in a browser, then run this "
    "cell again. Or download the repository and open this notebook from its notebooks folder."
)


@pytest.mark.parametrize("name", SETUP_SOURCES)
def test_setup_cell_explains_a_failed_clone(name, runs):
    if "Could not download" not in SETUP_SOURCES[name]:
        pytest.skip("an older setup cell: `make headers` brings the explained failure")
    result = runs["clone_fails"]
    # Whole sentences: what failed, why in plain words (none of git's own output), what to do.
    assert result["error"] == (
        FETCH_FAILED + "The repository was not found at that address." + WHAT_TO_DO
    )
    assert result["calls"] == [
        ["git", "clone", "--depth", "1", "--branch", config.BRANCH]
        + [f"{config.REPO_URL}.git", config.CLONE_DIR]
    ]
    assert runs["no_git"]["error"] == FETCH_FAILED + "Git is not installed here." + WHAT_TO_DO


def _git(*args, cwd=None):
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t")
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def _served_course(tmp_path: Path) -> str:
    """A bare repository holding a tiny course_utils on main and on tag v1.0 (a file:// address)."""
    work = tmp_path / "work"
    (work / "course_utils").mkdir(parents=True)
    (work / "course_utils" / "__init__.py").write_text("__version__ = 'v1.0'\n")
    _git("init", "-q", "-b", "main", cwd=work)
    _git("add", ".", cwd=work)
    _git("commit", "-q", "-m", "main", cwd=work)
    _git("tag", "v1.0", cwd=work)
    (work / "course_utils" / "__init__.py").write_text("__version__ = 'after v1.0'\n")
    _git("commit", "-q", "-am", "later", cwd=work)
    _git("clone", "-q", "--bare", str(work), str(tmp_path / "course.git"))
    return f"file://{tmp_path}/course"


CLONE_DRIVER = (
    "import os, sys\n"
    "sys.path[:] = [p for p in sys.path if os.path.realpath(p or '.') != os.path.realpath(sys.argv[1])]\n"
    "exec(compile(sys.argv[2], '<setup cell>', 'exec'), {'__name__': '__main__'})\n"
    "import course_utils\n"
    "print('VERSION', course_utils.__version__)\n"
)


@pytest.mark.parametrize(
    "ref, version, said",
    [
        ("v1.0", "v1.0", ""),
        ("main", "after v1.0", ""),
        (
            "v9.9",
            "after v1.0",
            "This notebook's version of the course (v9.9) is no longer on {repo}, so the newest "
            f"version (branch {config.BRANCH}) is used instead.\n",
        ),
    ],
)
def test_setup_cell_clones_the_ref_the_notebook_belongs_to(tmp_path, ref, version, said):
    """With a real git and a local repository: the notebook's tag is cloned; a ref that is gone
    falls back to the default branch and says so in a sentence."""
    repo = _served_course(tmp_path)
    source = nbtools.setup_cell_source(ref).replace(config.REPO_URL, repo)
    content = tmp_path / "content"
    content.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-c", CLONE_DRIVER, str(ROOT), source],
        cwd=content,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == said.format(repo=repo) + f"VERSION {version}\n"
    assert (content / config.CLONE_DIR / "course_utils").is_dir()


def test_a_notebook_keeps_its_ref_through_headers_and_exercises():
    nb = nbtools.read(nbtools.chapter_files()[0])
    assert nbtools.notebook_ref(nb) == config.BRANCH
    nbtools.set_headers(nb, "solutions", "01_x.ipynb", "v1.0")
    nbtools.set_headers(nb, "solutions", "01_x.ipynb")  # `make headers` again keeps it
    assert nbtools.notebook_ref(nb) == "v1.0" and 'REF = "v1.0"' in nb.cells[1].source
    exercise = nbtools.make_exercise(nb, "01_x.ipynb")
    assert config.colab_url("notebooks", "01_x.ipynb", "v1.0") in exercise.cells[0].source
    assert nbtools.notebook_ref(exercise) == "v1.0"
    with pytest.raises(nbtools.MarkerError, match="REF must be a branch or tag name"):
        nbtools.setup_cell_source('main"; import os')


def test_setup_cell_explains_an_unreachable_repository_with_the_real_git(tmp_path):
    """The generator's cell, run by a fresh Python with no course_utils anywhere and a real git
    pointed at an address nothing listens on: one message, nothing of git's own output."""
    source = nbtools.setup_cell_source().replace(
        config.REPO_URL, "http://127.0.0.1:9/nowhere/course"
    )
    driver = (
        "import os, sys\n"
        "sys.path[:] = [p for p in sys.path if os.path.realpath(p or '.') != os.path.realpath(sys.argv[1])]\n"
        "try:\n"
        "    exec(compile(sys.argv[2], '<setup cell>', 'exec'), {'__name__': '__main__'})\n"
        "except RuntimeError as exc:\n"
        "    print('MESSAGE', exc)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-c", driver, str(ROOT), source],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert lines == [
        "MESSAGE Could not download the course's helper code (course_utils) from "
        "http://127.0.0.1:9/nowhere/course. This runtime could not reach the address: it may be "
        "offline." + WHAT_TO_DO
    ], lines
    assert not (tmp_path / config.CLONE_DIR).exists()
