"""FlexSP pieces: DP bucketing, sequence blaster, the MILP against brute force, the planner, determinism."""

from __future__ import annotations

import importlib.util
import itertools

import numpy as np
import pytest

from nspsim.planners import get_planner
from nspsim.planners.base import make_context
from nspsim.planners.flexsp.bucketing import _dp_bounds, bucketize
from nspsim.planners.flexsp.milp import (
    DEFAULT_WORK_LIMIT,
    Limits,
    MilpProblem,
    _bounds,
    _layout,
    _matrix,
    _start_vector,
    solve,
)
from nspsim.planners.flexsp.routing import chunk_problem as _problem
from nspsim.planners.flexsp.routing import static_incumbent
from nspsim.planners.microbatch import blaster_split, token_split
from nspsim.workload import Workload, WorkloadConfig, build_workload
from planner_fixtures import batch_of, check_valid, model_workload


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
            best = min(
                padding(values, lengths, [*c, values.size - 1])
                for r in range(min(buckets, values.size))
                for c in itertools.combinations(range(values.size - 1), r)
            )
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
        best = min(
            max(int(lengths[a:b].sum()) for a, b in zip((0, *cuts), (*cuts, lengths.size)))
            for cuts in itertools.combinations(range(1, lengths.size), min(m, lengths.size) - 1)
        )
        assert worst == best


def test_token_split_balances_tokens_and_keeps_order() -> None:
    lengths = np.array([50, 40, 30, 20, 10, 10, 5])
    parts = token_split(lengths, 3)
    assert [p.tolist() for p in parts] == [[0, 5], [1, 4, 6], [2, 3]]  # LPT, ties to the lower part
    assert sorted(int(lengths[p].sum()) for p in parts) == [50, 55, 60]


def tiny_problem(counts: list[int], lengths: list[int]) -> MilpProblem:
    t = {2: np.array([3.0 * x for x in lengths]), 4: np.array([1.8 * x for x in lengths])}
    return MilpProblem(
        counts=np.array(counts),
        lengths=np.array(lengths),
        time=t,
        latency={2: 0.5, 4: 0.7},
        sizes=(2, 4),
        num_gpus=4,
        token_budget=1e9,
    )


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
    run = solve(p, limits=Limits(time_limit=10, work_limit=10_000))
    sol = run.solution
    assert sol is not None and sol.status == run.status == "optimal"
    assert sol.makespan == pytest.approx(brute_force_makespan(p), rel=1e-6)
    assert sol.assignment.sum(axis=0).tolist() == counts
    assert int(sol.slot_sizes.sum()) <= 4


@pytest.mark.skipif(importlib.util.find_spec("pyscipopt") is None, reason="PySCIPOpt not installed (extra 'scip')")
def test_scip_solver_agrees_with_highs() -> None:
    p = tiny_problem([3, 2], [2, 3])
    highs, scip = solve(p, solver="highs").solution, solve(p, solver="scip").solution
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
    with pytest.raises(ValueError, match="work_limit"):
        get_planner("flexsp", work_limit=0)


def small_trace_workload() -> Workload:
    return build_workload(
        WorkloadConfig(gpus=8, tokens_per_batch=128 * 1024, max_context=64 * 1024, token_budget=64 * 1024)
    )


def test_flexsp_plans_are_reproducible_under_the_default_limits() -> None:
    wl = small_trace_workload()
    batch = wl.sampler.batch(0)  # 169 sequences: the MILP does not finish, the work limit stops it
    first = get_planner("flexsp", max_micro_batches=1).plan(batch, wl)
    again = get_planner("flexsp", max_micro_batches=1, time_limit=100.0).plan(batch, wl)
    for plan in (first, again):
        assert "work-limit" in str(plan.metadata["milp_status"])
        assert plan.metadata["milp_time_limited"] == 0
        assert plan.metadata["milp_work_limit"] == DEFAULT_WORK_LIMIT
    assert first.metadata["milp_time_limit_s"] == 10.0 and again.metadata["milp_time_limit_s"] == 100.0
    assert first.content_hash == again.content_hash


def test_the_time_limit_still_stops_a_solve_and_is_recorded() -> None:
    wl = small_trace_workload()
    plan = get_planner("flexsp", max_micro_batches=1, time_limit=1e-3, work_limit=10**6).plan(wl.sampler.batch(0), wl)
    assert plan.metadata["milp_time_limited"] == 1
    assert "time-limit" in str(plan.metadata["milp_status"])


def test_work_limit_counts_highs_limit_checks() -> None:
    p = tiny_problem([3, 2], [2, 3])
    assert solve(p, limits=Limits(work_limit=1)).status == "work-limit"
    assert solve(p, limits=Limits(work_limit=1)).work == 1
    full = solve(p, limits=Limits(work_limit=10**6))
    assert full.status == "optimal" and 1 < full.work < 10**6


def test_the_incumbent_start_point_is_feasible_for_the_milp() -> None:
    wl = small_trace_workload()
    ctx = make_context(wl.sampler.batch(0), wl)
    buckets = bucketize(ctx.table.lengths, 16)
    problem = _problem(ctx, buckets, (2, 4, 8))
    incumbent = static_incumbent(problem)
    assert incumbent is not None
    p = MilpProblem(
        **{
            **problem.__dict__,
            "upper": incumbent.makespan * (1 + 1e-9),
            "start": (incumbent.slot_sizes, incumbent.assignment),
        }
    )
    lay = _layout(p)
    mat, lo, hi = _matrix(p, lay)
    x = _start_vector(lay, p)
    assert x is not None
    lower, upper, integrality = _bounds(lay, p)
    row = mat @ x
    assert np.all(row >= lo - 1e-9) and np.all(row <= hi + 1e-9)
    assert np.all(x >= lower) and np.all(x <= upper)
    assert np.array_equal(x[integrality > 0], np.rint(x[integrality > 0]))
    assert x[-1] == pytest.approx(incumbent.makespan, rel=1e-12)
