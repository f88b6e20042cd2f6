"""Simulator records and options: frozen keyword-only records, construction-time validation, and no
process-wide side effects (the cycle collector is never switched off under another thread's feet)."""

from __future__ import annotations

import dataclasses
import gc
import json
import threading

import numpy as np
import pytest

from nspsim.cost.interface import AttentionCost
from nspsim.execution.activation import POLICIES, ActivationPlan, RecomputePolicy
from nspsim.simulator import SimOptions, TimelineEvent
from nspsim.simulator.modes import MODES, SimMode
from nspsim.simulator.periodic import Repeat
from nspsim.sp_tree import Node
from nspsim.specs.backend import SPBackend
from nspsim.workload import WorkloadConfig
from sim_helpers import Setup, StubCost


def test_records_are_frozen_and_keyword_only() -> None:
    event = TimelineEvent(gpu=0, track="compute", name="k", category="attn_fwd", start=0.0, end=1.0)
    repeat = Repeat(segment=3, shift=0.5, copies=36)
    act = ActivationPlan(policy="keep-all", remat=np.zeros(2, bool), peak_bytes=np.zeros(4), oom=None)
    for record in (event, repeat, act):
        with pytest.raises(dataclasses.FrozenInstanceError):
            record.oom = "x"  # type: ignore[misc, union-attr]
    with pytest.raises(TypeError):
        TimelineEvent(0, "compute", "k", "attn_fwd", 0.0, 1.0)  # type: ignore[misc]
    with pytest.raises(TypeError):
        Repeat(3, 0.5, 36)  # type: ignore[misc]
    with pytest.raises(ValueError, match="unknown recompute policy"):
        ActivationPlan(policy="some", remat=np.zeros(2, bool), peak_bytes=np.zeros(4), oom=None)
    with pytest.raises(ValueError, match="invalid layer repeat"):
        Repeat(segment=3, shift=float("nan"), copies=1)


class _GcWatchingCost(StubCost):
    """Records whether the cycle collector is enabled whenever the simulator prices attention."""

    seen: list[bool]

    def attention(self, lengths: np.ndarray, degree: int) -> AttentionCost:
        self.seen.append(gc.isenabled())
        return super().attention(lengths, degree)


def test_a_simulation_on_a_worker_thread_leaves_the_cycle_collector_alone() -> None:
    cost = _GcWatchingCost(layers=2, comp=1e-9, pro=1e-7, epi=1e-7, nonattn=1e-7)
    object.__setattr__(cost, "seen", [])
    setup = Setup(cost)
    plan = setup.plan([Node(4, 0), Node(1, 5)], [4000, 1000])
    main_thread_saw: list[bool] = []
    worker = threading.Thread(target=lambda: setup.simulator().simulate(plan))
    assert gc.isenabled()
    worker.start()
    while worker.is_alive():
        main_thread_saw.append(gc.isenabled())
    worker.join()
    assert cost.seen and all(cost.seen) and all(main_thread_saw) and gc.isenabled()


def test_mode_and_policy_names_are_string_enums_with_the_old_messages() -> None:
    """Plain strings become the members; unknown names keep their one-line errors; JSON is unchanged."""
    assert SimOptions(mode="serial").mode is SimMode.SERIAL
    assert MODES == ("stream", "no-stream", "serial") and POLICIES == ("keep-all", "full-recompute", "tree-marks")
    with pytest.raises(ValueError, match=r"unknown simulation mode 'bogus' \(known: stream, no-stream, serial\)"):
        SimOptions(mode="bogus")
    act = ActivationPlan(policy="tree-marks", remat=np.zeros(2, bool), peak_bytes=np.zeros(4), oom=None)
    assert act.policy is RecomputePolicy.TREE_MARKS and json.dumps(act.policy) == '"tree-marks"'
    with pytest.raises(ValueError, match=r"unknown recompute policy 'some' \(known: keep-all, "):
        ActivationPlan(policy="some", remat=np.zeros(2, bool), peak_bytes=np.zeros(4), oom=None)
    with pytest.raises(ValueError, match=r"unknown SP backend 'mesh' \(known: ulysses, ring\)"):
        WorkloadConfig(backend="mesh")
    assert WorkloadConfig(backend="ring").backend is SPBackend.RING
