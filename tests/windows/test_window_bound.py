"""The window floor (nspsim.planners.window.bound) is below every plan of every assignment of a window:
random assignments with random memory-feasible placements, and every candidate routed by real planners;
it equals the per-micro-batch floor where the two coincide; and the gap's parts (nspsim.planners.window.gap)
are non-negative and add up to the estimate above the floor."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nspsim.plan.window import pass_batches
from nspsim.planners import get_planner
from nspsim.planners.base import make_context
from nspsim.planners.estimate import micro_batch_floor, recompute_aware_step, step_floors
from nspsim.planners.window import CANDIDATES, plan_estimate
from nspsim.planners.window.assign import assign
from nspsim.planners.window.bound import window_floor
from nspsim.planners.window.gap import window_gap
from nspsim.planners.window.planner import sample_work
from nspsim.trace.batching import Batch
from nspsim.workload import Workload, WorkloadConfig, build_workload
from planner_fixtures import batch_of

MARGIN = 1e-9
"""The floor and the estimates sum the same floats in different orders (and NSP's cost table fits the
affine non-attention part at its own token scale): a few units in the last place apart."""

WORKLOADS = {
    "30b-16gpu": WorkloadConfig(gpus=16, tokens_per_batch=1 << 20),
    "235b-ep8": WorkloadConfig(model="qwen3-235b-a22b", cluster="h200", training="paper-235b", gpus=32),
    "tiny-8gpu": WorkloadConfig(
        model="tiny", cluster="cpu", gpus=8, tokens_per_batch=1 << 16, max_context=1 << 14, token_budget=6000
    ),
}


@cache
def _workload(name: str) -> Workload:
    return build_workload(WORKLOADS[name])


@st.composite
def windows(draw: st.DrawFn) -> tuple[Workload, list[Batch], list[list[int]]]:
    """A random window (1-3 batches of random lengths, each within the longest the tree holds) and a random
    assignment of its samples to as many passes, every pass non-empty."""
    wl = _workload(draw(st.sampled_from(sorted(WORKLOADS))))
    longest = wl.tree.spmax * wl.token_budget
    batches = [
        batch_of(draw(st.lists(st.integers(1, longest), min_size=1, max_size=10)))
        for _ in range(draw(st.integers(1, 3)))
    ]
    total = sum(len(b.lengths) for b in batches)
    passes = len(batches)
    owner = [draw(st.integers(0, passes - 1)) for _ in range(total)]
    owner[:passes] = range(passes)  # every pass holds a sample
    return wl, batches, [[i for i in range(total) if owner[i] == k] for k in range(passes)]


def _random_pass_estimate(draw: st.DrawFn, wl: Workload, lengths: list[int]) -> float:
    """Summed step estimate (recompute-aware) of a random memory-feasible placement of ``lengths`` in
    one to three micro-batches."""
    ctx = make_context(batch_of(lengths), wl)
    fits = ctx.table.min_degree(wl.tree.degrees)
    degrees = np.array([draw(st.sampled_from([d for d in wl.tree.degrees if d >= f])) for f in fits.tolist()])
    firsts = np.array([d * draw(st.integers(0, wl.tree.num_gpus // d - 1)) for d in degrees.tolist()])
    count = draw(st.integers(1, min(3, len(lengths))))
    micro = np.arange(len(lengths)) % count
    total = 0.0
    for mb in range(count):
        select = np.flatnonzero(micro == mb)
        total += recompute_aware_step(ctx, select, degrees[select], firsts[select])
    return total


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), case=windows())
def test_no_placement_of_any_assignment_falls_below_the_floor(
    data: st.DataObject, case: tuple[Workload, list[Batch], list[list[int]]]
) -> None:
    wl, batches, passes = case
    lengths = [x for b in batches for x in b.lengths]
    estimate = sum(_random_pass_estimate(data.draw, wl, [lengths[i] for i in ids]) for ids in passes)
    assert window_floor(wl, batches).floor_s <= estimate * (1 + MARGIN)


@cache
def _code_window() -> tuple[Workload, tuple[Batch, ...]]:
    wl = build_workload(WorkloadConfig(gpus=16, tokens_per_batch=1 << 19, max_context=1 << 17, trace="code"))
    return wl, tuple(wl.sampler.batch(i) for i in range(3))


@pytest.mark.parametrize("planner", ["nsp", "static", "greedy", "basp"])
@pytest.mark.parametrize("candidate", CANDIDATES)
def test_every_routed_candidate_is_above_the_floor_and_its_gap_adds_up(planner: str, candidate: str) -> None:
    wl, batches = _code_window()
    lengths = np.concatenate([b.lengths_array() for b in batches])
    ids = assign(candidate, [len(b.lengths) for b in batches], lengths, sample_work(wl, lengths), 1 << 19)
    assert ids is not None
    step = get_planner(planner)
    plans = [step.plan(b, wl) for b in pass_batches(batches, ids)]
    floor = window_floor(wl, batches).floor_s
    assert floor <= sum(plan_estimate(p) for p in plans) * (1 + MARGIN)
    gap = window_gap(wl, batches, plans)
    parts = (gap.micro_batches_s, gap.degrees_s, gap.imbalance_s, gap.recompute_s)
    assert all(part >= -MARGIN * gap.estimate_s for part in parts)
    assert gap.floor_s == floor
    assert sum(parts) == pytest.approx(gap.estimate_s - floor, rel=1e-9, abs=1e-12)
    assert gap.estimate_s == pytest.approx(sum(plan_estimate(p) for p in plans), rel=1e-12)


def test_one_short_batch_in_one_micro_batch_is_the_micro_batch_floor() -> None:
    """With every degree holding every sample and no micro-batch cheaper than the FSDP floors, the window
    floor of one batch is micro_batch_floor of all its samples, hand-checked term by term."""
    wl = _workload("tiny-8gpu")
    batch = batch_of([100, 2000, 3000, 5000])  # each within B_tok = 6000: every degree holds it
    ctx = make_context(batch, wl)
    floor = window_floor(wl, [batch])
    gather, bwd_comm, overhead = step_floors(wl.cost)
    assert overhead + min(0.0, ctx.table.intercept[0]) + min(0.0, ctx.table.intercept[1]) >= 0  # g non-decreasing
    assert floor.micro_batches == floor.min_micro_batches == 1
    assert floor.floor_s == pytest.approx(micro_batch_floor(ctx, np.arange(4)), rel=1e-12)
    fwd, bwd = ctx.table.cheapest_work()
    assert floor.work_fwd_s == pytest.approx(float(fwd.sum()) / 8, rel=1e-12)
    assert floor.work_bwd_s == pytest.approx(float(bwd.sum()) / 8, rel=1e-12)
    expected = max(floor.work_fwd_s + min(0.0, ctx.table.intercept[0]), gather)
    expected += max(floor.work_bwd_s + min(0.0, ctx.table.intercept[1]), bwd_comm) + overhead
    assert floor.floor_s == pytest.approx(expected, rel=1e-12)


def test_a_long_sample_is_priced_only_at_the_degrees_that_hold_it() -> None:
    """15,000 tokens under B_tok = 6,000 on 8 GPUs: only degrees 4 and 8 hold it (15,000 / 2 > 6,000),
    so its work is min(4 fwd(4), 8 fwd(8)), above the unrestricted cheapest work (degree 1's here)."""
    wl = _workload("tiny-8gpu")
    assert sorted(wl.tree.degrees) == [1, 2, 4, 8] and wl.token_budget == 6000
    ctx = make_context(batch_of([15000]), wl)
    floor = window_floor(wl, [batch_of([15000])])
    (f4, b4), (f8, b8) = ctx.table.sample_costs(4), ctx.table.sample_costs(8)
    assert floor.work_fwd_s == pytest.approx(min(4 * float(f4[0]), 8 * float(f8[0])) / 8, rel=1e-12)
    assert floor.work_bwd_s == pytest.approx(min(4 * float(b4[0]), 8 * float(b8[0])) / 8, rel=1e-12)
    fwd, bwd = ctx.table.cheapest_work()
    assert floor.work_fwd_s + floor.work_bwd_s > (float(fwd[0]) + float(bwd[0])) / 8


def test_the_floor_is_the_same_for_every_order_of_the_window() -> None:
    wl, batches = _code_window()
    forward, backward = window_floor(wl, batches), window_floor(wl, batches[::-1])
    assert forward.floor_s == pytest.approx(backward.floor_s, rel=1e-12)
    assert window_floor(wl, batches) == forward  # deterministic


def test_an_empty_window_or_a_sample_no_degree_holds_is_one_clear_error() -> None:
    wl = _workload("tiny-8gpu")
    with pytest.raises(ValueError, match="at least one batch"):
        window_floor(wl, [])
    with pytest.raises(ValueError, match="fits no SP degree"):
        window_floor(wl, [batch_of([wl.tree.spmax * wl.token_budget + 1])])
