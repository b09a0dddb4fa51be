"""Every explorer of the solution notebooks, rendered ahead of time for the website (`make site`).

An explorer is a pure function of a few discrete controls, so the site can hold every picture:
this module finds each explorer cell of ``solutions/`` (a cell ending in ``cu.widgets.x_explorer(...)``),
starts that explorer as the notebook would (an explorer given notebook data, chapter 08's and 10's
training snapshots, first runs the notebook's earlier code cells), walks the grid of its controls
(each slider at its steps, every drop-down value; :data:`CAPS` names the coarser steps of the
grids that are too large) and writes one lossless WebP per frame, named by its content, plus a
``manifest.json`` that ``tools/site/static/course-explorer.js`` reads in the page.

Frames are rendered in parallel processes and cached by a content hash (the call, the notebook code
it runs, every file of ``course_utils``, this module and the library versions), so a second build
renders nothing. Instructor machinery: run by ``tools.site.build``.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import multiprocessing
import os
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from itertools import product
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
MAX_FRAMES = 1100
"""The most frames one explorer may have; a larger grid needs an entry in :data:`CAPS`."""

CAPS: dict[str, dict[str, tuple]] = {
    # explorer -> {control: the values kept}; the full grid's size in the comment
    "scaling_explorer": {  # 512 widths x 51 seeds = 26,112 frames
        "d_k": (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512),
        "seed": tuple(range(10)),
    },
    "dropout_explorer": {"seed": tuple(range(20))},  # 19 p x 201 seeds = 3,819
    "memory_explorer": {  # 12 lengths x 32 heads x 64 batches x 2 dtypes = 49,152
        "heads": (1, 2, 4, 8, 12, 16, 32),
        "batch": (1, 4, 16, 64),
    },
}
WEBP = {"lossless": True, "method": 1, "quality": 50}
"""Pillow's WebP settings: lossless (text stays exact), the fast method (docs/site.md: measured)."""


@dataclass(frozen=True)
class Found:
    """One explorer cell of a solution notebook."""

    notebook: str  # relative to the repository root
    cell: int
    name: str  # e.g. "query_explorer"
    call: str  # the call's source
    needs_cells: bool  # the call reads notebook names: run the earlier code cells first


@dataclass
class Control:
    """One control as the page shows it: its values (kept ones only), their labels, the start."""

    name: str
    kind: str  # "slider", "dropdown", "text" or "checkbox"
    label: str
    labels: list
    start: int
    full: int  # values before the cap


def explorer_call(source: str) -> tuple[str, bool] | None:
    """(explorer name, whether the call has arguments) when ``source`` ends in ``cu.widgets.x_explorer(...)``."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    last = tree.body[-1] if tree.body else None
    if not (isinstance(last, ast.Expr) and isinstance(last.value, ast.Call)):
        return None
    func = last.value.func
    if (
        isinstance(func, ast.Attribute)
        and func.attr.endswith("_explorer")
        and isinstance(func.value, ast.Attribute)
        and func.value.attr == "widgets"
        and isinstance(func.value.value, ast.Name)
        and func.value.value.id == "cu"
    ):
        return func.attr, bool(last.value.args or last.value.keywords or len(tree.body) > 1)
    return None


def find(root: Path = ROOT) -> list[Found]:
    """Every explorer cell of ``root/solutions``, in chapter order."""
    found = []
    for path in sorted((root / "solutions").glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for index, cell in enumerate(nb.cells):
            call = explorer_call(cell.source) if cell.cell_type == "code" else None
            if call:
                rel = str(path.relative_to(root))
                found.append(Found(rel, index, call[0], cell.source.strip(), call[1]))
    return found


def _versions() -> str:
    import matplotlib
    import PIL
    import torch

    return f"torch {torch.__version__} matplotlib {matplotlib.__version__} Pillow {PIL.__version__}"


def cache_key(found: Found, root: Path = ROOT) -> str:
    """A hash of everything the frames depend on (same key: same frames)."""
    digest = hashlib.sha256()
    digest.update(f"{found.name}\n{found.call}\n{CAPS.get(found.name)}\n{WEBP}\n".encode())
    digest.update(_versions().encode())
    if found.needs_cells:
        nb = nbformat.read(root / found.notebook, as_version=4)
        for cell in nb.cells[: found.cell]:
            if _teaching(cell):
                digest.update(cell.source.encode())
    for path in sorted((root / "course_utils").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    digest.update(Path(__file__).read_bytes())
    return digest.hexdigest()[:16]


# ----------------------------------------------------------------------------- in a worker process
_started: dict = {}


def start(found: Found, root: Path = ROOT):
    """The live :class:`course_utils.plotting.Explorer` of ``found``, as the notebook makes it."""
    if found in _started:
        return _started[found]
    import contextlib

    import matplotlib

    matplotlib.use("agg")
    from IPython.core.interactiveshell import InteractiveShell

    from course_utils import plotting

    os.environ.pop(plotting.STATIC_ENV_VAR, None)
    os.environ.pop("NBGRADER_EXECUTION", None)
    shown: list = []
    saved, plotting._display = plotting._display, shown.append
    shell = InteractiveShell.instance()
    cells = ["import course_utils as cu"]
    if found.needs_cells:  # the notebook's code before the explorer, less its self-checks
        nb = nbformat.read(root / found.notebook, as_version=4)
        cells = [c.source for c in nb.cells[: found.cell] if _teaching(c)]
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            for source in [*cells, found.call]:
                shown.clear()
                result = shell.run_cell(source, store_history=False)
                if not result.success:
                    raise RuntimeError(
                        f"{found.notebook}: a code cell failed while preparing {found.name}:\n"
                        f"{source[:300]}\n{result.error_in_exec or result.error_before_exec!r}"
                    )
    finally:
        plotting._display = saved
    live = [obj for obj in shown if isinstance(obj, plotting.Explorer)]
    if len(live) != 1:
        raise RuntimeError(
            f"{found.notebook}: {found.call} showed {shown!r}, not one live explorer"
        )
    _started[found] = live[0]
    return live[0]


def _teaching(cell) -> bool:
    """A code cell the explorer's data may need: not a self-check (it binds nothing, and judging the
    solution is nbval's job: a check that fails there must not stop the site)."""
    return cell.cell_type == "code" and "self-check" not in cell.metadata.get("tags", [])


