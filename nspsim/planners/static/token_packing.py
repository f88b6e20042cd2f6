"""Token packing of the FlexSP artifact's static-SP baseline: bins of a fixed token capacity, no cost model.

The rule is the one the FlexSP artifact (PKU-DAIR/Hetu-Galvatron, branch ``flexsp``,
``galvatron/flexsp_solver/solver.py``: ``solve_homo_sp_ffd_bfd_globalbatch``, run by the training
strategies ``fix_sp_bfd`` and ``adaptive_bfd``, with ``BestFitDecreasing`` from
``galvatron/flexsp_solver/utils.py``) applies to one SP degree s on P GPUs (G = P/s groups), re-stated
here (only the facts carry over, the code is ours):

1. **Capacity.** Every group (bin) holds at most ``C = max(0.9 * s * B_tok, longest sample)``
   tokens: 90% of the group's token budget, or the longest sample when that alone is more.
2. **Best fit decreasing** on token counts. Samples, longest first (equal lengths in batch order),
   each go into the open bin whose remaining room is the smallest that still holds them (the
   lowest-numbered such bin on a tie); a sample no open bin holds opens a new bin. Bins are
   numbered in the order they open.
3. **Micro-batches.** Bin ``b`` is group ``b % G`` of micro-batch ``b // G``: the bins fill
   micro-batches in order, so there are ``ceil(bins / G)`` of them and only the last one can have
   empty groups.
4. **Fill the empty groups** of the last micro-batch: for each, from the highest-numbered bin
   holding more than one sample, move that bin's first sample in batch order.
5. **Spread the last micro-batch** (only when s >= 16 and step 4 had empty groups to fill): with
   ``avg`` the last micro-batch's tokens // G, each of its groups i (from the second) below ``avg``
   takes samples, in batch order, from each earlier group j of the micro-batch that is above
   ``avg`` and holds more than one, while i stays below ``avg``, j above it, and i within C. (The
   artifact walks the sample index without a bound there; ours stops at the last sample.)

Nothing here reads the cost model: the groups hold similar token counts but not similar work, since
attention grows with the square of a sample's length. That is the imbalance the paper's Static SP
shows as "a long communication-wait component" (Figure 8); :mod:`nspsim.planners.static.planner`'s
default load-balanced packing is the stronger variant. Trade-off: one pass, O(n log bins) with a
sorted list of remaining rooms (:mod:`bisect`), against a packing that knows nothing about cost.
"""

from __future__ import annotations

import bisect
import math

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]

FILL = 0.9  # the artifact's share of a group's token budget that packing fills
SPREAD_FROM_DEGREE = 16  # the artifact spreads the last micro-batch for degrees of at least 16


def group_capacity(degree: int, budget: int, longest: int, fill: float = FILL) -> float:
    """Tokens one group of ``degree`` GPUs takes (step 1 of the module doc): ``fill`` of its budget,
    or the longest sample when that is more."""
    return max(fill * degree * budget, float(longest))


def best_fit_decreasing(lengths: IntArray, capacity: float) -> IntArray:
    """Bin of each sample (step 2): ``lengths`` must be sorted longest first, each at most
    ``capacity``; bins are numbered in the order they open."""
    rooms: list[tuple[float, int]] = []  # (remaining room, bin), sorted
    bins = np.empty(lengths.size, dtype=np.int64)
    opened = 0
    for i, length in enumerate(lengths.tolist()):
        at = bisect.bisect_left(rooms, (float(length), -1))
        if at == len(rooms):
            room, b = capacity, opened
            opened += 1
        else:
            room, b = rooms.pop(at)
        bins[i] = b
        bisect.insort(rooms, (room - length, b))
    return bins


def pack_by_tokens(
    lengths: IntArray, batch_ids: IntArray, degree: int, groups: int, budget: int, fill: float = FILL
) -> IntArray:
    """Unit (``micro-batch * groups + group``) of each sample under the artifact's rule (module doc).

    ``lengths`` are sorted longest first with equal lengths in batch order and ``batch_ids`` are the
    samples' batch indices (the order steps 4 and 5 take samples in); ``budget`` is B_tok per GPU.
    ``ValueError`` if a sample exceeds ``degree * budget`` tokens (no group of ``degree`` GPUs holds it).
    """
    if lengths.size == 0:
        raise ValueError("token packing needs at least one sample")
    if groups < 1 or degree < 1 or budget < 1:
        raise ValueError(f"token packing needs degree, groups and budget >= 1, got {degree}, {groups}, {budget}")
    longest = int(lengths[0])
    if longest > degree * budget:
        raise ValueError(
            f"token packing: a sample of {longest:,} tokens exceeds a group of {degree} GPU(s) at "
            f"B_tok={budget:,} ({degree * budget:,} tokens); use a larger degree"
        )
    capacity = group_capacity(degree, budget, longest, fill)
    units = best_fit_decreasing(lengths, capacity)
    used = int(units.max()) + 1
    micro_batches = math.ceil(used / groups)
    total = micro_batches * groups
    if used < total:
        _fill_empty(units, batch_ids, used, total)
        if degree >= SPREAD_FROM_DEGREE:
            _spread_last(units, lengths, batch_ids, total - groups, total, capacity)
    return units


def _fill_empty(units: IntArray, batch_ids: IntArray, used: int, total: int) -> None:
    """Step 4: each empty unit in ``used..total-1`` takes the first sample (batch order) of the
    highest-numbered unit below ``used`` that holds more than one."""
    counts = np.bincount(units, minlength=total)
    for empty in range(used, total):
        donors = np.flatnonzero(counts[:used] > 1)
        if donors.size == 0:
            return  # fewer samples than groups: the rest stay empty
        donor = int(donors[-1])
        members = np.flatnonzero(units == donor)
        moved = int(members[np.argmin(batch_ids[members])])
        units[moved] = empty
        counts[donor] -= 1
        counts[empty] += 1


def _spread_last(
    units: IntArray, lengths: IntArray, batch_ids: IntArray, first: int, end: int, capacity: float
) -> None:
    """Step 5 on the units ``first..end-1`` (the last micro-batch)."""
    tokens = np.bincount(units, weights=lengths, minlength=end).astype(np.int64)
    counts = np.bincount(units, minlength=end)
    avg = int(tokens[first:end].sum()) // (end - first)
    by_batch = np.argsort(batch_ids, kind="stable")  # sorted-sample index of each batch position
    for i in range(first + 1, end):
        if tokens[i] > avg:
            continue
        for j in range(first, i):
            for k in by_batch.tolist():
                if not (tokens[i] < avg and tokens[j] > avg and counts[j] > 1):
                    break
                if units[k] == j and tokens[i] + lengths[k] <= capacity:
                    units[k] = i
                    tokens[i] += lengths[k]
                    tokens[j] -= lengths[k]
                    counts[i] += 1
                    counts[j] -= 1
