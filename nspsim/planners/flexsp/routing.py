"""FlexSP's per-chunk pieces around the MILP: the problem of a bucketed chunk, the static incumbent
(the best one-size packing, the solver's start and fallback), and the realisation of a solution as
per-sample degrees and ranks. Split from :mod:`~nspsim.planners.flexsp.planner` so the sweep stays
readable; the algorithms are those the planner's module doc describes (trade-offs there).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from nspsim.planners.base import Context, IntArray, Placement
from nspsim.planners.flexsp.bucketing import Buckets
from nspsim.planners.flexsp.milp import MilpProblem, MilpSolution
from nspsim.planners.packing import pack_balanced
from nspsim.planners.proxy import CostTable


@dataclass(frozen=True)
class Routed:
    """One micro-batch: per sample (sorted-space index) its degree and first rank; solver facts."""

    samples: IntArray
    degrees: IntArray
    firsts: IntArray
    solution: MilpSolution
    buckets: int


def chunk_problem(
    ctx: Context, buckets: Buckets, sizes: tuple[int, ...], slot_limit: dict[int, int] | None = None
) -> MilpProblem:
    table = CostTable(ctx.workload.cost, ctx.workload.tree, buckets.maxima, ctx.budget)
    back = np.empty_like(table.order)
    back[table.order] = np.arange(table.order.size)  # table is sorted descending; buckets ascending
    return MilpProblem(
        counts=buckets.counts,
        lengths=buckets.maxima,
        time={s: table.total(s)[back] for s in sizes},
        latency={s: table.overhead_total(s) for s in sizes},
        sizes=sizes,
        num_gpus=ctx.num_gpus,
        token_budget=float(ctx.budget),
        slot_limit=slot_limit,
    )


def static_incumbent(p: MilpProblem) -> MilpSolution | None:
    """Best single-size Static SP packing of the bucketed sequences (a feasible MILP point), or
    ``None`` if no size holds them."""
    items = np.repeat(np.arange(p.counts.size), p.counts)[::-1]  # longest bucket first
    best: MilpSolution | None = None
    for s in p.sizes:
        if p.lengths[-1] > s * p.token_budget:
            continue
        groups = p.slots_of(s)
        if groups == 0:
            continue
        cost = p.time[s][items]
        slots = pack_balanced(cost, p.lengths[items] / s, groups, p.token_budget, p.latency[s])
        if slots is None:
            continue
        loads = np.bincount(slots, weights=cost, minlength=groups) + p.latency[s] * (
            np.bincount(slots, minlength=groups) > 0
        )
        if best is None or loads.max() < best.makespan:
            table = np.zeros((groups, p.counts.size), dtype=np.int64)
            np.add.at(table, (slots, items), 1)
            used = table.sum(axis=1) > 0
            best = MilpSolution(
                np.full(int(used.sum()), s, dtype=np.int64), table[used], float(loads.max()), "incumbent", 0.0, "static"
            )
    return best


def realise(sol: MilpSolution, buckets: Buckets, chunk: IntArray, table: CostTable) -> tuple[IntArray, IntArray]:
    """Degrees and first ranks of the chunk's samples. The solution fixes how many sequences of each
    bucket every slot gets; the actual sequences of a bucket (longest first) are dealt round-robin
    over its slots, least actually-loaded slot first, longest bucket first. Slots get aligned rank
    blocks, largest first."""
    order = np.argsort(-sol.slot_sizes, kind="stable")
    sizes = sol.slot_sizes[order]
    counts = sol.assignment[order]
    firsts_of_slot = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    slot_cost = {int(d): table.total(int(d))[chunk] for d in np.unique(sizes)}
    loads = np.zeros(sizes.size)
    degrees = np.empty(chunk.size, dtype=np.int64)
    firsts = np.empty(chunk.size, dtype=np.int64)
    for b in range(buckets.maxima.size - 1, -1, -1):
        members = np.flatnonzero(buckets.of_sample == b)
        if members.size == 0:
            continue
        by_load = np.argsort(loads, kind="stable")
        quota = counts[by_load, b]
        rank = np.arange(quota.sum()) - np.repeat(np.cumsum(quota) - quota, quota)
        slots = by_load[
            np.repeat(np.arange(quota.size), quota)[np.lexsort((np.repeat(np.arange(quota.size), quota), rank))]
        ]
        degrees[members], firsts[members] = sizes[slots], firsts_of_slot[slots]
        for d, cost in slot_cost.items():
            at = sizes[slots] == d
            loads += np.bincount(slots[at], weights=cost[members[at]], minlength=sizes.size)
    return degrees, firsts


def placement_of(ctx: Context, routed: list[Routed]) -> Placement:
    n = ctx.table.num_samples
    degrees, firsts, mbs = (np.zeros(n, dtype=np.int64) for _ in range(3))
    for mb, r in enumerate(routed):
        degrees[r.samples], firsts[r.samples], mbs[r.samples] = r.degrees, r.firsts, mb
    statuses = Counter(r.solution.status for r in routed)
    solve_time = sum(r.solution.solve_time_s for r in routed)
    meta: dict[str, float | int | str] = {
        "milp_solve_time_s": solve_time,
        "solver": routed[0].solution.solver if routed else "none",
        "milp_status": ",".join(f"{k}:{v}" for k, v in sorted(statuses.items())),
        "milp_fallbacks": sum(v for k, v in statuses.items() if k.startswith("incumbent")),
        "max_group": int(degrees.max()),
        "flexsp_buckets": ",".join(str(r.buckets) for r in routed),
    }
    return Placement(degrees, firsts, mbs, meta)
