"""The exhaustive optimal router and NSP's optimality gap on tiny instances (P <= 8, <= 8 samples)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from nspsim.planners import get_planner
from nspsim.planners.lower_bound import lower_bound
from nspsim.planners.nsp.optimal_router import optimal_route
from nspsim.planners.proxy import CostTable
from planner_fixtures import batch_of, model_workload, tiny_workload


def brute_force(table: CostTable) -> float:
    tree = table.tree
    nodes = [(d, f) for d in tree.degrees for f in range(0, tree.num_gpus, d)]
    best = np.inf
    for combo in itertools.product(range(len(nodes)), repeat=table.num_samples):
        degrees = np.array([nodes[u][0] for u in combo])
        firsts = np.array([nodes[u][1] for u in combo])
        loads = table.evaluate(degrees, firsts)
        if loads.tokens.max() <= table.token_budget * (1 + 1e-9):
            best = min(best, loads.load)
    return float(best)


def test_optimal_router_equals_brute_force() -> None:
    rng = np.random.default_rng(0)
    for _ in range(14):
        gpus = int(rng.choice([2, 4]))
        wl = model_workload(gpus=gpus, token_budget=int(rng.choice([8_192, 32_768])))
        lengths = np.exp(rng.uniform(np.log(300), np.log(60_000), int(rng.integers(1, 5)))).astype(int)
        if lengths.max() > wl.tree.spmax * wl.token_budget:
            continue
        table = CostTable(wl.cost, wl.tree, lengths, wl.token_budget)
        got, expect = optimal_route(table), brute_force(table)
        if got is None:  # no one-pass plan keeps the budget
            assert expect == np.inf
            continue
        assert got.load == pytest.approx(expect, rel=1e-12)
        loads = table.evaluate(np.array(got.degrees), np.array(got.firsts))
        assert loads.load == pytest.approx(got.load, rel=1e-12)


def test_optimal_router_refuses_large_instances() -> None:
    wl = tiny_workload(gpus=16, token_budget=1000)
    with pytest.raises(ValueError, match="at most 8 GPUs"):
        optimal_route(CostTable(wl.cost, wl.tree, [10, 20], wl.token_budget))


def instances(count: int, seed: int) -> list[tuple[object, list[int]]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        gpus = int(rng.choice([4, 8]))
        wl = model_workload(gpus=gpus, token_budget=65_536)
        lengths = np.exp(rng.uniform(np.log(512), np.log(96 * 1024), int(rng.integers(3, 9)))).astype(int)
        out.append((wl, lengths.tolist()))
    return out


def test_nsp_optimality_gap_on_tiny_instances() -> None:
    gaps = []
    for wl, lengths in instances(30, seed=7):
        table = CostTable(wl.cost, wl.tree, lengths, wl.token_budget)  # type: ignore[attr-defined]
        batch = batch_of(lengths)
        loads = {
            name: float(get_planner(name).plan(batch, wl).metadata["load_s"])  # type: ignore[arg-type]
            for name in ("nsp", "nsp2l", "greedy", "static")
        }
        best = optimal_route(table)
        assert best is not None
        assert lower_bound(table) <= best.load * (1 + 1e-12)
        for load in loads.values():
            assert best.load <= load * (1 + 1e-12)  # the optimum is no worse than any one-pass plan
        gaps.append(loads["nsp"] / best.load - 1)
    gaps_arr = np.array(gaps)
    # Measured (docs/planners.md): NSP misses the optimum on about 40% of such instances, by < 1%.
    assert gaps_arr.mean() < 0.01 and gaps_arr.max() < 0.05
