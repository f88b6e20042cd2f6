"""End-to-end rows: one optimizer step of a published training run, simulated.

``local_batch`` sequences of ``seq_len`` per data-parallel group of ``cp`` GPUs, in ``grad_accum``
micro-batches, placed as a static SP plan (every sample on an aligned group of ``cp`` GPUs), FSDP over
all GPUs, the row's checkpointing, attention kernel and fused or eager element-wise work. The memory
model is reported (``fits_memory``) but does not stop the timing: a published run did run. Tensor or
pipeline parallelism, fp8, per-layer checkpointing frequencies and GPU counts that are not powers of
two are not expressible.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from nspsim.cost.analytic import AnalyticCostModel
from nspsim.plan import make_plan
from nspsim.simulator import Simulator
from nspsim.sp_tree import Node
from nspsim.specs.backend import SPBackend
from nspsim.specs.hf import QK_NORM_ARCHITECTURES, spec_from_hf_config
from nspsim.specs.memory import memory_model
from nspsim.specs.model import ModelSpec
from nspsim.specs.training import Checkpointing, TrainingSpec
from nspsim.trace.batching import Batch
from nspsim.validation.config import (
    MAX_GPUS,
    MAX_SEQLEN,
    MAX_SIMULATED_GPUS,
    MAX_SIMULATED_SAMPLES,
    BadConfig,
    NotExpressible,
    get_bool,
    get_int,
    get_value,
    row_cluster_of,
)
from nspsim.validation.dataset import ReferenceRow
from nspsim.validation.hardware import ROW_KERNELS

ROW_CHECKPOINTING: Mapping[str, Checkpointing] = {
    "none": Checkpointing.NONE,
    "selective": Checkpointing.SELECTIVE,
    "selective-op": Checkpointing.OP,
    "op": Checkpointing.OP,
    "full": Checkpointing.FULL,
}
CP_BACKENDS: Mapping[str, SPBackend] = {"ulysses": SPBackend.ULYSSES, "ring": SPBackend.RING}


def row_model(config: Mapping[str, Any], name: str) -> ModelSpec:
    """The row's model: a transformers config table (``mlp = "gelu"``: a plain two-matrix MLP); MPT
    configs (``model_type = "mpt"``) are read as a Llama-shaped decoder with a GELU MLP, no QK-norm."""
    table = get_value(config, "model")
    if not isinstance(table, Mapping):
        raise BadConfig(f"model must be a table of transformers config fields ([row.config.model]), got {table!r}")
    table = dict(table)
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
        if get_int(config, key, 1) > 1:
            raise NotExpressible(f"{what} parallelism ({key} = {config[key]}) is not modelled (FSDP + SP only)")
    if not get_bool(config, "fsdp", True):
        raise NotExpressible("data parallelism without sharding (fsdp = false) is not modelled (FSDP + SP only)")
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
    if backend is None and get_int(config, "cp", 1) > 1:
        raise NotExpressible(f"context-parallel backend {config.get('cp_backend')!r} is not modelled (ulysses, ring)")
    return TrainingSpec(
        checkpointing=ROW_CHECKPOINTING[mode],
        attention_kernel=kernel,  # type: ignore[arg-type]
        fused_elementwise=get_bool(config, "compile", False),
        backend=backend or SPBackend.ULYSSES,
        expert_parallel=get_int(config, "expert_parallel", 1),
        optimizer_offload=get_bool(config, "optimizer_offload", False),
    )


def end_to_end(row: ReferenceRow) -> tuple[float, dict[str, Any]]:
    c = row.config
    training = row_training(c)
    gpus, gpn = get_int(c, "gpus", hi=MAX_GPUS), get_int(c, "gpus_per_node")
    if gpus > gpn and gpus % gpn:
        raise NotExpressible(f"{gpus} GPUs are not a whole number of {gpn}-GPU hosts")
    if gpus > MAX_SIMULATED_GPUS:
        raise NotExpressible(f"{gpus:,} GPUs: validation simulates end-to-end rows up to {MAX_SIMULATED_GPUS:,} GPUs")
    cluster = row_cluster_of(c, gpus, gpn)
    model = row_model(c, row.id)
    cp, seq_len = get_int(c, "cp", 1), get_int(c, "seq_len", hi=MAX_SEQLEN)
    local_batch, accum = get_int(c, "local_batch"), get_int(c, "grad_accum", 1)
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
    try:
        memory = memory_model(model, cluster, training)
    except ValueError:
        raise NotExpressible("the model states alone exceed the GPU's memory in nspsim's memory model") from None
    fits = memory.fits(memory.base_bytes(per_micro * seq_len / cp))
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
    try:
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
    except ValueError as exc:  # e.g. CP groups that do not tile the hosts
        raise NotExpressible(str(exc)) from None
    try:
        cost = AnalyticCostModel(model=model, cluster=cluster, training=training)
    except ValueError as exc:
        raise NotExpressible(str(exc)) from None
    sim = Simulator(cost=cost, model=model, cluster=cluster, training=training, memory=roomy)
    result = sim.simulate(plan)
    step = float(result.step_time_s or math.nan)
    value = samples * seq_len / step / gpus if row.unit == "tokens/s/gpu" else step
    return value, {"step_s": step, "fits_memory": fits, "breakdown_s": dict(result.breakdown_s)}
