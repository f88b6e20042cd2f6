"""Compiled kernels of the planners' hottest loop (numba): the item-by-item form of the greedy
least-loaded rule whose vectorised numpy form (:func:`nspsim.planners.packing.least_loaded_fill_rounds`)
stays as the reference the tests compare against (``tests/planners/test_compiled.py``: equal units,
loads and tokens, bit for bit, on random inputs with ties, surcharges and full units).

The fill: each item, in order, to the least-loaded unit whose tokens stay within the
limit (ties: the lower index), else to the unit with the fewest tokens; the unit pays its surcharge
on its first item; every sum is formed in the numpy form's order (load + cost, then + surcharge), so
the floats agree exactly. The numpy form places items in rounds of numpy calls, which wins on
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


def _fill_sequential(
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
    for i in range(cost.size):
        best = -1
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


@cache
def fill_kernel() -> Callable[..., None]:
    """The compiled fill, built on first use (numba is imported then, so commands that never plan do
    not pay for it) and cached on disk by numba across processes; without a writable cache folder (a
    read-only install and ``NUMBA_CACHE_DIR`` unusable, where numba refuses ``cache=True``) it is
    compiled per process."""
    from numba import njit

    try:
        kernel: Callable[..., None] = njit(cache=True, nogil=True)(_fill_sequential)
    except RuntimeError:
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
