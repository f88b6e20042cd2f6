"""Megatron-LM dynamic CP baseline: hand-computed schedules, properties, option validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nspsim.plan import Plan
from nspsim.planners import get_planner
from nspsim.planners.megatron_cp import gpus_needed
from nspsim.workload import Workload
from planner_fixtures import batch_of, check_valid, tiny_workload

WORKLOADS: dict[tuple[int, int, int | None], Workload] = {}


def workload(gpus: int, budget: int, spmax: int | None = None) -> Workload:
    key = (gpus, budget, spmax)
    if key not in WORKLOADS:
        WORKLOADS[key] = (
            tiny_workload(gpus=gpus, token_budget=budget)
            if spmax is None
            else tiny_workload(gpus=gpus, token_budget=budget, spmax=spmax)
        )
    return WORKLOADS[key]


def placed(plan: Plan) -> list[tuple[int, int, int]]:
    """(degree, first rank, micro-batch) of every sample, batch order."""
    return [(n.degree, n.first_rank, mb) for n, mb in zip(plan.nodes, plan.micro_batches, strict=True)]


def test_cp_size_is_the_next_power_of_two_of_length_over_capacity() -> None:
    assert [gpus_needed(n, 100) for n in (1, 100, 101, 200, 201, 400, 401)] == [1, 1, 2, 2, 4, 4, 8]
    assert gpus_needed(1, 100, min_cp_size=4) == 4 and gpus_needed(900, 100, min_cp_size=4) == 16
    for length in range(1, 3000, 7):  # Megatron's float form: max(1, 2 ** ceil(log2(L / capacity)))
        assert gpus_needed(length, 97) == max(1, 2 ** math.ceil(math.log2(length / 97)))


def test_hand_computed_schedule_on_eight_gpus() -> None:
    # B_tok 100, batch order [90, 350, 40, 180, 60, 90]; sorted 350, 180, 90, 90, 60, 40; work cap
    # 350 * 100 * 1.05 = 36750. 350 needs 4 -> ranks 0-3 (87.5 tokens/rank, work 30625 = the peak);
    # 180 needs 2 -> new group 4-5 (a size-4 group would tie at the peak; the first option wins);
    # the 90s need 1 -> ranks 6 and 7; 60 fits no group's tokens (90+60, 90+30, 87.5+15 > 100) and
    # waits; 40 joins 0-3 (87.5 + 10 <= 100, work 31025 <= cap). Micro-batch 1: 60 alone on rank 0,
    # doubled until no rank is idle -> degree 8.
    wl = workload(8, 100)
    plan = get_planner("megatron-cp").plan(batch_of([90, 350, 40, 180, 60, 90]), wl)
    check_valid(plan, wl, [90, 350, 40, 180, 60, 90])
    assert placed(plan) == [(1, 6, 0), (4, 0, 0), (4, 0, 0), (2, 4, 0), (8, 0, 1), (1, 7, 0)]
    assert plan.metadata["megatron_cp_degrees"] == "8:1,4:2,2:1,1:2"
    assert plan.metadata["megatron_cp_raised"] == 2  # the 60 (needs 1, runs at 8) and the 40 (at 4)
    assert plan.metadata["max_seqlen_per_rank"] == 100


def test_a_larger_group_wins_when_it_lowers_the_attention_peak() -> None:
    # 201 needs 4 (work 201^2/4 = 10100.25); 200 needs 2, but at 2 its work 20000 would be the peak,
    # at 4 (new group 4-7) it is 10000 < 10100.25: Megatron raises it to 4.
    wl = workload(8, 100)
    plan = get_planner("megatron-cp").plan(batch_of([200, 201]), wl)
    assert placed(plan) == [(4, 4, 0), (4, 0, 0)]
    assert plan.metadata["megatron_cp_raised"] == 1


def test_the_capacity_option_sets_the_degrees_and_the_micro_batches() -> None:
    wl = workload(2, 100)
    lengths = [100, 100]
    assert placed(get_planner("megatron-cp").plan(batch_of(lengths), wl)) == [(1, 0, 0), (1, 1, 0)]
    # at 50 tokens per rank each needs both GPUs, and two of them (50 + 50 > 50) cannot share a pass
    plan = get_planner("megatron-cp", max_seqlen_per_rank=50).plan(batch_of(lengths), wl)
    assert placed(plan) == [(2, 0, 0), (2, 0, 1)]
    assert plan.metadata["max_seqlen_per_rank"] == 50
    plan = get_planner("megatron-cp", min_cp_size=2).plan(batch_of([10, 10, 10]), wl)
    assert placed(plan) == [(2, 0, 0), (2, 0, 0), (2, 0, 0)]


def test_below_p_the_largest_group_is_spmax_and_ranks_may_idle() -> None:
    # spmax 2 on 8 GPUs: one 150-token sample needs 2 GPUs and cannot grow to fill the other six.
    wl = workload(8, 100, spmax=2)
    assert placed(get_planner("megatron-cp").plan(batch_of([150]), wl)) == [(2, 0, 0)]
    plan = get_planner("megatron-cp").plan(batch_of([150] * 5), wl)
    assert placed(plan) == [(2, 0, 0), (2, 2, 0), (2, 4, 0), (2, 6, 0), (2, 0, 1)]


def test_a_sample_longer_than_the_largest_group_holds_is_refused() -> None:
    wl = workload(4, 100)
    with pytest.raises(ValueError, match=r"sample 1 of batch 0 \(length 500\) fits no admissible SP group.*B_tok=100"):
        get_planner("megatron-cp").plan(batch_of([10, 500]), wl)
    with pytest.raises(ValueError, match=r"sample 1 of batch 0 \(length 300\) needs more than spmax=4 GPUs at "):
        get_planner("megatron-cp", max_seqlen_per_rank=50).plan(batch_of([10, 300]), wl)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_seqlen_per_rank": 0}, "max_seqlen_per_rank must be 'auto'"),
        ({"max_seqlen_per_rank": True}, "max_seqlen_per_rank must be 'auto'"),
        ({"max_seqlen_per_rank": "big"}, "max_seqlen_per_rank must be 'auto'"),
        ({"max_seqlen_per_rank": 1.5}, "max_seqlen_per_rank must be 'auto'"),
        ({"min_cp_size": 3}, "min_cp_size must be a power of two"),
        ({"min_cp_size": 0}, "min_cp_size must be a power of two"),
        ({"min_cp_size": True}, "min_cp_size must be a power of two"),
        ({"cap_delta": -0.1}, r"cap_delta must be a number in \[0, 1e\+06\]"),
        ({"cap_delta": math.nan}, "cap_delta=nan is not a finite number"),
        ({"cap_delta": math.inf}, "cap_delta=inf is not a finite number"),
        ({"cap_delta": True}, "cap_delta must be a number"),
    ],
)
def test_invalid_options_are_refused(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        get_planner("megatron-cp", **options)


def test_options_that_cannot_apply_to_the_workload_are_refused_not_clamped() -> None:
    wl = workload(4, 100)
    with pytest.raises(ValueError, match="min_cp_size=8 is above spmax=4: use min_cp_size <= 4"):
        get_planner("megatron-cp", min_cp_size=8).check(wl)
    with pytest.raises(ValueError, match="max_seqlen_per_rank=101 is above the token budget B_tok=100"):
        get_planner("megatron-cp", max_seqlen_per_rank=101).plan(batch_of([10]), wl)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    gpus=st.sampled_from([1, 2, 4, 8, 16]),
    budget=st.sampled_from([64, 100, 1000]),
    fractions=st.lists(st.floats(0.001, 1.0), min_size=1, max_size=40),
)
def test_groups_are_disjoint_aligned_hold_their_samples_and_leave_no_rank_idle(
    gpus: int, budget: int, fractions: list[float]
) -> None:
    wl = workload(gpus, budget)
    lengths = [max(1, int(f * wl.tree.spmax * budget)) for f in fractions]
    plan = get_planner("megatron-cp").plan(batch_of(lengths), wl)
    check_valid(plan, wl, lengths)
    assert plan.is_disjoint()  # every rank in at most one group per micro-batch
    for node, length in zip(plan.nodes, lengths, strict=True):
        assert node.first_rank % node.degree == 0 and node.degree >= gpus_needed(length, budget)
    _, degrees, firsts, mbs = plan.arrays
    for mb in range(plan.num_micro_batches):
        covered = np.zeros(gpus, dtype=bool)
        for d, f in {(int(d), int(f)) for d, f in zip(degrees[mbs == mb], firsts[mbs == mb], strict=True)}:
            covered[f : f + d] = True
        assert covered.all() or wl.tree.spmax < gpus  # spmax = P: idle ranks are always filled by doubling
