"""Simulator properties on random nested plans: overlap modes are ordered, extrapolated layers equal a
full simulation, noise is deterministic for a seed, the accounting always tiles the step."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from nspsim.plan import Plan
from nspsim.simulator.periodic import TOLERANCE_S
from nspsim.sp_tree import Node
from nspsim.specs.training import TrainingSpec
from sim_helpers import Setup, StubCost

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def plans(draw: st.DrawFn, layers: int = 1) -> tuple[Setup, Plan]:
    """A random plan on 8 GPUs (2 per host, spmax 8) with random round-number costs and FSDP prefetch depth."""
    cost = StubCost(
        layers=layers,
        lat=draw(st.sampled_from([0.0, 1e-5])),
        comp=draw(st.sampled_from([1e-10, 1e-9])),
        pro=draw(st.sampled_from([0.0, 1e-7, 1e-6])),
        epi=draw(st.sampled_from([0.0, 1e-7])),
        nonattn=draw(st.sampled_from([0.0, 1e-7])),
        allgather=draw(st.sampled_from([0.0, 2e-4, 2e-3])),
        reduce_scatter=draw(st.sampled_from([0.0, 2e-3])),
        optimizer=1e-4,
    )
    n = draw(st.integers(1, 12))
    degrees = draw(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=n, max_size=n))
    nodes = [Node(d, draw(st.integers(0, 8 // d - 1))) for d in degrees]
    lengths = draw(st.lists(st.integers(64, 6000), min_size=n, max_size=n))
    mbs = draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)) if draw(st.booleans()) else [0] * n
    if set(mbs) == {1}:
        mbs = [0] * n
    setup = Setup(cost, training=TrainingSpec(fsdp_prefetch_layers=draw(st.sampled_from([1, 1, 0, 2, 3]))))
    return setup, setup.plan(nodes, lengths, spmax=8, micro_batches=[sorted(set(mbs)).index(m) for m in mbs])


@SETTINGS
@given(plans())
def test_streaming_is_never_slower_than_no_streaming_or_serial(case: tuple[Setup, Plan]) -> None:
    """Exact without FSDP traffic: then a GPU's collectives are serialised on its SP queue, nothing shares
    a link and each mode's dependencies contain the previous one's (max-plus monotonicity). With FSDP
    transfers sharing NICs, streaming can move an SP transfer under one and lose a little: at most
    0.12% over 1,500 generated plans (no-stream vs serial: 2e-16); the bound is 0.5% (4x margin)."""
    setup, plan = case
    times = [setup.simulator(mode=m).simulate(plan).step_time_s for m in ("stream", "no-stream", "serial")]
    shared = setup.cost.allgather > 0 or setup.cost.reduce_scatter > 0
    rel = 5e-3 if shared else 1e-9
    assert times[0] <= times[1] * (1 + rel) + 1e-12  # type: ignore[operator]
    assert times[1] <= times[2] * (1 + rel) + 1e-12  # type: ignore[operator]


@SETTINGS
@given(plans())
def test_every_gpu_breakdown_tiles_the_step(case: tuple[Setup, Plan]) -> None:
    setup, plan = case
    result = setup.simulator().simulate(plan)
    assert result.per_gpu_breakdown_s.min() >= -1e-15
    assert result.per_gpu_breakdown_s.sum(axis=1) == pytest.approx(np.full(8, result.step_time_s), rel=1e-9)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans(layers=24))
def test_extrapolated_layers_equal_a_full_simulation(case: tuple[Setup, Plan]) -> None:
    setup, plan = case
    fast = setup.simulator().simulate(plan)
    full = setup.simulator(extrapolate=False).simulate(plan)
    event(f"extrapolated={fast.extrapolated}")
    assert fast.step_time_s == pytest.approx(full.step_time_s, rel=1e-9)
    # exact to the periodicity check's tolerance (nspsim.simulator.periodic.TOLERANCE_S), as documented
    assert fast.per_gpu_breakdown_s == pytest.approx(full.per_gpu_breakdown_s, rel=1e-9, abs=TOLERANCE_S)


def test_extrapolation_stays_within_the_periodicity_tolerance_on_a_case_hypothesis_found() -> None:
    """CI drew this plan (prefetch depth 1): one GPU's breakdown entry differed by 2.9e-11 s (8.6e-9
    relative), inside the 1e-9 s to which the periodic check matches layers, outside the former 1e-12."""
    cost = StubCost(layers=24, lat=1e-05, pro=1e-07, comp=1e-10, epi=1e-07, allgather=0.002, reduce_scatter=0.002)
    setup = Setup(cost, training=TrainingSpec(fsdp_prefetch_layers=1))
    plan = setup.plan([Node(1, 0), Node(8, 0), Node(1, 0), Node(1, 0)], [64, 958, 64, 3162], spmax=8)
    fast = setup.simulator().simulate(plan)
    full = setup.simulator(extrapolate=False).simulate(plan)
    assert fast.extrapolated
    gap = float(np.abs(fast.per_gpu_breakdown_s - full.per_gpu_breakdown_s).max())
    assert 0 < gap <= TOLERANCE_S


def test_extrapolation_happens_and_matches_on_a_typical_nested_plan() -> None:
    setup = Setup(
        StubCost(
            layers=20,
            lat=1e-5,
            comp=1e-9,
            pro=1e-7,
            epi=1e-7,
            nonattn=1e-7,
            allgather=1e-3,
            reduce_scatter=1e-3,
            optimizer=1e-4,
        )
    )
    plan = setup.plan(
        [Node(8, 0), Node(4, 1), Node(2, 0), Node(1, 2), Node(1, 3), Node(2, 3)],
        [6000, 3000, 2000, 1500, 1400, 900],
        spmax=8,
    )
    fast = setup.simulator(timeline=True).simulate(plan)
    full = setup.simulator(extrapolate=False, timeline=True).simulate(plan)
    assert fast.extrapolated and fast.layers_simulated == 12 and not full.extrapolated
    assert fast.step_time_s == pytest.approx(full.step_time_s, rel=1e-12)
    assert fast.per_gpu_breakdown_s == pytest.approx(full.per_gpu_breakdown_s, rel=1e-9, abs=1e-12)
    key = lambda e: (e.gpu, e.track, e.layer, e.micro_batch, e.name, round(e.start, 12))  # noqa: E731
    assert sorted(map(key, fast.timeline)) == sorted(map(key, full.timeline))


def test_extrapolated_timeline_of_a_later_micro_batch_matches_a_full_simulation() -> None:
    """Micro-batch 1's token-id layout change waits for micro-batch 0 (the runtime's all-to-all is
    blocking). It used to be issued at time 0 and wait in the SP queue, so an extrapolated timeline
    moved its issue time (its "wait" event) by the extrapolated layers' shift (found by a review)."""
    setup = Setup(
        StubCost(layers=24, lat=1e-5, pro=1e-7, comp=1e-10, nonattn=1e-6, allgather=5e-4, optimizer=1e-4),
        num_gpus=16,
        training=TrainingSpec(fsdp_prefetch_layers=0),
    )
    plan = setup.plan(
        [Node(2, 4), Node(2, 4), Node(1, 11), Node(2, 0), Node(2, 2), Node(2, 7), Node(8, 0)],
        [2413, 5550, 5777, 4613, 3948, 1850, 578],
        spmax=8,
        micro_batches=[0, 1, 0, 1, 0, 0, 1],
    )
    fast = setup.simulator(timeline=True, symmetry=False).simulate(plan)
    full = setup.simulator(timeline=True, symmetry=False, extrapolate=False).simulate(plan)
    assert fast.extrapolated and fast.layers_simulated == 12
    assert fast.step_time_s == pytest.approx(full.step_time_s, rel=1e-12)
    key = lambda e: (e.gpu, e.track, e.name, e.category, e.layer, e.micro_batch)  # noqa: E731
    a = sorted((key(e), e.start, e.end) for e in fast.timeline if e.end - e.start > 1e-12)
    b = sorted((key(e), e.start, e.end) for e in full.timeline if e.end - e.start > 1e-12)
    assert [k for k, _, _ in a] == [k for k, _, _ in b]
    assert [t for _, s, e in a for t in (s, e)] == pytest.approx([t for _, s, e in b for t in (s, e)], abs=1e-12)
    waits = [e for e in full.timeline if e.name == "wait: layout-in (token ids)" and e.micro_batch == 1]
    assert waits and all(e.start >= 0.1 for e in waits)  # after micro-batch 0, not from time 0


