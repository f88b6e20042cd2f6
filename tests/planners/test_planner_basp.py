"""BASP: one uniform degree per micro-batch, chosen per micro-batch; never worse than Static SP's estimate."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nspsim.plan import Plan
from nspsim.planners import get_planner
from nspsim.planners.microbatch import blaster_split
from nspsim.workload import Workload
from planner_fixtures import batch_of, check_valid, model_workload
from reference_load import plan_load


def estimate_and_load(wl: Workload, lengths: np.ndarray, degree: int, firsts: np.ndarray) -> tuple[float, float]:
    """Step estimate and Load of one micro-batch from the reference ``plan_load`` and the FSDP collectives."""
    loads = plan_load(wl.cost, wl.tree, lengths, np.full(lengths.size, degree), firsts)
    fsdp, layers = wl.cost.fsdp(), wl.cost.num_layers
    fwd, bwd = float(loads.d_fwd.max()), float(loads.d_bwd.max())
    est = max(fwd, layers * fsdp.allgather) + max(bwd, layers * (fsdp.allgather + fsdp.reduce_scatter))
    return est, fwd + bwd


def best_single_degree(wl: Workload, lengths: np.ndarray) -> tuple[float, float, int]:
    """Exhaustive: (estimate, Load, degree) of the best one-pass placement of ``lengths`` on equal
    groups of one degree (lexicographic, as the planner ranks them)."""
    best = (math.inf, math.inf, 0)
    for d in wl.tree.degrees:
        groups = wl.tree.num_gpus // d
        for assign in itertools.product(range(groups), repeat=lengths.size):
            units = np.array(assign)
            if np.bincount(units, weights=lengths / d, minlength=groups).max() <= wl.token_budget:
                best = min(best, (*estimate_and_load(wl, lengths, d, units * d), d))
    return best


def micro_batch_degrees(plan: Plan) -> list[set[int]]:
    return [
        {plan.nodes[j].degree for j in np.flatnonzero(plan.sample_mask(mb))} for mb in range(plan.num_micro_batches)
    ]


def test_small_case_equals_exhaustive_search_over_cuts_and_degrees() -> None:
    # 4 GPUs, one per host (every group crosses hosts), B_tok 16K: the 60K sequence needs degree 4 and
    # the batch (76K tokens) two passes. Static SP runs both at degree 4; BASP's second micro-batch
    # holds the four 4K sequences and runs them at degree 1, without all-to-alls.
    wl = model_workload(gpus=4, token_budget=16_384, gpus_per_node=1)
    lengths = [4000, 60_000, 4000, 4000, 4000]
    plan = get_planner("basp", max_micro_batches=3).plan(batch_of(lengths), wl)
    check_valid(plan, wl, lengths)
    ordered = np.sort(np.array(lengths))[::-1]
    cuts = []
    for m in range(2, 4):  # the memory minimum is 2 micro-batches
        routes = [best_single_degree(wl, ordered[c]) for c in blaster_split(ordered, m)]
        cuts.append((sum(r[0] for r in routes), sum(r[1] for r in routes), ",".join(str(r[2]) for r in routes)))
    static = get_planner("static").plan(batch_of(lengths), wl).metadata
    est, load, degrees = min([*cuts, (float(static["step_estimate_s"]), float(static["load_s"]), "static")])
    assert degrees == plan.metadata["basp_degrees"] == "4,1"
    assert float(plan.metadata["step_estimate_s"]) == pytest.approx(est, rel=1e-9)
    assert float(plan.metadata["load_s"]) == pytest.approx(load, rel=1e-9)
    assert float(plan.metadata["load_s"]) < float(static["load_s"])
    assert [d for d in micro_batch_degrees(plan)] == [{4}, {1}]


def test_short_micro_batch_gets_a_smaller_degree_than_the_long_one() -> None:
    wl = model_workload(gpus=8, token_budget=16_384)
    lengths = [100_000, *([2_000] * 40)]
    plan = get_planner("basp").plan(batch_of(lengths), wl)
    check_valid(plan, wl, lengths)
    degrees = micro_batch_degrees(plan)
    assert all(len(d) == 1 for d in degrees)
    long_mb = int(plan.micro_batches[0])
    assert min(min(d) for d in degrees) < next(iter(degrees[long_mb]))
    assert plan.metadata["basp_degrees"] == ",".join(str(next(iter(d))) for d in degrees)


lengths_st = st.lists(st.integers(1, 600) | st.integers(600, 30_000), min_size=1, max_size=24)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gpus=st.sampled_from([2, 4, 8]), budget=st.sampled_from([2048, 16_384, 65_536]), lengths=lengths_st)
def test_basp_estimate_is_never_worse_than_static(gpus: int, budget: int, lengths: list[int]) -> None:
    wl = model_workload(gpus=gpus, token_budget=budget)
    if max(lengths) > wl.tree.spmax * budget:
        return
    basp = get_planner("basp").plan(batch_of(lengths), wl)
    static = get_planner("static").plan(batch_of(lengths), wl)
    check_valid(basp, wl, lengths)
    assert basp.is_disjoint() and all(len(d) == 1 for d in micro_batch_degrees(basp))
    assert float(basp.metadata["step_estimate_s"]) <= float(static.metadata["step_estimate_s"]) * (1 + 1e-12)
