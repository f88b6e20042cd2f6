"""Predict one reference row with nspsim's own specs, cost model and simulator, or say why not.

* **kernel** rows: an attention kernel is priced by :meth:`AnalyticCostModel.attention` on one GPU
  (degree-1 node) of a model shaped like the benchmark (heads, head dim); zigzag ring attention by the
  Ring backend's node cost over the row's GPUs; a GEMM at the GPU's matmul rate with tile padding.
* **collective** rows: the cost model's collectives over the row's group (nccl-tests sizes: the
  all-gather output, the reduce-scatter input, the all-to-all send buffer).
* **end-to-end** rows: one optimizer step of the row's configuration, simulated
  (:mod:`nspsim.validation.end_to_end`).

Rows are read through :mod:`nspsim.validation.config` (typed settings, the keys each kind may carry).

A row the model cannot express gets a reason instead of a number: tensor or pipeline parallelism,
fp8, a GPU without a spec, a GPU count that is not a whole number of hosts, a kernel nspsim does not offer,
non-causal attention, per-layer checkpointing frequencies, a collective variant other than NCCL's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from nspsim.cost.analytic import AnalyticCostModel
from nspsim.cost.backends.base import BWD_ATTN_FLOP_RATIO
from nspsim.specs.backend import SPBackend
from nspsim.specs.model import ModelSpec
from nspsim.specs.training import TrainingSpec
from nspsim.validation.config import (
    CONFIG_KEYS,
    MAX_BATCH,
    MAX_GPUS,
    MAX_SEQLEN,
    PASSES,
    BadConfig,
    NotExpressible,
    get_bool,
    get_int,
    get_num,
    get_pass,
    get_value,
    pow2_at_least,
    row_cluster_of,
)
from nspsim.validation.dataset import ReferenceRow
from nspsim.validation.end_to_end import end_to_end
from nspsim.validation.hardware import ROW_KERNELS

BUSBW_FACTOR: Mapping[str, float] = {"allgather": 1.0, "reduce_scatter": 1.0, "alltoall": 1.0}
"""nccl-tests' bus-bandwidth factor over (n-1)/n (NVIDIA/nccl-tests doc/PERFORMANCE.md)."""


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """A row's simulated figure (in the row's unit), or the reason there is none, and details."""

    simulated: float | None = None
    reason: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)


