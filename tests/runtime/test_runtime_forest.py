"""A forest at 6 gloo ranks: plans over three SP trees of 2 execute as a single process would.

Six ranks are no power of two, so the SP tree is a forest (spmax 2, three trees; nspsim.sp_tree).
Every registered planner's plan for one long-tail batch, and a hand plan that nests degree-2 groups
over single ranks in every tree with recompute marks, run on 6 ranks and must give the loss and
every gradient of the single-process reference (fp32, 1e-5, as test_runtime_multirank).
"""

from __future__ import annotations

import pytest
import rt_workers
from test_runtime_multirank import _assert_matches_reference

from helpers import make_batch
from nspsim.plan import Plan, make_plan
from nspsim.planners import PLANNER_NAMES, get_planner
from nspsim.sp_tree import Node
from nspsim.specs.clusters import get_cluster
from nspsim.specs.model import get_model
from nspsim.workload import WorkloadConfig, build_workload
from nspsim_runtime.executor import ExecOptions
from nspsim_runtime.launch import run_ranks

WORLD = 6
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def forest_cases() -> list[rt_workers.Case]:
    per_rank = 256
    wl = build_workload(
        WorkloadConfig(
            model="tiny",
            cluster="cpu",
            gpus=WORLD,
            trace="longtail-paper",
            tokens_per_batch=per_rank * WORLD,
            max_context=512,
            token_budget=int(per_rank * 1.3),
            seed=WORLD,
        )
    )
    assert (wl.tree.spmax, wl.tree.num_trees) == (2, 3)
    plans = [get_planner(name).plan(wl.sampler.batch(0), wl) for name in PLANNER_NAMES]
    lengths = [37, 5, 41, 12, 3, 29, 17, 8, 1]
    nodes = [Node(2, 0), Node(1, 0), Node(2, 1), Node(1, 3), Node(1, 2), Node(2, 2), Node(1, 5), Node(1, 4), Node(1, 1)]
    nested = make_plan(
        planner="hand-forest",
        cluster=get_cluster("cpu", WORLD),
        model=get_model("tiny"),
        batch=make_batch(lengths),
        spmax=2,
        token_budget=10**6,
        nodes=nodes,
        recompute=[i % 2 == 0 for i in range(len(lengths))],
    )
    cases = [rt_workers.Case(plan_json=p.to_json(), seed=3) for p in plans]
    cases.append(rt_workers.Case(plan_json=nested.to_json(), seed=4, options=ExecOptions(lookahead=1)))
    return cases


def test_plans_over_a_forest_of_three_trees_match_the_single_process_reference() -> None:
    cases = forest_cases()
    results = run_ranks(rt_workers.suite, WORLD, {"parity": cases}, timeout_s=240, comm_timeout_s=60)
    run = {"world": WORLD, "payload": {"parity": cases}, "results": results}
    planners = set()
    for i, case in enumerate(cases):
        plan = Plan.from_json(case.plan_json)
        planners.add(plan.planner)
        assert plan.tree.num_trees == 3 and all(n.degree <= 2 for n in plan.nodes)
        _assert_matches_reference(run, i, case)
    assert set(PLANNER_NAMES) | {"hand-forest"} <= planners
