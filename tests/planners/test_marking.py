"""The compiled recompute marking (nspsim.planners.marking) equals the executor's numpy form
(nspsim.execution.recompute.saved_samples) on random placements of real workloads - which samples
keep their attention and the free bytes left, bit for bit; the compiled recompute seconds per GPU
(marking plus the nodes' recompute sums) equal the numpy path's (executor's marking, per-node loop,
the cost model asked) bit for bit; the kernels' pairwise sum is numpy's; and the recompute-aware
estimate is the same either way."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nspsim.planners.estimate as estimate
import nspsim.planners.marking as marking
from nspsim.execution.recompute import saved_samples
from nspsim.planners.base import make_context
from nspsim.planners.marking import mark_kernel
from nspsim.planners.proxy import CostTable
from nspsim.workload import Workload, WorkloadConfig, build_workload
from planner_fixtures import batch_of

WORKLOADS = {
    "235b-ep8": WorkloadConfig(model="qwen3-235b-a22b", cluster="h200", training="paper-235b", gpus=32),
    "30b-16gpu": WorkloadConfig(gpus=16, tokens_per_batch=1 << 20),
}
BUILT: dict[str, Workload] = {}


def _workload(name: str) -> Workload:
    if name not in BUILT:
        BUILT[name] = build_workload(WORKLOADS[name])
    return BUILT[name]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(WORKLOADS)), st.integers(0, 2**32 - 1), st.integers(1, 200), st.floats(0.0, 1.5))
def test_compiled_marking_equals_the_executors(name: str, seed: int, count: int, squeeze: float) -> None:
    wl = _workload(name)
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, wl.tree.spmax * wl.token_budget // 4, size=count).tolist()
    ctx = make_context(batch_of(lengths), wl)
    select = np.arange(count, dtype=np.int64)
    fits = ctx.table.min_degree(wl.tree.degrees)
    degrees = np.array([rng.choice([d for d in wl.tree.degrees if d >= f]) for f in fits.tolist()], dtype=np.int64)
    firsts = np.array([d * rng.integers(0, wl.tree.num_gpus // d) for d in degrees.tolist()], dtype=np.int64)
    sorted_lengths = ctx.table.lengths.astype(np.float64)
    free = wl.memory.activation_capacity * squeeze * rng.uniform(0.5, 1.0, size=wl.tree.num_gpus)
    left_ref, left = free.copy(), free.copy()
    expected = saved_samples(sorted_lengths, degrees, firsts, left_ref, wl.memory, wl.cost)
    got = estimate._saved(ctx.table, wl.memory, select, sorted_lengths, degrees, firsts, left)
    assert np.array_equal(got, expected)
    assert np.array_equal(left, left_ref)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_the_estimate_is_the_same_with_either_marking(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    wl = _workload(name)
    batch = wl.sampler.batch(0)
    ctx = make_context(batch, wl)
    rng = np.random.default_rng(1)
    select = np.arange(ctx.table.num_samples, dtype=np.int64)
    fits = ctx.table.min_degree(wl.tree.degrees)
    for _ in range(20):
        degrees = np.array([rng.choice([d for d in wl.tree.degrees if d >= f]) for f in fits.tolist()], dtype=np.int64)
        firsts = np.array([d * rng.integers(0, wl.tree.num_gpus // d) for d in degrees.tolist()], dtype=np.int64)
        fast = estimate.recompute_aware_step(ctx, select, degrees, firsts)
        with monkeypatch.context() as m:
            _all_numpy(m, wl)
            assert estimate.recompute_aware_step(ctx, select, degrees, firsts) == fast


def _all_numpy(m: pytest.MonkeyPatch, wl: Workload) -> None:
    """The estimate's reference path: the executor's marking, the per-node loop, the cost model asked."""
    m.setattr(estimate, "_remat_compiled", lambda *_: None)
    m.setattr(estimate, "_saved", lambda t, mem, s, ln, dg, fs, fr: saved_samples(ln, dg, fs, fr, mem, wl.cost))
    m.setattr(CostTable, "_recompute_pass", _asked)


def _asked(table: CostTable, lengths: np.ndarray, degree: int) -> float:
    redo = table._cost.recompute_attention(lengths, degree)
    return table._cost.num_layers * (redo.prologue + redo.compute)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(WORKLOADS)), st.integers(0, 2**32 - 1), st.integers(1, 200), st.floats(0.0, 1.5))
def test_compiled_recompute_equals_the_numpy_path(name: str, seed: int, count: int, squeeze: float) -> None:
    wl = _workload(name)
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, wl.tree.spmax * wl.token_budget // 4, size=count).tolist()
    ctx = make_context(batch_of(lengths), wl)
    select = np.sort(rng.choice(count, size=rng.integers(1, count + 1), replace=False)).astype(np.int64)
    fits = ctx.table.min_degree(wl.tree.degrees)[select]
    degrees = np.array([rng.choice([d for d in wl.tree.degrees if d >= f]) for f in fits.tolist()], dtype=np.int64)
    firsts = np.array([d * rng.integers(0, wl.tree.num_gpus // d) for d in degrees.tolist()], dtype=np.int64)
    tokens = (
        wl.memory.activation_capacity / wl.memory.base_bytes(1.0) * squeeze * rng.uniform(0.5, 1.0, wl.tree.num_gpus)
    )
    fast = estimate.remat_per_gpu(ctx, select, degrees, firsts, tokens)
    with pytest.MonkeyPatch.context() as m:
        _all_numpy(m, wl)
        assert np.array_equal(estimate.remat_per_gpu(ctx, select, degrees, firsts, tokens), fast)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 700))
def test_the_pairwise_sum_is_numpys(seed: int, size: int) -> None:
    values = np.random.default_rng(seed).lognormal(0.0, 3.0, size=size + 3)
    scratch = np.empty(64, dtype=np.int64), np.empty(64, dtype=np.int64), np.empty(64, dtype=np.int64), np.empty(64)
    mark_kernel()  # binds the compiled form
    for form in (marking._pairwise_sum_py, marking._pairwise_sum):
        assert form(values, size, *scratch) == float(values[:size].sum())


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 400), st.sampled_from([1, 7, 64, 5000, 10**6]))
def test_the_stable_order_is_numpys(seed: int, size: int, bound: int) -> None:
    key = np.random.default_rng(seed).integers(0, bound, size=size).astype(np.int64)
    mark_kernel()  # binds the compiled form
    for form in (marking._stable_order_py, marking._stable_order):
        assert np.array_equal(form(key, bound), np.argsort(key, kind="stable"))