def evaluate_row(row: ReferenceRow) -> Prediction:
    """Predict ``row`` (module docstring)."""
    unknown = sorted(set(row.config) - CONFIG_KEYS[row.kind])
    if unknown:
        raise ValueError(
            f"{row.origin or 'reference set'}: row {row.id}: unknown {row.kind} config key(s) {', '.join(unknown)} "
            f"(known: {', '.join(sorted(CONFIG_KEYS[row.kind]))})"
        )
    try:
        if row.kind == "kernel":
            value, detail = _kernel(row)
        elif row.kind == "collective":
            value, detail = _collective(row)
        else:
            value, detail = end_to_end(row)
    except BadConfig as exc:
        raise ValueError(f"{row.origin or 'reference set'}: row {row.id}: {exc}") from None
    except NotExpressible as exc:
        return Prediction(reason=str(exc))
    except (ValueError, KeyError, TypeError) as exc:
        return Prediction(reason=f"configuration not understood: {exc}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"row {row.id}: the model gave no finite positive prediction ({value!r}); a bug in nspsim")
    return Prediction(simulated=value, detail=detail)


# ---- kernels ---------------------------------------------------------------------------------------
def _attention_model(heads: int, kv_heads: int, head_dim: int) -> ModelSpec:
    """A one-layer model whose attention core has the benchmark's heads and head dimension."""
    return ModelSpec(
        name="attention-benchmark",
        num_layers=1,
        hidden=heads * head_dim,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        vocab=1,
        dense_ffn=1,
    )


def _kernel_cost(config: Mapping[str, Any], gpus: int, backend: SPBackend = SPBackend.ULYSSES) -> AnalyticCostModel:
    kernel = ROW_KERNELS.get(str(get_value(config, "kernel", "fa2")))
    if kernel is None:
        raise NotExpressible(
            f"attention kernel {config.get('kernel')!r} is not one nspsim prices (fa2, fa3, cudnn, triton)"
        )
    if not get_bool(config, "causal", False):
        raise NotExpressible("non-causal attention: nspsim prices causal LM training only")
    if str(config.get("dtype", "bf16")) not in ("bf16", "fp16"):
        raise NotExpressible(f"{config.get('dtype')} attention is not modelled (bf16/fp16 only)")
    heads, head_dim = get_int(config, "heads"), get_int(config, "head_dim")
    try:
        model = _attention_model(heads, get_int(config, "kv_heads", heads), head_dim)
    except ValueError as exc:
        raise BadConfig(str(exc)) from None
    cluster = row_cluster_of(config, pow2_at_least(gpus), get_int(config, "gpus_per_node", 8))
    training = TrainingSpec(attention_kernel=kernel, backend=backend)  # type: ignore[arg-type]
    try:
        return AnalyticCostModel(model=model, cluster=cluster, training=training)
    except ValueError as exc:
        raise NotExpressible(str(exc)) from None


def _kernel(row: ReferenceRow) -> tuple[float, dict[str, Any]]:
    c = row.config
    op = get_value(c, "op")
    if op == "gemm":
        return _gemm(row)
    if op == "ring-attention":
        return _ring(row)
    if op != "attention":
        raise NotExpressible(f"kernel op {op!r} is not modelled")
    if c.get("varlen"):
        raise NotExpressible("a varlen benchmark whose document lengths (cu_seqlens) the row does not give")
    cost = _kernel_cost(c, 1)
    batch, seqlen = get_int(c, "batch", hi=MAX_BATCH), get_int(c, "seqlen", hi=MAX_SEQLEN)
    phases = cost.attention(np.full(batch, seqlen, dtype=np.int64), 1)
    fwd_s, bwd_s = phases.fwd.total, phases.bwd.total
    seconds = {"fwd": fwd_s, "bwd": bwd_s, "fwd+bwd": fwd_s + bwd_s}[get_pass(c, PASSES)]
    fwd_flops = cost.model.attention_flops(float(batch) * seqlen**2)
    flops = {"fwd": 1.0, "bwd": BWD_ATTN_FLOP_RATIO, "fwd+bwd": 1.0 + BWD_ATTN_FLOP_RATIO}[str(c["pass"])] * fwd_flops
    return _kernel_unit(row, flops, seconds), {"seconds": seconds}


def _kernel_unit(row: ReferenceRow, flops: float, seconds: float) -> float:
    if row.unit == "TFLOP/s":
        return flops / seconds / 1e12
    if row.unit == "ms":
        return seconds * 1e3
    return 1.0 / seconds  # iter/s


def _gemm(row: ReferenceRow) -> tuple[float, dict[str, Any]]:
    c = row.config
    if str(c.get("dtype", "bf16")) not in ("bf16", "fp16"):  # equal dense tensor-core peaks on A100 and H100
        raise NotExpressible(f"{c.get('dtype')} GEMMs are not modelled (bf16 and fp16 only)")
    cluster = row_cluster_of(c, 1, 1)
    m, n, k = (get_int(c, key) for key in ("m", "n", "k"))
    tile = cluster.gpu.gemm_tile_rows
    rows = math.ceil(m / tile) * tile
    seconds = 2.0 * rows * n * k / cluster.gpu.matmul_flops
    return _kernel_unit(row, 2.0 * m * n * k, seconds), {"seconds": seconds}


def _ring(row: ReferenceRow) -> tuple[float, dict[str, Any]]:
    c = row.config
    variant = str(get_value(c, "variant"))
    if c.get("varlen"):
        raise NotExpressible("a varlen benchmark whose document lengths (cu_seqlens) the row does not give")
    if variant != "zigzag":
        raise NotExpressible(
            f"ring variant {variant!r}: nspsim's Ring backend is the load-balanced (zigzag) ring; "
            "plain ring, stripe and all-gather (llama3) variants are not modelled"
        )
    gpus = get_int(c, "gpus", hi=MAX_GPUS)
    if gpus < 2:
        raise NotExpressible("ring attention over one GPU is plain attention (op = 'attention')")
    cost = _kernel_cost({**c, "kernel": c.get("kernel", "fa2")}, gpus, SPBackend.RING)
    batch, seqlen = get_int(c, "batch", hi=MAX_BATCH), get_int(c, "seqlen", hi=MAX_SEQLEN)
    phases = cost.attention(np.full(batch, seqlen, dtype=np.int64), gpus)
    fwd_s, bwd_s = phases.fwd.total, phases.bwd.total
    seconds = {"fwd": fwd_s, "fwd+bwd": fwd_s + bwd_s}[get_pass(c, ("fwd", "fwd+bwd"))]
    fwd_flops = cost.model.attention_flops(float(batch) * seqlen**2) / gpus
    factor = {"fwd": 1.0, "fwd+bwd": 1.0 + BWD_ATTN_FLOP_RATIO}[str(c["pass"])]
    return _kernel_unit(row, factor * fwd_flops, seconds), {"seconds": seconds}


# ---- collectives -----------------------------------------------------------------------------------
def collective_seconds(cost: AnalyticCostModel, op: str, size: float, gpus: int) -> float:
    """Seconds of one nccl-tests collective of ``size`` bytes over ``gpus`` ranks (nccl-tests sizes:
    the all-gather output, reduce-scatter input, all-to-all send buffer per rank)."""
    moved = size * (gpus - 1) / gpus
    if op == "alltoall":
        return cost.alltoall_time(moved, gpus)
    if op in ("allgather", "reduce_scatter"):
        return cost.ring_collective_time(moved, gpus, op)
    raise NotExpressible(f"collective {op!r} is not modelled")


def collective_row_seconds(row: ReferenceRow, zero_latency: bool = False) -> float:
    """Seconds of a collective row's operation (``zero_latency``: the bandwidth part alone)."""
    c = row.config
    gpus, gpn = get_int(c, "gpus", hi=MAX_GPUS), get_int(c, "gpus_per_node")
    cluster = row_cluster_of(c, pow2_at_least(gpus), gpn)
    if zero_latency:
        cluster = replace(cluster, intra_latency_s=0.0, inter_latency_s=0.0, alltoall_peer_latency_s=0.0)
    cost = AnalyticCostModel(model=_attention_model(1, 1, 1), cluster=cluster, training=TrainingSpec())
    return collective_seconds(cost, str(get_value(c, "op")), get_num(c, "bytes"), gpus)


def _collective(row: ReferenceRow) -> tuple[float, dict[str, Any]]:
    c = row.config
    if "variant" in c:
        raise NotExpressible(f"{c['variant']}: not an NCCL collective (nspsim models NCCL's)")
    if c.get("transport") == "tcpx":
        raise NotExpressible(
            "GPUDirect-TCPX (TCP without offload): a ~1 ms floor per collective; nspsim's fabrics are RDMA"
        )
    op, gpus, gpn = str(get_value(c, "op")), get_int(c, "gpus", hi=MAX_GPUS), get_int(c, "gpus_per_node")
    if gpus < 2:
        raise NotExpressible("a collective over one GPU moves nothing")
    if op == "allreduce":
        raise NotExpressible(
            "all-reduce: a training step in nspsim uses none (FSDP reduce-scatters, SP all-to-alls), and "
            "NCCL's all-reduce algorithms (NVLS, tree) are not modelled"
        )
    if row.unit == "GB/s-per-device" and "bytes" not in c:
        raise NotExpressible("the source states neither the message size nor the network of this bandwidth")
    cluster = row_cluster_of(c, pow2_at_least(gpus), gpn)
    cost = AnalyticCostModel(model=_attention_model(1, 1, 1), cluster=cluster, training=TrainingSpec())
    size = get_num(c, "bytes")
    if row.unit == "GB/s-per-device":
        moved = size * (gpus - 1) / gpus
        seconds = collective_seconds(cost, op, size, gpus)
        return moved / seconds / 1e9, {"seconds": seconds}
    seconds = collective_seconds(cost, op, size, gpus)
    if row.unit == "us":
        return seconds * 1e6, {"seconds": seconds}
    algbw = size / seconds / 1e9
    if row.unit == "GB/s-algbw":
        return algbw, {"seconds": seconds}
    return algbw * BUSBW_FACTOR.get(op, 1.0) * (gpus - 1) / gpus, {"seconds": seconds}
