"""Compiled kernels of the planners' hottest loop (numba): the item-by-item form of the greedy
least-loaded rule whose vectorised numpy form (:func:`nspsim.planners.packing.least_loaded_fill_rounds`)
stays as the reference the tests compare against (``tests/planners/test_compiled.py``: equal units,
loads and tokens, bit for bit, on random inputs with ties, surcharges and full units).

The fill: each item, in order, to the least-loaded unit whose tokens stay within the
limit (ties: the lower index), else to the unit with the fewest tokens; the unit pays its surcharge
on its first item; every sum is formed in the numpy form's order (load + cost, then + surcharge), so
the floats agree exactly. From :data:`TREE_MIN_UNITS` units on, the least-loaded feasible unit is
found in a tournament tree (each node holds the less-loaded unit of its children, the lower index on
ties, so the root is the first unit in (load, index) order): the root is taken if it keeps the limit,
else masked out and the next root tried, the masked units restored after the item; the same unit
the scan picks, in O(log units) per item instead of O(units) (NSP's tail fills ~800 items onto 64
units per state). The numpy form places items in rounds of numpy calls, which wins on
thousands of units and loses on the dozens of the NSP tail and Static SP's head: profiled, 42% of a
memory-bound Qwen3-235B batch's planning time went to 47 rounds per call, a few items each.

Why numba: it compiles these plain loops over float64 arrays with no C toolchain or build step, its
wheels cover the platforms torch's do, and it is the usual tool for this job in the field; Cython or
a C extension would need a compiler wherever nspsim is installed. Trade-off: a compiled dependency and
a compilation the first time a process calls a kernel (cached on disk after that; :func:`warm` does it
before a planner starts its clock, so no ``planning_time_s`` includes it).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


TREE_MIN_UNITS = 16
"""From this many units the fill finds each item's unit in a tournament tree (module doc) instead of a
scan of every unit: the same unit, in O(log units) per item while the least-loaded units are feasible."""


def _fill_sequential(  # noqa: C901, PLR0912 - one kernel for numba
    load: FloatArray,
    tok: FloatArray,
    cost: FloatArray,
    item_tokens: FloatArray,
    limit: float,
    surcharge: FloatArray,
    out: IntArray,
) -> None:
    """Place every item (module doc), updating ``load``, ``tok`` and ``surcharge`` in place and writing
    each item's unit to ``out``; ``limit`` is the token budget with its tolerance."""
    units = load.size
    size = 1
    while size < units:
        size *= 2
    tree = np.full(2 * size, -1, dtype=np.int64)  # node i: the least-loaded unmasked unit below it (-1: none)
    masked = np.zeros(units, dtype=np.bool_)
    skipped = np.empty(units, dtype=np.int64)
    use_tree = units >= TREE_MIN_UNITS
    if use_tree:
        for u in range(units):
            tree[size + u] = u
        for node in range(size - 1, 0, -1):
            a, b = tree[2 * node], tree[2 * node + 1]
            tree[node] = a if b < 0 or (a >= 0 and load[a] <= load[b]) else b
    for i in range(cost.size):
        best = -1
        if use_tree:
            count = 0
            while tree[1] >= 0:
                u = tree[1]
                if limit - tok[u] >= item_tokens[i]:
                    best = u
                    break
                masked[u] = True  # infeasible for this item: out of the tournament until it is placed
                skipped[count] = u
                count += 1
                _replay(tree, load, masked, size, u)
            for k in range(count):
                masked[skipped[k]] = False
                _replay(tree, load, masked, size, skipped[k])
        else:
            for u in range(units):
                if limit - tok[u] >= item_tokens[i] and (best < 0 or load[u] < load[best]):
                    best = u
        if best < 0:
            best = 0
            for u in range(1, units):
                if tok[u] < tok[best]:
                    best = u
        out[i] = best
        load[best] = load[best] + cost[i] + surcharge[best]
        tok[best] += item_tokens[i]
        surcharge[best] = 0.0
        if use_tree:
            _replay(tree, load, masked, size, best)


def _replay_py(tree: IntArray, load: FloatArray, masked: npt.NDArray[np.bool_], size: int, unit: int) -> None:
    """Replay the tournament on the path from ``unit``'s leaf to the root: each node keeps the
    less-loaded unmasked unit of its two children, the left (lower index) on ties."""
    tree[size + unit] = -1 if masked[unit] else unit
    node = (size + unit) // 2
    while node >= 1:
        a, b = tree[2 * node], tree[2 * node + 1]
        tree[node] = a if b < 0 or (a >= 0 and load[a] <= load[b]) else b
        node //= 2


_replay: Callable[..., None] = _replay_py
"""What the fill calls: the plain function until :func:`fill_kernel` binds the compiled one."""


@cache
def fill_kernel() -> Callable[..., None]:
    """The compiled fill, built on first use (numba is imported then, so commands that never plan do
    not pay for it) and cached on disk by numba across processes; without a writable cache folder (a
    read-only install and ``NUMBA_CACHE_DIR`` unusable, where numba refuses ``cache=True``) it is
    compiled per process."""
    from numba import njit

    global _replay  # noqa: PLW0603 - numba resolves the kernel's global at compile time
    try:
        _replay = njit(cache=True, nogil=True)(_replay_py)
        kernel: Callable[..., None] = njit(cache=True, nogil=True)(_fill_sequential)
    except RuntimeError:
        _replay = njit(nogil=True)(_replay_py)
        kernel = njit(nogil=True)(_fill_sequential)
    return kernel


@cache
def warm() -> None:
    """Compile (or load from the disk cache) the fill, the marking and recompute sums
    (:mod:`nspsim.planners.marking`) and
    the proxy evaluation (:mod:`nspsim.planners.proxy_kernel`) for the types the planners pass, once
    per process (NSP warms its beam search itself,
    :func:`nspsim.planners.nsp.beam_kernel.warm_search`)."""
    from nspsim.planners.marking import recompute_kernel, saved_compiled
    from nspsim.planners.proxy_kernel import evaluate_kernel

    units = np.zeros(2)
    fill_kernel()(units.copy(), units.copy(), np.ones(1), np.ones(1), 1.0, units.copy(), np.zeros(1, dtype=np.int64))
    ints = np.ones(1, dtype=np.int64)
    saved_compiled(np.ones(1), ints, ints - 1, np.ones(2), np.ones(1), np.ones(1), np.ones(1))
    recompute_kernel()(np.ones(1, dtype=bool), ints, ints - 1, np.ones(1), np.ones(1), np.ones(1), 1.0, np.zeros(2))
    table, pair = np.ones((1, 1)), np.ones(2)
    evaluate_kernel()(
        ints, ints - 1, np.ones(1, dtype=bool), ints, ints - 1, ints, table, table, table, pair, pair, pair, pair
    )
