"""Simulator: exact hand-computed cases (collectives alone and sharing a link, compute-only steps,
comm wait from a late peer, the breakdown's accounting)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import simpy

from helpers import make_batch, toy_cluster, toy_cost, toy_model
from nspsim.cost.analytic import AnalyticCostModel
from nspsim.cost.interface import NonAttentionCost
from nspsim.plan import make_plan
from nspsim.records import BREAKDOWN_CATEGORIES
from nspsim.simulator import Simulator
from nspsim.simulator.hardware import Collective, CollectiveFactory, Fabric
from nspsim.sp_tree import Node
from nspsim.specs.training import TrainingSpec
from sim_helpers import Setup, StubCost, roomy_memory

REL = 1e-12


def _run_collectives(launches: list[tuple[Collective, float]], num_gpus: int = 8) -> dict[int, float]:
    """Launch each collective at its time on a fresh fabric; return finish time by collective id."""
    env = simpy.Environment()
    fabric = Fabric(env, num_gpus)
    done: dict[int, float] = {}
    for coll, at in launches:
        coll.on_done = lambda c: done.__setitem__(c.cid, c.finish)
        env.timeout(at).callbacks.append(lambda _e, c=coll, t=at: fabric.launch(c, t))
    env.run()
    return done


def _sp4(cid: int, first: int = 0) -> Collective:
    """The toy Ulysses QKV all-to-all of one 1000-token sample at SP degree 4 (across two hosts)."""
    seconds = toy_cost().attention(np.array([1000]), 4).fwd.prologue
    return CollectiveFactory(toy_cost(), toy_cluster()).make(cid, "a2a", first, first + 4, seconds, "a2a")


def test_one_alltoall_alone_takes_latency_plus_bytes_over_its_bottleneck() -> None:
    # 250 tokens per GPU at (64 + 2*4*16) * 2 = 384 B/token, 3/4 of them sent: 72,000 B, 24,000 B per peer.
    # One peer on the same host (NVLink 1 GB/s: 2.4e-5 s), two across hosts (NIC 0.1 GB/s: 4.8e-4 s):
    # NIC-bound, the NVLink port is busy 5% of the time; plus 100 us inter-host latency.
    coll = _sp4(0)
    assert coll.shares == pytest.approx((0.05, 1.0))
    assert _run_collectives([(coll, 0.0)])[0] == pytest.approx(1e-4 + 4.8e-4, rel=REL)


def test_two_collectives_sharing_a_nic_take_twice_as_long() -> None:
    done = _run_collectives([(_sp4(0), 0.0), (_sp4(1), 0.0)])
    assert done[0] == pytest.approx(1e-4 + 2 * 4.8e-4, rel=REL)
    assert done[1] == pytest.approx(1e-4 + 2 * 4.8e-4, rel=REL)


def test_staggered_sharing_is_processor_sharing() -> None:
    # The second transfer begins when the first is half done (3.4e-4): both run at half rate until the
    # first ends (3.4e-4 + 2 * 2.4e-4 = 8.2e-4); the second then has half left alone (+2.4e-4).
    done = _run_collectives([(_sp4(0), 0.0), (_sp4(1), 2.4e-4)])
    assert done[0] == pytest.approx(8.2e-4, rel=REL)
    assert done[1] == pytest.approx(1.06e-3, rel=REL)


def test_collectives_on_disjoint_gpus_do_not_interfere() -> None:
    done = _run_collectives([(_sp4(0, first=4), 0.0), (_sp4(1, first=0), 0.0)])
    assert done[0] == done[1] == pytest.approx(5.8e-4, rel=REL)


def test_multi_rail_fsdp_ring_shares_nvlink_with_an_intra_host_all_to_all() -> None:
    # The cross-host ring (one ring per NIC rail, 2 rails) puts half its bytes on NVLink: at 1 GB/s vs the
    # NIC's 0.1 GB/s it keeps NVLink 10% busy. From 1e-4 (ring latency) NVLink is loaded 1.1x, so both
    # run at 1/1.1: the SP2 all-to-all's remaining 9e-4 take 9.9e-4 (ends 1.09e-3); the ring then has
    # 1.9e-3 - 9e-4 = 1e-3 left alone (ends 2.09e-3).
    factory = CollectiveFactory(toy_cost(), toy_cluster())
    nvlink_only = factory.make(2, "sp2", 0, 2, 1e-3, "a2a")
    fsdp_ring = factory.make(3, "ring", 0, 8, 2e-3, "ring")
    done = _run_collectives([(nvlink_only, 0.0), (fsdp_ring, 0.0)])
    assert done[2] == pytest.approx(1.09e-3, rel=REL) and done[3] == pytest.approx(2.09e-3, rel=REL)


def test_a_port_oversubscribed_by_5_percent_slows_both_users_by_5_percent() -> None:
    # SP2 on host 0 (NVLink-bound, 10 us latency, 9.9e-4 s transfer) and the SP4 all-to-all, which keeps
    # GPU 0/1's NVLink 5% busy: from 1e-4 both run at 1/1.05. SP4's 4.8e-4 s take 5.04e-4 (ends 6.04e-4);
    # SP2 had done 9e-5 + 4.8e-4 by then and finishes its last 4.2e-4 alone (1.024e-3).
    sp2 = CollectiveFactory(toy_cost(), toy_cluster()).make(2, "sp2", 0, 2, 1e-3, "a2a")
    done = _run_collectives([(_sp4(0), 0.0), (sp2, 0.0)])
    assert done[0] == pytest.approx(6.04e-4, rel=REL)
    assert done[2] == pytest.approx(1.024e-3, rel=REL)


def test_nested_groups_on_the_same_gpus_slow_each_other_down() -> None:
    # An SP4 all-to-all under a world ring (both NIC-bound on GPUs 0-3): the ring is paced by its
    # most loaded NIC, so both share at half rate while they overlap.
    factory = CollectiveFactory(toy_cost(), toy_cluster())
    ring = factory.make(1, "ring", 0, 8, 1e-4 + 4.8e-4, "ring")
    done = _run_collectives([(_sp4(0), 0.0), (ring, 0.0)])
    assert done[0] == pytest.approx(1e-4 + 2 * 4.8e-4, rel=REL)
    assert done[1] == pytest.approx(1e-4 + 2 * 4.8e-4, rel=REL)


def test_compute_only_step_equals_the_sum_of_its_kernels() -> None:
    cluster = toy_cluster(1, 1)
    cost = AnalyticCostModel(
        model=toy_model(3), cluster=cluster, training=TrainingSpec(), attn_half_length=0.0, dense_gemm_efficiency=1.0
    )
    lengths = [3000, 1000, 500]
    plan = make_plan(
        planner="manual",
        cluster=cluster,
        model=toy_model(3),
        batch=make_batch(lengths),
        spmax=1,
        token_budget=10**9,
        nodes=[Node(1, 0)] * 3,
    )
    sim = Simulator(cost=cost, model=toy_model(3), cluster=cluster, training=TrainingSpec(), memory=roomy_memory(3))
    result = sim.simulate(plan)
    attn = cost.attention(np.array(lengths), 1)
    na = cost.non_attention(4500.0)
    head_f, head_b = cost.head(4500.0)
    kernels = 3 * (attn.fwd.compute + attn.bwd.compute + na.fwd_compute + na.bwd_compute)
    expected = kernels + head_f + head_b + cost.optimizer_time()
    assert result.step_time_s == pytest.approx(expected, rel=REL)
    assert result.breakdown_s["attn_fwd"] == pytest.approx(3 * attn.fwd.compute, rel=REL)
    assert result.breakdown_s["attn_bwd"] == pytest.approx(3 * attn.bwd.compute, rel=REL)
    assert result.breakdown_s["comm_wait"] == 0 and result.breakdown_s["sp_exposed_comm"] == 0


def test_leaf_only_plan_on_many_gpus_is_its_busiest_gpu() -> None:
    setup = Setup(StubCost(comp=1e-9, nonattn=1e-6))
    plan = setup.plan([Node(1, g) for g in range(8)], [1000 * (g + 1) for g in range(8)])
    result = setup.simulator().simulate(plan)
    # GPU 7 holds 8000 tokens: 3 * 6.4e-2 attention (fwd 1x, bwd 2x) + 3 * 8e-3 non-attention.
    assert result.critical_gpu == 7
    assert result.step_time_s == pytest.approx(3 * 6.4e-2 + 3 * 8e-3, rel=REL)
    own = 3 * 1e-9 * (1000.0 * np.arange(1, 9)) ** 2 + 3 * 1e-6 * 1000.0 * np.arange(1, 9)
    waits = result.per_gpu_breakdown_s[:, BREAKDOWN_CATEGORIES.index("comm_wait")]
    assert waits == pytest.approx(result.step_time_s - own, rel=1e-9, abs=1e-15)


def test_comm_wait_appears_when_one_group_member_is_late() -> None:
    # Sample A (1000) on sp2#0 = GPUs {0, 1}; sample B (2000) on GPU 0's leaf, issued first. GPU 0
    # computes B (4e-3 s) before A, so GPU 1, done with A at 5.5e-4, waits for GPU 0's epilogue.
    setup = Setup(StubCost(comp=1e-9, pro=1e-7, epi=1e-7, a2a_bw=float("inf")))
    plan = setup.plan([Node(2, 0), Node(1, 0)], [1000, 2000], issue_order=[(Node(1, 0), Node(2, 0))])
    result = setup.simulator(timeline=True).simulate(plan)
    assert result.step_time_s == pytest.approx(13.65e-3, rel=REL)
    assert result.critical_gpu == 0
    expect0 = {"attn_fwd": 4.5e-3, "attn_bwd": 9e-3, "sp_exposed_comm": 1.5e-4}
    assert result.breakdown_s == pytest.approx({k: expect0.get(k, 0.0) for k in BREAKDOWN_CATEGORIES}, abs=1e-15)
    gpu1 = dict(zip(BREAKDOWN_CATEGORIES, result.per_gpu_breakdown_s[1]))
    assert gpu1["comm_wait"] == pytest.approx(3.95e-3 + 7.9e-3, rel=1e-9)
    assert gpu1["sp_exposed_comm"] == pytest.approx(3e-4, rel=1e-9)
    waits = [
        (e.start, e.end)
        for e in result.timeline
        if e.gpu == 1 and e.track == "exposed" and e.category == "comm_wait" and e.layer == 0
    ]
    assert waits == [pytest.approx((5.5e-4, 4.5e-3), rel=1e-9)]


@pytest.mark.parametrize("mode", ["stream", "no-stream", "serial"])
def test_breakdown_sums_to_the_step_time_on_every_gpu(mode: str) -> None:
    setup = Setup(
        StubCost(
            layers=2,
            lat=1e-5,
            comp=1e-9,
            pro=2e-7,
            epi=1e-7,
            nonattn=1e-7,
            allgather=1e-3,
            reduce_scatter=1e-3,
            optimizer=1e-4,
        )
    )
    plan = setup.plan([Node(4, 0), Node(2, 2), Node(1, 0), Node(1, 5), Node(4, 1)], [4000, 1500, 800, 300, 2500])
    result = setup.simulator(mode=mode).simulate(plan)
    assert result.per_gpu_breakdown_s.sum(axis=1) == pytest.approx(np.full(8, result.step_time_s), rel=1e-12)
    assert sum(result.breakdown_s.values()) == pytest.approx(result.step_time_s, rel=1e-12)
    assert result.breakdown_s["other"] >= 1e-4  # the optimizer step


# ---- recomputation: a marked node re-sends Q, K, V and reruns its kernel right before its backward ----
REMAT_COST = StubCost(comp=1e-9, pro=1e-7, epi=2e-7, a2a_bw=float("inf"))  # no layout-change time


def test_recompute_is_prologue_and_kernel_without_epilogue() -> None:
    # One 1000-token sample on sp2#0, marked. Per GPU (S = 500, Q = 5e5): fwd pro 5e-5, kernel 5e-4, epi 1e-4;
    # bwd pro (dO) 2e-4, kernel 1e-3, epi 1e-4; recompute = fwd pro 5e-5 + kernel 5e-4, nothing sent back.
    # Backward from 6.5e-4: remat pro to 7e-4, dO pro to 9e-4 (under the remat kernel, 7e-4 to 1.2e-3),
    # bwd kernel to 2.2e-3, epilogue to 2.3e-3.
    setup = Setup(REMAT_COST)
    plan = setup.plan([Node(2, 0)], [1000], recompute=[True])
    result = setup.simulator().simulate(plan)
    assert result.step_time_s == pytest.approx(2.3e-3, rel=REL)
    expect = {"attn_fwd": 5e-4, "attn_remat": 5.5e-4, "attn_bwd": 1e-3, "sp_exposed_comm": 2.5e-4}
    assert result.breakdown_s == pytest.approx({k: expect.get(k, 0.0) for k in BREAKDOWN_CATEGORIES}, abs=1e-15)


def test_recompute_runs_inside_the_node_backward_in_reversed_issue_order() -> None:
    # Issue order (sp2#0 marked, leaf on GPU 0). Backward reversed: GPU 0 runs the leaf's backward kernel
    # (1.28e-3) first; the sp2 node's Q/K/V re-send (1.19e-3 to 1.24e-3) and dO all-to-all hide under it,
    # then its recompute kernel, its backward kernel and its epilogue (ends 4.07e-3).
    setup = Setup(REMAT_COST)
    plan = setup.plan(
        [Node(2, 0), Node(1, 0)], [1000, 800], recompute=[True, False], issue_order=[(Node(2, 0), Node(1, 0))]
    )
    result = setup.simulator(timeline=True).simulate(plan)
    assert result.step_time_s == pytest.approx(4.07e-3, rel=REL)
    gpu0 = dict(zip(BREAKDOWN_CATEGORIES, result.per_gpu_breakdown_s[0]))
    expect = {"attn_fwd": 1.14e-3, "attn_remat": 5e-4, "attn_bwd": 2.28e-3, "sp_exposed_comm": 1.5e-4}
    assert gpu0 == pytest.approx({k: expect.get(k, 0.0) for k in BREAKDOWN_CATEGORIES}, abs=1e-15)
    kernels = [e.name for e in result.timeline if e.gpu == 0 and e.track == "compute" and e.name.startswith("attn")]
    assert kernels == ["attn fwd sp2#0", "attn fwd sp1#0", "attn bwd sp1#0", "attn remat sp2#0", "attn bwd sp2#0"]


def test_layout_change_moves_token_ids_in_hidden_states_out_and_their_gradient_back() -> None:
    # Degrees {2, 1}: GPU 0 holds 500 + 300 = 800 tokens, (P-1)/P = 700 of them move. Token ids in:
    # 1e-5 + 700 * 16 B / 1 MB/s = 1.121e-2 s (no backward); hidden states out and their gradient in:
    # 1e-5 + 700 * 64 * 2 B / 1 MB/s = 8.961e-2 s each. Besides, only the sp2 node's four attention
    # all-to-alls take time (their latency, 4e-5 s).
    setup = Setup(StubCost(lat=1e-5, a2a_bw=1e6))
    nested = setup.simulator(timeline=True).simulate(setup.plan([Node(2, 0), Node(1, 0)], [1000, 300]))
    assert nested.step_time_s == pytest.approx(1.121e-2 + 2 * 8.961e-2 + 4e-5, rel=REL)
    assert nested.breakdown_s["sp_exposed_comm"] == pytest.approx(nested.step_time_s, rel=REL)
    names = [e.name for e in nested.timeline if e.gpu == 0 and e.track == "sp-comm"]
    assert [n for n in names if n.startswith("layout")] == [
        "layout-in (token ids)",
        "layout-out (hidden)",
        "layout-in (hidden grad)",
    ]
    uniform = setup.simulator().simulate(setup.plan([Node(2, 0), Node(2, 1)], [1000, 300]))
    assert uniform.step_time_s == pytest.approx(4e-5, rel=REL)  # one degree: already in the conventional layout


@pytest.mark.parametrize("prefetch, expected_ms, exposed_ms", [(0, 24.0, 6.0), (1, 20.0, 2.0), (2, 20.0, 2.0)])
def test_fsdp_prefetch_depth_is_honoured(prefetch: int, expected_ms: float, exposed_ms: float) -> None:
    # 3 layers, gather 1 ms, non-attention 2 ms forward, 4 ms backward on every GPU. No prefetch: every
    # gather waits for the layer before, 3 * (1 + 2) + 3 * (1 + 4) = 24 ms. One layer ahead: only the
    # first gather of each pass is exposed (gathers 0-1 back to back, 2 after layer 0 frees its
    # buffer): 1 + 6 + 1 + 12 = 20 ms. Two ahead hides nothing more here (compute-bound layers).
    setup = Setup(
        StubCost(layers=3, nonattn=2e-6, allgather=1e-3), training=TrainingSpec(fsdp_prefetch_layers=prefetch)
    )
    result = setup.simulator().simulate(setup.plan([Node(1, g) for g in range(8)], [1000] * 8))
    assert result.step_time_s == pytest.approx(expected_ms * 1e-3, rel=REL)
    assert result.breakdown_s["fsdp_exposed_comm"] == pytest.approx(exposed_ms * 1e-3, rel=REL)


def test_a_late_gpu_makes_every_other_gpu_wait_for_the_fsdp_gathers() -> None:
    # 2 layers, gathers of 1 ms issued once the layer before is done (no prefetch); non-attention 1 us per
    # token, GPU 0 holds 2000 tokens (2 ms forward, 4 backward), the others 1000 (1 ms, 2). Gathers run
    # 0-1, 3-4 (issued at 2 by GPUs 1-7, at 3 by GPU 0), 6-7 (bwd, issued at 5 / 6), 11-12 (at 9 / 11);
    # GPU 0 ends at 16 ms, the others at 14 and wait 1 + 1 + 2 ms for gathers plus 2 ms at the end.
    setup = Setup(StubCost(layers=2, nonattn=1e-6, allgather=1e-3), training=TrainingSpec(fsdp_prefetch_layers=0))
    plan = setup.plan([Node(1, g) for g in range(8)], [2000] + [1000] * 7, spmax=8)
    result = setup.simulator(timeline=True, extrapolate=False).simulate(plan)
    assert result.step_time_s == pytest.approx(16e-3, rel=REL) and result.critical_gpu == 0
    table = {k: result.per_gpu_breakdown_s[:, i] for i, k in enumerate(BREAKDOWN_CATEGORIES)}
    assert table["comm_wait"] == pytest.approx([0.0] + [6e-3] * 7, abs=1e-15)
    assert table["fsdp_exposed_comm"] == pytest.approx([4e-3] * 8, rel=REL)
    assert table["non_attn"] == pytest.approx([12e-3] + [6e-3] * 7, rel=REL)
    for gpu in range(8):
        waits = [
            (e.start, e.end)
            for e in result.timeline
            if e.gpu == gpu and e.track == "fsdp-allgather" and e.category == "comm_wait"
        ]
        spans = [
            (e.start, e.end)
            for e in result.timeline
            if e.gpu == gpu and e.track == "fsdp-allgather" and e.category == "fsdp_exposed_comm"
        ]
        assert waits == (
            [] if gpu == 0 else [pytest.approx(w, rel=REL) for w in ((2e-3, 3e-3), (5e-3, 6e-3), (9e-3, 11e-3))]
        )
        assert spans == [pytest.approx(s, rel=REL) for s in ((0.0, 1e-3), (3e-3, 4e-3), (6e-3, 7e-3), (11e-3, 12e-3))]


@dataclass(frozen=True)
class MoeStubCost(StubCost):
    """StubCost plus an expert-parallel all-to-all of ``ep_comm`` seconds per token (fwd; twice bwd)."""

    ep_comm: float = 0.0

    def non_attention(self, tokens: float) -> NonAttentionCost:
        return NonAttentionCost(
            self.nonattn * tokens, 2 * self.nonattn * tokens, self.ep_comm * tokens, 2 * self.ep_comm * tokens
        )


def test_expert_parallel_alltoalls_wrap_the_expert_compute_paced_by_the_groups_busiest_member() -> None:
    # EP 2 on 8 GPUs: groups (0,1), (2,3), ... Each all-to-all is half the layer's EP time of the group's
    # busiest member. GPU 0 holds 2000 tokens, the rest 1000. Group (0,1): fwd 1 (a2a) + 2 (compute) +
    # 1 (a2a) = 4 ms, bwd 2 + 4 + 2 = 8 ms: 12 ms. Other groups: 2 + 4 = 6 ms, then wait for nothing
    # (no FSDP): the step is group (0,1)'s, and GPU 1 waits 1 ms each pass inside the combine.
    setup = Setup(MoeStubCost(nonattn=1e-6, ep_comm=1e-6), training=TrainingSpec(expert_parallel=2))
    result = setup.simulator().simulate(setup.plan([Node(1, g) for g in range(8)], [2000] + [1000] * 7))
    assert result.step_time_s == pytest.approx(12e-3, rel=REL)
    crit = result.breakdown_s
    assert crit["non_attn"] == pytest.approx(6e-3, rel=REL)
    assert crit["ep_exposed_comm"] + crit["comm_wait"] == pytest.approx(6e-3, rel=REL)  # the all-to-alls: own category
    assert crit["other"] == pytest.approx(0.0, abs=1e-15)  # no longer filed under other
    dense = Setup(MoeStubCost(nonattn=1e-6, ep_comm=1e-6)).simulator()
    assert dense.simulate(setup.plan([Node(1, g) for g in range(8)], [2000] + [1000] * 7)).step_time_s == pytest.approx(
        6e-3, rel=REL
    )  # EP 1: no all-to-all, GPU 0's 2 + 4 ms of compute
