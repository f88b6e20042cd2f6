"""Compiled kernels of the planners' hottest loop (numba): the item-by-item form of the greedy
least-loaded rule whose vectorised numpy form (:func:`nspsim.planners.packing.least_loaded_fill_rounds`)
stays as the reference the tests compare against (``tests/planners/test_compiled.py``: equal units,
loads and tokens, bit for bit, on random inputs with ties, surcharges and full units).

The fill: each item, in order, to the least-loaded unit whose tokens stay within the
limit (ties: the lower index), else to the unit with the fewest tokens; the unit pays its surcharge
on its first item; every sum is formed in the numpy form's order (load + cost, then + surcharge), so
the floats agree exactly. The numpy form places items in rounds of numpy calls, which wins on
thousands of units and loses on the dozens of the NSP tail and Static SP's head: profiled, 42% of a
memory-bound Qwen3-235B batch's planning time went to 47 rounds per call, a few items each. NSP's
tail fills every level of all its states in one call (:func:`fill_states_kernel`). (A tournament tree
over the units was tried for the fill and dropped: under NSP's tight routing budget the least-loaded
units are mostly full, so it fell back to the scan and measured no faster.)

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


_fill: Callable[..., None] = _fill_sequential
"""The greedy fill :func:`_fill_states` calls: the plain function until :func:`fill_states_kernel` binds
the compiled one (numba resolves the global when it compiles the kernel)."""


def _fill_states(
    loads: FloatArray,
    tokens: FloatArray,
    active: npt.NDArray[np.bool_],
    offset: int,
    d: int,
    cost: FloatArray,
    item_tokens: FloatArray,
    limit: float,
    latency: float,
    blocks: IntArray,
) -> None:
    """Per state (rows of ``loads``/``tokens``/``active``/``blocks``): the units of degree ``d`` (max
    over their GPUs), a surcharge of ``latency`` on units whose node (``offset`` + unit) is inactive,
    the greedy fill of the items (``limit``: the budget with its tolerance) into ``blocks``, each
    unit's increment added to its GPUs and its node marked active, in place
    (:mod:`nspsim.planners.nsp.tail`; the same steps as its numpy ``_fill_level_reference``)."""
    units = loads.shape[1] // d
    unit_loads, unit_tokens = np.empty(units), np.empty(units)
    load, tok, surcharge = np.empty(units), np.empty(units), np.empty(units)
    for s in range(loads.shape[0]):
        for u in range(units):
            unit_loads[u] = loads[s, u * d : (u + 1) * d].max()
            unit_tokens[u] = tokens[s, u * d : (u + 1) * d].max()
            surcharge[u] = 0.0 if active[s, offset + u] else latency
        load[:] = unit_loads
        tok[:] = unit_tokens
        _fill(load, tok, cost, item_tokens, limit, surcharge, blocks[s])
        for u in range(units):
            grow_load, grow_tok = load[u] - unit_loads[u], tok[u] - unit_tokens[u]
            for p in range(u * d, (u + 1) * d):
                loads[s, p] += grow_load
                tokens[s, p] += grow_tok
        for i in range(blocks.shape[1]):
            active[s, offset + blocks[s, i]] = True


@cache
def fill_states_kernel() -> Callable[..., None]:
    """:func:`_fill_states` compiled (built on first use, cached on disk as :func:`fill_kernel`), calling
    the compiled fill. It lives in this file with the fill so that numba's disk cache, which is keyed on
    the source file, is renewed when either changes."""
    global _fill  # noqa: PLW0603 - numba resolves the kernel's global at compile time
    from numba import njit

    _fill = fill_kernel()
    try:
        kernel: Callable[..., None] = njit(cache=True, nogil=True)(_fill_states)
    except RuntimeError:
        kernel = njit(nogil=True)(_fill_states)
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
