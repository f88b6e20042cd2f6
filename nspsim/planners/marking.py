"""The executor's top-down recompute marking (:func:`nspsim.execution.recompute.saved_samples`) compiled
for the planners' recompute-aware estimate (:func:`nspsim.planners.estimate.remat_per_gpu`).

The rule (the executor's, unchanged): nodes from the roots down (larger degree first, then by first
rank; a node's samples in their input order); a node keeps all its samples' attention if their bytes
per rank fit the least free bytes among its ranks, else its samples in decreasing order of forward
attention time per byte (stable) while each fits; the kept bytes leave every rank of the node.
Profiled, the numpy form of the marking was 37% of a memory-bound Qwen3-235B batch's planning (about
50 markings per batch, each a Python loop of numpy calls over ~35 nodes); here a marking is one
kernel call.

Exactness: the per-sample inputs are the ones the executor's form computes (bytes per token and
forward attention time at the sample's node degree; the forward times come from
:meth:`CostTable.attention_fwd`, the cost model's per-sample costs over the batch's distinct lengths,
which are element-wise); a node's byte total is numpy's pairwise summation, replayed; length sums are
of integers and exact in any order. ``tests/planners/test_marking.py`` checks the kernel against
``saved_samples`` on random nodes and on the routes NSP builds. Trade-off: a second implementation
of the marking that the tests hold to the first.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def _pairwise_sum_py(
    values: FloatArray, m: int, stack_lo: IntArray, stack_n: IntArray, stack_phase: IntArray, sums: FloatArray
) -> float:
    """numpy's pairwise sum of ``values[:m]`` (``values[:m].sum()``, the same float): blocks under 8
    summed in order from -0.0, up to 128 in eight interleaved partial sums, larger ones halved at a
    multiple of 8; the stacks (64 entries) are scratch."""
    depth, nv = 1, 0
    stack_lo[0], stack_n[0], stack_phase[0] = 0, m, 0
    while depth > 0:
        depth -= 1
        lo, cnt, phase = stack_lo[depth], stack_n[depth], stack_phase[depth]
        if phase == 1:
            sums[nv - 2] = sums[nv - 2] + sums[nv - 1]
            nv -= 1
        elif cnt < 8:
            acc = -0.0
            for q in range(cnt):
                acc += values[lo + q]
            sums[nv] = acc
            nv += 1
        elif cnt <= 128:
            r = values[lo : lo + 8].copy()
            q = 8
            while q < cnt - (cnt % 8):
                for t in range(8):
                    r[t] += values[lo + q + t]
                q += 8
            acc = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
            while q < cnt:
                acc += values[lo + q]
                q += 1
            sums[nv] = acc
            nv += 1
        else:
            half = cnt // 2
            half -= half % 8
            stack_lo[depth], stack_n[depth], stack_phase[depth] = lo, cnt, 1
            stack_lo[depth + 1], stack_n[depth + 1], stack_phase[depth + 1] = lo + half, cnt - half, 0
            stack_lo[depth + 2], stack_n[depth + 2], stack_phase[depth + 2] = lo, half, 0
            depth += 3
    return float(sums[0])


def _stable_order_py(key: IntArray, bound: int) -> IntArray:
    """``np.argsort(key, kind="stable")`` of keys in [0, ``bound``): a counting sort when the bound is
    small next to the keys (the same permutation: equal keys keep their order), else the merge sort."""
    n = key.size
    if bound > 8 * n + 4096:
        return np.argsort(key, kind="mergesort")
    start = np.zeros(bound + 1, dtype=np.int64)
    for j in range(n):
        start[key[j] + 1] += 1
    for k in range(bound):
        start[k + 1] += start[k]
    order = np.empty(n, dtype=np.int64)
    for j in range(n):
        order[start[key[j]]] = j
        start[key[j]] += 1
    return order


_pairwise_sum: Callable[..., float] = _pairwise_sum_py
_stable_order: Callable[..., IntArray] = _stable_order_py
"""What the kernels call: the plain functions until :func:`mark_kernel` binds their compiled forms
(numba resolves the globals when it compiles a kernel)."""


def _mark(  # noqa: C901, PLR0912 - one kernel for numba
    lengths: FloatArray,
    degrees: IntArray,
    firsts: IntArray,
    free: FloatArray,
    unit_bytes: FloatArray,
    per_token: FloatArray,
    fwd: FloatArray,
    saved: BoolArray,
) -> None:
    """Mark ``saved`` (module doc); ``free`` is consumed in place; ``unit_bytes``/``per_token``/``fwd``
    are per sample at its node's degree."""
    n = lengths.size
    top = 0
    for j in range(n):
        top = max(top, degrees[j])
    key = (top - degrees) * (free.size + 1) + firsts
    order = _stable_order(key, top * (free.size + 1))
    sample_bytes = np.empty(n)
    value = np.empty(n)
    stack_lo = np.empty(64, dtype=np.int64)
    stack_n = np.empty(64, dtype=np.int64)
    stack_phase = np.empty(64, dtype=np.int64)
    sums = np.empty(64)
    a = 0
    while a < n:
        b = a + 1
        while b < n and key[order[b]] == key[order[a]]:
            b += 1
        d, f = degrees[order[a]], firsts[order[a]]
        m = b - a
        for q in range(m):
            j = order[a + q]
            sample_bytes[q] = lengths[j] * unit_bytes[j]
        total = _pairwise_sum(sample_bytes, m, stack_lo, stack_n, stack_phase, sums)
        room = free[f]
        for p in range(f + 1, f + d):
            room = min(room, free[p])
        kept_tokens = 0.0
        if total <= room:
            for q in range(m):
                saved[order[a + q]] = True
                kept_tokens += lengths[order[a + q]]
        else:
            for q in range(m):
                value[q] = fwd[order[a + q]] / max(sample_bytes[q], 1e-30)
            rank = np.argsort(-value[:m], kind="mergesort")
            for q in rank:
                if sample_bytes[q] <= room:
                    saved[order[a + q]] = True
                    room -= sample_bytes[q]
                    kept_tokens += lengths[order[a + q]]
        taken = kept_tokens / d * per_token[order[a]]
        for p in range(f, f + d):
            free[p] -= taken
        a = b


