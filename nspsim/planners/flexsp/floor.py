"""FlexSP's pruning floors: per chunk, a step estimate no FlexSP placement of it goes below.

A count's step estimate is the sum of its chunks' micro-batch
estimates, and each chunk's depends on that chunk alone. :class:`StepFloor` gives, per chunk and
without solving, a floor no placement FlexSP can make of it goes below: on the forward (likewise
backward) stage, the busiest GPU carries at least the mean over GPUs holding tokens, which is at
least ``sum_j min_d d fwd_j(d) / P`` plus the cheapest node latency plus the intercept, and at least
any one sample's cheapest ``fwd_j(d) + latency(d)`` plus the intercept (``d`` over the allowed sizes
that hold sample j; groups are disjoint and every sample has >= 1 token); the stage floors go through
:func:`~nspsim.planners.estimate.stage_step`, which is monotone in both. Counts are tried in increasing
order as before and their chunks longest first; before each solve, the solved chunks' exact
estimates plus the unsolved chunks' floors are compared with the best step so far, and the count is
abandoned once that sum exceeds it (by a relative 1e-9, far above rounding). An abandoned count
could only have lost (its step is at least the sum), and ties still go to the smaller count, so the
chosen plan is the one the full sweep chooses. Measured (``benchmarks/results/flexsp_speed.md``):
6.9 of the 15 solves per Figure 7 batch remain (2.3x less CPU), mostly because the longest chunk's
floor is loose (10-25%: packing and bucketing) while the others' are within a few percent. Trade-off: the
floors cost a few array passes per count; a plan's ``milp_solves`` now counts the solves made.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nspsim.planners.base import Context, IntArray
from nspsim.planners.estimate import Stages, micro_batch_step, stage_step
from nspsim.planners.proxy import FloatArray

PRUNE_RTOL = 1e-9
"""A count is abandoned only when its floor exceeds the best step by this relative margin (module doc)."""


@dataclass(frozen=True)
class StepFloor:
    """Per sorted sample, floors on what it adds to a micro-batch's busiest GPU (module doc
    "Pruning"): ``work_*`` min over allowed fitting sizes of ``d * cost(d)`` (its share of the GPUs'
    summed time), ``own_*`` min of ``cost(d) + node latency(d)`` (the time of its own GPUs); the
    cheapest node latency per pass."""

    ctx: Context
    work_fwd: FloatArray
    work_bwd: FloatArray
    own_fwd: FloatArray
    own_bwd: FloatArray
    node_fwd: float
    node_bwd: float

    @staticmethod
    def of(ctx: Context, sizes: tuple[int, ...]) -> StepFloor:
        """Floors of every sample of ``ctx`` over groups of the ``sizes`` that hold it within the budget."""
        table = ctx.table
        work_fwd, work_bwd, own_fwd, own_bwd = arrays = [np.full(table.num_samples, np.inf) for _ in range(4)]
        for d in sizes:
            fits = table.lengths <= d * table.token_budget
            fwd, bwd = table.sample_costs(d)
            lat_fwd, lat_bwd = table.overhead(d)
            for out, value in zip(arrays, (d * fwd, d * bwd, fwd + lat_fwd, bwd + lat_bwd)):
                np.minimum(out, np.where(fits, value, np.inf), out=out)
        latencies = [table.overhead(d) for d in sizes]
        return StepFloor(
            ctx,
            work_fwd,
            work_bwd,
            own_fwd,
            own_bwd,
            node_fwd=min(lat[0] for lat in latencies),
            node_bwd=min(lat[1] for lat in latencies),
        )

    def micro_batch(self, samples: IntArray) -> float:
        """No FlexSP placement of ``samples`` (sorted-space indices, at least one) as one micro-batch
        has a step estimate below this."""
        gpus = self.ctx.num_gpus
        ifwd, ibwd = self.ctx.table.intercept
        fwd = max(float(self.work_fwd[samples].sum()) / gpus + self.node_fwd, float(self.own_fwd[samples].max()))
        bwd = max(float(self.work_bwd[samples].sum()) / gpus + self.node_bwd, float(self.own_bwd[samples].max()))
        return stage_step(self.ctx, Stages(fwd + ifwd, bwd + ibwd))


def chunk_estimate(ctx: Context, samples: IntArray, degrees: IntArray, firsts: IntArray) -> float:
    """The step estimate of one routed chunk (``samples`` in sorted space with their degrees and first
    ranks) as its own micro-batch (what :func:`~nspsim.planners.estimate.step_estimate` adds)."""
    n = ctx.table.num_samples
    all_degrees, all_firsts = np.ones(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    mask = np.zeros(n, dtype=bool)
    all_degrees[samples], all_firsts[samples], mask[samples] = degrees, firsts, True
    return micro_batch_step(ctx, all_degrees, all_firsts, mask)
