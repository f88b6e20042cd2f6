"""Measured tables of a cost profile and how they are read between and beyond their points.

* :class:`LengthTable` - throughput (FLOP/s) against sequence length, piecewise linear in
  log2(length), clamped at both ends (a kernel's efficiency saturates; it does not keep growing);
  measured with full causal attention, it is read at a windowed sample's own length and applied to
  the window's share of the FLOPs, i.e. the full-attention time scaled by the pair ratio (why, rather
  than the time of the length with the same pair count: :mod:`nspsim.cost.analytic`);
* :class:`TimeTable` - seconds against tokens, piecewise linear in tokens and extended linearly past
  both ends with the end segments' slopes (small inputs keep their fixed cost, large ones grow with
  the last measured slope, never falling), never below 0; a table whose time falls by more than
  :data:`MAX_TIME_DROP` from one point to the next is refused (a measurement error);
* :class:`LinkFit` - one collective over one group size, ``latency + bytes / bandwidth``;
* :class:`WaitTable` - the wait at a collective against the seconds its members worked since their
  previous one, piecewise linear from (0, 0), extended proportionally past the last point; a wait
  longer than the work before it is refused (imbalance or a unit error, not lockstep noise).

Trade-off: tables are what a calibration measures and what a person can read and check; they cannot
express interactions between coefficients (e.g. a kernel slowed by a concurrent collective), which
the profile's ``overlap_slowdown`` states separately.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from nspsim.cost.profile.ranges import BANDWIDTH, DURATION, FLOPS, LATENCY, LENGTH, Plausible, format_number

T = TypeVar("T")
MAX_TIME_DROP = 0.1
"""How much less time a time table may take at its next, larger token count (measurement noise)."""


def _check_points(points: tuple[float, ...], values: tuple[float, ...], kind: str) -> None:
    if not points or len(points) != len(values):
        raise ValueError(f"a {kind} needs one value per point and at least one point")
    if any(b <= a for a, b in zip(points, points[1:])) or min(points) <= 0:
        raise ValueError(f"a {kind}'s points must be positive and strictly increasing")


@dataclass(frozen=True, kw_only=True)
class LengthTable:
    """Throughput as a function of sequence length, piecewise linear in log2(length)."""

    lengths: tuple[float, ...]
    values: tuple[float, ...]

    def __post_init__(self) -> None:
        _check_points(self.lengths, self.values, "length table")
        if min(self.values) <= 0:
            raise ValueError("a length table's throughputs must be positive")
        for length, value in zip(self.lengths, self.values, strict=True):
            LENGTH.check(length, "length")
            FLOPS.check(value, f"throughput at length {format_number(length)}")

    def __call__(self, lengths: np.ndarray) -> np.ndarray:
        """Interpolated throughput for each length."""
        x = np.log2(np.maximum(np.asarray(lengths, dtype=np.float64), 1.0))
        return np.interp(x, np.log2(self.lengths), self.values)


@dataclass(frozen=True, kw_only=True)
class TimeTable:
    """Seconds as a function of a token count, piecewise linear, extended linearly past both ends."""

    tokens: tuple[float, ...]
    seconds: tuple[float, ...]

    def __post_init__(self) -> None:
        _check_points(self.tokens, self.seconds, "time table")
        for tokens, value in zip(self.tokens, self.seconds, strict=True):
            LENGTH.check(tokens, "tokens")
            DURATION.check(value, f"time at {format_number(tokens)} tokens")
        for (t0, s0), (t1, s1) in zip(zip(self.tokens, self.seconds), zip(self.tokens[1:], self.seconds[1:])):
            if s1 < s0 * (1 - MAX_TIME_DROP):  # more tokens never take much less time: a measurement error
                raise ValueError(
                    f"a time table falls from {format_number(s0)} s at {format_number(t0)} tokens to "
                    f"{format_number(s1)} s at {format_number(t1)} tokens; more tokens cannot take "
                    f"{1 - s1 / s0:.0%} less time (remeasure: the points are noise or mislabelled)"
                )

    def __call__(self, tokens: float) -> float:
        """Seconds at ``tokens`` (0 tokens cost 0: nothing runs)."""
        if tokens <= 0:
            return 0.0
        xs, ys = self.tokens, self.seconds
        if len(xs) == 1:
            return ys[0] * tokens / xs[0]
        if tokens <= xs[0]:
            slope = (ys[1] - ys[0]) / (xs[1] - xs[0])
            return max(ys[0] + slope * (tokens - xs[0]), 0.0)
        if tokens >= xs[-1]:  # past the last point time only grows (a falling end segment is noise)
            slope = max((ys[-1] - ys[-2]) / (xs[-1] - xs[-2]), 0.0)
            return ys[-1] + slope * (tokens - xs[-1])
        return float(np.interp(tokens, xs, ys))


@dataclass(frozen=True, kw_only=True)
class LinkFit:
    """A collective over a group of one size: ``latency_s + bytes / bandwidth`` (bytes per rank, as
    the cost model counts them for that collective)."""

    latency_s: float
    bandwidth: float

    def __post_init__(self) -> None:
        LATENCY.check(self.latency_s, "latency")
        BANDWIDTH.check(self.bandwidth, "bandwidth")

    def time(self, nbytes: float) -> float:
        """Seconds to move ``nbytes``."""
        return self.latency_s + nbytes / self.bandwidth


@dataclass(frozen=True, kw_only=True)
class WaitTable:
    """Seconds a group's members wait for the last of them at a collective, against the seconds they
    worked since their previous collective (``nspsim_runtime.calibration.lockstep``)."""

    work_s: tuple[float, ...]
    wait_s: tuple[float, ...]

    def __post_init__(self) -> None:
        _check_points(self.work_s, self.wait_s, "wait table")
        for work, wait in zip(self.work_s, self.wait_s, strict=True):
            DURATION.check(work, "work")
            DURATION.check(wait, f"wait after {format_number(work)} s of work")
            if wait > work:  # the slowest member worked at most twice as long as the others
                raise ValueError(
                    f"a wait table waits {format_number(wait)} s after {format_number(work)} s of work; a wait "
                    "longer than the work before it means the members' work differs more than 2x, which is "
                    "imbalance for the plan to show, not lockstep noise (remeasure, or check the units: seconds)"
                )

    def __call__(self, work: float) -> float:
        """Wait after ``work`` seconds (0 without work; proportional to ``work`` past the last point)."""
        if work <= 0:
            return 0.0
        if work >= self.work_s[-1]:
            return self.wait_s[-1] * work / self.work_s[-1]
        return float(np.interp(work, (0.0, *self.work_s), (0.0, *self.wait_s)))


@dataclass(frozen=True, kw_only=True)
class AffineFit:
    """``intercept + slope * tokens`` fitted to a :class:`TimeTable` by least squares on relative error
    (each point weighs 1 / its time, so short inputs fit as well as long ones)."""

    intercept: float
    slope: float
    max_rel_error: float

    @staticmethod
    def of(table: TimeTable) -> AffineFit:
        """The fit of ``table`` (one point: a line through the origin)."""
        x, y = np.asarray(table.tokens, dtype=np.float64), np.asarray(table.seconds, dtype=np.float64)
        if x.size == 1:
            return AffineFit(intercept=0.0, slope=float(y[0] / x[0]), max_rel_error=0.0)
        w = 1.0 / np.maximum(y, 1e-12)
        design = np.stack([np.ones_like(x), x], axis=1) * w[:, None]
        (a, b), *_ = np.linalg.lstsq(design, y * w, rcond=None)
        a, b = max(float(a), 0.0), max(float(b), 0.0)
        err = float(np.max(np.abs(a + b * x - y) / np.maximum(y, 1e-12)))
        return AffineFit(intercept=a, slope=b, max_rel_error=err)

    def __call__(self, tokens: float) -> float:
        """Seconds at ``tokens``."""
        return self.intercept + self.slope * tokens


def lookup_degree(table: Mapping[int, T], degree: int) -> T | None:
    """Value for ``degree``: exact, else the nearest smaller profiled degree, else the smallest."""
    if not table:
        return None
    if degree in table:
        return table[degree]
    smaller = [d for d in table if d <= degree]
    return table[max(smaller) if smaller else min(table)]


def nearest_key(table: Mapping[int, T], key: int) -> T | None:
    """Value at ``key``, else at the profiled key nearest to it in log2 (ties: the smaller)."""
    if not table:
        return None
    if key in table:
        return table[key]
    best = min(table, key=lambda k: (abs(np.log2(k) - np.log2(max(key, 1))), k))
    return table[best]


def checked(range_: Plausible, value: float, what: str) -> float:
    """``value`` after checking it lies in ``range_``."""
    range_.check(value, what)
    return value
