"""BASP, batch-aware sequence parallelism (only its abstract is public).

**Rule.** The batch is sorted by length and cut into m micro-batches of even token count (contiguous
chunks of the sorted order, FlexSP's sequence blaster), so a micro-batch holds sequences of similar
length. Every micro-batch runs at ONE SP degree: P/s equal, disjoint groups of s GPUs, its sequences
packed onto them as Static SP packs. The degree is chosen per micro-batch, among the degrees that hold
its longest sequence, by the least step estimate of that micro-batch (ties: the lower proxy Load, then
the smaller degree); m runs from the memory minimum to ``max_micro_batches`` and the least summed step
estimate wins (``chosen_by=step``). Static SP's plan (one degree for every micro-batch, also the m = 1
cut) always competes, so BASP's step estimate is never worse than Static SP's (a property test). What
BASP cannot do, unlike FlexSP and NSP, is mix group sizes within one micro-batch.

**Options** (default, why):

* ``max_micro_batches=5``: the NSP paper's sweep of micro-batch counts; every count up to it is
  planned, so the time grows with its square.

**Reference.** The BASP abstract: existing SP is batch-agnostic, applying "uniform sequence
partitioning across all batch sizes"; BASP "partitions GPUs into disjoint sequence-parallel groups
according to the micro-batch", shrinking the all-to-all group, and reports 1.17-1.31x over standard
SP. docs/planners.md "BASP (interpretation)".

**Deviations.** The whole rule is an interpretation. The other reading, "degree = P / (sequences in the
micro-batch)", gives degree 1 to nearly every micro-batch of a token-budget batch of thousands of
sequences; measured 2.4-11x Static SP's Load and 2.8x its simulated step time, the opposite of the
published speed-up, so it is not implemented.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from nspsim.execution.prepare import AS_PLANNED, Preparation
from nspsim.plan import Plan
from nspsim.planners.base import Context, IntArray, Placement, Stopwatch, check_count_option, make_context
from nspsim.planners.estimate import Stages, proxy_load, stage_step, static_floor, step_estimate
from nspsim.planners.finish import finish
from nspsim.planners.microbatch import MAX_MICRO_BATCHES, blaster_split, min_micro_batches
from nspsim.planners.static.planner import best, pack_degree, sweep
from nspsim.trace.batching import Batch
from nspsim.workload import Workload


@dataclass(frozen=True)
class ChunkRoute:
    """One micro-batch's chosen degree, its packing (sorted-space arrays over the chunk's samples,
    ``parts`` > 1 when the chunk needed more passes), its estimate and proxy Load."""

    degree: int
    firsts: IntArray
    parts: IntArray
    estimate: float
    load: float


def route_chunk(ctx: Context, chunk: IntArray) -> ChunkRoute:
    """The best single-degree packing of the sorted samples ``chunk`` (module docstring). Degrees are
    packed in order of a Load floor (their work spread evenly, or the longest sample alone); once the
    floor exceeds the best estimate found, no later degree can win (estimate >= Load >= floor)."""
    longest = int(ctx.table.lengths[chunk[0]])
    floors = {d: static_floor(ctx, chunk, d) for d in ctx.levels if longest <= d * ctx.budget}
    found: ChunkRoute | None = None
    for d in sorted(floors, key=lambda d: (floors[d], d)):
        if found is not None and floors[d] > found.estimate:
            break
        route = _pack_chunk(ctx, chunk, d)
        if found is None or (route.estimate, route.load, route.degree) < (found.estimate, found.load, found.degree):
            found = route
    assert found is not None  # the feasibility check guarantees a degree that holds the longest sample
    return found


def _pack_chunk(ctx: Context, chunk: IntArray, degree: int) -> ChunkRoute:
    placement = pack_degree(ctx, degree, chunk)
    parts = placement.micro_batches[chunk]
    estimate, load = 0.0, 0.0
    for part in range(int(parts.max()) + 1):
        mask = np.zeros(ctx.table.num_samples, dtype=bool)
        mask[chunk[parts == part]] = True
        loads = ctx.table.evaluate(placement.degrees, placement.firsts, mask)
        estimate += stage_step(ctx, Stages.of(loads))
        load += loads.load
    return ChunkRoute(degree, placement.firsts[chunk], parts, estimate, load)


def batch_aware_placement(ctx: Context, m: int) -> Placement:
    """Sorted batch cut into ``m`` even-token chunks, each at its own best single degree."""
    n = ctx.table.num_samples
    degrees, firsts, mbs = (np.zeros(n, dtype=np.int64) for _ in range(3))
    next_mb = 0
    chosen = []
    for chunk in blaster_split(ctx.table.lengths, m):
        route = route_chunk(ctx, chunk)
        degrees[chunk], firsts[chunk], mbs[chunk] = route.degree, route.firsts, next_mb + route.parts
        next_mb += int(route.parts.max()) + 1
        chosen.append(str(route.degree))
    return Placement(degrees, firsts, mbs, {"basp_degrees": ",".join(chosen), "basp_chunks": m})


@dataclass(frozen=True, kw_only=True)
class BASPPlanner:
    """BASP (interpretation in the module docstring); option ``max_micro_batches``."""

    max_micro_batches: int = 5
    name: ClassVar[str] = "basp"
    preparation: ClassVar[Preparation] = AS_PLANNED
    headline: ClassVar[bool] = True
    relative_cost: ClassVar[float] = 4.0

    def __post_init__(self) -> None:
        check_count_option(
            "max_micro_batches",
            self.max_micro_batches,
            MAX_MICRO_BATCHES,
            "every count up to it is planned; the time grows with its square",
        )

    def check(self, workload: Workload) -> None:
        """No option depends on the workload."""

    def plan(self, batch: Batch, workload: Workload) -> Plan:
        """Try each micro-batch count and Static SP's plan, keep the smallest step estimate."""
        started = Stopwatch.start()
        ctx = make_context(batch, workload)
        first = min_micro_batches(int(ctx.table.lengths.sum()), ctx.num_gpus, ctx.budget)
        last = min(max(first, self.max_micro_batches), ctx.table.num_samples)
        static = best(sweep(ctx))
        seed = Placement(
            static.placement.degrees,
            static.placement.firsts,
            static.placement.micro_batches,
            {"basp_degrees": str(static.degree), "basp_chunks": static.placement.num_micro_batches},
        )
        candidates = [(static.step, static.load, seed)]  # = the m = 1 cut when one pass holds the batch
        for m in range(max(first, 2), last + 1):
            placement = batch_aware_placement(ctx, m)
            candidates.append((step_estimate(ctx, placement), proxy_load(ctx, placement), placement))
        chosen = min(candidates, key=lambda c: (c[0], c[1]))[2]
        return finish(self.name, ctx, chosen, started, chosen_by="step")
