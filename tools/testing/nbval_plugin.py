"""pytest plugin for the course's nbval runs (loaded by the repository's ``conftest.py``).

Two rules on top of strict ``pytest --nbval``:

0. **Explorers are static.** ``COURSE_STATIC_WIDGETS=1`` is set for the kernels, so the
   interactive explorers draw one static figure (what the stored solution shows).
1. **stderr is not compared.** Library warnings (paths, line numbers, deprecations) vary
   between machines. Solutions must not *store* stderr either: ``tests/test_notebooks.py``
   fails if any solution holds a stderr stream or an error output.
2. **A last-digit tolerance for printed numbers.** A float32 matmul on another CPU or on
   CUDA may land one unit away in the last printed digit (0.4419 vs 0.4420). When nbval's
   exact comparison fails, the text is compared again with every number replaced by a
   placeholder: the rest must be identical up to whitespace (torch re-aligns columns when a
   sign changes, and may wrap ``device=...``/``grad_fn=...`` onto a new line on CUDA), and each pair of numbers must differ by at most one unit in
   the last digit they print. Integers, shapes, words and any larger change still fail.
   ``tests/test_nbval_tolerance.py`` proves both directions. The tolerance relies on
   nbval's ``compare_outputs`` internals, so nbval is pinned in ``constraints.txt``.
"""

from __future__ import annotations

import math
import os
import re

NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|\b(?:nan|inf)\b")
SPACES = re.compile(r"\s+")


def _unit(token: str) -> float | None:
    """One unit in the last printed digit of a float token, or None for an integer."""
    mantissa, _, exponent = token.lower().partition("e")
    if "." not in mantissa:
        return None
    decimals = len(mantissa.split(".")[1])
    return 10.0 ** (int(exponent or 0) - decimals)


def numbers_close(ref: str, test: str) -> bool:
    """True when two printed numbers are equal or one unit apart in the last digit."""
    if ref == test:
        return True
    try:
        a, b = float(ref), float(test)
    except ValueError:
        return False
    if math.isnan(a) or math.isnan(b) or math.isinf(a) or math.isinf(b):
        return a == b or (math.isnan(a) and math.isnan(b))
    unit_a, unit_b = _unit(ref), _unit(test)
    if unit_a is None or unit_b is None:
        return a == b  # integers (shapes, counts, ids) must match exactly
    return abs(a - b) <= max(unit_a, unit_b) * 1.000001


def texts_match(ref: str, test: str) -> bool:
    """Compare two outputs allowing last-digit differences in printed floats only."""
    if ref == test:
        return True
    ref_numbers, test_numbers = NUMBER.findall(ref), NUMBER.findall(test)
    if len(ref_numbers) != len(test_numbers):
        return False
    ref_skeleton = SPACES.sub("", NUMBER.sub("#", ref))
    test_skeleton = SPACES.sub("", NUMBER.sub("#", test))
    if ref_skeleton != test_skeleton:
        return False
    return all(numbers_close(r, t) for r, t in zip(ref_numbers, test_numbers))


def _flatten(outputs, skip, sanitize):
    """nbval's own flattening: MIME type or stream name -> list of sanitized values."""
    from nbval.plugin import transform_streams_for_comparison

    flat: dict[str, list] = {}
    for output in transform_streams_for_comparison(outputs):
        for key, value in output.items():
            if key in skip:
                continue
            if key == "data":
                for mime, data in value.items():
                    if mime not in skip:
                        flat.setdefault(mime, []).append(sanitize(data))
            else:
                flat.setdefault(key, []).append(sanitize(value))
    return flat


def tolerant_equal(cell, test, ref) -> bool:
    skip = cell.parent.skip_compare
    a = _flatten(ref, skip, cell.sanitize)
    b = _flatten(test, skip, cell.sanitize)
    if a.keys() != b.keys():
        return False
    for key, ref_values in a.items():
        test_values = b[key]
        if len(ref_values) != len(test_values):
            return False
        for r, t in zip(ref_values, test_values):
            if r == t:
                continue
            if not (isinstance(r, str) and isinstance(t, str) and texts_match(r, t)):
                return False
    return True


def _install() -> None:
    from nbval.plugin import IPyNbCell

    if getattr(IPyNbCell.compare_outputs, "_course_tolerant", False):
        return
    exact = IPyNbCell.compare_outputs

    def compare_outputs(self, test, ref, skip_compare=None):
        if exact(self, test, ref, skip_compare):
            return True
        if skip_compare is None and tolerant_equal(self, test, ref):
            self.comparison_traceback = []
            return True
        return False

    compare_outputs._course_tolerant = True  # type: ignore[attr-defined]
    IPyNbCell.compare_outputs = compare_outputs


STATIC_ENV_VAR = "COURSE_STATIC_WIDGETS"


def pytest_configure(config):
    if getattr(config.option, "nbval", False) or getattr(config.option, "nbval_lax", False):
        _install()
        # Explorers draw a static figure instead of a live widget (no browser under nbval);
        # the kernels nbval starts inherit this variable.
        os.environ[STATIC_ENV_VAR] = "1"


def pytest_collectstart(collector):
    from nbval.plugin import IPyNbFile

    if isinstance(collector, IPyNbFile) and "stderr" not in collector.skip_compare:
        collector.skip_compare = collector.skip_compare + ("stderr",)
