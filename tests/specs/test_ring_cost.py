"""Ring attention cost: exact hand-computed parts on the toy specs, with and without a measured
full-block throughput, and the causal / full split the model charges against the runtime's blocks."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import toy_cost
from nspsim.cost.backends.ring import ring_kernels, ring_parts
from nspsim.cost.profile import LengthTable, Profile
from nspsim.execution.shards import NodeShards, ring_blocks
from nspsim.sp_tree import Node

FULL = Profile(
    attn_full_fwd_flops_by_length=LengthTable(lengths=(1024,), values=(2e12,)),
    attn_full_bwd_flops_by_length=LengthTable(lengths=(1024,), values=(1e12,)),
)
"""Full blocks twice as fast as the toy GPU's causal kernels (1e12 forward, 0.5e12 backward)."""


def test_ring_parts_degree_2_with_full_blocks_measured() -> None:
    # L = 16,000, k = 2: a GPU's share F = 2 * 16000^2 * 64 / 2 = 1.6384e10 FLOPs; c = 4,000.
    # First step: the causal diagonals F/4 = 4.096e9 at 1e12 and the full cross block F/4 at 2e12.
    # Second step: F/2 = 8.192e9 of full blocks at 2e12. Backward 2.5x at 0.5e12 and 1e12.
    # K,V hop: 8,000 tokens * 2 * 64 * 2 B = 2.048e6 B at 1 GB/s; backward 3x (fp32 dK,dV); merges off.
    f0, b0, fs, bs, mf, mb, gf, gb = ring_parts(toy_cost("ring", FULL), np.array([16_000]), 2)
    assert f0[0] == pytest.approx(4.096e-3 + 2.048e-3)
    assert fs[0] == pytest.approx(4.096e-3)
    assert b0[0] == pytest.approx(2.048e-2 + 1.024e-2)
    assert bs[0] == pytest.approx(2.048e-2)
    assert (mf[0], mb[0]) == pytest.approx((2.048e-3, 6.144e-3))
    assert (gf[0], gb[0]) == (0.0, 0.0)
    node = toy_cost("ring", FULL).attention(np.array([16_000]), 2)
    assert node.fwd.compute == pytest.approx(6.144e-3 + 4.096e-3)  # steps outlast the 2.058 ms hop
    assert node.bwd.compute == pytest.approx(3.072e-2 + 2.048e-2)


def test_ring_kernels_degree_4_split_causal_and_full_work() -> None:
    # L = 16,000, k = 4: F = 2 * 16000^2 * 64 / 4 = 8.192e9; first step F/8 causal + F/8 full, later F/4 full.
    f0, b0, fs, bs = ring_kernels(toy_cost("ring", FULL), np.array([16_000]), 4)
    assert f0[0] == pytest.approx(1.024e9 / 1e12 + 1.024e9 / 2e12)
    assert fs[0] == pytest.approx(2.048e9 / 2e12)
    assert b0[0] == pytest.approx(2.5 * (1.024e9 / 0.5e12 + 1.024e9 / 1e12))
    assert bs[0] == pytest.approx(2.5 * 2.048e9 / 1e12)


def test_without_a_full_block_table_every_block_runs_at_the_causal_throughput() -> None:
    # The toy's causal throughput is length-independent, so every step is F/k at 1e12 (the old pricing).
    f0, b0, fs, bs = ring_kernels(toy_cost("ring"), np.array([16_000]), 2)
    assert f0[0] == pytest.approx(8.192e-3) and fs[0] == pytest.approx(8.192e-3)
    assert b0[0] == pytest.approx(4.096e-2) and bs[0] == pytest.approx(4.096e-2)


@pytest.mark.parametrize("k", [2, 3, 4, 8])
def test_the_model_charges_the_runtime_blocks_causal_and_full_shares(k: int) -> None:
    """Per rank, ring_blocks' causal blocks hold 1/(2k) of its causal pairs, all in step 0, half of step
    0 is full blocks and every later step is 1/k of full blocks: the shares ring_kernels prices."""
    c = 64
    sh = NodeShards(node=Node(k, 0), backend="ring", samples=np.array([0]), lengths=np.array([2 * k * c]))
    share = (2 * k * c) ** 2 / 2 / k  # a rank's causal pairs in units of c^2 / 2 per causal c-block
    for rank in range(k):
        for step in range(k):
            blocks = ring_blocks(sh, rank, step)
            causal = sum(int((b.q_lengths**2).sum()) / 2 for b in blocks if b.causal)
            full = sum(int((b.q_lengths * b.k_lengths).sum()) for b in blocks if not b.causal)
            if step == 0:
                assert (causal, full) == (share / (2 * k), share / (2 * k))
            else:
                assert (causal, full) == (0, share / k)
