"""The estimate ladder: every way a planner scores a placement, cheapest first, in one place.

A placement's per-GPU forward and backward times under the routing proxy (:class:`ProxyLoad`, from
:meth:`~nspsim.planners.proxy.CostTable.evaluate`) reduce to one micro-batch's two *stages*
(:class:`Stages`: the busiest GPU's forward and backward seconds); every rung above Load is a
function of those two floats per micro-batch.

=================  ==========================================================  ===============================
rung               value (summed over micro-batches)                           use it to
=================  ==========================================================  ===============================
lower bound        max(work floor, longest-sample floor) of the batch          report a plan's gap (Load / bound)
                   (:func:`~nspsim.planners.lower_bound.lower_bound`); also    prune candidates that cannot win
                   :func:`static_floor`, a floor on one degree's Load, and
                   :func:`micro_batch_floor`, on a micro-batch's step
load               max_p D_fwd + max_p D_bwd (:func:`proxy_load`)              route: thousands of candidates
step               max(fwd, layers * all-gather) + max(bwd, layers * (AG +     choose micro-batch counts and
                   RS)) + the fixed cost per micro-batch (:func:`stage_step`,   degrees: FSDP floors and the
                   :func:`step_estimate`)                                      cost of each extra micro-batch
recompute-aware    step with the backward stage plus the recomputation the     choose among a memory-bound
                   executor's tree marking implies, phase-wise per EP group    batch's final candidates
                   (:func:`recompute_aware_step`)
simulator          the discrete-event simulation (``nspsim.simulator``)        judge every rung
=================  ==========================================================  ===============================

Each rung is at least the one below on every placement (``tests/planners/test_estimate_ladder.py`` checks it on
random placements): step adds non-negative floors and costs to Load's stages, recompute-aware adds
non-negative recomputation and, under expert parallelism, a group's max attention plus its max
non-attention is at least any GPU's sum. Trade-off: the higher rungs cost more per call (recompute-aware
replays the marking), so a planner uses the cheapest rung that sees what its choice changes. Which rung
chose a plan is recorded on it (:class:`~nspsim.plan.estimates.Estimates`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from nspsim.cost.interface import CostModel
from nspsim.execution.recompute import nodes_top_down, saved_samples
from nspsim.plan.estimates import Estimates
from nspsim.planners.base import Context, IntArray, Placement
from nspsim.planners.lower_bound import lower_bound
from nspsim.planners.marking import recompute_kernel, saved_compiled
from nspsim.planners.proxy import CostTable, FloatArray, ProxyLoad
from nspsim.specs.memory import MemoryModel


@dataclass(frozen=True)
class Stages:
    """One micro-batch's stage times in seconds: the busiest GPU's forward and backward."""

    fwd: float
    bwd: float

    @staticmethod
    def of(loads: ProxyLoad, remat: FloatArray | None = None) -> Stages:
        """The stages of per-GPU proxy times; ``remat`` (seconds per GPU) adds to the backward."""
        bwd = loads.d_bwd if remat is None else loads.d_bwd + remat
        return Stages(float(loads.d_fwd.max()), float(bwd.max()))


def stage_step(ctx: Context, stages: Stages) -> float:
    """Step estimate of one micro-batch: each stage floored by its FSDP collectives (hidden behind the
    pass's compute when that is longer), plus the cost model's fixed cost per micro-batch."""
    gather, bwd_comm, overhead = _step_floors(ctx.workload.cost)
    return max(stages.fwd, gather) + max(stages.bwd, bwd_comm) + overhead


_FLOORS: dict[int, tuple[CostModel, tuple[float, float, float]]] = {}


def step_floors(cost: CostModel) -> tuple[float, float, float]:
    """The forward and backward FSDP floors of a micro-batch and its fixed cost per micro-batch, all
    layers (:func:`stage_step`'s terms besides the stages)."""
    return _step_floors(cost)


def _step_floors(cost: CostModel) -> tuple[float, float, float]:
    """The forward and backward FSDP floors of a micro-batch and its fixed cost, all layers (asked of
    the cost model once per model: every call is batch-independent)."""
    hit = _FLOORS.get(id(cost))
    if hit is None or hit[0] is not cost:
        fsdp = cost.fsdp()
        gather, bwd_comm = cost.num_layers * fsdp.allgather, cost.num_layers * (fsdp.allgather + fsdp.reduce_scatter)
        hit = _FLOORS[id(cost)] = (cost, (gather, bwd_comm, cost.micro_batch_overhead()))
    return hit[1]


def micro_batch_step(ctx: Context, degrees: IntArray, firsts: IntArray, mask: npt.NDArray[np.bool_]) -> float:
    """Step estimate of the masked sorted samples on ``(degrees, firsts)`` run as one micro-batch."""
    return stage_step(ctx, Stages.of(ctx.table.evaluate(degrees, firsts, mask)))


def step_estimate(ctx: Context, placement: Placement) -> float:
    """Step estimate of a placement: its micro-batches' estimates summed."""
    return sum(
        micro_batch_step(ctx, placement.degrees, placement.firsts, placement.micro_batches == mb)
        for mb in range(placement.num_micro_batches)
    )


def proxy_load(ctx: Context, placement: Placement) -> float:
    """Proxy Load of a placement (micro-batch Loads summed)."""
    return ctx.table.load(placement.degrees, placement.firsts, placement.micro_batches)


FLOOR_MARGIN = 1e-9
"""Relative slack of the rule "recompute-aware estimate >= :func:`micro_batch_floor`": the two are
formed in different orders of float sums, a few units in the last place apart; 1e-9 is far above that
(``tests/planners/test_estimate_ladder.py`` checks the rule with this margin)."""


def micro_batch_floor(ctx: Context, samples: IntArray) -> float:
    """No placement of ``samples`` as one micro-batch on the tree's degrees has a step estimate, hence
    a recompute-aware one, below this: :func:`stage_step` of each pass's work at every sample's
    cheapest degree spread evenly over the GPUs.

    Proof. The forward stage is max_p D_p^fwd >= (1/P) sum_p D_p^fwd. Each sample j on a node of
    degree d adds fwd_j(d) to each of the node's d GPUs, so the sum over GPUs holds d fwd_j(d) >=
    min_d' d' fwd_j(d') per sample, plus node latencies (>= 0) and the intercept once per GPU holding
    tokens (>= P min(0, intercept)); likewise backward. :func:`stage_step` is non-decreasing in both
    stages, so the step estimate is at least ``stage_step`` of these means; the recompute-aware estimate
    adds non-negative recomputation to the backward stage and, phase-wise per EP group, a group's max
    attention plus its max non-attention, at least any of its GPUs' sum (the ladder above). The floor
    forms its sums in another order than the estimate: compare with :data:`FLOOR_MARGIN`."""
    fwd, bwd = ctx.table.cheapest_work()
    i_fwd, i_bwd = ctx.table.intercept
    p = ctx.num_gpus
    mean_fwd = float(fwd[samples].sum()) / p + min(0.0, i_fwd)
    mean_bwd = float(bwd[samples].sum()) / p + min(0.0, i_bwd)
    return stage_step(ctx, Stages(mean_fwd, mean_bwd))


def static_floor(ctx: Context, samples: IntArray, degree: int) -> float:
    """No placement of ``samples`` (sorted, longest first) at one ``degree`` has a proxy Load below
    this: their total work spread evenly over the GPUs, or the longest sample's own cost there."""
    cost = ctx.table.total(degree)[samples]
    return max(float(cost.sum()) * degree / ctx.num_gpus, float(cost[0]) + ctx.table.overhead_total(degree))


def selected_loads(table: CostTable, select: IntArray, degrees: IntArray, firsts: IntArray) -> ProxyLoad:
    """Proxy stage times and tokens per GPU of the selected samples on ``(degrees, firsts)``
    (``degrees[i]``/``firsts[i]`` belong to sample ``select[i]``)."""
    full_deg = np.zeros(table.num_samples, dtype=np.int64)
    full_first = np.zeros(table.num_samples, dtype=np.int64)
    mask = np.zeros(table.num_samples, dtype=bool)
    full_deg[select], full_first[select], mask[select] = degrees, firsts, True
    return table.evaluate(full_deg, full_first, mask)


def remat_per_gpu(
    ctx: Context, select: IntArray, degrees: IntArray, firsts: IntArray, tokens: FloatArray
) -> FloatArray:
    """Seconds of recomputation per GPU if the selected samples run on ``(degrees, firsts)`` as one
    micro-batch holding ``tokens`` sharded tokens per GPU: the executor's top-down marking
    (:func:`nspsim.execution.recompute.saved_samples`, same free bytes per GPU) replayed on the arrays,
    every node's unkept samples adding their recompute pass (the cost model's ``recompute_attention``
    of their forward attention, times the layers, :meth:`CostTable.recompute_pass`) to each GPU of the node."""
    table, memory, cost = ctx.table, ctx.workload.memory, ctx.workload.cost
    lengths = table.lengths[select].astype(np.float64)
    free = memory.activation_capacity - memory.base_bytes(1.0) * tokens
    fast = _remat_compiled(table, memory, select, lengths, degrees, firsts, free) if memory.keeps_attention else None
    if fast is not None:
        return fast
    lost = ~(
        saved_samples(lengths, degrees, firsts, free, memory, cost)
        if not memory.keeps_attention
        else _saved(table, memory, select, lengths, degrees, firsts, free)
    )
    remat = np.zeros(table.tree.num_gpus)
    for d, first, members in nodes_top_down(degrees[lost], firsts[lost]):
        remat[first : first + d] += table.recompute_pass(lengths[lost][members], d)
    return remat


def _remat_compiled(
    table: CostTable,
    memory: MemoryModel,
    select: IntArray,
    lengths: FloatArray,
    degrees: IntArray,
    firsts: IntArray,
    free: FloatArray,
) -> FloatArray | None:
    """:func:`remat_per_gpu` of a memory model that keeps attention in two kernel calls, the marking
    (:func:`~nspsim.planners.marking.saved_compiled`) and the nodes' recompute sums
    (:func:`~nspsim.planners.marking.recompute_kernel`), their per-sample inputs gathered from the
    table's per-degree rows (:meth:`CostTable.recompute_rows`; the same floats as :func:`_saved` and
    :meth:`CostTable.recompute_pass`); ``None`` where the table has no rows (a backend without
    additive parts, a degree outside the tree): the caller's numpy path then decides."""
    tables, rows = table.recompute_rows(), table.level_rows(degrees)
    if tables is None or rows is None:
        return None
    pro, comp, latency, fwd = tables
    unit, per_token = _memory_rows(memory, tuple(table.level_degrees.tolist()))
    saved = saved_compiled(lengths, degrees, firsts, free, unit[rows], per_token[rows], fwd[rows, select])
    remat = np.zeros(table.tree.num_gpus)
    if not saved.all():
        c = np.ascontiguousarray
        recompute_kernel()(
            ~saved,
            c(degrees, dtype=np.int64),
            c(firsts, dtype=np.int64),
            pro[rows, select],
            comp[rows, select],
            latency[rows],
            float(table.layers),
            remat,
        )
    return remat


@functools.lru_cache(maxsize=64)
def _memory_rows(memory: MemoryModel, levels: tuple[int, ...]) -> tuple[FloatArray, FloatArray]:
    """Per degree of ``levels``: attention bytes one rank keeps per token of a saved node, and per
    sharded token (the memory model's, once per model and tree)."""
    unit = np.array([memory.node_attention_bytes(1.0, d) for d in levels])
    per_token = np.array([memory.attention_bytes_per_token(d) for d in levels])
    return unit, per_token


def _saved(
    table: CostTable,
    memory: MemoryModel,
    select: IntArray,
    lengths: FloatArray,
    degrees: IntArray,
    firsts: IntArray,
    free: FloatArray,
) -> npt.NDArray[np.bool_]:
    """:func:`~nspsim.execution.recompute.saved_samples` compiled (:mod:`nspsim.planners.marking`), its
    per-sample inputs at each sample's degree."""
    unit, per_token, fwd = np.empty(select.size), np.empty(select.size), np.empty(select.size)
    for d in np.unique(degrees).tolist():
        at = degrees == d
        unit[at] = memory.node_attention_bytes(1.0, d)
        per_token[at] = memory.attention_bytes_per_token(d)
        fwd[at] = table.attention_fwd(d)[select[at]]
    return saved_compiled(lengths, degrees, firsts, free, unit, per_token, fwd)


def phase_wise(table: CostTable, loads: ProxyLoad, remat: FloatArray, expert_parallel: int) -> Stages:
    """Stages when every layer synchronises each expert-parallel group between attention and the
    experts (the EP dispatch and combine all-to-alls): per pass and per EP group (aligned blocks of
    ``expert_parallel`` GPUs), the group's max attention (+ recompute in backward) plus its max
    non-attention; the stage is the slowest group's. Groups are not synchronised with each other per
    layer (the FSDP all-gathers run ahead, so they drift), so this is not max_p attention + max_p
    non-attention over all GPUs (docs/planners.md has the measurement that chose this form).
    Non-attention per GPU is the proxy's affine part of its tokens."""
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
    return Stages(fwd, bwd)


def recompute_aware_step(
    ctx: Context, select: IntArray, degrees: IntArray, firsts: IntArray, loads: ProxyLoad | None = None
) -> float:
    """Step estimate of the selected samples on ``(degrees, firsts)`` as one micro-batch with the
    recomputation its tree marking implies (:func:`remat_per_gpu`; phase-wise per EP group under
    expert parallelism, :func:`phase_wise`); ``loads``: their :func:`selected_loads` under
    ``ctx.table`` when the caller has them already."""
    wl = ctx.workload
    if loads is None:
        loads = selected_loads(ctx.table, select, degrees, firsts)
    extra = remat_per_gpu(ctx, select, degrees, firsts, loads.tokens)
    if wl.model.moe is not None and wl.training.expert_parallel > 1:
        return stage_step(ctx, phase_wise(ctx.table, loads, extra, wl.training.expert_parallel))
    return stage_step(ctx, Stages.of(loads, extra))


def recompute_aware_estimate(ctx: Context, placement: Placement) -> float:
    """:func:`recompute_aware_step` of each micro-batch of a placement, summed."""
    total = 0.0
    for mb in range(placement.num_micro_batches):
        select = np.flatnonzero(placement.micro_batches == mb)
        total += recompute_aware_step(ctx, select, placement.degrees[select], placement.firsts[select])
    return total


def estimates(ctx: Context, placement: Placement, chosen_by: str, chosen_s: float | None = None) -> Estimates:
    """The plan's :class:`~nspsim.plan.estimates.Estimates`: the batch's lower bound, the placement's
    Load and step estimate, and the rung ``chosen_by`` with its value (``chosen_s`` when the planner
    has it already, else evaluated here; the step estimate for ``rule``)."""
    load, step = proxy_load(ctx, placement), step_estimate(ctx, placement)
    if chosen_s is None:
        by_rung = {"load": load, "step": step, "rule": step}
        chosen_s = by_rung[chosen_by] if chosen_by in by_rung else recompute_aware_estimate(ctx, placement)
    return Estimates(
        lower_bound_s=lower_bound(ctx.table),
        load_s=load,
        step_estimate_s=step,
        chosen_by=chosen_by,
        chosen_estimate_s=float(chosen_s),
    )
