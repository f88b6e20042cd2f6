"""Small hand-checkable specs shared by tests (round numbers so expected values are exact)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nspsim.cost.analytic import AnalyticCostModel
from nspsim.cost.profile import Profile
from nspsim.specs.cluster import ClusterSpec, GpuSpec
from nspsim.specs.model import ModelSpec
from nspsim.specs.training import TrainingSpec

TOY_GPU = GpuSpec(
    name="toy",
    peak_flops=4e12,
    matmul_flops=2e12,
    attn_fwd_flops=1e12,
    attn_bwd_flops=0.5e12,
    hbm_bytes=1e9,
    hbm_bw=1e11,
    gemm_tile_rows=1,  # no tile padding: non-attention time exactly linear in tokens
)


def toy_model(layers: int = 1) -> ModelSpec:
    """hidden 64, 4 heads of 16 (q_width 64), 4 KV heads, dense FFN 128, no QK-norm."""
    return ModelSpec(
        name="toy",
        num_layers=layers,
        hidden=64,
        num_heads=4,
        num_kv_heads=4,
        head_dim=16,
        vocab=10,
        dense_ffn=128,
        qk_norm=False,
    )


def toy_cluster(num_gpus: int = 8, gpus_per_node: int = 2) -> ClusterSpec:
    """NVLink 1 GB/s, NIC 0.1 GB/s, latencies 10 us / 100 us."""
    return ClusterSpec(
        name="toy",
        gpu=TOY_GPU,
        num_gpus=num_gpus,
        gpus_per_node=gpus_per_node,
        nvlink_bw=1e9,
        nic_bw=1e8,
        host_bw=1e9,
        intra_latency_s=1e-5,
        inter_latency_s=1e-4,
    )


def toy_cost(
    backend: str = "ulysses", profile: Profile | None = None, layers: int = 1, num_gpus: int = 8
) -> AnalyticCostModel:
    """Analytic cost model on the toy specs with length-independent attention throughput."""
    return AnalyticCostModel(
        model=toy_model(layers),
        cluster=toy_cluster(num_gpus),
        training=TrainingSpec(backend=backend),
        profile=profile or Profile(),
        attn_half_length=0.0,
        dense_gemm_efficiency=1.0,
        elementwise=False,  # hand computations count GEMM FLOPs; tests/specs/test_training_terms.py checks that term
    )


def make_batch(lengths: Sequence[int], *, trace: str = "test", tokens_per_batch: int | None = None) -> Any:
    """A batch with the given lengths (no drops)."""
    from nspsim.trace.batching import Batch

    total = sum(lengths)
    return Batch(
        lengths=tuple(int(x) for x in lengths),
        trace=trace,
        seed=0,
        index=0,
        tokens_per_batch=tokens_per_batch or total,
        max_context=max(lengths),
        dropped_count=0,
        dropped_tokens=0,
    )
