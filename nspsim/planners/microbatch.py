"""Splitting a batch into micro-batches (docs/planners.md, FlexSP's "sequence blaster").

* :func:`blaster_split` - FlexSP's split: sort the batch and cut it into m *contiguous* chunks of the
  sorted order, minimising the largest chunk's token count. Chunks hold similar lengths (low variance
  inside a micro-batch) and even token counts. FlexSP describes a dynamic program; the same optimum
  of this min-max contiguous partition is found exactly by binary search on the largest chunk with a
  greedy feasibility check (O(n log total) instead of O(m n^2)), which is what runs here. Among
  the optimal splits, ours makes the *first* chunks as long as the optimum allows.
* :func:`blaster_split_artifact` - the same optimum with the FlexSP artifact's tie rule (its DP keeps
  the smallest split index reaching each sub-problem's optimum, so the *last* chunks are as long as
  possible): sorted ``[10, 1, 1, 1, 1]`` in 3 gives ``[10] [1] [1, 1, 1]`` where ours gives
  ``[10] [1, 1, 1] [1]``. Found without the O(m n^2) table: walking back from the end, the last chunk
  of i items in k starts at ``max(k - 1, g)``, g the first start whose suffix fits the sub-problem's
  optimum (any earlier start exceeds it; the prefix's own optimum is monotone in its length).
* :func:`artifact_first_count` - the artifact's first micro-batch count: from the memory minimum up
  until every chunk of its split holds strictly fewer than P * B_tok tokens.
* :func:`token_split` - used when a nested plan (NSP, greedy) cannot hold the whole batch in one pass:
  deal the sorted samples to m micro-batches balancing tokens, so each holds an even token count and
  a similar mix of long and short samples. (The NSP paper runs one micro-batch; this is the fallback
  for budgets that make one pass impossible.)
* :func:`candidate_splits` - both of the above for NSP's memory-bound micro-batch sweep.
* :func:`min_micro_batches` - the memory minimum ceil(sum L / (P * B_tok)).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from nspsim.planners.packing import least_loaded_fill, pack_balanced

IntArray = npt.NDArray[np.int64]

MAX_MICRO_BATCHES = 64
"""Largest ``max_micro_batches`` option (BASP, FlexSP): BASP plans every count up to it, about 4 s at
64 for a 2M-token batch on 64 GPUs, and its cost grows with the square of the count."""


def min_micro_batches(total_tokens: int, num_gpus: int, token_budget: int) -> int:
    """Fewest micro-batches whose tokens fit the cluster's total budget."""
    return max(1, math.ceil(total_tokens / (num_gpus * token_budget)))


def _chunks_needed(tokens: IntArray, cap: int) -> int:
    """Greedy count of contiguous chunks of at most ``cap`` tokens (``cap`` >= every item)."""
    count, start, csum = 0, 0, np.cumsum(tokens)
    base = 0
    while start < tokens.size:
        stop = int(np.searchsorted(csum, base + cap, side="right"))
        count += 1
        base = int(csum[stop - 1])
        start = stop
    return count


def _min_max_chunk(lengths: IntArray, m: int) -> int:
    """The smallest possible largest-chunk token count of ``lengths`` in at most ``m`` contiguous chunks."""
    lo, hi = int(lengths.max()), int(lengths.sum())
    while lo < hi:
        mid = (lo + hi) // 2
        if _chunks_needed(lengths, mid) <= m:
            hi = mid
        else:
            lo = mid + 1
    return lo


def blaster_split(lengths: IntArray, m: int) -> list[IntArray]:
    """Contiguous chunks (index arrays into ``lengths``, which is sorted) minimising the largest
    chunk's tokens; at most ``m`` chunks, exactly ``min(m, n)`` when possible."""
    n = lengths.size
    m = max(1, min(m, n))
    bounds = _cut(lengths, _min_max_chunk(lengths, m), m)
    return [np.arange(a, b, dtype=np.int64) for a, b in zip(bounds, bounds[1:])]


