"""Lockstep waits: the profile's wait tables, their fit from calibration timings, the cost model's
lookup, and the engine's charge, on exact hand-computed cases."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from test_calibration_fit import _measurements

from nspsim.cost.analytic import AnalyticCostModel
from nspsim.cost.profile import WaitTable, parse_profile
from nspsim.records import BREAKDOWN_CATEGORIES
from nspsim.sp_tree import Node
from nspsim.specs.clusters import get_cluster
from nspsim.specs.model import get_model
from nspsim.specs.training import TrainingSpec
from nspsim_runtime.calibration.fit import build_profile, lockstep_table
from sim_helpers import Setup, StubCost

REL = 1e-12


def _profile(**extra: Any) -> dict[str, Any]:
    return {"format": "nspsim-profile", "version": 2, "name": "t", **extra}


def test_wait_table_interpolates_from_zero_and_extends_in_proportion() -> None:
    table = WaitTable(work_s=(0.01, 0.1), wait_s=(0.002, 0.005))
    assert table(0.0) == 0.0
    assert table(0.005) == pytest.approx(0.001, rel=REL)  # half-way from (0, 0) to the first point
    assert table(0.055) == pytest.approx(0.0035, rel=REL)
    assert table(0.2) == pytest.approx(0.01, rel=REL)  # 5% of the work past the last point


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        ([[0.1, 0.001], [0.05, 0.002]], "strictly increasing"),
        ([[0.1, -0.001]], "non-negative"),
        ([[0.0, 0.001]], "positive"),
        ("x", "list of"),
    ],
)
def test_bad_wait_tables_name_the_key(pairs: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        parse_profile(_profile(lockstep_wait_by_size={"2": pairs}))
    assert "lockstep_wait_by_size" in str(err.value)


def test_wait_tables_need_version_2() -> None:
    data = _profile(lockstep_wait_by_size={"2": [[0.1, 0.001]]}) | {"version": 1}
    with pytest.raises(ValueError, match='need "version": 2'):
        parse_profile(data)


def test_the_fit_subtracts_the_back_to_back_time_and_keeps_the_wait_non_decreasing() -> None:
    work, wait = lockstep_table([0.0001, 0.01, 0.04, 0.12], [0.0003, 0.0008, 0.0020, 0.0015])
    assert work == (0.01, 0.04, 0.12)
    assert wait == pytest.approx((0.0005, 0.0017, 0.0017), rel=REL)
    with pytest.raises(ValueError, match="back-to-back point"):
        lockstep_table([0.0], [0.0003])


def test_a_busy_machines_wait_above_its_work_is_capped_so_the_profile_loads() -> None:
    # measured under a load average of 9 on 2 cores: 8.9 ms in the all-to-all after 4.8 ms of work
    work, wait = lockstep_table([0.0, 0.0048, 0.036, 0.19], [0.0001, 0.009, 0.0262, 0.0488])
    assert work == (0.0048, 0.036, 0.19)
    assert wait == pytest.approx((0.0048, 0.0261, 0.0487), rel=REL)
    WaitTable(work_s=work, wait_s=wait)  # loads: no wait above its work


def test_the_cost_model_looks_up_the_nearest_smaller_measured_group_size() -> None:
    model, training = get_model("tiny"), TrainingSpec()
    plain = AnalyticCostModel(model=model, cluster=get_cluster("cpu", 4), training=training)
    assert plain.lockstep_waits() is None  # analytic: ranks arrive together
    profile = parse_profile(_profile(lockstep_wait_by_size={"2": [[0.1, 0.004]], "4": [[0.1, 0.01]]}))
    cost = AnalyticCostModel(model=model, cluster=get_cluster("cpu", 8), training=training, profile=profile)
    wait = cost.lockstep_waits()
    assert wait is not None
    assert wait(2, 0.05) == pytest.approx(0.002, rel=REL)
    assert wait(8, 0.1) == pytest.approx(0.01, rel=REL)  # 8 was not measured: 4's table
    assert wait(1, 0.1) == 0.0


def test_a_collective_starts_its_latency_late_by_the_wait_after_its_members_work() -> None:
    # One 1000-token sample on sp2#0 (per GPU: fwd prologue 5e-5, kernel 5e-4, epilogue 1e-4; bwd
    # prologue 2e-4, kernel 1e-3, epilogue 1e-4); 1.95e-3 without waits. With wait = 10% of the work
    # since the members' previous collective: the forward epilogue follows 5e-4 of kernel (+5e-5), the
    # backward prologue follows it directly (+0), the backward epilogue follows 1e-3 of kernel (+1e-4).
    seen: list[tuple[int, float]] = []

    def wait(size: int, work: float) -> float:
        seen.append((size, work))
        return 0.1 * work

    results = []
    for lockstep in (None, wait):
        setup = Setup(StubCost(comp=1e-9, pro=1e-7, epi=2e-7, a2a_bw=float("inf"), lockstep=lockstep))
        results.append(setup.simulator().simulate(setup.plan([Node(2, 0)], [1000])))
    before, after = results
    assert before.step_time_s == pytest.approx(1.95e-3, rel=REL)
    assert after.step_time_s == pytest.approx(2.1e-3, rel=REL)
    sp = BREAKDOWN_CATEGORIES.index("sp_exposed_comm")
    assert after.per_gpu_breakdown_s[:2, sp] - before.per_gpu_breakdown_s[:2, sp] == pytest.approx([1.5e-4] * 2)
    assert {size for size, _ in seen} == {2}
    assert sorted(w for _, w in seen if w > 0) == pytest.approx([5e-4, 1e-3], rel=1e-9)


def test_calibrated_lockstep_tables_reach_the_profile_and_load() -> None:

    m = replace(_measurements(), lockstep={2: ((0.01, 0.1), (0.0005, 0.004))})
    data = build_profile(m, name="p", provenance={"ranks": 2}, cluster="cpu")
    assert data["lockstep_wait_by_size"] == {"2": [[0.01, 0.0005], [0.1, 0.004]]}
    table = parse_profile(data).lockstep_wait_by_size[2]
    assert table(0.05) == pytest.approx(0.0005 + 0.0035 * 4 / 9, rel=1e-9)
