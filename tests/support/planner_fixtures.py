"""Workloads and checks shared by the planner tests (tests/planners/test_planner*.py)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from helpers import make_batch
from nspsim.plan import Plan
from nspsim.trace.batching import Batch
from nspsim.workload import Workload, WorkloadConfig, build_workload
from reference_load import plan_load


def tiny_workload(gpus: int = 4, token_budget: int | None = 4096, model: str = "tiny", **kw: object) -> Workload:
    """The ``tiny`` model on ``gpus`` H100s with an explicit token budget (fast, exact arithmetic)."""
    cfg = WorkloadConfig(
        model=model,
        cluster="h100",
        gpus=gpus,
        token_budget=token_budget,
        tokens_per_batch=1 << 20,
        max_context=1 << 16,
        **kw,
    )  # type: ignore[arg-type]
    return build_workload(cfg)


def batch_of(lengths: Sequence[int]) -> Batch:
    """A batch holding exactly ``lengths``."""
    batch: Batch = make_batch(lengths)
    return batch


def exact_load(plan: Plan, workload: Workload) -> float:
    """Proxy Load from ``reference_load.plan_load`` (the reference), micro-batches summed."""
    lengths, degrees, firsts, mbs = plan.arrays
    return sum(
        plan_load(workload.cost, workload.tree, lengths[mbs == mb], degrees[mbs == mb], firsts[mbs == mb]).load
        for mb in range(plan.num_micro_batches)
    )


def check_valid(plan: Plan, workload: Workload, lengths: Sequence[int]) -> None:
    """Every sample placed once on an admissible node, budgets hold, metadata is consistent."""
    assert plan.lengths == tuple(lengths)
    assert len(plan.nodes) == len(lengths)
    assert all(workload.tree.has_node(n) and n.degree <= workload.tree.spmax for n in plan.nodes)
    for mb in range(plan.num_micro_batches):
        assert plan.tokens_per_gpu(mb).max() <= workload.token_budget * (1 + 1e-9)
    meta = plan.metadata
    assert np.isclose(float(meta["load_s"]), exact_load(plan, workload), rtol=1e-9)
    assert float(meta["lower_bound_s"]) <= float(meta["load_s"]) * (1 + 1e-9)
    assert float(meta["planning_time_s"]) >= 0
    assert int(meta["micro_batches"]) == plan.num_micro_batches


def model_workload(
    model: str = "qwen3-30b-a3b",
    gpus: int = 8,
    token_budget: int = 64 * 1024,
    cluster: str = "h100",
    gpus_per_node: int | None = None,
) -> Workload:
    """A real model's cost model on a few GPUs with an explicit token budget, memory check skipped
    (tiny clusters cannot hold the model states; only the routing proxy matters here).
    ``gpus_per_node`` shrinks the NVLink host so small groups already cross hosts."""
    from dataclasses import replace

    from nspsim.cost.analytic import AnalyticCostModel
    from nspsim.sp_tree import SPTree
    from nspsim.specs.clusters import get_cluster
    from nspsim.specs.model import get_model
    from nspsim.workload import resolve_spmax

    base = tiny_workload(gpus=gpus, token_budget=token_budget)
    spec, hw = get_model(model), get_cluster(cluster, gpus)
    if gpus_per_node is not None:
        hw = replace(hw, gpus_per_node=gpus_per_node)
    cost = AnalyticCostModel(model=spec, cluster=hw, training=base.training)
    spmax = resolve_spmax(spec, hw, "ulysses", None)
    config = replace(base.config, model=model, cluster=cluster)
    return replace(
        base,
        config=config,
        model=spec,
        cluster=hw,
        cost=cost,
        tree=SPTree(num_gpus=gpus, spmax=spmax, gpus_per_node=hw.gpus_per_node),
    )


def guarantee_score(plan: Plan, wl: Workload, budget: int | None = None) -> float:
    """What NSP's final choice minimises: its proxy Load, or on a memory-bound batch the summed
    recompute-aware step estimate of its micro-batches (Load plus the recomputation the tree marking
    implies, with FSDP floors; nspsim.planners.estimate.recompute_aware_step) under ``wl``'s
    memory, the cost table built at ``budget`` (default B_tok; no cost depends on it)."""
    from nspsim.planners.base import Context
    from nspsim.planners.estimate import recompute_aware_step
    from nspsim.planners.nsp.token_balance import is_memory_bound
    from nspsim.planners.proxy import CostTable

    lengths, degrees, firsts, mbs = plan.arrays
    if not is_memory_bound(wl, int(np.sum(lengths))):
        return float(plan.metadata["load_s"])
    table = CostTable(wl.cost, wl.tree, lengths, wl.token_budget if budget is None else budget)
    ctx = Context(batch=batch_of([int(x) for x in lengths]), workload=wl, table=table)
    deg, first, mb = degrees[table.order], firsts[table.order], mbs[table.order]
    total = 0.0
    for m in range(plan.num_micro_batches):
        select = np.flatnonzero(mb == m).astype(np.int64)
        total += recompute_aware_step(ctx, select, deg[select], first[select])
    return total


def static_scores(lengths: Sequence[int], packing: Workload, scoring: Workload, budget: int) -> list[float]:
    """:func:`guarantee_score` (under ``scoring``'s memory, table at ``budget``) of every single-pass
    Static SP plan of ``lengths`` packed under ``packing``, one per degree that holds the batch."""
    from nspsim.planners import get_planner

    scores = []
    for d in packing.tree.degrees:
        try:
            plan = get_planner("static", degree=d).plan(batch_of(lengths), packing)
        except ValueError:
            continue
        if plan.num_micro_batches == 1:
            scores.append(guarantee_score(plan, scoring, budget))
    return scores
