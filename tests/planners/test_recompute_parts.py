"""The routing table's recompute pass from the cost model's per-sample parts
(:meth:`CostTable.recompute_pass`, :meth:`CostTable.recompute_singles`) equals the cost model's own
``recompute_attention`` bit for bit: on random nodes of the batch's lengths at every degree (both
dtypes the planners pass), for one sample alone, for lengths outside the batch (the cost model
asked), under Ring (no parts: the cost model asked) and for a cost model without parts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nspsim.planners.proxy import CostTable
from nspsim.specs.backend import SPBackend
from nspsim.workload import Workload, WorkloadConfig, build_workload
from sim_helpers import StubCost

WORKLOADS = {
    "235b-ulysses": WorkloadConfig(model="qwen3-235b-a22b", cluster="h200", training="paper-235b", gpus=32),
    "30b-ulysses": WorkloadConfig(gpus=16, tokens_per_batch=1 << 20),
    "30b-ring": WorkloadConfig(gpus=16, tokens_per_batch=1 << 20, backend=SPBackend.RING),
}
BUILT: dict[str, Workload] = {}


def _workload(name: str) -> Workload:
    if name not in BUILT:
        BUILT[name] = build_workload(WORKLOADS[name])
    return BUILT[name]


def _asked(table: CostTable, lengths: np.ndarray, degree: int) -> float:
    """What the cost model says (the reference)."""
    redo = table._cost.recompute_attention(lengths, degree)
    return table._cost.num_layers * (redo.prologue + redo.compute)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(WORKLOADS)), st.integers(0, 2**32 - 1), st.integers(1, 300), st.integers(1, 40))
def test_recompute_pass_equals_the_cost_model(name: str, seed: int, count: int, node: int) -> None:
    wl = _workload(name)
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 4 * wl.token_budget, size=count)
    table = CostTable(wl.cost, wl.tree, lengths, wl.token_budget)
    for d in wl.tree.degrees:
        members = np.sort(rng.choice(count, size=min(node, count), replace=False))
        for dtype in (np.int64, np.float64):
            held = table.lengths[members].astype(dtype)
            assert table.recompute_pass(held, d) == _asked(table, held, d)
        foreign = np.array([int(table.lengths.max()) + 1, 7], dtype=np.int64)  # not all the batch's
        assert table.recompute_pass(foreign, d) == _asked(table, foreign, d)
        singles = table.recompute_singles(d)
        for i in rng.choice(count, size=min(count, 8), replace=False).tolist():
            assert singles[i] == _asked(table, table.lengths[i : i + 1], d)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_parts_exist_where_the_backend_is_additive(name: str) -> None:
    wl = _workload(name)
    table = CostTable(wl.cost, wl.tree, [4096, 1024], wl.token_budget)
    top = max(wl.tree.degrees)
    assert (table._parts(top) is None) == (wl.training.backend is SPBackend.RING)
    assert table._parts(1) is not None  # degree 1 is local under every backend


def test_a_cost_model_without_parts_is_asked() -> None:
    wl = _workload("30b-ulysses")
    stub = StubCost(layers=3, lat=1e-4, pro=1e-9, epi=1e-9, comp=1e-12)
    table = CostTable(stub, wl.tree, [900, 400, 400, 30], 1 << 14)
    assert table._parts(4) is None
    held = table.lengths[1:3]
    assert table.recompute_pass(held, 4) == _asked(table, held, 4)
    assert table.recompute_singles(4).tolist() == [_asked(table, table.lengths[i : i + 1], 4) for i in range(4)]
