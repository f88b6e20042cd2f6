"""Predict one reference row with nspsim's own specs, cost model and simulator, or say why not.

* **kernel** rows: an attention kernel is priced by :meth:`AnalyticCostModel.attention` on one GPU
  (degree-1 node) of a model shaped like the benchmark (heads, head dim); zigzag ring attention by the
  Ring backend's node cost over the row's GPUs; a GEMM at the GPU's matmul rate with tile padding.
* **collective** rows: the cost model's collectives over the row's group (nccl-tests sizes: the
  all-gather output, the reduce-scatter input, the all-reduce buffer, the all-to-all send buffer).
* **end-to-end** rows: one optimizer step of the row's configuration, simulated: ``local_batch``
  sequences of ``seq_len`` per data-parallel group of ``cp`` GPUs, in ``grad_accum`` micro-batches,
  placed as a static SP plan (every sample on an aligned group of ``cp`` GPUs), FSDP over all GPUs,
  the row's checkpointing, attention kernel and fused or eager element-wise work. The memory model is
  reported (``fits``) but does not stop the timing: a published run did run.

A row the model cannot express gets a reason instead of a number: tensor or pipeline parallelism,
fp8, a GPU without a spec, a GPU count that is not a power of two, a kernel nspsim does not offer,
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
from nspsim.sp_tree import Node, is_power_of_two
from nspsim.specs.backend import SPBackend
from nspsim.specs.cluster import ClusterSpec
from nspsim.specs.hf import QK_NORM_ARCHITECTURES, spec_from_hf_config
from nspsim.specs.memory import memory_model
from nspsim.specs.model import ModelSpec
from nspsim.specs.training import Checkpointing, TrainingSpec
from nspsim.validation.dataset import ReferenceRow
from nspsim.validation.hardware import ROW_KERNELS, row_cluster

ROW_CHECKPOINTING: Mapping[str, Checkpointing] = {
    "none": Checkpointing.NONE,
    "selective": Checkpointing.SELECTIVE,
    "selective-op": Checkpointing.OP,
    "op": Checkpointing.OP,
    "full": Checkpointing.FULL,
}
CP_BACKENDS: Mapping[str, SPBackend] = {"ulysses": SPBackend.ULYSSES, "ring": SPBackend.RING}
FA_BACKWARD_RATIO = BWD_ATTN_FLOP_RATIO  # FlashAttention's benchmark convention is nspsim's: backward = 2.5x forward
BUSBW_FACTOR: Mapping[str, float] = {"allgather": 1.0, "reduce_scatter": 1.0, "alltoall": 1.0}
"""nccl-tests' bus-bandwidth factor over (n-1)/n (NVIDIA/nccl-tests doc/PERFORMANCE.md)."""


class NotExpressible(ValueError):
    """The model cannot express a row; the message says why."""


class BadConfig(ValueError):
    """A row's configuration is malformed (a count that is not a positive integer, a flag that is not a
    boolean): an input error, reported with the row and never priced."""


MAX_GPUS = 2**20
MAX_BATCH = 2**20
MAX_SEQLEN = 2**30
MAX_SIMULATED_GPUS = 4096
MAX_SIMULATED_SAMPLES = 2**17
_MISSING = object()


def _int(config: Mapping[str, Any], key: str, default: Any = _MISSING, *, hi: int = 2**40) -> int:
    """A positive integer setting (``default`` when absent)."""
    if key not in config:
        if default is _MISSING:
            raise NotExpressible(f"the configuration has no {key!r}")
        return int(default)
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= hi:
        raise BadConfig(f"{key} must be an integer in [1, {hi:,}], got {value!r}")
    return value


def _num(config: Mapping[str, Any], key: str, default: Any = _MISSING) -> Any:
    """A positive finite number (``default`` when absent)."""
    if key not in config:
        if default is _MISSING:
            raise NotExpressible(f"the configuration has no {key!r}")
        return default
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise BadConfig(f"{key} must be a positive finite number, got {value!r}")
    return float(value)