def blaster_split_artifact(lengths: IntArray, m: int) -> list[IntArray]:
    """:func:`blaster_split`'s optimum with the FlexSP artifact's tie rule (module doc): exactly
    ``min(m, n)`` chunks, the later ones as long as possible."""
    n = lengths.size
    m = max(1, min(m, n))
    csum = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
    starts, end = [], n
    for k in range(m, 1, -1):
        target = _min_max_chunk(lengths[:end], k)
        first_fit = int(np.searchsorted(csum[:end], csum[end] - target, side="left"))
        start = max(k - 1, first_fit)
        starts.append(start)
        end = start
    bounds = [0, *reversed(starts), n]
    return [np.arange(a, b, dtype=np.int64) for a, b in zip(bounds, bounds[1:])]


def artifact_first_count(lengths: IntArray, capacity: int) -> int:
    """The FlexSP artifact's first micro-batch count (``get_min_valid_microbatch_num``): from
    ceil(tokens / capacity) up until every chunk of :func:`blaster_split_artifact` holds strictly
    fewer than ``capacity`` (P * B_tok) tokens; ``ValueError`` when even one sample per chunk does not."""
    n = lengths.size
    if int(lengths.max()) >= capacity:
        raise ValueError(
            f"FlexSP (variant=artifact): a sample of {int(lengths.max())} tokens is not below the cluster's "
            f"P x B_tok = {capacity} tokens, which the artifact's count rule requires"
        )
    m = max(1, math.ceil(int(lengths.sum()) / capacity))
    while m < n and any(int(lengths[c].sum()) >= capacity for c in blaster_split_artifact(lengths, m)):
        m += 1
    return min(m, n)


def _cut(lengths: IntArray, cap: int, m: int) -> list[int]:
    """Chunk boundaries under ``cap``, splitting further so exactly min(m, n) chunks exist."""
    csum = np.cumsum(lengths)
    bounds, base, start = [0], 0, 0
    while start < lengths.size:
        stop = int(np.searchsorted(csum, base + cap, side="right"))
        left_chunks = m - len(bounds)  # chunks still to open after this one
        stop = min(stop, lengths.size - left_chunks)  # leave one item for every remaining chunk
        stop = max(stop, start + 1)
        bounds.append(stop)
        base = int(csum[stop - 1])
        start = stop
    return bounds


def token_split(lengths: IntArray, m: int, capacity: float = float("inf")) -> list[IntArray]:
    """Positions of ``lengths`` (sorted, non-increasing) dealt to ``m`` parts with even token counts
    and a similar mix of long and short samples (Static SP's balanced packing with tokens as the
    load; exact LPT under ``capacity`` if that overflows a part); positions stay sorted."""
    m = max(1, min(m, lengths.size))
    if m == 1:
        return [np.arange(lengths.size, dtype=np.int64)]
    tokens = lengths.astype(np.float64)
    part = pack_balanced(tokens, tokens, m, capacity, 0.0)
    if part is None:
        part, _, _ = least_loaded_fill(np.zeros(m), np.zeros(m), tokens, tokens, capacity)
    return [np.flatnonzero(part == k).astype(np.int64) for k in range(m)]


def candidate_splits(lengths: IntArray, m: int, capacity: float) -> list[tuple[str, list[IntArray]]]:
    """The ways NSP splits a memory-bound batch of sorted ``lengths`` into ``m`` micro-batches:
    ``tokens`` (:func:`token_split`: even tokens, similar mixes of long and short samples) and, for
    m > 1, ``sorted`` (:func:`blaster_split`'s contiguous chunks: the long samples together, so a
    micro-batch of short ones keeps its attention at degree 1) when each chunk fits ``capacity``
    tokens."""
    out = [("tokens", token_split(lengths, m, capacity))]
    if m > 1:
        chunks = blaster_split(lengths, m)
        if len(chunks) == m and all(int(lengths[c].sum()) <= capacity for c in chunks):
            out.append(("sorted", chunks))
    return out
