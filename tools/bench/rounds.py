"""Interleaved timing rounds for ``make bench``, and what they can tell apart.

All the variants of one length and mode are timed in rounds: one block of calls of every
variant per round (A B C, then B C A, ...), so that a change in the machine's load during the
measurement hits all of them alike. A variant's figure is the median of its rounds with
their interquartile range (its *spread*); one variant is ranked before another only where
the two spreads do not overlap and, round by round, the first was the faster in all the rounds
both were timed in (one in ten may disagree); otherwise the pair is "not separable on this
machine now".
Times relative to a baseline are taken round by round (the ratio within one round, where the
load was the same), then summarised the same way.

Everything here except :func:`interleaved_rounds` is a pure function of the numbers.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from course_utils.validation import CourseInputError

BLOCK_SECONDS = 0.01
"""A round times each variant for at least this long (several calls when one is shorter)."""
NOT_SEPARABLE = "not separable on this machine now"


@dataclass(frozen=True)
class Spread:
    """The median of some samples and their interquartile range [q1, q3]; ``rounds``: the
    samples themselves in round order, where known (a CSV written before they were kept has
    none)."""

    median: float
    q1: float
    q3: float
    n: int
    rounds: tuple[float, ...] = field(default=(), compare=False)

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1


def spread(samples: Iterable[float]) -> Spread:
    """Median and quartiles (inclusive method) of the finite samples."""
    given = tuple(float(v) for v in samples)
    values = [v for v in given if math.isfinite(v)]
    if not values:
        raise CourseInputError("spread needs at least one finite sample, but got none.")
    if len(values) == 1:
        return Spread(values[0], values[0], values[0], 1, given)
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return Spread(statistics.median(values), q1, q3, len(values), given)


DISAGREE = 0.1
"""The share of shared rounds in which the variant ranked faster may have been the slower."""


def surely_faster(a: Spread, b: Spread) -> bool:
    """True when a's whole interquartile range lies below b's and, where both know their
    rounds, a was faster than b in every round they share but at most one in ten: a is ranked
    before b. The second test catches two spreads that separate by chance of the load, which
    the rounds side by side show swapping places."""
    if not a.q3 < b.q1:
        return False
    pairs = [(x, y) for x, y in zip(a.rounds, b.rounds) if math.isfinite(x) and math.isfinite(y)]
    slower = sum(x >= y for x, y in pairs)
    return slower <= math.floor(DISAGREE * len(pairs))


@dataclass(frozen=True)
class Ranking:
    """What the spreads of one length and mode allow to say about the order of the variants.

    ``tiers``: the variants in groups, fastest first; every member of a tier is surely faster
    than every member of the next. ``faster``: every pair (a, b) with a surely faster than b,
    including pairs inside one tier (possible when a noisy variant's wide spread joins them)."""

    tiers: tuple[tuple[str, ...], ...]
    faster: frozenset[tuple[str, str]]

    def separable(self, a: str, b: str) -> bool:
        return (a, b) in self.faster or (b, a) in self.faster

    def ranks(self) -> dict[str, str]:
        """Each variant's place: "2" where it is separated from all the others, else the
        range of places the spreads allow ("3-5")."""
        names = [name for tier in self.tiers for name in tier]
        out = {}
        for name in names:
            low = 1 + sum((other, name) in self.faster for other in names)
            high = len(names) - sum((name, other) in self.faster for other in names)
            out[name] = str(low) if low == high else f"{low}-{high}"
        return out

    def not_separable(self) -> list[tuple[str, str]]:
        """The pairs inside a tier that the spreads cannot order."""
        return [
            (a, b)
            for tier in self.tiers
            for i, a in enumerate(tier)
            for b in tier[i + 1 :]
            if not self.separable(a, b)
        ]

    def text(self, most: int = 4) -> str:
        """One line: the tiers joined by '<', a tier of several in brackets: not separable as a
        group; then the pairs inside the brackets that do separate (counted past ``most``)."""
        if len(self.tiers) == 1 and len(self.tiers[0]) == 1:
            return f"{self.tiers[0][0]} (the only variant timed)"
        chain = " < ".join(t[0] if len(t) == 1 else "[" + ", ".join(t) + "]" for t in self.tiers)
        if not self.not_separable():
            return chain
        inside = [
            f"{a} < {b}"
            for tier in self.tiers
            for i, a in enumerate(tier)
            for b in tier[i + 1 :]
            if (a, b) in self.faster
        ]
        text = f"{chain}; [...]: {NOT_SEPARABLE}"
        if len(inside) > most:
            return f"{text}, except {len(inside)} pairs inside them (see the ranks)"
        return f"{text}, except {', '.join(inside)}" if inside else text


def rank(spreads: Mapping[str, Spread]) -> Ranking:
    """Order the variants as far as their spreads separate (see :class:`Ranking`).

    Sorted by the lower quartile, a variant joins the current tier while its range overlaps
    the tier's; a gap starts a new tier, so tiers are separated from each other entirely."""
    if not spreads:
        raise CourseInputError("rank needs at least one variant's spread, but got none.")
    order = sorted(spreads, key=lambda name: (spreads[name].q1, spreads[name].median))
    tiers: list[list[str]] = []
    top = -math.inf
    for name in order:
        s = spreads[name]
        if tiers and s.q1 <= top:
            tiers[-1].append(name)
        else:
            tiers.append([name])
        top = max(top, s.q3) if len(tiers[-1]) > 1 else s.q3
    faster = frozenset(
        (a, b) for a in spreads for b in spreads if a != b and surely_faster(spreads[a], spreads[b])
    )
    merged: list[list[str]] = []
    for tier in tiers:  # a gap in the ranges that the rounds do not confirm joins the tiers
        if merged and not all((a, b) in faster for a in merged[-1] for b in tier):
            merged[-1].extend(tier)
        else:
            merged.append(tier)
    tiers = merged
    return Ranking(
        tuple(tuple(sorted(t, key=lambda name: spreads[name].median)) for t in tiers), faster
    )


def paired_ratios(samples: Sequence[float], baseline: Sequence[float]) -> Spread:
    """The spread of ``samples[r] / baseline[r]`` over the rounds r both were timed in."""
    return spread(a / b for a, b in zip(samples, baseline) if b > 0)


# ----------------------------------------------------------------------------- two runs
Claim = tuple[object, str, str]  # (group, faster variant, slower variant)


def claims(groups: Mapping[object, Mapping[str, Spread]]) -> set[Claim]:
    """Every ranking the spreads claim, over groups (e.g. (mode, length)) of variants."""
    return {(key, a, b) for key, spreads in groups.items() for a, b in rank(spreads).faster}


def compare_claims(first: set[Claim], second: set[Claim]) -> dict[str, list[Claim]]:
    """Which claims of two runs agree, which only one run makes (the other said "not
    separable" or did not time the pair) and which contradict each other."""
    flipped = {(key, b, a) for key, a, b in second}
    return {
        "agree": sorted(first & second, key=str),
        "contradict": sorted(first & flipped, key=str),
        "first only": sorted(first - second - flipped, key=str),
        "second only": sorted(second - first - {(k, b, a) for k, a, b in first}, key=str),
    }


# ----------------------------------------------------------------------------- measuring
def usable_cores() -> int:
    """The CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def load_average() -> tuple[float, float, float]:
    """The system's load average over 1, 5 and 15 minutes (NaN where the OS has none)."""
    try:
        return os.getloadavg()
    except (AttributeError, OSError):  # Windows
        return (math.nan,) * 3


Sampler = Callable[[str, Callable[[], object], int], float]
"""(variant, function, calls) -> seconds per call, for one block of calls."""


def timer_sample(name: str, fn: Callable[[], object], number: int) -> float:
    """One block of ``number`` calls with ``torch.utils.benchmark.Timer`` (which synchronises
    CUDA before reading the clock): seconds per call."""
    from torch.utils.benchmark import Timer

    timer = Timer("fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    return timer.timeit(number).times[0]


@dataclass
class Rounds:
    """Seconds per call of each variant, one sample per round; the calls in one block; and
    the exception that stopped a variant (it is left out of the later rounds)."""

    samples: dict[str, list[float]]
    number: dict[str, int]
    failed: dict[str, BaseException]


def interleaved_rounds(
    runners: Mapping[str, Callable[[], object]],
    *,
    min_rounds: int = 5,
    max_rounds: int = 25,
    min_run_time: float = 0.5,
    warmup: int = 1,
    sample: Sampler | None = None,
) -> Rounds:
    """Warm up every runner (the last warm-up call, timed, sets how many calls make a block of
    at least ``BLOCK_SECONDS``), then time one block of each per round, each round starting one
    variant later, until there are ``min_rounds`` rounds and every variant has been timed for
    ``min_run_time`` seconds in all, or ``max_rounds`` rounds."""
    sample = sample or timer_sample
    out = Rounds({}, {}, {})
    for name, fn in runners.items():
        try:
            for _ in range(max(warmup, 1) - 1):
                fn()
            first = sample(name, fn, 1)
        except Exception as exc:  # noqa: BLE001 - out of memory and the like: reported
            out.failed[name] = exc
            continue
        out.samples[name] = []
        out.number[name] = max(1, math.ceil(BLOCK_SECONDS / first)) if first > 0 else 1
    names = list(out.samples)
    if not names:
        return out
    spent = dict.fromkeys(names, 0.0)
    for r in range(max_rounds):
        live = [n for n in names[r % len(names) :] + names[: r % len(names)] if n not in out.failed]
        if not live or (r >= min_rounds and min(spent[n] for n in live) >= min_run_time):
            break
        for name in live:
            try:
                seconds = sample(name, runners[name], out.number[name])
            except Exception as exc:  # noqa: BLE001
                out.failed[name] = exc
                continue
            out.samples[name].append(seconds)
            spent[name] += seconds * out.number[name]
    return out
