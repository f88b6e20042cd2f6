"""FlexSP at scale (issue 26 item 3): the aggregated MILP, parallel solves and the per-plan time budget.

The plans of the default options up to 64 GPUs are pinned to the content hashes the code before the
change produced; the aggregated model's solutions are checked as placements; workers give the same
plans as one process whatever order they finish in; a spent budget keeps every chunk's incumbent."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from nspsim.planners import get_planner
from nspsim.planners.base import make_context
from nspsim.planners.flexsp.aggregated import solve_counts
from nspsim.planners.flexsp.bucketing import bucketize
from nspsim.planners.flexsp.milp import Limits, MilpProblem
from nspsim.planners.flexsp.parallel import BUDGET_SKIPPED, Job, Solves, run_job
from nspsim.planners.flexsp.planner import FlexSPPlanner
from nspsim.planners.flexsp.routing import chunk_problem, static_incumbent
from nspsim.planners.microbatch import blaster_split
from nspsim.workload import WorkloadConfig, build_workload

SMALL = WorkloadConfig(gpus=16, tokens_per_batch=512 * 1024, max_context=96 * 1024, seed=3)
MID = WorkloadConfig(gpus=32, tokens_per_batch=1024 * 1024, max_context=128 * 1024, trace="code", seed=5)
BEFORE = {  # content hashes of commit 80fdf19's FlexSP (default options), batches 0-2
    "small": ("f5a9143457c300b2", "5e3e435909d8e1e4", "218024d81cc7a443"),
    "mid": ("4168157a20f429a1", "84ddfc488016f6c6", "71d91413aafc7a63"),
}


@pytest.mark.parametrize("name, config", [("small", SMALL), ("mid", MID)])
def test_default_plans_up_to_64_gpus_are_those_before_the_change(name: str, config: WorkloadConfig) -> None:
    wl = build_workload(config)
    for index, expected in enumerate(BEFORE[name]):
        plan = get_planner("flexsp").plan(wl.sampler.batch(index), wl)
        assert plan.content_hash == expected, (name, index)
        assert plan.metadata["flexsp_milp_model"] == "slots"


def _problems(config: WorkloadConfig, count: int) -> list[MilpProblem]:
    wl = build_workload(config)
    ctx = make_context(wl.sampler.batch(0), wl)
    sizes = FlexSPPlanner().sizes(ctx)
    out = []
    for chunk in blaster_split(ctx.table.lengths, count):
        problem = chunk_problem(ctx, bucketize(ctx.table.lengths[chunk]), sizes)
        incumbent = static_incumbent(problem)
        assert incumbent is not None
        start = (incumbent.slot_sizes, incumbent.assignment)
        out.append(MilpProblem(**{**problem.__dict__, "upper": incumbent.makespan * (1 + 1e-9), "start": start}))
    return out


@pytest.mark.parametrize("with_start", [True, False])
def test_the_aggregated_model_gives_a_valid_placement(with_start: bool) -> None:
    for p in _problems(MID, 2):
        if not with_start:
            p = MilpProblem(**{**p.__dict__, "upper": None, "start": None})
        run = solve_counts(p, limits=Limits(work_limit=50))
        sol = run.solution
        assert sol is not None, run.status
        assert np.array_equal(sol.assignment.sum(axis=0), p.counts)  # every sequence placed once
        assert int(sol.slot_sizes.sum()) <= p.num_gpus
        assert np.all(sol.assignment.sum(axis=1) > 0)
        tokens = sol.assignment @ p.lengths / sol.slot_sizes
        assert np.all(tokens <= p.token_budget * (1 + 1e-9))  # memory per GPU of every group
        loads = [row @ p.time[int(s)] + p.latency[int(s)] for s, row in zip(sol.slot_sizes, sol.assignment)]
        assert sol.makespan == pytest.approx(max(loads))
        for s, row in zip(sol.slot_sizes, sol.assignment):  # sizes hold their buckets' longest sequence
            assert np.all(p.lengths[row > 0] <= s * p.token_budget)


def test_the_aggregated_model_plans_where_forced_and_is_recorded() -> None:
    wl = build_workload(MID)
    batch = wl.sampler.batch(0)
    plan = get_planner("flexsp", milp_model="counts").plan(batch, wl)
    assert plan.metadata["flexsp_milp_model"] == "counts"
    assert plan.is_disjoint()
    assert get_planner("flexsp", milp_model="slots").plan(batch, wl).metadata["flexsp_milp_model"] == "slots"


def test_auto_aggregates_above_64_gpus_except_for_the_artifact_variant() -> None:
    for gpus, nspsim_model in ((64, "slots"), (128, "counts")):
        wl = build_workload(WorkloadConfig(gpus=gpus, tokens_per_batch=32 * 1024 * gpus))
        ctx = make_context(wl.sampler.batch(0), wl)
        assert FlexSPPlanner().model_for(ctx) == nspsim_model
        assert FlexSPPlanner(variant="artifact", count_window=4).model_for(ctx) == "slots"
        assert FlexSPPlanner(milp_model="counts").model_for(ctx) == "counts"


def test_worker_processes_return_runs_in_submission_order() -> None:
    problems = _problems(MID, 3)
    jobs = [Job(p, model, "highs", Limits()) for p in problems for model in ("slots", "counts")]
    jobs = jobs[::-1]  # the slowest (per-slot, longest chunk) last and first alike
    alone = [run_job(job) for job in jobs]
    with Solves(workers=2, plan_time_limit=0.0) as solves:
        pooled = solves.run(jobs, [True] * len(jobs))
    for a, b in zip(alone, pooled):
        assert a.status == b.status and a.work == b.work
        assert a.solution is not None and b.solution is not None
        assert a.solution.makespan == b.solution.makespan
        assert np.array_equal(a.solution.assignment, b.solution.assignment)


@pytest.mark.parametrize("model", ["slots", "counts"])
def test_plans_with_workers_equal_plans_without(model: str) -> None:
    wl = build_workload(MID)
    batch = wl.sampler.batch(1)
    options: dict[str, Any] = {"milp_model": model, "count_window": 3}
    one = get_planner("flexsp", **options).plan(batch, wl)
    two = get_planner("flexsp", workers=2, **options).plan(batch, wl)
    assert one.content_hash == two.content_hash
    assert two.metadata["flexsp_workers"] == 2


def test_a_spent_budget_keeps_every_chunks_incumbent() -> None:
    wl = build_workload(MID)
    batch = wl.sampler.batch(0)
    plan = get_planner("flexsp", plan_time_limit=1e-9, milp_model="counts").plan(batch, wl)
    meta = plan.metadata
    assert meta["milp_budget_skipped"] == meta["milp_solves"] > 0
    assert meta["milp_fallbacks"] == plan.num_micro_batches
    assert str(meta["milp_status"]).startswith(f"incumbent({BUDGET_SKIPPED})")
    assert meta["milp_plan_time_limit_s"] == 1e-9
    assert plan.is_disjoint()
    assert get_planner("flexsp", milp_model="counts").plan(batch, wl).metadata["milp_budget_skipped"] == 0


def test_a_budget_caps_each_solve_to_what_is_left() -> None:
    job = Job(_problems(MID, 1)[0], "slots", "highs", Limits(time_limit=10.0))
    solves = Solves(workers=1, plan_time_limit=5.0)
    left = solves.remaining()
    assert left is not None and 0 < left <= 5.0
    assert Solves._capped(job, 2.0).limits.time_limit == 2.0
    assert Solves._capped(job, 20.0) is job
    assert Solves(workers=1, plan_time_limit=0.0).remaining() is None


@pytest.mark.parametrize(
    "options, message",
    [
        ({"milp_model": "dense"}, "option milp_model must be one of auto, slots, counts"),
        ({"workers": 0}, "workers"),
        ({"workers": 65}, "option workers must be at most 64"),
        ({"plan_time_limit": -1.0}, "option plan_time_limit must be 0 .no budget. or a number of seconds"),
        ({"plan_time_limit": 4000.0}, "up to 3600"),
        ({"plan_time_limit": True}, "plan_time_limit"),
    ],
)
def test_scaling_options_are_range_checked(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        get_planner("flexsp", **options)
