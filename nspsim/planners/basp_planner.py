"""BASP, batch-aware sequence parallelism (only its abstract is public; SPEC 6).

The abstract: existing SP shards every sequence of a micro-batch over all SP ranks; BASP instead
"partitions GPUs into disjoint sequence-parallel groups according to the micro-batch size", so a
micro-batch of b sequences runs on b groups of P/b GPUs and each all-to-all stays inside a smaller
group. Interpretation implemented here, for token-budget batches of variable length:

* the batch is split into micro-batches by the same sorted, token-balanced cut as FlexSP's sequence
  blaster, trying the memory-minimum count up to +4 (at most ``max_micro_batches``);
* micro-batch i with n_i sequences runs at one SP degree s_i = the largest power of two <= P / n_i
  (one group per sequence when n_i <= P; degree 1 and several sequences per GPU otherwise), raised
  to the smallest degree that holds its longest sequence in memory and capped at spmax;
* its sequences are packed onto the P / s_i equal groups exactly as Static SP packs (cost-balanced
  under the token budget; a micro-batch that then overflows memory is split further);
* the micro-batch count with the smallest step estimate wins.

So BASP is Static SP with a degree per micro-batch chosen from the micro-batch's *size*, not its cost:
cheap to decide, blind to length skew inside a micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from nspsim.batching import Batch
from nspsim.config import Workload
from nspsim.plan import Plan
from nspsim.planners.base import Stopwatch, Context, IntArray, Placement, finish, make_context, step_estimate
from nspsim.planners.microbatch import blaster_split, min_micro_batches
from nspsim.planners.static_planner import pack_degree


def batch_aware_degree(ctx: Context, chunk: IntArray) -> int:
    """Degree of a micro-batch: largest power of two <= P / n, within [memory minimum, spmax]."""
    spmax = ctx.workload.tree.spmax
    degree = 1
    while degree * 2 <= min(spmax, ctx.num_gpus // chunk.size):
        degree *= 2
    longest = int(ctx.table.lengths[chunk].max())
    while longest > degree * ctx.budget and degree < spmax:
        degree *= 2
    return degree


@dataclass(frozen=True, kw_only=True)
class BASPPlanner:
    """BASP (interpretation in the module docstring); option ``max_micro_batches``."""

    max_micro_batches: int = 5
    name: ClassVar[str] = "basp"

    def __post_init__(self) -> None:
        if isinstance(self.max_micro_batches, bool) or not isinstance(self.max_micro_batches, int) \
                or self.max_micro_batches < 1:
            raise ValueError(f"option max_micro_batches must be a positive integer, got {self.max_micro_batches!r}")

    def plan(self, batch: Batch, workload: Workload) -> Plan:
        """Try each micro-batch count, keep the smallest step estimate."""
        started = Stopwatch.start()
        ctx = make_context(batch, workload)
        first = min_micro_batches(int(ctx.table.lengths.sum()), ctx.num_gpus, ctx.budget)
        last = min(max(first, min(first + 4, self.max_micro_batches)), ctx.table.num_samples)
        candidates = [_placement(ctx, m) for m in range(first, last + 1)]
        best = min(candidates, key=lambda p: step_estimate(ctx, p))
        return finish(self.name, ctx, best, started)


def _placement(ctx: Context, m: int) -> Placement:
    n = ctx.table.num_samples
    degrees, firsts, mbs = (np.zeros(n, dtype=np.int64) for _ in range(3))
    next_mb = 0
    chosen = []
    for chunk in blaster_split(ctx.table.lengths, m):
        degree = batch_aware_degree(ctx, chunk)
        part = pack_degree(ctx, degree, chunk)
        degrees[chunk], firsts[chunk] = degree, part.firsts[chunk]
        mbs[chunk] = next_mb + part.micro_batches[chunk]
        next_mb += int(part.micro_batches[chunk].max()) + 1
        chosen.append(str(degree))
    return Placement(degrees, firsts, mbs, {"basp_degrees": ",".join(chosen)})
