"""FlexSP pieces: DP bucketing, sequence blaster, the MILP against brute force, the planner; BASP."""

from __future__ import annotations

import importlib.util
import itertools

import numpy as np
import pytest

from nspsim.planners import get_planner
from nspsim.planners.basp_planner import batch_aware_degree
from nspsim.planners.base import make_context
from nspsim.planners.bucketing import _dp_bounds, bucketize
from nspsim.planners.flexsp_milp import MilpProblem, solve
from nspsim.planners.microbatch import blaster_split, token_split
from planner_fixtures import batch_of, check_valid, model_workload, tiny_workload


def padding(values: np.ndarray, lengths: np.ndarray, ends: list[int]) -> int:
    maxima = values[ends]
    return int((maxima[np.searchsorted(maxima, lengths)] - lengths).sum())


def test_bucketing_dp_minimises_padding_like_brute_force() -> None:
    rng = np.random.default_rng(0)
    for _ in range(60):
        lengths = rng.integers(1, 80, int(rng.integers(1, 20)))
        values, counts = np.unique(lengths, return_counts=True)
        for buckets in (1, 2, 3, 4):
            got = padding(values, lengths, _dp_bounds(values, counts, buckets))
            best = min(padding(values, lengths, [*c, values.size - 1])
                       for r in range(min(buckets, values.size))
                       for c in itertools.combinations(range(values.size - 1), r))
            assert got == best


def test_bucketing_grows_until_padding_is_small() -> None:
    lengths = np.arange(1, 2001)
    few = bucketize(lengths, buckets=4, max_padding=1.0)
    grown = bucketize(lengths, buckets=4, max_padding=0.05)
    assert few.maxima.size == 4 and grown.maxima.size > 4
    assert grown.padding <= 0.05 * lengths.sum()
    assert np.all(grown.maxima[grown.of_sample] >= lengths)


def test_blaster_split_minimises_the_largest_chunk() -> None:
    rng = np.random.default_rng(1)
    for _ in range(80):
        lengths = np.sort(rng.integers(1, 100, int(rng.integers(1, 11))))[::-1]
        m = int(rng.integers(1, 5))
        parts = blaster_split(lengths, m)
        assert np.array_equal(np.concatenate(parts), np.arange(lengths.size))
        assert len(parts) == min(m, lengths.size)
        worst = max(int(lengths[p].sum()) for p in parts)
        best = min(max(int(lengths[a:b].sum()) for a, b in zip((0, *cuts), (*cuts, lengths.size)))
                   for cuts in itertools.combinations(range(1, lengths.size), min(m, lengths.size) - 1))
        assert worst == best


def test_token_split_balances_tokens_and_keeps_order() -> None:
    lengths = np.array([50, 40, 30, 20, 10, 10, 5])
    parts = token_split(lengths, 3)
    assert [p.tolist() for p in parts] == [[0, 5], [1, 4, 6], [2, 3]]  # LPT, ties to the lower part
    assert sorted(int(lengths[p].sum()) for p in parts) == [50, 55, 60]


def tiny_problem(counts: list[int], lengths: list[int]) -> MilpProblem:
    t = {2: np.array([3.0 * x for x in lengths]), 4: np.array([1.8 * x for x in lengths])}
    return MilpProblem(counts=np.array(counts), lengths=np.array(lengths), time=t, latency={2: 0.5, 4: 0.7},
                       sizes=(2, 4), num_gpus=4, token_budget=1e9)


def brute_force_makespan(p: MilpProblem) -> float:
    items = np.repeat(np.arange(p.counts.size), p.counts)
    best = np.inf
    for groups in ([4], [2, 2], [2]):
        for assign in itertools.product(range(len(groups)), repeat=items.size):
            loads = [0.0] * len(groups)
            for item, g in zip(items, assign):
                loads[g] += p.time[groups[g]][item]
            used = {g for g in assign}
            best = min(best, max(loads[g] + p.latency[groups[g]] for g in used))
    return float(best)


@pytest.mark.parametrize("counts,lengths", [([2, 1], [1, 5]), ([3, 2], [2, 3]), ([1, 1, 2], [1, 4, 6])])
def test_milp_matches_brute_force_on_four_gpus(counts: list[int], lengths: list[int]) -> None:
    p = tiny_problem(counts, lengths)
    sol = solve(p, time_limit=10)
    assert sol is not None and sol.status == "optimal"
    assert sol.makespan == pytest.approx(brute_force_makespan(p), rel=1e-6)
    assert sol.assignment.sum(axis=0).tolist() == counts
    assert int(sol.slot_sizes.sum()) <= 4


@pytest.mark.skipif(importlib.util.find_spec("pyscipopt") is None, reason="PySCIPOpt not installed (extra 'scip')")
def test_scip_solver_agrees_with_highs() -> None:
    p = tiny_problem([3, 2], [2, 3])
    highs, scip = solve(p, solver="highs"), solve(p, solver="scip")
    assert highs is not None and scip is not None
    assert scip.makespan == pytest.approx(highs.makespan, rel=1e-6)


def test_scip_request_without_pyscipopt_is_a_clear_error() -> None:
    if importlib.util.find_spec("pyscipopt") is not None:
        pytest.skip("PySCIPOpt is installed")
    with pytest.raises(ValueError, match="needs PySCIPOpt"):
        solve(tiny_problem([1], [1]), solver="scip")


def test_flexsp_plan_is_disjoint_with_groups_of_two_or_more_and_records_the_solver() -> None:
    wl = model_workload(gpus=8, token_budget=32_768)
    lengths = [90_000, 40_000, 12_000, 9_000, 5_000, 3_000, 2_000, 900, 700, 300, 100, 50]
    plan = get_planner("flexsp", time_limit=5.0).plan(batch_of(lengths), wl)
    check_valid(plan, wl, lengths)
    assert plan.is_disjoint() and min(n.degree for n in plan.nodes) >= 2
    meta = plan.metadata
    assert meta["solver"] == "highs" and float(meta["milp_solve_time_s"]) >= 0
    assert "milp_status" in meta and 1 <= plan.num_micro_batches <= 5


def test_flexsp_options_are_validated() -> None:
    with pytest.raises(ValueError, match="time_limit"):
        get_planner("flexsp", time_limit=0)
    with pytest.raises(ValueError, match="solver"):
        get_planner("flexsp", solver="gurobi")
    with pytest.raises(ValueError, match="min_group"):
        get_planner("flexsp", min_group=3)


def test_basp_degree_follows_the_micro_batch_size() -> None:
    wl = tiny_workload(gpus=8, token_budget=1000)
    ctx = make_context(batch_of([900, 800, 700, 10, 10, 10, 10, 10, 10, 10]), wl)
    assert batch_aware_degree(ctx, np.arange(2)) == 4   # 2 sequences: 8 / 2 GPUs each
    assert batch_aware_degree(ctx, np.arange(3)) == 2   # 3 sequences: largest power of two <= 8/3
    assert batch_aware_degree(ctx, np.arange(10)) == 1  # more sequences than GPUs
    ctx2 = make_context(batch_of([3500] + [10] * 20), wl)
    assert batch_aware_degree(ctx2, np.arange(21)) == 4  # memory: 3500 tokens need 4 GPUs of 1000
