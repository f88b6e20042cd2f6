"""Tree and iteration levels: per-GPU sums over chains and Load(a)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import toy_cost
from nspsim.sp_tree import SPTree
from reference_load import plan_load, tokens_per_gpu

TREE = SPTree(num_gpus=8, spmax=4, gpus_per_node=2)


def test_two_levels_on_one_gpu_by_hand() -> None:
    # 1000 tokens on sp2#0 (ranks 0,1) and 400 on sp1#0 (rank 0).
    lengths, degrees, firsts = np.array([1000, 400]), np.array([2, 1]), np.array([0, 0])
    res = plan_load(toy_cost(), TREE, lengths, degrees, firsts)
    sp2 = 9.6e-5 + 6.4e-5 + 3.2e-5  # prologue + compute + epilogue of the 1000-token sample at k=2
    leaf = 2 * 400**2 * 64 / 1e12
    assert res.attn_fwd[0] == pytest.approx(sp2 + 2e-5 + leaf)
    assert res.attn_fwd[1] == pytest.approx(sp2 + 2e-5)
    assert res.attn_fwd[2:].sum() == 0
    assert res.tokens.tolist() == [900, 500, 0, 0, 0, 0, 0, 0]
    assert res.nonattn_fwd[0] == pytest.approx(900 * 81_920 / 2e12)
    assert res.load == pytest.approx(res.d_fwd[0] + res.d_bwd[0])
    assert res.critical_gpu == 0


def test_load_scales_with_layers() -> None:
    args = (TREE, np.array([3000, 70]), np.array([4, 1]), np.array([4, 2]))
    one = plan_load(toy_cost(layers=1), *args)
    three = plan_load(toy_cost(layers=3), *args)
    assert three.load == pytest.approx(3 * one.load)


def test_tokens_per_gpu_sum_to_batch_tokens() -> None:
    rng = np.random.default_rng(0)
    degrees = rng.choice([1, 2, 4], size=50)
    firsts = np.array([rng.integers(0, 8 // d) * d for d in degrees])
    lengths = rng.integers(1, 5000, size=50)
    assert tokens_per_gpu(TREE, lengths, degrees, firsts).sum() == pytest.approx(lengths.sum())