def _pass(config: Mapping[str, Any], allowed: tuple[str, ...]) -> str:
    """The kernel row's ``pass``, one of ``allowed``."""
    value = _get(config, "pass")
    if value not in allowed:
        raise BadConfig(f"pass must be one of {', '.join(allowed)}, got {value!r}")
    return str(value)


def _bool(config: Mapping[str, Any], key: str, default: bool) -> bool:
    """A true/false setting (``default`` when absent)."""
    value = config.get(key, default)
    if not isinstance(value, bool):
        raise BadConfig(f"{key} must be true or false, got {value!r}")
    return value


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """A row's simulated figure (in the row's unit), or the reason there is none, and details."""

    simulated: float | None = None
    reason: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)


CONFIG_KEYS: Mapping[str, frozenset[str]] = {
    "kernel": frozenset(
        {"gpu", "gpu_note", "op", "kernel", "pass", "batch", "seqlen", "heads", "kv_heads", "head_dim", "causal",
         "dtype", "m", "n", "k", "variant", "varlen", "gpus", "gpus_per_node"}
    ),
    "collective": frozenset(
        {"gpu", "gpu_note", "op", "gpus", "gpus_per_node", "bytes", "dtype", "nic", "nic_gbps_per_gpu", "transport",
         "variant", "tokens_per_batch", "hidden", "topk", "topk_groups"}
    ),
    "end-to-end": frozenset(
        {"gpu", "gpu_note", "model", "gpus", "gpus_per_node", "seq_len", "local_batch", "grad_accum", "cp",
         "cp_backend", "tp", "pp", "fsdp", "checkpointing", "attention_kernel", "compile", "precision",
         "expert_parallel", "optimizer_offload"}
    ),
}  # fmt: skip
"""The config keys each kind may carry (docs/validation.md); another key (a typo such as ``casual``) is
an input error, never silently ignored."""
PASSES = ("fwd", "bwd", "fwd+bwd")


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
            value, detail = _end_to_end(row)
    except BadConfig as exc:
        raise ValueError(f"{row.origin or 'reference set'}: row {row.id}: {exc}") from None
    except NotExpressible as exc:
        return Prediction(reason=str(exc))
    except (ValueError, KeyError, TypeError) as exc:
        return Prediction(reason=f"configuration not understood: {exc}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"row {row.id}: the model gave no finite positive prediction ({value!r}); a bug in nspsim")
    return Prediction(simulated=value, detail=detail)


def _get(config: Mapping[str, Any], key: str, default: Any = None) -> Any:
    if key not in config and default is None:
        raise NotExpressible(f"the configuration has no {key!r}")
    return config.get(key, default)


def _cluster(config: Mapping[str, Any], gpus: int, gpus_per_node: int) -> ClusterSpec:
    nic = _num(config, "nic_gbps_per_gpu", None)
    try:
        return row_cluster(str(_get(config, "gpu")), gpus, gpus_per_node, nic)
    except ValueError as exc:
        raise NotExpressible(str(exc)) from None


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(n, 1))))


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
    kernel = ROW_KERNELS.get(str(_get(config, "kernel", "fa2")))
    if kernel is None:
        raise NotExpressible(
            f"attention kernel {config.get('kernel')!r} is not one nspsim prices (fa2, fa3, cudnn, triton)"
        )
    if not _bool(config, "causal", False):
        raise NotExpressible("non-causal attention: nspsim prices causal LM training only")
    if str(config.get("dtype", "bf16")) not in ("bf16", "fp16"):
        raise NotExpressible(f"{config.get('dtype')} attention is not modelled (bf16/fp16 only)")
    heads, head_dim = _int(config, "heads"), _int(config, "head_dim")
    try:
        model = _attention_model(heads, _int(config, "kv_heads", heads), head_dim)
    except ValueError as exc:
        raise BadConfig(str(exc)) from None
    cluster = _cluster(config, _pow2_at_least(gpus), _int(config, "gpus_per_node", 8))
    training = TrainingSpec(attention_kernel=kernel, backend=backend)  # type: ignore[arg-type]
    try:
        return AnalyticCostModel(model=model, cluster=cluster, training=training)
    except ValueError as exc:
        raise NotExpressible(str(exc)) from None


