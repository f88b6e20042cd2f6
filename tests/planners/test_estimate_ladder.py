"""The estimate ladder (nspsim.planners.estimate): on random placements every rung is at least the
one below (lower bound <= Load <= step <= recompute-aware), on compute-bound, memory-bound and
expert-parallel workloads; and every planner's plan carries the Estimates record of the rung that
chose it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nspsim.plan.estimates import CHOSEN_BY, Estimates
from nspsim.planners import PLANNER_NAMES, get_planner
from nspsim.planners.base import Context, Placement, make_context
from nspsim.planners.estimate import (
    FLOOR_MARGIN,
    Stages,
    micro_batch_floor,
    micro_batch_step,
    proxy_load,
    recompute_aware_estimate,
    recompute_aware_step,
    stage_step,
    static_floor,
    step_estimate,
)
from nspsim.planners.lower_bound import lower_bound
from nspsim.planners.nsp.planner import LOAD_MARGIN
from nspsim.workload import Workload, WorkloadConfig, build_workload
from planner_fixtures import batch_of

WORKLOADS = {
    "30b-16gpu": WorkloadConfig(gpus=16, tokens_per_batch=1 << 20),  # compute-bound
    "235b-ep8": WorkloadConfig(model="qwen3-235b-a22b", cluster="h200", training="paper-235b", gpus=32),  # EP, memory
    "tiny-8gpu": WorkloadConfig(
        model="tiny", cluster="cpu", gpus=8, tokens_per_batch=1 << 16, max_context=1 << 14, token_budget=6000
    ),
}
BUILT: dict[str, Workload] = {}


def _workload(name: str) -> Workload:
    if name not in BUILT:
        BUILT[name] = build_workload(WORKLOADS[name])
    return BUILT[name]


@st.composite
def placements(draw: st.DrawFn) -> tuple[str, Context, Placement]:
    """A random memory-feasible placement: every sample on an aligned node of a degree that holds it
    within the budget, in one of up to three micro-batches."""
    name = draw(st.sampled_from(sorted(WORKLOADS)))
    wl = _workload(name)
    budget = wl.token_budget
    spmax = wl.tree.spmax
    lengths = draw(st.lists(st.integers(1, spmax * budget), min_size=1, max_size=24))
    ctx = make_context(batch_of(lengths), wl)
    fits = ctx.table.min_degree(wl.tree.degrees)
    degrees, firsts = [], []
    for smallest in fits.tolist():
        d = draw(st.sampled_from([x for x in wl.tree.degrees if x >= smallest]))
        degrees.append(d)
        firsts.append(d * draw(st.integers(0, wl.tree.num_gpus // d - 1)))
    count = draw(st.integers(1, min(3, len(lengths))))
    mbs = np.array([i % count for i in range(len(lengths))], dtype=np.int64)  # every micro-batch used
    placement = Placement(np.array(degrees, dtype=np.int64), np.array(firsts, dtype=np.int64), mbs)
    return name, ctx, placement


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(placements())
def test_every_rung_is_at_least_the_one_below(case: tuple[str, Context, Placement]) -> None:
    _, ctx, placement = case
    bound = lower_bound(ctx.table)
    load = proxy_load(ctx, placement)
    step = step_estimate(ctx, placement)
    aware = recompute_aware_estimate(ctx, placement)
    assert bound <= load * (1 + 1e-9)
    assert load <= step * (1 + 1e-9)
    assert step <= aware * (1 + 1e-9)
    one_pass = Placement(placement.degrees, placement.firsts, np.zeros_like(placement.micro_batches))
    if len(set(placement.degrees.tolist())) == 1:  # one degree: its Load is above that degree's floor
        samples = np.arange(ctx.table.num_samples)
        assert static_floor(ctx, samples, int(placement.degrees[0])) <= proxy_load(ctx, one_pass) * (1 + 1e-9)


def test_the_step_rung_of_two_stages_is_hand_computable() -> None:
    """stage_step = max(fwd, layers * all-gather) + max(bwd, layers * (all-gather + reduce-scatter))
    + the fixed micro-batch cost, so it is monotone in both stages and floored by FSDP."""
    wl = _workload("tiny-8gpu")
    ctx = make_context(batch_of([100]), wl)
    cost = wl.cost
    fsdp = cost.fsdp()
    gather = cost.num_layers * fsdp.allgather
    comm = cost.num_layers * (fsdp.allgather + fsdp.reduce_scatter)
    fixed = cost.micro_batch_overhead()
    assert stage_step(ctx, Stages(0.0, 0.0)) == pytest.approx(gather + comm + fixed, rel=1e-12)
    big = 10 * (gather + comm) + 1.0
    assert stage_step(ctx, Stages(big, 2 * big)) == pytest.approx(3 * big + fixed, rel=1e-12)


@pytest.mark.parametrize("name", PLANNER_NAMES)
def test_every_plan_records_the_rung_that_chose_it(name: str) -> None:
    wl = _workload("30b-16gpu")
    plan = get_planner(name).plan(wl.sampler.batch(0), wl)
    est = plan.estimates
    assert est is not None and est.chosen_by in CHOSEN_BY
    assert est.lower_bound_s <= est.load_s * (1 + 1e-9) <= est.step_estimate_s * (1 + 1e-9)
    by_rung = {"load": est.load_s, "step": est.step_estimate_s, "rule": est.step_estimate_s}
    if est.chosen_by in by_rung:
        assert est.chosen_estimate_s == by_rung[est.chosen_by]
    assert Estimates.of(dict(est.to_metadata())) == est


def test_a_record_refuses_what_no_plan_can_have() -> None:
    good = {"lower_bound_s": 1.0, "load_s": 2.0, "step_estimate_s": 3.0, "chosen_by": "step", "chosen_estimate_s": 3.0}
    Estimates(**good)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="chosen_by must be one of load, step, recompute-aware, rule"):
        Estimates(**{**good, "chosen_by": "lower-bound"})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="never below the Load"):
        Estimates(**{**good, "load_s": 4.0})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="finite non-negative"):
        Estimates(**{**good, "chosen_estimate_s": float("nan")})  # type: ignore[arg-type]
    assert Estimates.of({"load_s": 1.0}) is None  # a plan made before the record existed


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(placements())
def test_a_micro_batch_estimate_never_falls_below_its_load_beyond_the_pruning_margin(
    case: tuple[str, Context, Placement],
) -> None:
    """NSP skips estimating a candidate whose Load reaches the best estimate so far
    (``nspsim.planners.nsp.planner._better``): sound only if every micro-batch's recompute-aware
    estimate is at least its Load times 1 - LOAD_MARGIN, the phase-wise (EP) form included."""
    _, ctx, placement = case
    for mb in range(placement.num_micro_batches):
        select = np.flatnonzero(placement.micro_batches == mb)
        load = ctx.table.evaluate(placement.degrees, placement.firsts, placement.micro_batches == mb).load
        aware = recompute_aware_step(ctx, select, placement.degrees[select], placement.firsts[select])
        assert aware >= load * (1 - LOAD_MARGIN)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(placements())
def test_no_micro_batch_estimate_falls_below_its_floor(case: tuple[str, Context, Placement]) -> None:
    """NSP stops routing a memory-bound batch's split once its routed micro-batches' estimates plus
    the others' floors reach the best split (``nspsim.planners.nsp.pruning``): sound only if
    every micro-batch's step and recompute-aware estimates are at least ``micro_batch_floor`` times
    1 - FLOOR_MARGIN, whatever its placement."""
    _, ctx, placement = case
    for mb in range(placement.num_micro_batches):
        at = placement.micro_batches == mb
        select = np.flatnonzero(at)
        floor = micro_batch_floor(ctx, select)
        step = micro_batch_step(ctx, placement.degrees, placement.firsts, at)
        aware = recompute_aware_step(ctx, select, placement.degrees[select], placement.firsts[select])
        assert step >= floor * (1 - FLOOR_MARGIN)
        assert aware >= floor * (1 - FLOOR_MARGIN)


@pytest.mark.parametrize("index", [0, 1])
def test_pruning_splits_by_their_floors_keeps_the_plan(index: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same plan and estimates whether NSP prunes splits and candidates by the floors or routes and
    estimates everything."""
    import nspsim.planners.nsp.planner as nsp_planner

    wl = _workload("235b-ep8")
    batch = wl.sampler.batch(index)
    planner = get_planner("nsp")
    pruned = planner.plan(batch, wl)
    monkeypatch.setattr(nsp_planner, "beaten", lambda bound, best: False)
    monkeypatch.setattr(nsp_planner, "part_cap", lambda best, done, later: np.inf)
    full = planner.plan(batch, wl)
    assert pruned.estimates is not None and pruned.estimates.chosen_by == "recompute-aware"
    assert (pruned.content_hash, pruned.estimates) == (full.content_hash, full.estimates)
