"""NSP's compiled tail level fill (nspsim.planners.nsp.tail._fill_level, one kernel call per level for
all states) equals its numpy form (_fill_level_reference) bit for bit - blocks, per-GPU loads and
tokens, active nodes - on random states, tail items and levels (budget-tight cases included), and
the whole completion is the same either way."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nspsim.planners.nsp.tail as tail
from nspsim.planners.nsp.beam import node_layout
from nspsim.planners.nsp.tail import TreeStates
from nspsim.planners.proxy import CostTable
from nspsim.workload import Workload, WorkloadConfig, build_workload

WORKLOADS = {
    "235b-32gpu": WorkloadConfig(model="qwen3-235b-a22b", cluster="h200", training="paper-235b", gpus=32),
    "30b-16gpu": WorkloadConfig(gpus=16, tokens_per_batch=1 << 20),
}
BUILT: dict[str, Workload] = {}


def _workload(name: str) -> Workload:
    if name not in BUILT:
        BUILT[name] = build_workload(WORKLOADS[name])
    return BUILT[name]


def _states(wl: Workload, table: CostTable, rng: np.random.Generator, count: int, fill: float) -> TreeStates:
    layout = node_layout(wl.tree.num_gpus, tuple(sorted(wl.tree.degrees, reverse=True)))
    gpus = wl.tree.num_gpus
    loads = rng.uniform(0.0, 1.0, (count, gpus)) * float(table.total(1).max()) * rng.integers(0, 2, (count, gpus))
    tokens = rng.uniform(0.0, fill, (count, gpus)) * table.token_budget
    return TreeStates(loads, tokens, rng.random((count, layout.size)) < 0.3, layout)


def _copy(states: TreeStates) -> TreeStates:
    return TreeStates(states.loads.copy(), states.tokens.copy(), states.active.copy(), states.layout)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(WORKLOADS)), st.integers(0, 2**32 - 1), st.integers(1, 400), st.integers(1, 4))
def test_compiled_level_fill_equals_numpy(name: str, seed: int, count: int, beams: int) -> None:
    wl = _workload(name)
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, wl.token_budget, size=count)
    table = CostTable(wl.cost, wl.tree, lengths, wl.token_budget)
    states = _states(wl, table, rng, beams, float(rng.uniform(0.0, 1.2)))
    start = int(rng.integers(0, count))
    items = np.arange(start, count, dtype=np.int64)
    for d in sorted(wl.tree.degrees):
        fast, slow = _copy(states), _copy(states)
        got = tail._fill_level(fast, table, items, d)
        expected = tail._fill_level_reference(slow, table, items, d)
        assert np.array_equal(got, expected)
        for field in ("loads", "tokens", "active"):
            assert np.array_equal(getattr(fast, field), getattr(slow, field)), field


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_the_completion_is_the_same_either_way(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    wl = _workload(name)
    rng = np.random.default_rng(3)
    lengths = np.concatenate([rng.integers(wl.token_budget, 4 * wl.token_budget, 6), rng.integers(1, 9000, 300)])
    table = CostTable(wl.cost, wl.tree, lengths, wl.token_budget)
    states = _states(wl, table, rng, 3, 0.5)
    items = np.arange(table.num_samples, dtype=np.int64)
    fast, slow = _copy(states), _copy(states)
    got = tail.complete(fast, table, items)
    monkeypatch.setattr(tail, "_fill_level", tail._fill_level_reference)
    expected = tail.complete(slow, table, items)
    assert all(np.array_equal(a, b) for a, b in zip(got, expected))
    assert np.array_equal(fast.loads, slow.loads) and np.array_equal(fast.tokens, slow.tokens)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 10**6), max_size=50),
    st.integers(1, 5000),
    st.sets(st.sampled_from([1, 2, 4, 8, 16, 32, 64]), min_size=1),
)
def test_effective_degrees_are_the_smallest_level_that_holds(lengths: list[int], budget: int, levels: set[int]) -> None:
    got = tail.effective_degrees(np.array(lengths, dtype=np.int64), budget, tuple(levels))
    expected = [min((d for d in levels if length <= d * budget), default=max(levels)) for length in lengths]
    assert got.tolist() == expected
