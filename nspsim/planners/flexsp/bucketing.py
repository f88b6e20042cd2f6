"""FlexSP's adaptive length bucketing (docs/planners.md): few buckets so the MILP stays small.

The MILP assigns *counts* of bucketed sequences to groups, each bucket standing for its longest
member (so memory and time bounds stay conservative). Bucket boundaries minimise the padding
sum_j (bucket max - L_j) by dynamic programming over the sorted distinct lengths: with prefix sums,
the padding of a bucket [i..j] is n(i..j) * v_j - sum(i..j), and one DP layer per bucket is a
vectorised min over a (candidates x candidates) matrix. To bound that matrix, boundaries are taken
from at most ``MAX_CANDIDATES`` distinct lengths (every distinct length when there are fewer; the
longest distinct lengths always included, since the tail is where padding is expensive). The bucket
count starts at 16 and doubles while the padding exceeds ``max_padding`` of the tokens (up to 64).
Trade-off: fewer buckets mean a faster MILP and a larger over-estimate of time and memory.

:func:`bucketize_artifact` is the FlexSP artifact's rule (``bucket_seqs``): start at min(n, 16)
buckets and add one at a time while the padded total exceeds (tokens + P * B_tok) / 2, i.e. while
the padding exceeds half the micro-batch's free capacity, with no cap; the DP's layers are built once,
in order, so each added bucket costs one layer. Reaching n buckets means one per sequence (the
artifact then solves its per-sequence MILP; one bucket per distinct length is the same MILP, since
equal sequences are interchangeable).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
MAX_CANDIDATES = 384
MAX_BUCKETS = 64


@dataclass(frozen=True)
class Buckets:
    """Bucket maxima (ascending), the bucket of every input length, and the padding in tokens."""

    maxima: IntArray
    of_sample: IntArray
    padding: int

    @property
    def counts(self) -> IntArray:
        """Samples per bucket."""
        counts: IntArray = np.bincount(self.of_sample, minlength=self.maxima.size).astype(np.int64)
        return counts


def _candidates(values: IntArray, counts: IntArray) -> tuple[IntArray, IntArray]:
    """Collapse distinct lengths to at most MAX_CANDIDATES groups (by quantile of counts, keeping
    the longest values separate); returns (group max values, group counts) and padding is exact
    for boundaries at group maxima."""
    if values.size <= MAX_CANDIDATES:
        return values, counts
    keep_top = MAX_CANDIDATES // 4
    low_vals, low_counts = values[:-keep_top], counts[:-keep_top]
    cum = np.cumsum(low_counts)
    cuts = np.searchsorted(cum, np.linspace(0, cum[-1], MAX_CANDIDATES - keep_top + 1)[1:], side="left")
    ends = np.unique(np.minimum(cuts, low_vals.size - 1))
    starts = np.concatenate([[0], ends[:-1] + 1])
    group_counts = np.add.reduceat(low_counts, starts)
    return np.concatenate([low_vals[ends], values[-keep_top:]]), np.concatenate([group_counts, counts[-keep_top:]])


def _dp_layers(values: IntArray, counts: IntArray) -> Iterator[tuple[float, list[int]]]:
    """For 1, 2, ... buckets: the least padding and the indices (into ``values``) of the bucket maxima
    reaching it, by DP, one layer per added bucket."""
    u = values.size
    n = np.concatenate([[0], np.cumsum(counts)]).astype(np.float64)
    s = np.concatenate([[0], np.cumsum(counts * values.astype(np.float64))])
    lo, hi = np.meshgrid(np.arange(u), np.arange(u), indexing="ij")  # a bucket covers candidates lo..hi
    pad = np.where(lo <= hi, (n[hi + 1] - n[lo]) * values[hi] - (s[hi + 1] - s[lo]), np.inf)
    best = pad[0].copy()  # one bucket ending at j
    choice = [np.zeros(u, dtype=np.int64)]
    while True:
        ends, j = [], u - 1
        for arg in reversed(choice):
            ends.append(j)
            j = int(arg[j]) - 1
            if j < 0:
                break
        yield float(best[u - 1]), sorted(set(ends))
        total = np.concatenate([[np.inf], best[:-1]])[:, None] + pad  # previous bucket ends at lo-1
        arg = np.argmin(total, axis=0)
        best = total[arg, np.arange(u)]
        choice.append(arg)


def _dp_bounds(values: IntArray, counts: IntArray, buckets: int) -> list[int]:
    """Indices (into ``values``) of the bucket maxima minimising padding, by DP."""
    if buckets >= values.size:
        return list(range(values.size))
    return next(itertools.islice(_dp_layers(values, counts), buckets - 1, None))[1]


def _buckets(arr: IntArray, maxima: IntArray) -> Buckets:
    of_sample = np.searchsorted(maxima, arr, side="left").astype(np.int64)
    return Buckets(maxima=maxima.astype(np.int64), of_sample=of_sample, padding=int((maxima[of_sample] - arr).sum()))


def bucketize(lengths: npt.ArrayLike, buckets: int = 16, max_padding: float = 0.05) -> Buckets:
    """Bucket ``lengths``: DP boundaries, grown from ``buckets`` while padding > ``max_padding``."""
    arr = np.asarray(lengths, dtype=np.int64)
    values, counts = np.unique(arr, return_counts=True)
    cand_vals, cand_counts = _candidates(values, counts)
    count = buckets
    while True:
        maxima = cand_vals[_dp_bounds(cand_vals, cand_counts, count)]
        of_sample = np.searchsorted(maxima, arr, side="left").astype(np.int64)
        padding = int((maxima[of_sample] - arr).sum())
        if padding <= max_padding * arr.sum() or count >= MAX_BUCKETS or count >= values.size:
            return Buckets(maxima=maxima.astype(np.int64), of_sample=of_sample, padding=padding)
        count *= 2


def bucketize_artifact(lengths: npt.ArrayLike, capacity: float, start: int = 16) -> tuple[Buckets, int]:
    """The FlexSP artifact's bucketing (module doc): the buckets and the artifact's bucket count (n
    when it falls back to one bucket per sequence). ``capacity`` is the cluster's P * B_tok tokens."""
    arr = np.asarray(lengths, dtype=np.int64)
    values, counts = np.unique(arr, return_counts=True)
    allowed = (capacity - float(arr.sum())) / 2  # padded total <= (tokens + capacity) / 2
    first = min(arr.size, start)
    if first >= values.size:  # as many buckets as distinct lengths: no padding
        return _buckets(arr, values), first
    cand_vals, cand_counts = _candidates(values, counts)
    for count, (padding, ends) in enumerate(_dp_layers(cand_vals, cand_counts), start=1):
        if count >= first and padding <= allowed:
            return _buckets(arr, cand_vals[ends]), count
        if count >= cand_vals.size:  # more than MAX_CANDIDATES distinct lengths: one bucket per length
            break
    return _buckets(arr, values), arr.size
