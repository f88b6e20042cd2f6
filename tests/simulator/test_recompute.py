"""Tree-level recomputation: top-down save marks, node split by sample subset, and what the simulator
does with them (exact cases on round-number memory)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nspsim.execution.activation import plan_activations
from nspsim.execution.recompute import mark_recompute
from nspsim.sp_tree import Node
from nspsim.specs.memory import MemoryModel
from sim_helpers import Setup, StubCost


def memory(capacity: float) -> MemoryModel:
    """1 byte per sharded token always kept, 1 more per token of saved attention (any degree)."""
    return MemoryModel(
        usable_bytes=capacity,
        state_bytes=0.0,
        buffer_bytes=0.0,
        keep_bytes_per_token=1.0,
        working_bytes_per_token=0.0,
        attn_bytes_per_token_layer=1.0,
        attn_kv_bytes_per_head_token=0.0,
        num_layers=1,
        num_kv_heads=4,
        token_budget=10**9,
    )


COST = StubCost(comp=1e-9, pro=1e-7, epi=1e-7)


def test_upper_node_saved_first_then_budget_runs_out() -> None:
    # GPUs 0-3 hold 1600/4 + 200 = 600 tokens: 400 bytes free. The root's 400 bytes per rank fit exactly,
    # the leaves' 200 do not.
    plan = Setup(COST).plan([Node(4, 0)] + [Node(1, g) for g in range(4)], [1600, 200, 200, 200, 200])
    marked = mark_recompute(plan, memory(1000), COST)
    assert marked.recompute == (False, True, True, True, True)
    assert marked.content_hash != plan.content_hash
    assert marked.metadata["tree_recompute_saved_share"] == pytest.approx(0.2)


def test_node_cut_by_the_budget_is_split_by_sample_subset() -> None:
    # sp2#0 holds 800 and 400 tokens (400 + 200 per rank); 400 bytes free: the longer sample (highest
    # recompute cost per saved byte) is saved, the shorter one recomputed.
    plan = Setup(COST).plan([Node(2, 0), Node(2, 0)], [400, 800])
    marked = mark_recompute(plan, memory(1000), COST)
    assert marked.recompute == (True, False)


def test_nothing_is_marked_when_all_attention_fits() -> None:
    plan = Setup(COST).plan([Node(4, 0), Node(1, 0)], [1600, 200])
    assert mark_recompute(plan, memory(10_000), COST).recompute == (False, False)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.sampled_from([1, 2, 4, 8]), st.integers(0, 7), st.integers(16, 3000)), min_size=1, max_size=15
    ),
    st.floats(0.3, 3.0),
)
def test_marks_always_fit_whenever_full_recomputation_fits(samples: list[tuple[int, int, int]], slack: float) -> None:
    nodes = [Node(d, i % (8 // d)) for d, i, _ in samples]
    plan = Setup(COST).plan(nodes, [n for _, _, n in samples], spmax=8)
    tokens = plan.tokens_per_gpu(0)
    mem = memory(float(tokens.max()) * (1 + slack))
    marked = mark_recompute(plan, mem, COST)
    act = plan_activations(marked, mem)
    assert act.oom is None and act.policy == "tree-marks"
    full = plan_activations(plan, memory(float(tokens.max()) * 2 + 1))
    if full.policy == "keep-all":
        assert not any(mark_recompute(plan, memory(float(tokens.max()) * 2 + 1), COST).recompute)


def test_tree_marks_recompute_less_than_full_recomputation() -> None:
    setup = Setup(COST, memory=memory(1000))
    plan = setup.plan([Node(4, 0)] + [Node(1, g) for g in range(4)], [1600, 200, 200, 200, 200])
    full = setup.simulator().simulate(plan)
    tree = setup.simulator().simulate(mark_recompute(plan, setup.memory, COST))  # type: ignore[arg-type]
    assert full.recompute_policy == "full-recompute" and tree.recompute_policy == "tree-marks"
    # Full: GPU 0 reruns its leaf (4e-5 s) and the root (kernel 1e-9 * 1600^2 / 4 = 6.4e-4 s; its Q/K/V
    # re-send, 4e-5 s, hides under the leaf's backward, which comes first in reversed issue order; no
    # epilogue); tree marks: only the leaf, which has no communication.
    assert full.breakdown_s["attn_remat"] == pytest.approx(6.8e-4, rel=1e-9)
    assert tree.breakdown_s["attn_remat"] == pytest.approx(4e-5, rel=1e-9)
    assert tree.step_time_s < full.step_time_s  # type: ignore[operator]


def test_prepare_plan_marks_then_orders_like_the_steps_it_composes() -> None:
    from nspsim.execution.issue_order import optimize_issue_order
    from nspsim.execution.prepare import AS_PLANNED, NESTED_PREPARATION, prepare_plan, recorded_preparation

    setup = Setup(StubCost(comp=1e-9, pro=2e-6, epi=1e-7), memory=memory(1000))
    plan = setup.plan([Node(4, 0)] + [Node(1, g) for g in range(4)], [1600, 200, 200, 200, 200])
    mem = memory(1000)
    both = prepare_plan(plan, memory=mem, cost=setup.cost, preparation=NESTED_PREPARATION)
    direct = optimize_issue_order(mark_recompute(plan, mem, setup.cost), setup.cost)
    assert both == replace(direct, metadata={**direct.metadata, "prepared": "all"})
    assert recorded_preparation(both) == "all" and recorded_preparation(plan) is None
    assert both.recompute == (False, True, True, True, True) and both.issue_order != plan.issue_order
    as_routed = prepare_plan(plan, memory=mem, cost=setup.cost, preparation=AS_PLANNED)
    assert as_routed.content_hash == plan.content_hash and as_routed.recompute == plan.recompute
    assert recorded_preparation(as_routed) == "none"  # recorded, so a replay runs it as written
    sim = setup.simulator()
    ranked = prepare_plan(
        plan,
        memory=mem,
        cost=setup.cost,
        preparation=NESTED_PREPARATION,
        evaluate=lambda p: sim.simulate(p).step_time_or_inf,
    )
    marked_only = sim.simulate(mark_recompute(plan, mem, setup.cost)).step_time_or_inf
    assert sim.simulate(ranked).step_time_or_inf <= marked_only