def _selection(control) -> tuple[list, list[str]]:
    pairs = [o if isinstance(o, tuple) and len(o) == 2 else (str(o), o) for o in control.options]
    return [v for _, v in pairs], [str(label) for label, _ in pairs]


def describe(explorer, name: str) -> tuple[list[Control], list[list]]:
    """The page's controls for ``explorer`` (caps applied) and, for each, the values it takes."""
    caps = CAPS.get(name, {})
    controls, values = [], []
    for key, c in explorer.controls.items():
        label = c.description or key
        if hasattr(c, "options") and hasattr(c, "index"):
            kind = "slider" if "Slider" in type(c).__name__ else "dropdown"
            vals, labels = _selection(c)
            start = c.index
        elif isinstance(getattr(c, "value", None), bool):
            kind, vals, labels, start = "checkbox", [False, True], ["off", "on"], int(c.value)
        elif all(hasattr(c, a) for a in ("min", "max", "step")):
            kind, count = "slider", int(round((c.max - c.min) / c.step)) + 1
            vals = [c.min + k * c.step for k in range(count)]
            vals = [round(v, 10) if isinstance(v, float) else v for v in vals]
            labels = [format(v, getattr(c, "readout_format", "") or "") for v in vals]
            start = min(range(count), key=lambda k: abs(vals[k] - c.value))
        else:  # a text box: the notebook's text, fixed (typing needs a kernel)
            kind, vals, labels, start = "text", [c.value], [str(c.value)], 0
        full = len(vals)
        if key in caps:
            kept = [k for k, v in enumerate(vals) if any(_same(v, w) for w in caps[key])]
            missing = [w for w in caps[key] if not any(_same(v, w) for v in vals)]
            if missing:
                raise ValueError(
                    f"CAPS[{name!r}][{key!r}] names {missing}, not values of {label!r}"
                )
            kept = sorted(set(kept) | {start})
            start = kept.index(start)
            vals, labels = [vals[k] for k in kept], [labels[k] for k in kept]
        controls.append(Control(key, kind, label, labels, start, full))
        values.append(vals)
    return controls, values


def _same(a, b) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, (int, float)) and abs(a - b) < 1e-9)


def grid_size(values: list[list]) -> int:
    size = 1
    for vals in values:
        size *= len(vals)
    return size


def _webp(explorer) -> tuple[bytes, tuple[int, int]]:
    from PIL import Image

    canvas = explorer.figure.canvas
    width, height = canvas.get_width_height()
    image = Image.frombuffer("RGBA", (width, height), bytes(canvas.buffer_rgba()), "raw")
    out = io.BytesIO()
    image.convert("RGB").save(out, "WEBP", **WEBP)
    return out.getvalue(), (width, height)


