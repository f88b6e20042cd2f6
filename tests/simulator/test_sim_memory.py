"""Simulator memory: peak bytes per GPU by hand, the save/recompute policy, and out-of-memory reports."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from nspsim.execution.activation import plan_activations
from nspsim.sp_tree import Node
from nspsim.specs.backend import SPBackend
from nspsim.specs.clusters import get_cluster
from nspsim.specs.memory import MemoryModel, memory_model, saved_attention_bytes
from nspsim.specs.model import get_model
from nspsim.specs.training import TrainingSpec
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


def _tiny_memory(backend: SPBackend) -> MemoryModel:
    """The tiny model (2 layers, 8 query heads, 2 KV heads, head dim 8) in bf16 on 8 CPU ranks."""
    return memory_model(get_model("tiny"), get_cluster("cpu", 8), TrainingSpec(backend=backend, reserved_bytes=0))


def test_saved_attention_follows_the_runtime_layout_by_hand() -> None:
    """Per sharded token per layer: O (64 bf16 values) + fp32 LSE (8 heads) for every saved node;
    Ulysses adds head-layout Q (64) and K, V (16 each), and past 2 KV heads one more head (8) of K
    and of V per extra degree; Ring never replicates."""
    out_lse = 64 * 2 + 8 * 4
    ulysses, ring = _tiny_memory(SPBackend.ULYSSES), _tiny_memory(SPBackend.RING)
    assert ulysses.attention_bytes_per_token(4) == 832 and ring.attention_bytes_per_token(4) == 320
    assert ulysses.attention_bytes_per_token(1) == ring.attention_bytes_per_token(1) == 2 * out_lse
    assert ulysses.attention_bytes_per_token(2) == 2 * (out_lse + (64 + 2 * 16) * 2)
    assert ulysses.attention_bytes_per_token(8) == 2 * (out_lse + (64 + 2 * 16) * 2 + 6 * 2 * 8 * 2)
    assert ring.attention_bytes_per_token(2) == ring.attention_bytes_per_token(8) == 2 * out_lse
    assert ulysses.node_attention_bytes(800.0, 8) == 100 * ulysses.attention_bytes_per_token(8)


def test_ring_keeps_attention_where_ulysses_must_recompute() -> None:
    """An SP4 node of 4000 tokens: 1000 sharded tokens per GPU; with room for 2 + 400 B per token of
    keep, working set and attention, Ring (320 B) keeps its attention and Ulysses (832 B) cannot."""
    results = {}
    for backend in SPBackend:
        mem = replace(
            _tiny_memory(backend),
            usable_bytes=1000 * (2 + 400.0),
            state_bytes=0.0,
            buffer_bytes=0.0,
            keep_bytes_per_token=1.0,
            working_bytes_per_token=1.0,
        )
        results[backend] = plan_activations(Setup(COST).plan([Node(4, 0)], [4000]), mem).policy
    assert results == {SPBackend.RING: "keep-all", SPBackend.ULYSSES: "full-recompute"}


def test_every_sp_backend_states_its_saved_attention() -> None:
    """Adding an SPBackend member without its saved-attention layout fails here."""
    for backend in SPBackend:
        sp, per_kv_head, leaf = saved_attention_bytes(get_model("tiny"), TrainingSpec(backend=backend))
        assert sp >= leaf > 0 and per_kv_head >= 0


def test_hand_built_models_without_a_leaf_figure_use_the_sp_figure() -> None:
    assert memory(1.0).attention_bytes_per_token(1) == memory(1.0).attention_bytes_per_token(4) == 3.0


def test_memory_model_rejects_negative_coefficients_and_degree_zero() -> None:
    with pytest.raises(ValueError, match="attn_kv_bytes_per_head_token must be a byte count >= 0"):
        replace(memory(1.0), attn_kv_bytes_per_head_token=-1.0)
    with pytest.raises(ValueError, match="attn_leaf_bytes_per_token_layer must be a byte count >= 0"):
        replace(memory(1.0), attn_leaf_bytes_per_token_layer=float("nan"))
    with pytest.raises(ValueError, match="num_kv_heads must be >= 1"):
        replace(memory(1.0), num_kv_heads=0)
    with pytest.raises(ValueError, match="an SP degree is >= 1"):
        memory(1.0).attention_bytes_per_token(0)