def _recompute(
    lost: BoolArray,
    degrees: IntArray,
    firsts: IntArray,
    prologue: FloatArray,
    compute: FloatArray,
    latency: FloatArray,
    layers: float,
    remat: FloatArray,
) -> None:
    """Add to ``remat`` (per GPU) every node's recompute pass of its ``lost`` samples: nodes from the
    roots down (as :func:`~nspsim.execution.recompute.nodes_top_down` on the lost samples), each
    ``layers * ((sum prologue + latency) + sum compute)`` over its lost samples in input order (numpy
    sums, :meth:`~nspsim.planners.proxy.CostTable.recompute_pass`), added to each of its GPUs;
    ``prologue``/``compute``/``latency`` are per sample at its node's degree."""
    idx = np.flatnonzero(lost)
    n = idx.size
    top = 0
    for q in range(n):
        top = max(top, degrees[idx[q]])
    key = (top - degrees[idx]) * (remat.size + 1) + firsts[idx]
    order = _stable_order(key, top * (remat.size + 1))
    pro, comp = np.empty(n), np.empty(n)
    stack_lo = np.empty(64, dtype=np.int64)
    stack_n = np.empty(64, dtype=np.int64)
    stack_phase = np.empty(64, dtype=np.int64)
    sums = np.empty(64)
    a = 0
    while a < n:
        b = a + 1
        while b < n and key[order[b]] == key[order[a]]:
            b += 1
        j = idx[order[a]]
        d, f = degrees[j], firsts[j]
        for q in range(b - a):
            pro[q] = prologue[idx[order[a + q]]]
            comp[q] = compute[idx[order[a + q]]]
        head = _pairwise_sum(pro, b - a, stack_lo, stack_n, stack_phase, sums) + latency[j]
        value = layers * (head + _pairwise_sum(comp, b - a, stack_lo, stack_n, stack_phase, sums))
        for p in range(f, f + d):
            remat[p] += value
        a = b


@cache
def mark_kernel() -> Callable[..., None]:
    """The compiled marking, built on first use and cached on disk (as
    :func:`nspsim.planners.compiled.fill_kernel`); binds the compiled pairwise sum first."""
    return _compiled(_mark)


@cache
def recompute_kernel() -> Callable[..., None]:
    """The compiled recompute sum (:func:`_recompute`), built and cached as :func:`mark_kernel`."""
    return _compiled(_recompute)


def _compiled(function: Callable[..., None]) -> Callable[..., None]:
    global _pairwise_sum, _stable_order  # noqa: PLW0603 - numba resolves the kernels' globals at compile time
    from numba import njit

    try:
        _pairwise_sum = njit(cache=True, nogil=True)(_pairwise_sum_py)
        _stable_order = njit(cache=True, nogil=True)(_stable_order_py)
        kernel: Callable[..., None] = njit(cache=True, nogil=True)(function)
    except RuntimeError:
        _pairwise_sum = njit(nogil=True)(_pairwise_sum_py)
        _stable_order = njit(nogil=True)(_stable_order_py)
        kernel = njit(nogil=True)(function)
    return kernel


def saved_compiled(
    lengths: FloatArray,
    degrees: IntArray,
    firsts: IntArray,
    free: FloatArray,
    unit_bytes: FloatArray,
    per_token: FloatArray,
    fwd: FloatArray,
) -> BoolArray:
    """Which samples keep their attention (``free`` consumed in place): the compiled
    :func:`~nspsim.execution.recompute.saved_samples` of a memory model that keeps attention."""
    saved = np.zeros(lengths.size, dtype=bool)
    if lengths.size:
        c = np.ascontiguousarray
        mark_kernel()(
            c(lengths, dtype=np.float64),
            c(degrees, dtype=np.int64),
            c(firsts, dtype=np.int64),
            free,
            c(unit_bytes, dtype=np.float64),
            c(per_token, dtype=np.float64),
            c(fwd, dtype=np.float64),
            saved,
        )
    return saved
