"""Cost model: exact hand-computed cases on the toy specs (see tests/support/helpers.py for the numbers)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from helpers import TOY_GPU, toy_cluster, toy_cost, toy_model
from nspsim.cost.analytic import AnalyticCostModel
from nspsim.cost.backends import BACKENDS, COSTS, SPBackend, backend_cost
from nspsim.cost.comm import alltoall_traffic, ring_collective_traffic, ring_traffic
from nspsim.cost.interface import CostModel
from nspsim.cost.profile import LengthTable, Profile
from nspsim.specs.model import ModelSpec, MoESpec
from nspsim.specs.training import TrainingSpec

L = np.array([1000])


def test_satisfies_the_interface() -> None:
    assert isinstance(toy_cost(), CostModel)


def test_ulysses_degree_2_inside_one_host() -> None:
    # FLOPs fwd = 2 * 1000^2 * 64 = 1.28e8, per GPU 6.4e7 at 1e12 FLOP/s.
    # QKV a2a: 500 tokens * 1/2 sent * (64 + 2*4*16) * 2 B = 96,000 B at 1 GB/s, + 10 us latency.
    # Output a2a: 500 * 1/2 * 64 * 2 B = 32,000 B.
    c = toy_cost().attention(L, 2)
    assert c.fwd.prologue == pytest.approx(9.6e-5 + 1e-5)
    assert c.fwd.compute == pytest.approx(6.4e-5)
    assert c.fwd.epilogue == pytest.approx(3.2e-5 + 1e-5)
    assert c.bwd.prologue == pytest.approx(3.2e-5 + 1e-5)
    assert c.bwd.compute == pytest.approx(2.5 * 6.4e7 / 0.5e12)
    assert c.bwd.epilogue == pytest.approx(9.6e-5 + 1e-5)


def test_ulysses_across_hosts_is_nic_bound() -> None:
    # k=4 over two 2-GPU hosts: 250 tokens * 3/4 * 192 * 2 B = 72,000 B sent, 1 local and 2 remote peers:
    # NIC carries 48,000 B at 0.1 GB/s = 4.8e-4 s; latency 100 us.
    assert toy_cost().attention(L, 4).fwd.prologue == pytest.approx(4.8e-4 + 1e-4)


def test_ulysses_replicates_kv_heads_beyond_kv_head_count() -> None:
    # k=8 > 4 KV heads: width 64 + 2*8*16 = 320 -> 640 B/token; 125 * 7/8 * 640 = 70,000 B; 6/7 remote.
    assert toy_cost().attention(L, 8).fwd.prologue == pytest.approx(60_000 / 1e8 + 1e-4)


def test_varlen_flops_use_sum_of_squares() -> None:
    two = toy_cost().attention(np.array([500, 500]), 1).fwd.compute
    one = toy_cost().attention(np.array([1000]), 1).fwd.compute
    assert two == pytest.approx(one / 2)
    assert toy_model().attention_flops(500**2 + 500**2) == pytest.approx(2 * 64 * 500_000)


def test_degree_one_has_no_communication() -> None:
    c = toy_cost().attention(L, 1)
    assert (c.fwd.prologue, c.fwd.epilogue, c.bwd.prologue, c.bwd.epilogue) == (0, 0, 0, 0)
    assert toy_cost().node_overhead(1) == (0.0, 0.0)


def test_sample_costs_plus_overhead_equal_node_cost_for_ulysses() -> None:
    cost, lengths = toy_cost(), np.array([300, 1000, 4096])
    for k in (1, 2, 4, 8):
        node = cost.attention(lengths, k)
        per = cost.attention_sample_costs(lengths, k)
        over = cost.node_overhead(k)
        assert node.fwd.total == pytest.approx(per.fwd.sum() + over[0])
        assert node.bwd.total == pytest.approx(per.bwd.sum() + over[1])


def test_ring_degree_2() -> None:
    # Per GPU KV block: 500 tokens * 2 * 64 * 2 B = 128,000 B per step over NVLink = 1.28e-4 s (+10 us).
    # Per-step compute 6.4e-5 / 2 = 3.2e-5; fwd = c + (k-1) * max(c, m + lat).
    c = toy_cost("ring").attention(L, 2)
    assert c.fwd.prologue == 0 and c.fwd.epilogue == 0
    assert c.fwd.compute == pytest.approx(3.2e-5 + 1.38e-4)
    # Backward circulates K,V (bf16) and the fp32 dK,dV: 3 * 1.28e-4 per step; compute 2.5x at half the throughput.
    cb = 2.5 * 6.4e7 / 0.5e12 / 2
    assert c.bwd.compute == pytest.approx(cb + max(cb, 3.84e-4 + 1e-5))


def test_ring_sample_costs_bound_the_node_cost() -> None:
    cost, lengths = toy_cost("ring"), np.array([100, 2000, 9000])
    for k in (2, 4, 8):
        per = cost.attention_sample_costs(lengths, k)
        over = cost.node_overhead(k)
        assert per.fwd.sum() + over[0] >= cost.attention(lengths, k).fwd.total - 1e-12


def test_non_attention_dense() -> None:
    # 2 * (64*(64+128) + 64*64 + 3*64*128) = 81,920 FLOPs/token; 1000 tokens at 2e12 FLOP/s.
    c = toy_cost().non_attention(1000)
    assert c.fwd_compute == pytest.approx(4.096e-5)
    assert c.bwd_compute == pytest.approx(2 * 4.096e-5 + 2 * 3 * 64 * 128 * 1000 / 2e12)
    assert c.fwd_comm == 0 and c.bwd_comm == 0


def test_tile_padding_is_half_a_tile_per_gemm_and_per_local_expert() -> None:
    # Tiles of 129 rows waste 64 rows per GEMM on average.
    gpu = replace(TOY_GPU, gemm_tile_rows=129)
    dense = replace(toy_cost(), cluster=replace(toy_cluster(), gpu=gpu))
    c = dense.non_attention(1000)
    assert c.fwd_compute == pytest.approx((1000 + 64) * 81_920 / 2e12)
    ffn = 2 * 3 * 64 * 128
    assert c.bwd_compute == pytest.approx((1000 + 64) * (2 * 81_920 + ffn) / 2e12)
    # MoE: 8 experts over EP 2 = 4 local experts, each with a ragged last tile per GEMM; the router
    # and attention projections are dense GEMMs (one ragged tile each).
    moe = ModelSpec(
        name="toy-moe", num_layers=1, hidden=64, num_heads=4, num_kv_heads=4, head_dim=16, vocab=10,
        qk_norm=False, moe=MoESpec(num_experts=8, top_k=2, expert_ffn=32),
    )  # fmt: skip
    cost = AnalyticCostModel(
        model=moe,
        cluster=replace(toy_cluster(), gpu=gpu),
        training=TrainingSpec(expert_parallel=2),
        moe_gemm_efficiency=1.0,
        elementwise=False,
    )
    expert, router, attn = 2 * 3 * 64 * 32, 2 * 64 * 8, 2 * (64 * 64 + 2 * 64 * 64 + 64 * 64)
    fwd_pad, bwd_pad = cost.tile_padding_flops()
    assert fwd_pad == pytest.approx(64 * (attn + router + 4 * expert))
    assert bwd_pad == pytest.approx(64 * (2 * (attn + router + 4 * expert) + 4 * expert))
    no_pad = replace(cost, cluster=replace(toy_cluster(), gpu=TOY_GPU))
    assert cost.non_attention(500).fwd_compute - no_pad.non_attention(500).fwd_compute == pytest.approx(fwd_pad / 2e12)
    assert cost.non_attention(0).fwd_compute == 0.0  # a GPU without tokens runs no GEMM


def test_fsdp_ring_over_hosts() -> None:
    # Layer params 64*192 + 64*64 + 3*64*128 + 2*64 = 41,088; 7/8 moved in bf16. One ring per NIC rail
    # (2 GPUs per host): each NIC carries half of a GPU's bytes, which at 0.1 GB/s is the bottleneck.
    f = toy_cost().fsdp()
    assert f.allgather == pytest.approx(41_088 * 7 / 8 * 2 / 2 / 1e8 + 1e-4)
    assert f.reduce_scatter == pytest.approx(f.allgather)


def test_alltoall_time_latency_and_bandwidth() -> None:
    cost = toy_cost()
    assert cost.alltoall_time(1e6, 2) == pytest.approx(1e-5 + 1e-3)
    assert cost.alltoall_time(1e6, 1) == 0.0


def test_profile_overrides_bandwidth_throughput_and_latency() -> None:
    profile = Profile(
        alltoall_bw_by_degree={2: 5e8, 8: 1e7},
        latency_s_by_degree={2: 2e-5},
        attn_fwd_flops_by_length=LengthTable(lengths=(1024, 4096), values=(1e12, 2e12)),
    )
    cost = toy_cost(profile=profile)
    assert cost.attention(L, 2).fwd.prologue == pytest.approx(96_000 / 5e8 + 2e-5)
    # Degree 4 falls back to the nearest smaller profiled degree (2) for bandwidth and latency.
    assert cost.alltoall_seconds_per_byte(4) == pytest.approx(1 / 5e8)
    assert cost.attn_throughput(np.array([2048]), backward=False)[0] == pytest.approx(1.5e12)
    assert cost.attn_throughput(np.array([10]), backward=False)[0] == pytest.approx(1e12)


def test_throughput_saturates_with_length() -> None:
    from nspsim.cost.analytic import AnalyticCostModel
    from nspsim.specs.training import TrainingSpec

    cost = AnalyticCostModel(model=toy_model(), cluster=toy_cluster(), training=TrainingSpec(), attn_half_length=512)
    got = cost.attn_throughput(np.array([512, 1_000_000]), backward=False)
    assert got[0] == pytest.approx(0.5e12)
    assert got[1] == pytest.approx(1e12, rel=1e-3)


def test_link_traffic_split() -> None:
    t = alltoall_traffic(700.0, 8, 2)
    assert (t.nvlink_bytes, t.nic_bytes) == (100.0, 600.0)
    assert alltoall_traffic(700.0, 1, 2).nic_bytes == 0
    assert ring_traffic(10.0, 2, 2).nvlink_bytes == 10.0 and ring_traffic(10.0, 4, 2).nic_bytes == 10.0
    rails = ring_collective_traffic(80.0, 64, 8)
    assert (rails.nvlink_bytes, rails.nic_bytes) == (70.0, 10.0)
    assert ring_collective_traffic(80.0, 8, 8) == ring_traffic(80.0, 8, 8)


def test_qwen3_orders_of_magnitude() -> None:
    from nspsim.cost.analytic import AnalyticCostModel
    from nspsim.specs.clusters import get_cluster
    from nspsim.specs.model import get_model
    from nspsim.specs.training import TrainingSpec

    cost = AnalyticCostModel(model=get_model("qwen3-30b-a3b"), cluster=get_cluster("h100", 64), training=TrainingSpec())
    one = cost.attention(np.array([128 * 1024]), 32)
    # A 128K sample at SP=32 spends more time computing than communicating, and crossing hosts costs.
    assert one.fwd.compute > one.fwd.comm > 0
    assert cost.alltoall_seconds_per_byte(16) > 4 * cost.alltoall_seconds_per_byte(8)


def test_every_sp_backend_has_a_registered_cost() -> None:
    """Adding an SPBackend member without a cost file fails here (recipe: nspsim.cost.backends)."""
    assert set(COSTS) == set(SPBackend)
    assert backend_cost("ring") is COSTS[SPBackend.RING]
    with pytest.raises(ValueError, match=r"unknown SP backend 'mesh' \(known: ulysses, ring\)"):
        backend_cost("mesh")


def test_every_sp_backend_has_a_layout_that_memory_and_shards_read() -> None:
    """The layout descriptor is the one truth for chunk owners and what a saved node keeps; an
    unknown backend is refused, never given another backend's layout."""
    from nspsim.execution.shards import chunk_owners
    from nspsim.specs.backend import LAYOUTS, backend_layout

    assert set(LAYOUTS) == set(SPBackend)
    assert chunk_owners(4, "ulysses").tolist() == [0, 1, 2, 3]
    assert chunk_owners(4, "ring").tolist() == [0, 1, 2, 3, 3, 2, 1, 0]
    for bad in ("ringg", ""):
        with pytest.raises(ValueError, match="unknown SP backend"):
            chunk_owners(4, bad)
        with pytest.raises(ValueError, match="unknown SP backend"):
            backend_layout(bad)
    with pytest.raises(ValueError, match="chunks must be one of contiguous, zigzag"):
        type(LAYOUTS[SPBackend.RING])(chunks="spiral", saves_head_layout_qkv=False, replicates_kv=False)