def _kernel(row: ReferenceRow) -> tuple[float, dict[str, Any]]:
    c = row.config
    op = _get(c, "op")
    if op == "gemm":
        return _gemm(row)
    if op == "ring-attention":
        return _ring(row)
    if op != "attention":
        raise NotExpressible(f"kernel op {op!r} is not modelled")
    if c.get("varlen"):
        raise NotExpressible("a varlen benchmark whose document lengths (cu_seqlens) the row does not give")
    cost = _kernel_cost(c, 1)
    batch, seqlen = _int(c, "batch", hi=MAX_BATCH), _int(c, "seqlen", hi=MAX_SEQLEN)
    phases = cost.attention(np.full(batch, seqlen, dtype=np.int64), 1)
    fwd_s, bwd_s = phases.fwd.total, phases.bwd.total
    seconds = {"fwd": fwd_s, "bwd": bwd_s, "fwd+bwd": fwd_s + bwd_s}[_pass(c, PASSES)]
    fwd_flops = cost.model.attention_flops(float(batch) * seqlen**2)
    flops = {"fwd": 1.0, "bwd": FA_BACKWARD_RATIO, "fwd+bwd": 1.0 + FA_BACKWARD_RATIO}[str(c["pass"])] * fwd_flops
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
    cluster = _cluster(c, 1, 1)
    m, n, k = (_int(c, key) for key in ("m", "n", "k"))
    tile = cluster.gpu.gemm_tile_rows
    rows = math.ceil(m / tile) * tile
    seconds = 2.0 * rows * n * k / cluster.gpu.matmul_flops
    return _kernel_unit(row, 2.0 * m * n * k, seconds), {"seconds": seconds}


def _ring(row: ReferenceRow) -> tuple[float, dict[str, Any]]:
    c = row.config
    variant = str(_get(c, "variant"))
    if c.get("varlen"):
        raise NotExpressible("a varlen benchmark whose document lengths (cu_seqlens) the row does not give")
    if variant != "zigzag":
        raise NotExpressible(
            f"ring variant {variant!r}: nspsim's Ring backend is the load-balanced (zigzag) ring; "
            "plain ring, stripe and all-gather (llama3) variants are not modelled"
        )
    gpus = _int(c, "gpus", hi=MAX_GPUS)
    if gpus < 2:
        raise NotExpressible("ring attention over one GPU is plain attention (op = 'attention')")
    cost = _kernel_cost({**c, "kernel": c.get("kernel", "fa2")}, gpus, SPBackend.RING)
    batch, seqlen = _int(c, "batch", hi=MAX_BATCH), _int(c, "seqlen", hi=MAX_SEQLEN)
    phases = cost.attention(np.full(batch, seqlen, dtype=np.int64), gpus)
    fwd_s, bwd_s = phases.fwd.total, phases.bwd.total
    seconds = {"fwd": fwd_s, "fwd+bwd": fwd_s + bwd_s}[_pass(c, ("fwd", "fwd+bwd"))]
    fwd_flops = cost.model.attention_flops(float(batch) * seqlen**2) / gpus
    factor = {"fwd": 1.0, "fwd+bwd": 1.0 + FA_BACKWARD_RATIO}[str(c["pass"])]
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
    gpus, gpn = _int(c, "gpus", hi=MAX_GPUS), _int(c, "gpus_per_node")
    cluster = _cluster(c, _pow2_at_least(gpus), gpn)
    if zero_latency:
        cluster = replace(cluster, intra_latency_s=0.0, inter_latency_s=0.0, alltoall_peer_latency_s=0.0)
    cost = AnalyticCostModel(model=_attention_model(1, 1, 1), cluster=cluster, training=TrainingSpec())
    return collective_seconds(cost, str(_get(c, "op")), _num(c, "bytes"), gpus)


