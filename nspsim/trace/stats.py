"""Summary statistics of an array of sequence lengths, as ``nspsim trace stats`` prints them.

One pass of numpy over the array. ``np.percentile`` computes the median, p90, p99 and p99.9 together
with linear interpolation (numpy's default), using a partial sort (O(n)). Bucket shares come from
one ``np.searchsorted`` and two ``np.bincount`` calls. Trade-off: the whole array is held in memory,
which is fine for the 1M-10M lengths a trace materialises.

Buckets follow the NSP paper's routing figure: [0, 8K), [8K, 32K), [32K, 128K), [128K, inf), with
K = 1024. ``share_lt_8k`` equals the "0-8K" sample share. ``share_gt_128k`` is strict (> 131072), so a
length of exactly 131072 counts in the "128K+" bucket but not in ``share_gt_128k``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from nspsim.trace.base import MAX_LENGTH, exact_total

BUCKET_EDGES = (0, 8192, 32768, 131072)
BUCKET_NAMES = ("0-8K", "8-32K", "32-128K", "128K+")
_SHARE_KEYS = ("share_lt_8k", "share_gt_128k")


@dataclass(frozen=True, kw_only=True)
class TraceStats:
    """Statistics of a length array. Shares are fractions in [0, 1]: ``share_by_bucket`` is the
    share of samples per bucket and ``token_share_by_bucket`` the share of tokens."""

    count: int
    min: int
    median: float
    p90: float
    p99: float
    p999: float
    max: int
    mean: float
    total_tokens: int
    share_lt_8k: float
    share_gt_128k: float
    share_by_bucket: dict[str, float]
    token_share_by_bucket: dict[str, float]

    def __post_init__(self) -> None:
        if self.count < 1 or self.min < 1:
            raise ValueError(f"trace stats need count >= 1 and min >= 1, got count={self.count}, min={self.min}")
        order = (self.min, self.median, self.p90, self.p99, self.p999, self.max)
        if any(b < a for a, b in zip(order, order[1:])):
            raise ValueError(f"trace stats must satisfy min <= median <= p90 <= p99 <= p999 <= max, got {order}")
        for key in _SHARE_KEYS:
            if not 0.0 <= getattr(self, key) <= 1.0:
                raise ValueError(f"trace stats: {key}={getattr(self, key)} is not a fraction in [0, 1]")
        for key in ("share_by_bucket", "token_share_by_bucket"):
            shares = dict(getattr(self, key))
            if set(shares) != set(BUCKET_NAMES) or not math.isclose(sum(shares.values()), 1.0, abs_tol=1e-9):
                raise ValueError(f"trace stats: {key} needs keys {', '.join(BUCKET_NAMES)} summing to 1, got {shares}")
            object.__setattr__(self, key, {name: float(shares[name]) for name in BUCKET_NAMES})

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict with exactly the field names (bucket dicts copied)."""
        return {
            "count": self.count,
            "min": self.min,
            "median": self.median,
            "p90": self.p90,
            "p99": self.p99,
            "p999": self.p999,
            "max": self.max,
            "mean": self.mean,
            "total_tokens": self.total_tokens,
            "share_lt_8k": self.share_lt_8k,
            "share_gt_128k": self.share_gt_128k,
            "share_by_bucket": dict(self.share_by_bucket),
            "token_share_by_bucket": dict(self.token_share_by_bucket),
        }


def _as_lengths(lengths: npt.ArrayLike) -> npt.NDArray[np.int64]:
    arr = np.asarray(lengths)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"trace_stats needs a non-empty 1-D array of lengths, got shape {arr.shape}")
    if arr.dtype.kind not in "iu" and (
        arr.dtype.kind != "f" or not np.all(np.isfinite(arr)) or not np.all(arr == np.floor(arr))
    ):
        raise ValueError(f"trace_stats needs integer lengths, got dtype {arr.dtype}")
    if float(arr.min()) < 1:
        bad = int(np.argmin(arr))
        raise ValueError(f"trace_stats: lengths[{bad}] = {arr[bad]} is not a positive integer")
    if float(arr.max()) > MAX_LENGTH:
        bad = int(np.argmax(arr))
        raise ValueError(f"trace_stats: lengths[{bad}] = {arr[bad]}: lengths too large (at most 2**36 tokens)")
    return arr.astype(np.int64, copy=False)


def trace_stats(lengths: npt.ArrayLike) -> TraceStats:
    """Statistics of ``lengths`` (positive integers). See the module docstring for the definitions."""
    arr = _as_lengths(lengths)
    n, total = arr.size, exact_total(arr, "trace_stats")  # int64 sums of many long lengths would wrap
    median, p90, p99, p999 = (float(p) for p in np.percentile(arr, [50.0, 90.0, 99.0, 99.9]))
    bucket = np.searchsorted(np.asarray(BUCKET_EDGES), arr, side="right") - 1
    samples = np.bincount(bucket, minlength=len(BUCKET_NAMES)) / n
    tokens = np.bincount(bucket, weights=arr.astype(np.float64), minlength=len(BUCKET_NAMES)) / total
    return TraceStats(
        count=n,
        min=int(arr.min()),
        median=median,
        p90=p90,
        p99=p99,
        p999=p999,
        max=int(arr.max()),
        mean=total / n,
        total_tokens=total,
        share_lt_8k=float(np.count_nonzero(arr < 8192)) / n,
        share_gt_128k=float(np.count_nonzero(arr > 131072)) / n,
        share_by_bucket={k: float(v) for k, v in zip(BUCKET_NAMES, samples, strict=True)},
        token_share_by_bucket={k: float(v) for k, v in zip(BUCKET_NAMES, tokens, strict=True)},
    )


def _fmt_share(x: float) -> str:
    """A percentage to 3 significant digits, so small tail shares stay readable (0.0049%)."""
    return f"{x * 100:.3g}%"


def format_stats(stats: TraceStats, title: str) -> str:
    """A multi-line, fixed-width table for the terminal: summary lines, then one line per bucket."""
    rows = [
        ("samples", f"{stats.count:,}"),
        ("tokens", f"{stats.total_tokens:,}"),
        ("mean", f"{stats.mean:,.1f}"),
        ("min", f"{stats.min:,}"),
        ("median", f"{stats.median:,.0f}"),
        ("p90", f"{stats.p90:,.0f}"),
        ("p99", f"{stats.p99:,.0f}"),
        ("p99.9", f"{stats.p999:,.0f}"),
        ("max", f"{stats.max:,}"),
        ("share < 8K", _fmt_share(stats.share_lt_8k)),
        ("share > 128K", _fmt_share(stats.share_gt_128k)),
    ]
    lines = [title, "-" * 36]  # the table's width, however long the title
    lines += [f"  {label:<14}{value:>20}" for label, value in rows]
    lines.append(f"  {'bucket':<14}{'samples':>10}{'tokens':>10}")
    for name in BUCKET_NAMES:
        lines.append(
            f"  {name:<14}{_fmt_share(stats.share_by_bucket[name]):>10}"
            f"{_fmt_share(stats.token_share_by_bucket[name]):>10}"
        )
    return "\n".join(lines)
