"""The recompute-aware final choice of NSP on memory-bound batches (nspsim.planners.remat_estimate)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from nspsim.execution.recompute import mark_recompute
from nspsim.planners import get_planner
from nspsim.planners.base import make_context
from nspsim.planners.nsp_planner import _static_routes
from nspsim.planners.proxy import CostTable
from nspsim.planners.remat_estimate import remat_aware_load, remat_per_gpu, selected_loads
from nspsim.planners.token_balance import effective_budget, is_memory_bound
from nspsim.simulator.work import step_work
from nspsim.workload import WorkloadConfig, build_workload
from planner_fixtures import batch_of, check_valid, guarantee_score, static_scores

BIG = WorkloadConfig(model="qwen3-235b-a22b", cluster="h200")  # memory-bound at 2M tokens / 64 GPUs


@pytest.fixture(scope="module")
def big():  # type: ignore[no-untyped-def]
    return build_workload(BIG)


@pytest.mark.parametrize("planner", ["nsp:off", "static"])
def test_the_estimate_is_the_simulators_recompute_work(big, planner: str) -> None:  # type: ignore[no-untyped-def]
    """Per GPU, the estimate equals the recompute work the simulator runs for the plan that
    ``mark_recompute`` marks: each marked node's recompute phases (prologue + kernel) times the layers."""
    opts = {"token_balance_ratio": "off", "remat_aware": False} if planner == "nsp:off" else {}
    plan = get_planner(planner.split(":")[0], **opts).plan(big.sampler.batch(3), big)
    marked = mark_recompute(plan, big.memory, big.cost)
    lengths, degrees, firsts, _ = plan.arrays
    table = CostTable(big.cost, big.tree, lengths, big.token_budget)
    select = np.arange(table.num_samples)
    deg, first = degrees[table.order], firsts[table.order]
    got = remat_per_gpu(
        table, big.memory, big.cost, select, deg, first, selected_loads(table, select, deg, first).tokens
    )
    work = step_work(marked, big.cost, big.model, big.training, np.array(marked.recompute))
    (mb,) = work.micro_batches
    expected = np.zeros(big.tree.num_gpus)
    for gpu, chain in enumerate(mb.chains):
        for i in chain:
            redo = mb.nodes[i].remat
            if redo is not None:
                expected[gpu] += big.cost.num_layers * (redo.prologue + redo.compute)
    assert any(marked.recompute)  # the case exercises recomputation
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)


def test_nsp_picks_the_least_estimate_among_its_candidates_when_memory_bound(big) -> None:  # type: ignore[no-untyped-def]
    batch = big.sampler.batch(4)
    assert is_memory_bound(big, sum(batch.lengths))
    ctx = make_context(batch, big, effective_budget("auto", big, batch.lengths))
    select = np.arange(ctx.table.num_samples)
    plan = get_planner("nsp").plan(batch, big)
    lengths, degrees, firsts, _ = plan.arrays
    chosen = remat_aware_load(
        ctx.table, big.memory, big.cost, select, degrees[ctx.table.order], firsts[ctx.table.order]
    )
    seeds = _static_routes(ctx, select, big.tree.degrees, np.inf)
    assert seeds and chosen <= min(
        remat_aware_load(ctx.table, big.memory, big.cost, select, r.degrees, r.firsts) for r in seeds
    ) * (1 + 1e-12)
    # Here the blind Load would pick the nested beam; the estimate sees its recomputation.
    blind = get_planner("nsp", seed_static=False).plan(batch, big)
    _, bdeg, bfirst, _ = blind.arrays
    assert float(blind.metadata["load_s"]) < float(plan.metadata["load_s"])
    assert (
        remat_aware_load(ctx.table, big.memory, big.cost, select, bdeg[ctx.table.order], bfirst[ctx.table.order])
        > chosen
    )


def test_compute_bound_batches_keep_the_plain_load_choice() -> None:
    wl = build_workload(WorkloadConfig())  # Qwen3-30B on 64 H100: not memory-bound
    batch = wl.sampler.batch(0)
    assert not is_memory_bound(wl, sum(batch.lengths))
    plan = get_planner("nsp").plan(batch, wl)
    static = get_planner("static").plan(batch, wl)
    assert float(plan.metadata["load_s"]) <= float(static.metadata["load_s"]) * (1 + 1e-12)


SIXTEEN = build_workload(WorkloadConfig(gpus=16, tokens_per_batch=1 << 20))  # Qwen3-30B, 16 H100s: B_tok 63K, 25K kept


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lengths=st.lists(st.integers(8_000, 60_000), min_size=8, max_size=24))
def test_on_memory_bound_batches_nsp_never_loses_to_a_static_seed_on_the_estimate(lengths: list[int]) -> None:
    wl = SIXTEEN
    assume(is_memory_bound(wl, sum(lengths)) and sum(lengths) <= 16 * wl.token_budget)
    nsp = get_planner("nsp").plan(batch_of(lengths), wl)
    check_valid(nsp, wl, lengths)
    if nsp.num_micro_batches > 1:
        return
    budget = effective_budget("auto", wl, tuple(lengths))
    same = build_workload(WorkloadConfig(gpus=16, tokens_per_batch=1 << 20, token_budget=budget))
    scores = static_scores(lengths, same, wl, budget)
    if scores:
        assert guarantee_score(nsp, wl, budget) <= min(scores) * (1 + 1e-12)


def test_remat_aware_is_an_option_recorded_in_the_plan(big) -> None:  # type: ignore[no-untyped-def]
    batch = big.sampler.batch(4)
    on, off = (get_planner("nsp", remat_aware=flag).plan(batch, big) for flag in (True, False))
    assert on.metadata["remat_aware"] == 1 and off.metadata["remat_aware"] == 0
    assert str(on.metadata["route_source"]).startswith("static-") and off.metadata["route_source"] == "beam"
    with pytest.raises(ValueError, match="remat_aware"):
        get_planner("nsp", remat_aware="yes")