def _collective(row: ReferenceRow) -> tuple[float, dict[str, Any]]:
    c = row.config
    if "variant" in c:
        raise NotExpressible(f"{c['variant']}: not an NCCL collective (nspsim models NCCL's)")
    if c.get("transport") == "tcpx":
        raise NotExpressible(
            "GPUDirect-TCPX (TCP without offload): a ~1 ms floor per collective; nspsim's fabrics are RDMA"
        )
    op, gpus, gpn = str(_get(c, "op")), _int(c, "gpus", hi=MAX_GPUS), _int(c, "gpus_per_node")
    if gpus < 2:
        raise NotExpressible("a collective over one GPU moves nothing")
    if op == "allreduce":
        raise NotExpressible(
            "all-reduce: a training step in nspsim uses none (FSDP reduce-scatters, SP all-to-alls), and "
            "NCCL's all-reduce algorithms (NVLS, tree) are not modelled"
        )
    if row.unit == "GB/s-per-device" and "bytes" not in c:
        raise NotExpressible("the source states neither the message size nor the network of this bandwidth")
    cluster = _cluster(c, _pow2_at_least(gpus), gpn)
    cost = AnalyticCostModel(model=_attention_model(1, 1, 1), cluster=cluster, training=TrainingSpec())
    size = _num(c, "bytes")
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


# ---- end to end ------------------------------------------------------------------------------------
def row_model(config: Mapping[str, Any], name: str) -> ModelSpec:
    """The row's model: a transformers config table (``mlp = "gelu"``: a plain two-matrix MLP); MPT
    configs (``model_type = "mpt"``) are read as a Llama-shaped decoder with a GELU MLP, no QK-norm."""
    table = dict(_get(config, "model"))
    mlp = table.pop("mlp", "swiglu")
    if mlp not in ("swiglu", "gelu"):
        raise BadConfig(f"model mlp must be 'swiglu' (gated) or 'gelu' (plain), got {mlp!r}")
    gelu = mlp == "gelu"
    if table.get("model_type") == "mpt":
        table["model_type"] = "llama"
    if table.get("model_type") not in QK_NORM_ARCHITECTURES:
        raise NotExpressible(f"model_type {table.get('model_type')!r} is not supported")
    try:
        spec = spec_from_hf_config(table, name=name)
        return replace(spec, ffn_gated=not gelu)
    except ValueError as exc:
        raise BadConfig(str(exc)) from None


def row_training(config: Mapping[str, Any]) -> TrainingSpec:
    """The row's training settings (``NotExpressible`` for what nspsim does not model)."""
    for key, what in (("tp", "tensor"), ("pp", "pipeline")):
        if _int(config, key, 1) > 1:
            raise NotExpressible(f"{what} parallelism ({key} = {config[key]}) is not modelled (FSDP + SP only)")
    precision = str(config.get("precision", "bf16"))
    if precision != "bf16":
        raise NotExpressible(f"{precision} training is not modelled (bf16 GEMMs only)")
    mode = str(config.get("checkpointing", "selective"))
    if mode not in ROW_CHECKPOINTING:
        raise NotExpressible(
            f"checkpointing {mode!r} is not modelled (every layer is alike in the simulator: "
            f"{', '.join(ROW_CHECKPOINTING)})"
        )
    kernel = ROW_KERNELS.get(str(config.get("attention_kernel", "fa2")))
    if kernel is None:
        raise NotExpressible(f"attention kernel {config.get('attention_kernel')!r} is not one nspsim prices")
    backend = CP_BACKENDS.get(str(config.get("cp_backend", "ulysses")))
    if backend is None and _int(config, "cp", 1) > 1:
        raise NotExpressible(f"context-parallel backend {config.get('cp_backend')!r} is not modelled (ulysses, ring)")
    return TrainingSpec(
        checkpointing=ROW_CHECKPOINTING[mode],
        attention_kernel=kernel,  # type: ignore[arg-type]
        fused_elementwise=_bool(config, "compile", False),
        backend=backend or SPBackend.ULYSSES,
        expert_parallel=_int(config, "expert_parallel", 1),
        optimizer_offload=_bool(config, "optimizer_offload", False),
    )


