"""The executor's own work, measured for ``python -m nspsim_runtime.calibrate``: real
:class:`nspsim_runtime.executor.NSPExecutor` steps of the FSDP2-sharded model on balanced plans (equal short
samples, every rank the same tokens) at a few token counts per rank, once with degree-1 nodes and
once with one Ulysses node over all ranks. Each step's forward/backward wall time minus its attention
kernels and its exposed SP waits (collectives and waits for a peer) is what the rank computed outside
the kernels; beyond the isolated layer and head tables that is the executor's own work (index
gathers, packing for the collectives, autograd over the whole model, FSDP hooks), which
:func:`nspsim_runtime.calibration.fit.executor_overhead` turns into ``micro_batch_s`` and a per-token layer
cost.

Trade-off: a median of 4 steps after a warm-up per point keeps this to seconds on 2 cores; short
samples keep the subtracted kernels cheap, so their timing error stays small next to the residual.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from nspsim.plan import Plan
from nspsim.planners import get_planner
from nspsim.specs.model import ModelSpec
from nspsim.trace.batching import Batch
from nspsim.workload import Workload, WorkloadConfig, build_workload
from nspsim_runtime.data import rank_input, synthetic_stream
from nspsim_runtime.exec_options import ExecOptions
from nspsim_runtime.executor import NSPExecutor
from nspsim_runtime.groups import GroupCache
from nspsim_runtime.launch import RankEnv
from nspsim_runtime.model import DecoderLM, fsdp_shard

EXEC_TOKENS = (1024, 4096, 8192)
"""Tokens per rank of the executor steps (inside the layer tables' token range, so they interpolate)."""
EXEC_SAMPLE = 512
"""Sample length of the executor steps: short, so their attention kernels (subtracted) stay cheap."""


def barrier(sync: bool = True) -> None:
    """A barrier over every rank when there are several (and ``sync``)."""
    if sync and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def executor_times(spec: ModelSpec, env: RankEnv, *, model: str, kernel: str, quick: bool) -> dict[str, Any]:
    """Forward/backward wall seconds of executor steps minus their attention kernels and exposed SP
    waits, per token count per rank (module docstring), for degree-1 nodes (``local``) and, on more
    than one rank, one Ulysses node over all ranks (``sp``); the median of the steps after a warm-up."""
    tokens = (EXEC_SAMPLE, 2 * EXEC_SAMPLE) if quick else EXEC_TOKENS
    workload = build_workload(
        WorkloadConfig(
            trace="wikipedia",
            model=model,
            cluster="cpu",
            gpus=env.world,
            tokens_per_batch=max(tokens) * env.world,
            max_context=EXEC_SAMPLE,
        )
    )
    lm = DecoderLM(spec, seed=0)
    if env.world > 1:
        fsdp_shard(lm, lm.layers)
    executor = NSPExecutor(
        model=lm,
        spec=spec,
        rank=env.rank,
        world=env.world,
        device=torch.device("cpu"),
        groups=GroupCache(world=env.world, backend="gloo", timeout=timedelta(seconds=env.timeout_s)),
        options=ExecOptions(kernel=kernel, grad_sync="fsdp" if env.world > 1 else "allreduce"),
        memory=workload.memory,
    )
    degrees = {"local": 1, "sp": env.world} if env.world > 1 else {"local": 1}
    out: dict[str, Any] = {"tokens": list(tokens)}
    for name, degree in degrees.items():
        plans = [_balanced_plan(workload, degree, n * env.world) for n in tokens]
        out[name] = [_step_time(executor, lm, plan, spec, env, 1 if quick else 4) for plan in plans]
    return out


def _balanced_plan(workload: Workload, degree: int, total_tokens: int) -> Plan:
    """Static SP at ``degree`` over samples of :data:`EXEC_SAMPLE` tokens, ``total_tokens`` in all."""
    count = total_tokens // EXEC_SAMPLE
    batch = Batch(
        lengths=(EXEC_SAMPLE,) * count,
        trace="calibration",
        seed=0,
        index=0,
        tokens_per_batch=count * EXEC_SAMPLE,
        max_context=EXEC_SAMPLE,
    )
    return get_planner("static", degree=degree).plan(batch, workload)


def _step_time(executor: NSPExecutor, lm: DecoderLM, plan: Plan, spec: ModelSpec, env: RankEnv, reps: int) -> float:
    """Median over ``reps`` steps (after one that creates the groups and warms the allocator) of the
    step's forward/backward time outside its attention kernels and exposed SP waits."""
    data = rank_input(synthetic_stream(plan.lengths, seed=0, index=0, vocab=spec.vocab), env.rank, env.world)
    runs = []
    for i in range(reps + 1):
        barrier()
        step = executor.run(plan, data)
        lm.zero_grad(set_to_none=True)
        s = step.seconds
        if i:
            runs.append(step.fwd_bwd_s - s["attn_fwd"] - s["attn_bwd"] - s["attn_remat"] - s["sp_exposed_comm"])
    return float(np.median(runs))
