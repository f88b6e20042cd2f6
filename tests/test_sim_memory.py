"""Simulator memory: peak bytes per GPU by hand, the save/recompute policy, and out-of-memory reports."""

from __future__ import annotations

import numpy as np
import pytest

from nspsim.execution.activation import plan_activations
from nspsim.sp_tree import Node
from nspsim.specs.memory import MemoryModel
from sim_helpers import Setup, StubCost

COST = StubCost(comp=1e-9, pro=1e-7, epi=1e-7)


def memory(usable: float) -> MemoryModel:
    """States 100 B, buffers 50 B; 2 B per sharded token always, 3 B per token of saved attention."""
    return MemoryModel(
        usable_bytes=usable,
        state_bytes=100.0,
        buffer_bytes=50.0,
        keep_bytes_per_token=1.0,
        working_bytes_per_token=1.0,
        attn_bytes_per_token_layer=3.0,
        attn_kv_bytes_per_head_token=0.0,
        num_layers=1,
        num_kv_heads=4,
        token_budget=10**9,
    )


def plan():  # type: ignore[no-untyped-def]
    # GPU 0: 800/4 + 100 = 300 tokens; GPUs 1-3: 200; GPU 5: 50; others 0.
    return Setup(COST).plan([Node(4, 0), Node(1, 0), Node(1, 5)], [800, 100, 50])


def test_peak_memory_keeps_all_attention_when_it_fits() -> None:
    act = plan_activations(plan(), memory(10_000))
    tokens = np.array([300, 200, 200, 200, 0, 50, 0, 0], dtype=float)
    assert act.policy == "keep-all" and act.oom is None and not act.remat.any()
    assert act.peak_bytes == pytest.approx(150 + 5 * tokens)


def test_full_recomputation_when_attention_does_not_fit() -> None:
    # Keeping attention needs 5 * 300 = 1500 B on GPU 0; only 1400 - 150 = 1250 B are free; 2 * 300 fits.
    act = plan_activations(plan(), memory(1400))
    assert act.policy == "full-recompute" and act.oom is None and act.remat.all()
    assert act.peak_bytes[0] == pytest.approx(150 + 600)


def test_out_of_memory_is_reported_not_simulated() -> None:
    setup = Setup(COST, memory=memory(700))  # 550 B free < 2 * 300 on GPU 0
    result = setup.simulator().simulate(plan())
    assert result.oom and result.step_time_s is None and result.breakdown_s == {}
    assert "out of memory: GPU 0" in (result.oom_detail or "")
    assert result.to_dict()["oom"] is True and result.to_dict()["step_time_s"] is None
    assert result.peak_memory_bytes[0] == pytest.approx(750)


def test_simulated_result_reports_peak_memory_and_policy() -> None:
    result = Setup(COST, memory=memory(1400)).simulator().simulate(plan())
    assert not result.oom and result.recompute_policy == "full-recompute" and result.remat_share == 1.0
    assert result.peak_memory_bytes[0] == pytest.approx(750)
    assert result.breakdown_s["attn_remat"] > 0
