"""The compiled proxy evaluation (nspsim.planners.proxy_kernel, CostTable.evaluate) equals the numpy
form (CostTable.evaluate_reference) bit for bit - forward and backward stage times and tokens per
GPU - on random placements, masks, both proxies and three workloads (Ulysses with EP, Ring, a
CPU tiny model), and falls back to the numpy form for degrees outside the tree."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nspsim.planners.proxy import CostTable, ProxyLoad
from nspsim.specs.backend import SPBackend
from nspsim.workload import Workload, WorkloadConfig, build_workload

WORKLOADS = {
    "235b-ep8": WorkloadConfig(model="qwen3-235b-a22b", cluster="h200", training="paper-235b", gpus=32),
    "30b-ring": WorkloadConfig(gpus=16, tokens_per_batch=1 << 20, backend=SPBackend.RING),
    "tiny-8gpu": WorkloadConfig(
        model="tiny", cluster="cpu", gpus=8, tokens_per_batch=1 << 16, max_context=1 << 14, token_budget=6000
    ),
}
BUILT: dict[str, Workload] = {}


def _workload(name: str) -> Workload:
    if name not in BUILT:
        BUILT[name] = build_workload(WORKLOADS[name])
    return BUILT[name]


def _same(got: ProxyLoad, expected: ProxyLoad) -> None:
    for field in ("d_fwd", "d_bwd", "tokens"):
        assert np.array_equal(getattr(got, field), getattr(expected, field)), field


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(sorted(WORKLOADS)),
    st.sampled_from(["full", "attn-fwd"]),
    st.integers(0, 2**32 - 1),
    st.integers(1, 300),
    st.floats(0.0, 1.0),
)
def test_compiled_evaluation_equals_numpy(name: str, kind: str, seed: int, count: int, keep: float) -> None:
    wl = _workload(name)
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, wl.tree.spmax * wl.token_budget, size=count)
    table = CostTable(wl.cost, wl.tree, lengths, wl.token_budget, kind=kind)
    levels = list(wl.tree.degrees)
    degrees = rng.choice(levels, size=count).astype(np.int64)
    firsts = (degrees * rng.integers(0, wl.tree.num_gpus // degrees)).astype(np.int64)
    mask = rng.random(count) < keep
    _same(table.evaluate(degrees, firsts, mask), table.evaluate_reference(degrees, firsts, mask))
    _same(table.evaluate(degrees, firsts), table.evaluate_reference(degrees, firsts))
    budget = table.with_budget(wl.token_budget // 2)  # copies share the kernel tables
    _same(budget.evaluate(degrees, firsts, mask), table.evaluate_reference(degrees, firsts, mask))


def test_a_degree_outside_the_tree_takes_the_numpy_form() -> None:
    wl = _workload("tiny-8gpu")
    table = CostTable(wl.cost, wl.tree, [5000, 3000, 100], wl.token_budget)
    assert 3 not in wl.tree.degrees
    degrees = np.array([1, 1, 1], dtype=np.int64)
    firsts = np.array([0, 1, 2], dtype=np.int64)
    _same(table.evaluate(degrees, firsts), table.evaluate_reference(degrees, firsts))
    three = np.array([3, 1, 1], dtype=np.int64)  # not a tree degree: the kernel declines, numpy decides
    with pytest.raises(ValueError):
        table.evaluate_reference(three, np.array([0, 4, 5], dtype=np.int64))
    with pytest.raises(ValueError):
        table.evaluate(three, np.array([0, 4, 5], dtype=np.int64))
