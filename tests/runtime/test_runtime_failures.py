"""Failures end every rank with a clear error within a bounded time, never a hang."""

from __future__ import annotations

import pytest
import rt_workers

from helpers import make_batch
from nspsim.plan import make_plan
from nspsim.sp_tree import Node
from nspsim.specs.cluster import get_cluster
from nspsim.specs.model import get_model
from runtime.launch import spawn_ranks

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
COMM_TIMEOUT_S = 20.0


def _plan(lengths: list[int], nodes: list[Node], world: int):
    return make_plan(
        planner="hand",
        cluster=get_cluster("cpu", world),
        model=get_model("tiny"),
        batch=make_batch(lengths),
        spmax=world,
        token_budget=10**6,
        nodes=nodes,
    )


def test_a_plan_hash_mismatch_stops_every_rank_before_any_sp_collective() -> None:
    a = _plan([30, 7, 12, 5], [Node(4, 0), Node(1, 1), Node(2, 1), Node(1, 0)], 4)
    b = _plan([30, 7, 12, 5], [Node(2, 0), Node(1, 1), Node(2, 1), Node(1, 0)], 4)
    outcomes = spawn_ranks(
        rt_workers.mismatched_plans,
        4,
        [a.to_json(), b.to_json(), a.to_json(), a.to_json()],
        timeout_s=90,
        comm_timeout_s=COMM_TIMEOUT_S,
    )
    for o in outcomes:
        assert o.status == "error", o
        first = o.error.splitlines()[0]
        assert first.startswith("PlanMismatchError: rank") and "ranks [1] hold" in first, first
        assert b.content_hash in first and a.content_hash in first
        assert o.elapsed_s < COMM_TIMEOUT_S


def test_a_rank_dying_mid_step_makes_every_other_rank_fail_fast() -> None:
    plan = _plan([40, 9, 17, 6, 3], [Node(4, 0), Node(2, 0), Node(2, 1), Node(1, 1), Node(1, 3)], 4)
    outcomes = spawn_ranks(
        rt_workers.dies_mid_step,
        4,
        (plan.to_json(), 2),
        timeout_s=90,
        comm_timeout_s=COMM_TIMEOUT_S,
        grace_s=COMM_TIMEOUT_S + 15,
    )
    assert outcomes[2].status == "died" and outcomes[2].exitcode == 17
    for o in outcomes[:2] + outcomes[3:]:
        assert o.status == "error", o
        assert o.elapsed_s < COMM_TIMEOUT_S + 10, o
        first = o.error.splitlines()[0]
        assert first.startswith("PeerFailure: rank") and "a peer rank died or stalled" in first, first
        assert any(w in first for w in ("Connection closed", "Connection reset")), first


def test_a_stuck_rank_is_ended_by_its_watchdog_and_its_peers_by_the_group_timeout() -> None:
    plan = _plan([40, 9, 17, 6, 3], [Node(4, 0), Node(2, 0), Node(2, 1), Node(1, 1), Node(1, 3)], 4)
    comm_timeout, watchdog = 4.0, 8.0
    outcomes = spawn_ranks(
        rt_workers.stalls_mid_step,
        4,
        (plan.to_json(), 1, watchdog),
        timeout_s=90,
        comm_timeout_s=comm_timeout,
        grace_s=watchdog + 10,
    )
    assert outcomes[1].status == "died" and outcomes[1].exitcode == 3  # runtime.watchdog.EXIT_CODE
    for o in outcomes[:1] + outcomes[2:]:
        assert o.status == "error", o
        assert comm_timeout * 0.5 < o.elapsed_s < comm_timeout + 10, o
        first = o.error.splitlines()[0]
        # A peer that reaches the collective late may see the stuck rank's exit before its own timeout.
        assert first.startswith("PeerFailure: rank") and any(
            w in first for w in ("Timed out", "Connection closed", "Connection reset")
        ), first
