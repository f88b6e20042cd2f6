"""The routing proxy's per-GPU stage times (:meth:`nspsim.planners.proxy.CostTable.evaluate`) compiled.

The rule (the numpy form's, :meth:`~nspsim.planners.proxy.CostTable.evaluate_reference`, unchanged):
for each degree present among the selected samples, smallest first, every block of the degree sums
its samples' forward and backward costs and sharded tokens in sample order, adds the node latency
if it holds a sample, and adds the sums to each of its GPUs; then every GPU holding tokens adds the
non-attention intercept. Profiled, the numpy form was ~17% of a memory-bound Qwen3-235B batch's
planning (~100 calls per batch, each ~25 numpy calls over the present degrees); here a call is one
kernel call.

Exactness: every sum is formed in the numpy form's order (``bincount`` adds weights in sample order
from 0.0; then ``+ active * latency``, then the running per-GPU sum; ``+ held * intercept`` last,
multiplying by 1.0 or 0.0 as numpy does), the per-sample costs are the same table rows, and
``length / degree`` is the same IEEE division; ``tests/planners/test_proxy_kernel.py`` checks the
stage times and tokens bit for bit on random placements. Trade-off: a second implementation of the
proxy that the tests hold to the first, for a call that no longer costs more than the search around it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def _evaluate(  # noqa: PLR0913 - one kernel for numba
    degrees: IntArray,
    firsts: IntArray,
    sel: BoolArray,
    lengths: IntArray,
    row_of: IntArray,
    level_degrees: IntArray,
    fwd: FloatArray,
    bwd: FloatArray,
    overhead: FloatArray,
    intercept: FloatArray,
    d_fwd: FloatArray,
    d_bwd: FloatArray,
    tokens: FloatArray,
) -> bool:
    """Fill ``d_fwd``, ``d_bwd``, ``tokens`` (zeros on entry; module doc). Row r of ``fwd``/``bwd``
    (levels x samples) and ``overhead`` (levels x 2) belongs to ``level_degrees[r]`` (ascending);
    ``row_of[d]`` is the row of degree d (-1: none); ``intercept`` is (fwd, bwd). ``False``, with the
    outputs undefined, when a selected sample's degree has no row or its block is outside the GPUs
    (the caller then runs the numpy form, which raises or handles it)."""
    n, gpus = degrees.size, d_fwd.size
    present = np.zeros(level_degrees.size, dtype=np.bool_)
    for j in range(n):
        if sel[j]:
            d = degrees[j]
            if d < 1 or d >= row_of.size or row_of[d] < 0 or firsts[j] < 0 or firsts[j] // d >= gpus // d:
                return False
            present[row_of[d]] = True
    sf, sb, st = np.empty(gpus), np.empty(gpus), np.empty(gpus)
    active = np.empty(gpus, dtype=np.bool_)
    for r in range(level_degrees.size):
        if not present[r]:
            continue
        d = level_degrees[r]
        nb = gpus // d
        sf[:nb] = 0.0
        sb[:nb] = 0.0
        st[:nb] = 0.0
        active[:nb] = False
        for j in range(n):
            if sel[j] and degrees[j] == d:
                b = firsts[j] // d
                sf[b] += fwd[r, j]
                sb[b] += bwd[r, j]
                st[b] += lengths[j] / d
                active[b] = True
        for b in range(nb):
            on = 1.0 if active[b] else 0.0
            vf = sf[b] + on * overhead[r, 0]
            vb = sb[b] + on * overhead[r, 1]
            for p in range(b * d, (b + 1) * d):
                d_fwd[p] += vf
                d_bwd[p] += vb
                tokens[p] += st[b]
    for p in range(gpus):
        held = 1.0 if tokens[p] > 0 else 0.0
        d_fwd[p] = d_fwd[p] + held * intercept[0]
        d_bwd[p] = d_bwd[p] + held * intercept[1]
    return True


@cache
def evaluate_kernel() -> Callable[..., bool]:
    """The compiled evaluation, built on first use and cached on disk (as
    :func:`nspsim.planners.compiled.fill_kernel`)."""
    from numba import njit

    try:
        kernel: Callable[..., bool] = njit(cache=True, nogil=True)(_evaluate)
    except RuntimeError:
        kernel = njit(nogil=True)(_evaluate)
    return kernel
