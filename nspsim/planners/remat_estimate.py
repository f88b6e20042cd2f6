"""Recompute-aware choice among NSP's final candidates on memory-bound batches.

The routing proxy (Load) does not see tree-level recomputation, the paper's deliberate choice. On a
memory-bound batch that blind spot picks wrong: on Qwen3-235B / 64 H200s / wikipedia batch 4 the
beam's nested plan had the smallest Load, yet its simulated step (23.32 s) lost to NSP's own
static-8 seed packed under the same token cap (19.86 s), because its degree-1 and degree-2 nodes
holding 28-35K-token samples cannot keep their attention and recompute it in backward. (The
estimate below does not see comm wait either, and on that batch picks a static-2 packing, 23.58 s;
over the 11 distinct Qwen3-235B batches of the closing study it still improves the mean, see
docs/planners.md.)

So when the batch is memory-bound, the final candidates (the beam's best state and the static
seeds) are compared by Load plus an estimate of that recomputation: the executor's top-down marking
(:func:`nspsim.execution.recompute.saved_samples`, roots first, same free bytes per GPU) is replayed on the
candidate's arrays, and every node's unkept samples add their recompute pass - the cost model's
``recompute_attention`` of their forward attention (Q/K/V re-send and kernel, no epilogue), times the
layers - to each GPU of the node's backward stage. Estimate = max_p D_p^fwd + max_p (D_p^bwd + R_p).
Trade-off: a few extra milliseconds per memory-bound batch (one marking per candidate); the choice
can pick a candidate whose bare Load is higher, so on memory-bound batches NSP's guarantee is stated
on this estimate (never worse than the best static seed's), not on Load.

Under expert parallelism the estimate is phase-wise per EP group (:func:`phase_wise`): the EP
dispatch and combine all-to-alls synchronise a group between attention and the experts every
layer, so each group pays its max attention plus its max non-attention; and the beam of a
memory-bound batch also runs on the EP-aligned levels (:func:`candidate_levels`), whose nodes
never make a group's GPUs unequal.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from nspsim.cost.interface import CostModel
from nspsim.execution.recompute import nodes_top_down, saved_samples
from nspsim.planners.base import Context, estimate_of
from nspsim.planners.proxy import CostTable, ProxyLoad
from nspsim.specs.memory import MemoryModel

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Route:
    """Degrees and first ranks of the routed samples, its Load under the search proxy, its source."""

    degrees: IntArray
    firsts: IntArray
    load: float
    source: str


def selected_loads(table: CostTable, select: IntArray, degrees: IntArray, firsts: IntArray) -> ProxyLoad:
    """Proxy stage times and tokens per GPU of the selected samples on ``(degrees, firsts)``
    (``degrees[i]``/``firsts[i]`` belong to sample ``select[i]``)."""
    full_deg = np.zeros(table.num_samples, dtype=np.int64)
    full_first = np.zeros(table.num_samples, dtype=np.int64)
    mask = np.zeros(table.num_samples, dtype=bool)
    full_deg[select], full_first[select], mask[select] = degrees, firsts, True
    return table.evaluate(full_deg, full_first, mask)


def remat_per_gpu(
    table: CostTable,
    memory: MemoryModel,
    cost: CostModel,
    select: IntArray,
    degrees: IntArray,
    firsts: IntArray,
    tokens: FloatArray,
) -> FloatArray:
    """Seconds of recomputation per GPU if the selected samples run on ``(degrees, firsts)`` (one
    micro-batch) with ``tokens`` sharded tokens per GPU (``selected_loads(...).tokens``)."""
    lengths = table.lengths[select].astype(np.float64)
    free = memory.activation_capacity - memory.base_bytes(1.0) * tokens
    lost = ~saved_samples(lengths, degrees, firsts, free, memory, cost)
    remat = np.zeros(table.tree.num_gpus)
    for d, first, members in nodes_top_down(degrees[lost], firsts[lost]):
        redo = cost.recompute_attention(lengths[lost][members], d)
        remat[first : first + d] += cost.num_layers * (redo.prologue + redo.compute)
    return remat


def remat_aware_load(
    table: CostTable, memory: MemoryModel, cost: CostModel, select: IntArray, degrees: IntArray, firsts: IntArray
) -> float:
    """max_p D_p^fwd + max_p (D_p^bwd + R_p) of the selected samples on ``(degrees, firsts)``."""
    loads = selected_loads(table, select, degrees, firsts)
    extra = remat_per_gpu(table, memory, cost, select, degrees, firsts, loads.tokens)
    return float(loads.d_fwd.max() + (loads.d_bwd + extra).max())


def recompute_aware_estimate(ctx: Context, select: IntArray, route: Route) -> float:
    """Step estimate of ``route`` as one micro-batch with the recomputation its tree marking implies
    (:func:`remat_per_gpu`; phase-wise per EP group under expert parallelism, :func:`phase_wise`;
    FSDP floors and the fixed micro-batch cost of :func:`~nspsim.planners.base.estimate_of`)."""
    wl = ctx.workload
    loads = selected_loads(ctx.table, select, route.degrees, route.firsts)
    extra = remat_per_gpu(ctx.table, wl.memory, wl.cost, select, route.degrees, route.firsts, loads.tokens)
    if wl.model.moe is not None and wl.training.expert_parallel > 1:
        return estimate_of(ctx, phase_wise(ctx.table, loads, extra, wl.training.expert_parallel))
    return estimate_of(ctx, loads, extra)


def phase_wise(table: CostTable, loads: ProxyLoad, remat: FloatArray, expert_parallel: int) -> ProxyLoad:
    """Stage times when every layer synchronises each expert-parallel group between attention and
    the experts (the EP dispatch and combine all-to-alls): per pass and per EP group (aligned blocks of
    ``expert_parallel`` GPUs), the group's max attention (+ recompute in backward) + its max
    non-attention; the stage is the slowest group's. Groups are not synchronised with each other per
    layer (the FSDP all-gathers run ahead, so they drift), so this is not max_p attention +
    max_p non-attention over all GPUs, which charged a plan of eight internally uniform SP8 groups
    (FlexSP's, a static-8 packing) for attention and tokens peaking on different groups.
    Non-attention per GPU is the proxy's affine part of its tokens. Measured on Qwen3-235B-A22B / 64
    H200s / wikipedia 192K batch 0 (simulated step; this estimate; the all-GPU form): NSP's one-pass
    nested plan 25.05 s, 22.39 s, 22.70 s; BASP 22.22, 19.12, 23.11; FlexSP 22.11, 19.45, 23.67; a
    static-8 packing 22.14, 19.48, 23.74: this one orders all seven candidates measured as the
    simulator does, the all-GPU form put the nested plan first (docs/planners.md)."""
    held = loads.tokens > 0
    i_fwd, i_bwd = table.intercept
    o_fwd = table.layers * table.fit.fwd_slope * loads.tokens + i_fwd * held
    o_bwd = table.layers * table.fit.bwd_slope * loads.tokens + i_bwd * held
    groups = max(loads.tokens.size // max(expert_parallel, 1), 1)

    def group_max(values: FloatArray) -> FloatArray:
        out: FloatArray = values.reshape(groups, -1).max(axis=1)
        return out

    fwd = float((group_max(loads.d_fwd - o_fwd) + group_max(o_fwd)).max())
    bwd = float((group_max(loads.d_bwd + remat - o_bwd) + group_max(o_bwd)).max())
    return ProxyLoad(d_fwd=np.array([fwd]), d_bwd=np.array([bwd]), tokens=np.array([float(loads.tokens.max())]))


def candidate_levels(levels: tuple[int, ...], expert_parallel: int) -> list[tuple[int, ...]]:
    """The level sets a memory-bound batch's beam runs on: the planner's ``levels`` and, under expert
    parallelism, the EP-aligned ones (degree 1 and degrees of at least one EP group) when they
    differ. A node smaller than an EP group but larger than one GPU makes its group's GPUs unequal
    in attention and tokens, which :func:`phase_wise` charges every layer; the aligned beam avoids
    that by construction, and the estimate decides between the routes."""
    out = [levels]
    if expert_parallel > 1:
        aligned = tuple(d for d in levels if d == 1 or d >= expert_parallel)
        if aligned != levels and aligned:
            out.append(aligned)
    return out