def render_chunk(found: Found, part: int, parts: int, folder: str) -> dict:
    """Render this process's share (``part`` of ``parts``, a contiguous run) of ``found``'s grid."""
    import torch

    from course_utils.validation import CourseInputError

    torch.set_num_threads(1)
    began, cpu = time.perf_counter(), time.process_time()
    explorer = start(found)
    controls, values = describe(explorer, found.name)
    total = grid_size(values)
    if total > MAX_FRAMES:
        counts = ", ".join(f"{c.name}: {len(v)}" for c, v in zip(controls, values))
        raise ValueError(
            f"{found.name} has {total} frames ({counts}), over MAX_FRAMES = {MAX_FRAMES}: "
            "give it coarser steps in tools/site/explorers.CAPS (and say so in docs/site.md)"
        )
    first, last = part * total // parts, (part + 1) * total // parts
    frames, size = {}, None
    names = [c.name for c in controls]
    grid = list(product(*values))
    for index in range(first, last):
        try:
            view = explorer.compute(**dict(zip(names, grid[index])))
        except CourseInputError as error:
            frames[index] = {"error": str(error)}
            continue
        explorer.update(view=view)
        data, size = _webp(explorer)
        file = hashlib.sha256(data).hexdigest()[:20] + ".webp"
        target = Path(folder) / file
        if not target.exists():
            target.write_bytes(data)
        frames[index] = file
    return {
        "controls": [asdict(c) for c in controls],
        "total": total,
        "frames": frames,
        "size": size,
        "seconds": time.perf_counter() - began,
        "cpu_seconds": time.process_time() - cpu,
    }


# ----------------------------------------------------------------------------- the build
def coarse_note(controls: list[dict]) -> str:
    """What the page says about coarser steps than the notebook's ('' when none)."""
    said = []
    for c in controls:
        if len(c["labels"]) < c["full"]:
            shown = ", ".join(c["labels"][:8]) + (", ..." if len(c["labels"]) > 8 else "")
            said.append(f"{c['label']}: {len(c['labels'])} of its {c['full']} steps ({shown})")
    return "; ".join(said)


def render_all(out: Path, jobs: int = 2, root: Path = ROOT, log=print) -> list[dict]:
    """Render (or take from the cache in ``out``) every explorer's frames; return their manifests.

    ``out/<key>/`` holds one explorer's frames and ``manifest.json``; folders of keys no longer
    in use are removed."""
    out.mkdir(parents=True, exist_ok=True)
    found = find(root)
    keys = {f: cache_key(f, root) for f in found}
    todo: dict[str, Found] = {}
    for f in found:
        if not (out / keys[f] / "manifest.json").exists():
            todo.setdefault(keys[f], f)
    began = time.perf_counter()
    if todo:
        log(f"rendering {len(todo)} explorers in {jobs} processes: {', '.join(sorted(todo))}")
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
            tasks = {}
            for key, f in todo.items():
                (out / f"{key}.tmp").mkdir(exist_ok=True)
                parts = 1 if f.needs_cells else jobs
                tasks[key] = [
                    pool.submit(render_chunk, f, p, parts, str(out / f"{key}.tmp"))
                    for p in range(parts)
                ]
            for key, futures in tasks.items():
                _write_manifest(out, key, todo[key], [fut.result() for fut in futures])
                log(f"  {todo[key].name}: {time.perf_counter() - began:.0f} s")
    for stale in out.iterdir():
        if stale.is_dir() and stale.name not in set(keys.values()):
            shutil.rmtree(stale)
    manifests = []
    for f in found:
        manifest = json.loads((out / keys[f] / "manifest.json").read_text(encoding="utf-8"))
        manifests.append({**manifest, "key": keys[f], "notebook": f.notebook, "cell": f.cell})
    return manifests


def _write_manifest(out: Path, key: str, found: Found, chunks: list[dict]) -> None:
    frames: dict[int, object] = {}
    for chunk in chunks:
        frames.update(chunk["frames"])
    controls, total = chunks[0]["controls"], chunks[0]["total"]
    if sorted(frames) != list(range(total)):
        raise RuntimeError(f"{found.name}: the processes rendered {len(frames)} of {total} frames")
    strides, stride = [], 1
    for c in reversed(controls):
        strides.insert(0, stride)
        stride *= len(c["labels"])
    size = next(c["size"] for c in chunks if c["size"])
    folder = out / f"{key}.tmp"
    files = {f for f in frames.values() if isinstance(f, str)}
    manifest = {
        "name": found.name,
        "controls": controls,
        "strides": strides,
        "frames": [frames[i] for i in range(total)],
        "width": size[0],
        "height": size[1],
        "coarse": coarse_note(controls),
        "bytes": sum((folder / f).stat().st_size for f in files),
        "distinct": len(files),
        "render_seconds": round(max(c["seconds"] for c in chunks), 1),
        "render_cpu_seconds": round(sum(c["cpu_seconds"] for c in chunks), 1),
        "versions": _versions(),
    }
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    target = out / key
    if target.exists():
        shutil.rmtree(target)
    folder.rename(target)