def _end_to_end(row: ReferenceRow) -> tuple[float, dict[str, Any]]:
    # imported here: kernel and collective rows never need the simulator, and it is the slow import
    from nspsim.plan import make_plan
    from nspsim.simulator import Simulator
    from nspsim.trace.batching import Batch

    c = row.config
    training = row_training(c)
    gpus, gpn = _int(c, "gpus", hi=MAX_GPUS), _int(c, "gpus_per_node")
    if not is_power_of_two(gpus):
        raise NotExpressible(f"{gpus} GPUs: nspsim's clusters are powers of two")
    if gpus > MAX_SIMULATED_GPUS:
        raise NotExpressible(f"{gpus:,} GPUs: validation simulates end-to-end rows up to {MAX_SIMULATED_GPUS:,} GPUs")
    cluster = _cluster(c, gpus, gpn)
    model = row_model(c, row.id)
    cp, seq_len = _int(c, "cp", 1), _int(c, "seq_len", hi=MAX_SEQLEN)
    local_batch, accum = _int(c, "local_batch"), _int(c, "grad_accum", 1)
    if gpus % cp or local_batch % accum:
        raise NotExpressible(f"cp {cp} must divide {gpus} GPUs and grad_accum {accum} the local batch {local_batch}")
    if cp > 1 and training.backend is SPBackend.ULYSSES and cp > model.max_ulysses_degree:
        raise NotExpressible(f"Ulysses degree {cp} exceeds the {model.num_heads} attention heads")
    groups = gpus // cp
    per_micro = local_batch // accum
    samples = groups * local_batch
    if samples > MAX_SIMULATED_SAMPLES:
        raise NotExpressible(f"{samples:,} sequences per step: validation simulates up to {MAX_SIMULATED_SAMPLES:,}")
    lengths = (seq_len,) * samples
    nodes = [Node(cp, (i // local_batch)) for i in range(samples)]
    micro = [(i % local_batch) // per_micro for i in range(samples)]
    memory = memory_model_or_none(model, cluster, training)
    fits = memory is not None and memory.fits(memory.base_bytes(per_micro * seq_len / cp))
    if memory is None:
        raise NotExpressible("the model states alone exceed the GPU's memory in nspsim's memory model")
    roomy = replace(memory, usable_bytes=math.inf, token_budget=max(memory.token_budget, per_micro * seq_len))
    batch = Batch(
        lengths=lengths,
        trace="reference",
        seed=0,
        index=0,
        tokens_per_batch=samples * seq_len,
        max_context=seq_len,
        dropped_count=0,
        dropped_tokens=0,
    )
    plan = make_plan(
        planner="reference",
        cluster=cluster,
        model=model,
        batch=batch,
        spmax=max(cp, 1),
        token_budget=roomy.token_budget,
        nodes=nodes,
        micro_batches=micro,
        backend=training.backend,
    )
    try:
        cost = AnalyticCostModel(model=model, cluster=cluster, training=training)
    except ValueError as exc:
        raise NotExpressible(str(exc)) from None
    sim = Simulator(cost=cost, model=model, cluster=cluster, training=training, memory=roomy)
    result = sim.simulate(plan)
    step = float(result.step_time_s or math.nan)
    value = samples * seq_len / step / gpus if row.unit == "tokens/s/gpu" else step
    return value, {"step_s": step, "fits_memory": fits, "breakdown_s": dict(result.breakdown_s)}


def memory_model_or_none(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec) -> Any:
    """The memory model, or ``None`` when model states and buffers alone do not fit."""
    try:
        return memory_model(model, cluster, training)
    except ValueError:
        return None
