"""Greedy tree routing: the NSP paper's "w/o router" ablation (section 6, Figure 10).

**Rule.** Each sample in turn, longest first, goes to the feasible SP-tree node that least raises the
critical load max_p C_p; among nodes that raise it equally (typically: not at all) the one adding the
least total work (degree x per-GPU cost: the least communication) wins, then the least-loaded one. No
prefix search, no beam, no lookahead: NSP's beam with width 1 over every sample (``chosen_by=load``).
Within one level the best node is the one with the smallest block maximum (plus latency if idle), so
each step needs only a per-level argmin, and the per-level block maxima are kept up to date
incrementally: one step is O(levels) numpy calls. Trade-off: still a Python loop over all samples, so
its runtime grows with the batch (docs/planners.md).

**Options** (default, why):

* ``token_balance_ratio="auto"``: the routing budget NSP uses (:mod:`~nspsim.planners.nsp.token_balance`),
  so the ablation changes the router only.

**Reference.** NSP paper section 6.4 and Figure 10 ("w/o router").

**Deviations.** The paper does not say how ties break; least added work, then least load, is ours.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from nspsim.execution.prepare import NESTED_PREPARATION, Preparation
from nspsim.plan import Plan
from nspsim.planners.base import Context, IntArray, Placement, Stopwatch, make_context
from nspsim.planners.finish import finish
from nspsim.planners.microbatch import min_micro_batches, token_split
from nspsim.planners.nsp.token_balance import check_ratio, effective_budget
from nspsim.planners.packing import BUDGET_RTOL
from nspsim.planners.proxy import CostTable
from nspsim.trace.batching import Batch
from nspsim.workload import Workload

FloatArray = npt.NDArray[np.float64]


class LevelMaxima:
    """Block maxima of a per-GPU vector at every tree level, updated in place."""

    def __init__(self, num_gpus: int, levels: tuple[int, ...]) -> None:
        self.levels = tuple(sorted(levels))
        self.blocks: dict[int, FloatArray] = {d: np.zeros(num_gpus // d) for d in self.levels}

    def add(self, degree: int, block: int, delta: float) -> None:
        """Add ``delta`` to every GPU of node (degree, block)."""
        first, end = block * degree, (block + 1) * degree
        for d, arr in self.blocks.items():
            if d <= degree:
                arr[first // d : end // d] += delta
            else:
                parent = first // d
                arr[parent] = max(arr[parent], self.blocks[degree][block])


@dataclass(frozen=True)
class _Step:
    """The chosen node of one sample: level, block, per-GPU delta."""

    degree: int
    block: int
    delta: float


def _best_node(
    costs: dict[int, float],
    latency: dict[int, float],
    length: int,
    loads: LevelMaxima,
    tokens: LevelMaxima,
    idle: dict[int, FloatArray],
    budget: float,
) -> _Step | None:
    top = float(loads.blocks[loads.levels[-1]].max())
    best: tuple[float, float, float] | None = None
    step = None
    for d in loads.levels:
        if length > d * budget:
            continue
        new_block = loads.blocks[d] + costs[d] + latency[d] * idle[d]
        feasible = tokens.blocks[d] + length / d <= budget * (1 + BUDGET_RTOL)
        if not feasible.any():
            continue
        b = int(np.argmin(np.where(feasible, new_block, np.inf)))
        delta = costs[d] + latency[d] * float(idle[d][b])
        key = (max(top, float(new_block[b])), d * delta, float(new_block[b]))
        if best is None or key < best:
            best, step = key, _Step(d, b, delta)
    return step


def greedy_route(table: CostTable, select: IntArray, levels: tuple[int, ...]) -> tuple[IntArray, IntArray] | None:
    """(degrees, first ranks) of the selected sorted samples, or ``None`` if one cannot be placed."""
    p = table.tree.num_gpus
    loads, tokens = LevelMaxima(p, levels), LevelMaxima(p, levels)
    idle = {d: np.ones(p // d) for d in levels}
    cost = {d: table.total(d)[select] for d in levels}
    latency = {d: table.overhead_total(d) for d in levels}
    degrees = np.empty(select.size, dtype=np.int64)
    firsts = np.empty(select.size, dtype=np.int64)
    for i, j in enumerate(select.tolist()):
        length = int(table.lengths[j])
        step = _best_node(
            {d: float(c[i]) for d, c in cost.items()}, latency, length, loads, tokens, idle, table.token_budget
        )
        if step is None:
            return None
        loads.add(step.degree, step.block, step.delta)
        tokens.add(step.degree, step.block, length / step.degree)
        idle[step.degree][step.block] = 0.0
        degrees[i], firsts[i] = step.degree, step.block * step.degree
    return degrees, firsts


@dataclass(frozen=True, kw_only=True)
class GreedyPlanner:
    """The "w/o router" ablation; option ``token_balance_ratio`` as NSP's."""

    token_balance_ratio: float | str = "auto"
    name: ClassVar[str] = "greedy"
    preparation: ClassVar[Preparation] = NESTED_PREPARATION
    headline: ClassVar[bool] = False
    relative_cost: ClassVar[float] = 2.0

    def __post_init__(self) -> None:
        check_ratio(self.token_balance_ratio)

    def check(self, workload: Workload) -> None:
        """No option depends on the workload."""

    def plan(self, batch: Batch, workload: Workload) -> Plan:
        """Route every sample greedily (fewest micro-batches that fit when one pass cannot)."""
        started = Stopwatch.start()
        ctx = make_context(batch, workload, effective_budget(self.token_balance_ratio, workload, batch.lengths))
        extra = {"token_balance_ratio": str(self.token_balance_ratio)}
        return finish(self.name, ctx, _route_batch(ctx), started, extra, chosen_by="load")


def _route_batch(ctx: Context) -> Placement:
    n = ctx.table.num_samples
    m = min_micro_batches(int(ctx.table.lengths.sum()), ctx.num_gpus, ctx.budget)
    while True:
        parts = token_split(ctx.table.lengths, m, ctx.num_gpus * ctx.budget)
        routes = [greedy_route(ctx.table, part, ctx.levels) for part in parts]
        if all(r is not None for r in routes):
            break
        m += 1
    degrees, firsts, mbs = (np.zeros(n, dtype=np.int64) for _ in range(3))
    for mb, (part, route) in enumerate(zip(parts, routes)):
        assert route is not None
        degrees[part], firsts[part], mbs[part] = route[0], route[1], mb
    return Placement(degrees, firsts, mbs)