def test_backend_names_are_their_old_strings() -> None:
    """Members equal, hash and serialise like the plain strings plans and configs always held."""
    spec = TrainingSpec(backend="ring")
    assert spec.backend is SPBackend.RING and spec.backend == "ring" and f"{spec.backend}" == "ring"
    assert json.dumps({"backend": spec.backend}) == '{"backend": "ring"}'
    assert {"ring": 1}[SPBackend.RING] == 1
    assert BACKENDS == ("ulysses", "ring")


def test_max_degree_per_backend() -> None:
    model = toy_model()  # 4 heads
    assert COSTS[SPBackend.ULYSSES].max_degree(model, 64) == model.max_ulysses_degree
    assert COSTS[SPBackend.RING].max_degree(model, 64) == 64
    assert COSTS[SPBackend.ULYSSES].max_degree(model, 2) == 2


@pytest.mark.parametrize("backend", list(SPBackend))
def test_degree_one_is_the_local_kernel_under_every_backend(backend: SPBackend) -> None:
    lengths = np.array([300, 1000])
    assert toy_cost(backend).attention(lengths, 1) == toy_cost("ulysses").attention(lengths, 1)
    assert toy_cost(backend).node_overhead(1) == (0.0, 0.0)
    assert COSTS[backend].collectives_per_node(8) == (2 if backend == SPBackend.ULYSSES else 7)
