"""What ``python -m nspsim_runtime.calibrate`` measures, on every rank at once (ranks that share cores are
measured sharing them, as they run under torchrun), with the runtime's own kernels, layers and gloo
collectives. Each rank returns median seconds per point; the caller averages the ranks.

* attention: the runtime's kernel (``--kernel``, ``auto`` = CPU flash) forward and backward over one
  causal sample of each length, for the query heads a rank holds at each Ulysses degree 1..N (KV heads
  ``max(kv // k, 1)``); the longest length is measured on the fewest heads only and scaled to the
  others by the previous length's ratio (a long kernel costs seconds per head count); and over full
  (non-causal) ``L x L`` blocks with all heads, what a Ring step's off-diagonal blocks run;
* non-attention: one built-in decoder layer (norms, projections, RoPE, MLP or MoE) with the attention
  core replaced by a pass-through, forward and backward, over token counts;
* head: embedding, final norm, tied output head and the loss, forward and backward;
* optimizer: an AdamW step over the model sharded by FSDP2 as the runtime shards it;
* step: the control collectives every step pays (plan broadcast, hash check, barrier, loss sum, times);
* collectives: all-to-all, ring hop (batched isend/irecv), all-gather and reduce-scatter over every
  aligned group size 2..N, all groups of a size at once, 4 KiB .. 4 MiB per rank;
* overlap: one decoder layer's forward with an all-to-all in flight against alone;
* lockstep: how long ranks that ran equal work wait for each other at a collective
  (:mod:`nspsim_runtime.calibration.lockstep`);
* speed reference and machine: :mod:`nspsim_runtime.calibration.reference` and a load / steal /
  frequency snapshot (:mod:`nspsim_runtime.machine`) before, between and after the phases;
* executor: real executor steps minus their kernels and SP waits (:mod:`nspsim_runtime.calibration.executor_steps`),
  what the executor itself adds beyond the isolated layer and head tables.

Trade-off: medians of a few repeats keep the whole run to minutes on 2 cores; the variance that
remains shows up in the validation's error, not in the profile.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from nspsim.specs.hf import resolve_model
from nspsim.specs.model import ModelSpec
from nspsim_runtime.affinity import pin_to_core
from nspsim_runtime.calibration.executor_steps import barrier, executor_times
from nspsim_runtime.calibration.fit import LinkMeasurement
from nspsim_runtime.calibration.lockstep import lockstep_waits
from nspsim_runtime.calibration.mix import kernel_mix, pass_through
from nspsim_runtime.calibration.reference import SpeedReference
from nspsim_runtime.kernels import Segments, select_kernel
from nspsim_runtime.launch import RankEnv
from nspsim_runtime.machine import snapshot
from nspsim_runtime.model import DecoderLayer, DecoderLM, fsdp_shard

ATTN_LENGTHS = (64, 256, 1024, 4096, 8192)
LONG_LENGTH = 16384
FULL_LENGTHS = (64, 256, 1024, 4096)
"""Full (non-causal) L x L blocks: a Ring step's blocks are L/2k of a sample, a quarter of it at k = 2."""
LAYER_TOKENS = (256, 1024, 4096, 8192, 16384)
LINK_BYTES = (1 << 12, 1 << 15, 1 << 18, 1 << 20, 1 << 22)


@dataclass(frozen=True, kw_only=True)
class CalibrationConfig:
    """What to measure: the model whose shapes are timed, the kernel, threads per rank, and ``quick``
    (fewer points and repeats, for tests)."""

    model: str = "tiny"
    kernel: str = "auto"
    threads: int = 1
    quick: bool = False