def test_noise_is_deterministic_for_a_seed() -> None:
    setup = Setup(StubCost(layers=3, comp=1e-9, pro=1e-7, epi=1e-7, nonattn=1e-7))
    plan = setup.plan([Node(4, 0), Node(1, 5), Node(2, 3)], [4000, 1000, 2000])
    a = setup.simulator(seed=7, jitter=0.1).simulate(plan)
    b = setup.simulator(seed=7, jitter=0.1).simulate(plan)
    assert a.step_time_s == b.step_time_s and np.array_equal(a.per_gpu_breakdown_s, b.per_gpu_breakdown_s)
    assert setup.simulator(seed=8, jitter=0.1).simulate(plan).step_time_s != a.step_time_s
    assert setup.simulator(seed=7).simulate(plan).step_time_s != a.step_time_s


@SETTINGS
@given(plans(layers=3))
def test_symmetry_reduction_is_exact(case: tuple[Setup, Plan]) -> None:
    setup, plan = case
    reduced = setup.simulator(timeline=True).simulate(plan)
    every_gpu = setup.simulator(symmetry=False, timeline=True).simulate(plan)
    assert reduced.step_time_s == pytest.approx(every_gpu.step_time_s, rel=1e-12)
    assert reduced.per_gpu_breakdown_s == pytest.approx(every_gpu.per_gpu_breakdown_s, rel=1e-9, abs=1e-15)
    assert reduced.critical_gpu == every_gpu.critical_gpu and every_gpu.units == 8
    key = lambda e: (e.gpu, e.track, e.layer, e.micro_batch, e.name, round(e.start, 12))  # noqa: E731
    assert sorted(map(key, reduced.timeline)) == sorted(map(key, every_gpu.timeline))


def test_disjoint_plans_simulate_one_unit_per_group() -> None:
    setup = Setup(StubCost(comp=1e-9, pro=1e-7, epi=1e-7, allgather=1e-3))
    plan = setup.plan([Node(4, 0), Node(4, 1), Node(4, 0)], [3000, 2000, 1000])
    assert setup.simulator().simulate(plan).units == 2