def median_time(fn: Callable[[], object], reps: int) -> float:
    """Median seconds of ``reps`` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def _reps(cost_hint: float, quick: bool) -> int:
    """Repeats for a point whose size is ``cost_hint`` (tokens or length): fewer for long ones."""
    reps = 2 if cost_hint >= 8192 else 3 if cost_hint >= 2048 else 7 if cost_hint >= 512 else 15
    return 1 if quick else reps


def heads_per_rank(spec: ModelSpec, world: int) -> list[int]:
    """Query heads a rank holds at Ulysses degrees 1, 2, 4, .. up to ``world`` (distinct, descending)."""
    out: list[int] = []
    k = 1
    while k <= world and spec.num_heads // k >= 1:
        if spec.num_heads // k not in out:
            out.append(spec.num_heads // k)
        k *= 2
    return out


def attention_times(spec: ModelSpec, cfg: CalibrationConfig, world: int) -> dict[str, Any]:
    """Kernel forward/backward medians per (heads, length), every rank at once (module docstring)."""
    kernel = select_kernel(cfg.kernel, torch.device("cpu"))
    lengths = ATTN_LENGTHS[:3] if cfg.quick else ATTN_LENGTHS
    fwd: dict[int, list[float]] = {}
    bwd: dict[int, list[float]] = {}
    heads_list = heads_per_rank(spec, world)
    for heads in heads_list:
        kv = max(spec.num_kv_heads * heads // spec.num_heads, 1)
        for length in lengths:
            f, b = _attention_point(kernel, length, heads, kv, spec.head_dim, _reps(length, cfg.quick), True)
            fwd.setdefault(heads, []).append(f)
            bwd.setdefault(heads, []).append(b)
    if not cfg.quick:
        few = heads_list[-1]
        kv = max(spec.num_kv_heads * few // spec.num_heads, 1)
        f, b = _attention_point(kernel, LONG_LENGTH, few, kv, spec.head_dim, 1, True)
        rf, rb = f / fwd[few][-1], b / bwd[few][-1]
        for heads in heads_list:
            fwd[heads].append(fwd[heads][-1] * rf)
            bwd[heads].append(bwd[heads][-1] * rb)
        lengths = (*lengths, LONG_LENGTH)
    full = FULL_LENGTHS[:2] if cfg.quick else FULL_LENGTHS
    heads, kv = spec.num_heads, spec.num_kv_heads
    points = [_attention_point(kernel, n, heads, kv, spec.head_dim, _reps(n, cfg.quick), True, False) for n in full]
    return {
        "lengths": list(lengths),
        "fwd": fwd,
        "bwd": bwd,
        "full_lengths": list(full),
        "full_fwd": {heads: [p[0] for p in points]},
        "full_bwd": {heads: [p[1] for p in points]},
    }


def _attention_point(
    kernel: Any, length: int, heads: int, kv: int, dim: int, reps: int, sync: bool, causal: bool = True
) -> tuple[float, float]:
    gen = torch.Generator().manual_seed(length + heads)
    q = torch.randn(length, heads, dim, generator=gen)
    k, v = torch.randn(length, kv, dim, generator=gen), torch.randn(length, kv, dim, generator=gen)
    seg = Segments.same([length])
    out, lse = kernel.forward(q, k, v, seg, causal=causal)
    dout = torch.randn_like(out)
    barrier(sync)
    f = median_time(lambda: kernel.forward(q, k, v, seg, causal=causal), reps)
    barrier(sync)
    b = median_time(lambda: kernel.backward(dout, q, k, v, out, lse, seg, causal=causal), reps)
    return f, b


def layer_times(spec: ModelSpec, cfg: CalibrationConfig) -> dict[str, list[float]]:
    """Non-attention (one decoder layer) and head forward/backward medians per token count, every rank
    at once."""
    torch.manual_seed(0)
    layer = DecoderLayer(spec, rope_theta=1e6)
    lm = DecoderLM(spec, seed=0)
    tokens = LAYER_TOKENS[:3] if cfg.quick else LAYER_TOKENS
    out: dict[str, list[float]] = {"tokens": list(tokens), "nf": [], "nb": [], "hf": [], "hb": []}
    for n in tokens:
        reps = _reps(n, cfg.quick)
        h = torch.randn(n, spec.hidden, requires_grad=True)
        pos = torch.arange(n) % 4096
        grad = torch.randn(n, spec.hidden)
        barrier()
        out["nf"].append(median_time(lambda: layer(h, pos, pass_through), reps))  # noqa: B023 (run at once)
        out["nb"].append(_backward_time(lambda: layer(h, pos, pass_through), grad, reps))  # noqa: B023
        ids = torch.randint(0, spec.vocab, (n,))
        targets = torch.randint(0, spec.vocab, (n,))

        def head() -> Tensor:
            x = lm.embed(ids)  # noqa: B023 (run at once)
            return torch.nn.functional.cross_entropy(lm.logits(x).float(), targets, reduction="sum")  # noqa: B023

        barrier()
        out["hf"].append(median_time(head, reps))
        out["hb"].append(_backward_time(head, None, reps))
    return out


def _backward_time(forward: Callable[[], Tensor], grad: Tensor | None, reps: int) -> float:
    """Median seconds of the backward pass alone (a fresh forward before each, not timed)."""
    times = []
    for i in range(reps + 1):
        y = forward()
        start = time.perf_counter()
        y.backward(grad)  # type: ignore[no-untyped-call]
        if i:
            times.append(time.perf_counter() - start)
    return float(np.median(times))


def optimizer_time(spec: ModelSpec, env: RankEnv) -> float:
    """Seconds of one AdamW step and ``zero_grad`` on the model sharded by FSDP2 as the runtime shards
    it (world > 1): per-tensor overheads dominate a small model, so this is per model and rank count."""
    model = DecoderLM(spec, seed=0)
    if env.world > 1:
        fsdp_shard(model, model.layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    params = list(model.parameters())

    def zero_grads() -> None:
        for p in params:
            p.grad = torch.zeros_like(p)

    def step() -> None:
        zero_grads()
        opt.step()
        opt.zero_grad(set_to_none=True)

    barrier()
    grads = median_time(zero_grads, 7)
    return max(median_time(step, 7) - grads, 0.0)


def step_overhead(env: RankEnv) -> float:
    """Seconds of the control traffic every step pays besides its work: the plan broadcast from rank 0,
    the plan-hash check, the barrier before the gradient sync, the loss all-reduce and the gathering of
    every rank's times (``nspsim_runtime.training.trainer``, ``nspsim_runtime.executor``)."""
    if env.world <= 1:
        return 0.0
    plan_like = {"lengths": list(range(400)), "nodes": [[1, r] for r in range(64)], "hash": "0" * 64}

    def control() -> None:
        box: list[Any] = [plan_like if env.rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        hashes: list[Any] = [None] * env.world
        dist.all_gather_object(hashes, "0" * 16)
        dist.barrier()
        dist.all_reduce(torch.zeros(1, dtype=torch.float64))
        times: list[Any] = [None] * env.world
        dist.all_gather_object(times, {"step_s": 1.0, "breakdown_s": dict.fromkeys(range(8), 0.0)})

    barrier()
    return median_time(control, 9)


def link_times(env: RankEnv, quick: bool) -> list[LinkMeasurement]:
    """Collective medians over every aligned group size 2..world (all groups of a size at once)."""
    out: list[LinkMeasurement] = []
    sizes = LINK_BYTES[::2] if quick else LINK_BYTES
    size = 2
    while size <= env.world:
        groups = [dist.new_group(list(range(s, s + size))) for s in range(0, env.world, size)]
        group = groups[env.rank // size]
        local = env.rank % size
        base = env.rank - local
        nxt, prv = base + (local + 1) % size, base + (local - 1) % size
        times: dict[str, list[float]] = {"alltoall": [], "p2p": [], "allgather": [], "reduce_scatter": []}
        for nbytes in sizes:
            n = max(nbytes // 4 // size * size, size)
            send, recv = torch.randn(n), torch.empty(n)
            shard = torch.empty(n // size)
            reps = 3 if quick else 10
            barrier()
            times["alltoall"].append(median_time(lambda: dist.all_to_all_single(recv, send, group=group), reps))  # noqa: B023

            def hop() -> None:
                ops = [dist.P2POp(dist.isend, send, nxt, group), dist.P2POp(dist.irecv, recv, prv, group)]  # noqa: B023
                for w in dist.batch_isend_irecv(ops):
                    w.wait()

            barrier()
            times["p2p"].append(median_time(hop, reps))
            barrier()
            times["allgather"].append(median_time(lambda: dist.all_gather_into_tensor(recv, shard, group=group), reps))  # noqa: B023
            barrier()
            times["reduce_scatter"].append(
                median_time(lambda: dist.reduce_scatter_tensor(shard, send, group=group), reps)  # noqa: B023
            )
        moved = [max(b // 4 // size * size, size) * 4 for b in sizes]
        counted = {  # bytes per rank as the cost model counts each collective
            "alltoall": [m * (size - 1) / size for m in moved],
            "p2p": [float(m) for m in moved],
            "allgather": [m * (size - 1) / size for m in moved],
            "reduce_scatter": [m * (size - 1) / size for m in moved],
        }
        for name, secs in times.items():
            out.append(
                LinkMeasurement(collective=name, group_size=size, nbytes=tuple(counted[name]), seconds=tuple(secs))
            )
        size *= 2
    return out


def overlap_slowdown(spec: ModelSpec, env: RankEnv, quick: bool) -> float:
    """A decoder layer's forward with an all-to-all in flight over its forward alone (1 on one rank)."""
    if env.world <= 1:
        return 1.0
    layer = DecoderLayer(spec, rope_theta=1e6)
    n = 1024 if quick else 4096
    h, pos = torch.randn(n, spec.hidden), torch.arange(n)
    send, recv = torch.randn(1 << 20), torch.empty(1 << 20)

    def alone() -> None:
        with torch.no_grad():
            layer(h, pos, pass_through)

    def with_comm() -> None:
        work = dist.all_to_all_single(recv, send, async_op=True)
        alone()
        assert work is not None
        work.wait()

    reps = 3 if quick else 9
    barrier()
    t_alone = median_time(alone, reps)
    barrier()
    comm = median_time(lambda: dist.all_to_all_single(recv, send), reps)
    barrier()
    both = median_time(with_comm, reps)
    # both = max(compute * slowdown, comm) when they overlap; the compute part is what slowed
    return max(both, t_alone) / t_alone if both > comm else 1.0


SHARING_PASSES = 3


def sharing_curve(spec: ModelSpec, env: RankEnv, quick: bool, kernel_name: str = "auto") -> dict[int, float]:
    """Slowdown of a kernel mix (a decoder layer's forward, an attention forward) when ``n`` ranks run
    it at once against one rank alone, for n = 1, 2, 4, .. world (ranks >= n wait in a collective):
    per pass the mean over the active ranks of their median over 15 runs, divided by the pass's
    n = 1 time; the median over :data:`SHARING_PASSES` interleaved passes (two calibrations of the
    same host gave 1.11 / 2.35 and 1.59 / 3.26 at 2 / 4 ranks with one pass of 7 runs)."""
    mix = kernel_mix(spec, 1024 if quick else 2048, kernel_name)

    counts = [1 << i for i in range(env.world.bit_length()) if 1 << i <= env.world]
    ratios: dict[int, list[float]] = {n: [] for n in counts}
    for _ in range(1 if quick else SHARING_PASSES):  # interleaved passes: a drift of the host hits every n
        times: dict[int, float] = {}
        for n in counts:
            barrier()
            mine = median_time(mix, 3 if quick else 15) if env.rank < n else 0.0
            gathered: list[Any] = [mine]
            if env.world > 1:
                gathered = [None] * env.world
                dist.all_gather_object(gathered, mine)
            times[n] = float(np.mean(gathered[:n]))
        for n in counts:
            ratios[n].append(times[n] / times[1])
    return {n: float(np.median(r)) for n, r in ratios.items()}


def calibrate_rank(env: RankEnv, cfg: CalibrationConfig) -> dict[str, Any]:
    """Every measurement of one rank (called on all ranks at once by :func:`nspsim_runtime.launch.run_ranks`):
    kernels and layers with every rank busy at once, the sharing curve, the optimizer, control
    traffic and collectives; the speed reference (:mod:`nspsim_runtime.calibration.reference`) and a
    machine snapshot (:mod:`nspsim_runtime.machine`, rank 0) before, between and after the phases."""
    torch.set_num_threads(cfg.threads)
    pin_to_core(env.rank, env.world)  # as nspsim_runtime.train pins its ranks (nspsim_runtime.affinity)
    spec = resolve_model(cfg.model)
    started = time.perf_counter()
    reference = SpeedReference(spec, cfg.kernel)
    machine: list[dict[str, Any]] = []

    def checkpoint() -> None:  # the speed reference (every rank) and the machine (rank 0) between phases
        reference.measure()
        if env.rank == 0:
            machine.append(snapshot())

    checkpoint()
    result: dict[str, Any] = {"attention": attention_times(spec, cfg, env.world)}
    checkpoint()
    result["layers"] = layer_times(spec, cfg)
    checkpoint()
    result["sharing"] = sharing_curve(spec, env, cfg.quick, cfg.kernel)
    result["optimizer_s"] = optimizer_time(spec, env)
    result["step_s"] = step_overhead(env)
    result["links"] = link_times(env, cfg.quick) if env.world > 1 else []
    checkpoint()
    result["overlap_slowdown"] = overlap_slowdown(spec, env, cfg.quick)
    result["lockstep"] = lockstep_waits(spec, env, cfg.quick, cfg.kernel)
    checkpoint()
    result["executor"] = executor_times(spec, env, model=cfg.model, kernel=cfg.kernel, quick=cfg.quick)
    checkpoint()
    result["speed_reference"] = reference.samples
    result["machine"] = machine
    result["wall_s"] = time.perf_counter() - started
    return result
