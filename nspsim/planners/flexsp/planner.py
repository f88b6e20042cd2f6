"""FlexSP as published (ASPLOS'25): sequence blaster, DP bucketing and a MILP per micro-batch.

**Rule.** For each micro-batch count m from the memory minimum, the sorted batch is cut into m
contiguous chunks of even token count (:func:`~nspsim.planners.microbatch.blaster_split`). Each chunk
is bucketed (:mod:`~nspsim.planners.flexsp.bucketing`) and routed by the MILP of
:mod:`~nspsim.planners.flexsp.milp` onto disjoint power-of-two groups; bucketed sequences count at
their bucket's longest length (conservative times and memory), and the realised plan places the
actual sequences of each bucket on the slots the MILP chose. The count with the least step estimate
wins (``chosen_by=step``; per-micro-batch FSDP included). Each MILP gets the best static packing of
its bucketed sequences over groups of one size as an upper bound on the makespan and as the solver's
starting solution, used when the solver finds nothing better (HiGHS rarely closes this MILP's gap).
Pruning gives the same plans with fewer solves: a count is abandoned once its solved chunks plus the
unsolved chunks' floors (:mod:`~nspsim.planners.flexsp.floor`) exceed the best step so far. The metadata
records solve times, solver, limits, stop reasons, solves made and pruned, and incumbent fallbacks.

**Options** (default, why):

* ``time_limit=DEFAULT_TIME_LIMIT_S`` seconds per solve: a safety net, the artifact's 10 s; at most
  :data:`MAX_TIME_LIMIT_S`.
* ``work_limit=DEFAULT_WORK_LIMIT`` deterministic work units per solve (HiGHS MIP limit checks,
  single-threaded, fixed seed; :mod:`~nspsim.planners.flexsp.highs_solve`): binds long before the
  clock, so the same batch always gives the same plan (``milp_time_limited`` counts the solves the clock
  stopped instead); at most :data:`MAX_WORK_LIMIT`, 100,000 times the default.
* ``max_micro_batches=5`` and ``count_window=5``: the counts tried, the NSP paper's sweep; past the
  window counts are tried one at a time only until one plans, so a batch some count can hold always
  gets a plan.
* ``buckets=16``: the artifact's starting bucket count; at most
  :data:`~nspsim.planners.flexsp.bucketing.MAX_BUCKETS`.
* ``min_group="auto"``: 2, as in the artifact (1 when spmax is 1); an explicit value above spmax is
  refused by :meth:`FlexSPPlanner.check`, never clamped.
* ``solver="highs"`` (``"scip"`` with the extra) and ``mip_gap=1e-4``: the MILP solver and its
  relative gap.
* ``variant="nspsim"``: our count and tie rules; ``"artifact"`` follows the FlexSP artifact's
  (:mod:`~nspsim.planners.flexsp.artifact`: its blaster ties, first count, bucketing and slot pruning;
  the least sum of MILP makespans chooses the count, ``chosen_by=load``).

**Reference.** FlexSP (ASPLOS'25) and its artifact, PKU-DAIR/Hetu-Galvatron branch ``flexsp``;
docs/planners.md "FlexSP" and "FlexSP: ours and the artifact's" (the per-stage comparison).

**Deviations** (variant ``nspsim``): the count is chosen by our step estimate rather than the MILP
makespans; the static incumbent; counts past the window until one plans.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from nspsim.execution.prepare import AS_PLANNED, Preparation
from nspsim.plan import Plan
from nspsim.planners.base import Context, IntArray, Placement, Stopwatch, check_count_option, make_context
from nspsim.planners.estimate import step_estimate
from nspsim.planners.finish import finish
from nspsim.planners.flexsp.artifact import VARIANTS, slot_limits
from nspsim.planners.flexsp.bucketing import MAX_BUCKETS, Buckets, bucketize, bucketize_artifact
from nspsim.planners.flexsp.floor import PRUNE_RTOL, StepFloor, chunk_estimate
from nspsim.planners.flexsp.milp import DEFAULT_WORK_LIMIT, SOLVERS, Limits, MilpProblem, MilpSolution, solve
from nspsim.planners.microbatch import (
    MAX_MICRO_BATCHES,
    artifact_first_count,
    blaster_split,
    blaster_split_artifact,
    min_micro_batches,
)
from nspsim.planners.packing import pack_balanced
from nspsim.planners.proxy import CostTable
from nspsim.trace.batching import Batch
from nspsim.workload import Workload

DEFAULT_TIME_LIMIT_S = 10.0
MAX_TIME_LIMIT_S = 3600.0
"""Longest ``time_limit`` per MILP solve: an hour; a sweep makes up to a few dozen solves."""
MAX_WORK_LIMIT = 10**6
"""Largest ``work_limit``: 100,000 times the default (whose solves take ~1 s at 64 GPUs); the time
limit stops a solve long before."""


@dataclass(frozen=True)
class _Routed:
    """One micro-batch: per sample (sorted-space index) its degree and first rank; solver facts."""

    samples: IntArray
    degrees: IntArray
    firsts: IntArray
    solution: MilpSolution
    buckets: int


@dataclass(frozen=True, kw_only=True)
class FlexSPPlanner:
    """FlexSP: options ``variant`` ("nspsim", the default, or "artifact": the FlexSP
    artifact's count, chunk, bucket and slot rules, :mod:`~nspsim.planners.flexsp.artifact`),
    ``count_window`` (consecutive micro-batch counts tried), ``time_limit`` (s per MILP solve, safety
    net), ``work_limit`` (deterministic work units per solve), ``max_micro_batches`` (nspsim's cap on
    the count), ``buckets`` (the first bucket count), ``min_group``, ``solver`` ("highs" or "scip"),
    ``mip_gap``."""

    time_limit: float = DEFAULT_TIME_LIMIT_S
    work_limit: int = DEFAULT_WORK_LIMIT
    max_micro_batches: int = 5
    buckets: int = 16
    min_group: int | str = "auto"
    solver: str = "highs"
    mip_gap: float = 1e-4
    variant: str = "nspsim"
    count_window: int = 5
    name: ClassVar[str] = "flexsp"
    preparation: ClassVar[Preparation] = AS_PLANNED
    headline: ClassVar[bool] = True
    relative_cost: ClassVar[float] = 100.0

    def __post_init__(self) -> None:
        if isinstance(self.time_limit, bool) or not isinstance(self.time_limit, (int, float)) or self.time_limit <= 0:
            raise ValueError(f"option time_limit must be a positive number of seconds, got {self.time_limit!r}")
        if self.time_limit > MAX_TIME_LIMIT_S:
            raise ValueError(
                f"option time_limit must be at most {MAX_TIME_LIMIT_S:.0f} seconds per MILP solve, "
                f"got {self.time_limit!r}"
            )
        check_count_option("work_limit", self.work_limit, MAX_WORK_LIMIT, "100,000 times the default")
        check_count_option(
            "max_micro_batches", self.max_micro_batches, MAX_MICRO_BATCHES, "the sweep covers at most 5 counts anyway"
        )
        check_count_option("buckets", self.buckets, MAX_BUCKETS, "bucketing never grows past it")
        if self.min_group != "auto":
            value = self.min_group
            if isinstance(value, bool) or not isinstance(value, int) or value < 1 or value & (value - 1):
                raise ValueError(f"option min_group must be 'auto' or a power of two, got {value!r}")
        if self.solver not in SOLVERS:
            raise ValueError(f"option solver must be one of {', '.join(SOLVERS)}, got {self.solver!r}")
        if not isinstance(self.mip_gap, (int, float)) or not 0 <= self.mip_gap < 1:
            raise ValueError(f"option mip_gap must be in [0, 1), got {self.mip_gap!r}")
        if self.variant not in VARIANTS:
            raise ValueError(f"option variant must be one of {', '.join(VARIANTS)}, got {self.variant!r}")
        check_count_option("count_window", self.count_window, MAX_MICRO_BATCHES, "each count costs a MILP per chunk")
        if self.variant == "artifact" and self.max_micro_batches != 5:
            raise ValueError(
                "option max_micro_batches does not apply to variant=artifact (the artifact has no cap on the "
                "count); set count_window, the number of counts tried"
            )

    def check(self, workload: Workload) -> None:
        """An explicit ``min_group`` must be <= spmax (a larger group does not exist there)."""
        spmax = workload.tree.spmax
        if isinstance(self.min_group, int) and self.min_group > spmax:
            raise ValueError(
                f"flexsp option min_group={self.min_group} is above spmax={spmax}, the largest SP group of this "
                f"workload: use min_group <= {spmax} (or 'auto')"
            )

    def plan(self, batch: Batch, workload: Workload) -> Plan:
        """Sweep micro-batch counts, solve a MILP per micro-batch, keep the best step estimate."""
        self.check(workload)
        started = Stopwatch.start()
        ctx = make_context(batch, workload)
        placement, facts = self.sweep(ctx)
        chosen_by = "load" if self.variant == "artifact" else "step"  # the artifact sums MILP makespans
        return finish(self.name, ctx, placement, started, self._limit_facts(facts), chosen_by=chosen_by)

    def sweep(self, ctx: Context, *, prune: bool = True) -> tuple[Placement, SweepFacts]:
        """The best count's placement and what the sweep did; ``prune=False`` solves every chunk of
        every count (the same placement, for checks; module doc "Pruning")."""
        if self.variant == "artifact":
            return self._sweep_artifact(ctx)
        n = ctx.table.num_samples
        first = min_micro_batches(int(ctx.table.lengths.sum()), ctx.num_gpus, ctx.budget)
        last = min(max(first, min(first + self.count_window - 1, self.max_micro_batches)), n)
        floor = StepFloor.of(ctx, self.sizes(ctx)) if prune else None
        best: tuple[float, Placement] | None = None
        facts = SweepFacts()
        m = first
        while m <= last or (best is None and m <= n):  # past the window only until a count plans
            placement = self._try_count(ctx, m, facts, floor, None if best is None else best[0])
            if placement is not None:
                step = step_estimate(ctx, placement)
                if best is None or step < best[0]:
                    best = (step, placement)
            m += 1
        if best is None:
            raise ValueError(
                f"FlexSP found no plan with {first}..{n} micro-batches under B_tok={ctx.budget}; raise the token budget"
            )
        facts.counts = f"{first}-{m - 1}"
        return best[1], facts

    def _sweep_artifact(self, ctx: Context) -> tuple[Placement, SweepFacts]:
        """The artifact's sweep (:mod:`~nspsim.planners.flexsp.artifact`): ``count_window`` counts
        from its first valid one; the feasible count with the least sum of MILP makespans."""
        lengths = ctx.table.lengths
        first = artifact_first_count(lengths, ctx.num_gpus * ctx.budget)
        last = min(first + self.count_window - 1, ctx.table.num_samples)
        best: tuple[float, Placement] | None = None
        facts = SweepFacts(counts=f"{first}-{last}")
        for m in range(first, last + 1):
            routed = []
            for chunk in blaster_split_artifact(lengths, m):
                r = self._route_chunk(ctx, chunk)
                if r is None:
                    break
                routed.append(r)
                facts.solves.append(r.solution)
            else:
                total = sum(r.solution.makespan for r in routed)
                if best is None or total < best[0]:
                    best = (total, _placement(ctx, routed))
        if best is None:
            raise ValueError(
                f"FlexSP (variant=artifact) found no plan with {first}..{last} micro-batches under "
                f"B_tok={ctx.budget}, as the artifact would not; variant=nspsim tries further counts"
            )
        return best[1], facts

    def _limit_facts(self, sweep: SweepFacts) -> dict[str, float | int | str]:
        """Limits and, over every solve of the sweep, how many the clock stopped (not reproducible);
        how many counts and chunk solves the floors pruned."""
        solves = sweep.solves
        return {
            "milp_time_limit_s": float(self.time_limit),
            "milp_work_limit": self.work_limit,
            "milp_solves": len(solves),
            "milp_time_limited": sum("time-limit" in s.status for s in solves),
            "milp_work_total": sum(s.work for s in solves),
            "milp_counts_pruned": sweep.counts_pruned,
            "milp_solves_pruned": sweep.solves_pruned,
            "flexsp_variant": self.variant,
            "flexsp_counts": sweep.counts,
        }

    @property
    def limits(self) -> Limits:
        """Per-solve limits from the options."""
        return Limits(time_limit=float(self.time_limit), work_limit=self.work_limit, mip_gap=float(self.mip_gap))

    def sizes(self, ctx: Context) -> tuple[int, ...]:
        """Allowed group sizes: powers of two from min_group (``"auto"``: 2, or 1 when spmax is 1) to spmax."""
        low = self.min_group if isinstance(self.min_group, int) else min(2, ctx.workload.tree.spmax)
        return tuple(d for d in ctx.levels if d >= low)

    def _try_count(
        self, ctx: Context, m: int, sweep: SweepFacts, floor: StepFloor | None, cutoff: float | None
    ) -> Placement | None:
        """Route the m chunks (longest first); ``None`` if one fails or, with a ``floor`` and the best
        step so far (``cutoff``), once the count cannot beat it."""
        chunks = blaster_split(ctx.table.lengths, m)
        if any(int(ctx.table.lengths[c].sum()) > ctx.num_gpus * ctx.budget for c in chunks):
            return None
        floors = [0.0] * len(chunks) if floor is None else [floor.micro_batch(c) for c in chunks]
        routed = []
        exact = 0.0
        for i, chunk in enumerate(chunks):
            if floor is not None and cutoff is not None and exact + sum(floors[i:]) > cutoff * (1 + PRUNE_RTOL):
                sweep.counts_pruned += 1
                sweep.solves_pruned += len(chunks) - i
                return None
            r = self._route_chunk(ctx, chunk)
            if r is None:
                return None
            routed.append(r)
            sweep.solves.append(r.solution)
            if floor is not None:
                exact += chunk_estimate(ctx, r.samples, r.degrees, r.firsts)
        return _placement(ctx, routed)

    def _route_chunk(self, ctx: Context, chunk: IntArray) -> _Routed | None:
        """Bucket the chunk, solve its MILP from the static incumbent (or from nothing when no single
        size packs it); ``None`` if the MILP finds no placement."""
        lengths = ctx.table.lengths[chunk]
        sizes = self.sizes(ctx)
        if self.variant == "artifact":
            buckets, count = bucketize_artifact(lengths, ctx.num_gpus * ctx.budget, self.buckets)
            limit: dict[int, int] | None = slot_limits(lengths, sizes, ctx.num_gpus, ctx.budget)
        else:
            buckets, limit = bucketize(lengths, self.buckets), None
            count = buckets.maxima.size
        problem = _problem(ctx, buckets, sizes, limit)
        incumbent = static_incumbent(problem)
        if incumbent is not None:
            problem = MilpProblem(
                **{
                    **problem.__dict__,
                    "upper": incumbent.makespan * (1 + 1e-9),
                    "start": (incumbent.slot_sizes, incumbent.assignment),
                }
            )
        run = solve(problem, solver=self.solver, limits=self.limits)
        solved = run.solution
        if incumbent is not None and (solved is None or solved.makespan >= incumbent.makespan):
            solved = MilpSolution(  # no better than its start: keep the incumbent
                incumbent.slot_sizes,
                incumbent.assignment,
                incumbent.makespan,
                f"incumbent({run.status})",
                run.solve_time_s,
                self.solver,
                run.work,
            )
        if solved is None:
            return None
        degrees, firsts = realise(solved, buckets, chunk, ctx.table)
        return _Routed(chunk, degrees, firsts, solved, count)


@dataclass
class SweepFacts:
    """What one sweep over micro-batch counts did: every solve made, and how many counts (and their
    chunk solves) the floors pruned."""

    solves: list[MilpSolution] = field(default_factory=list)
    counts_pruned: int = 0
    solves_pruned: int = 0
    counts: str = ""


def _problem(
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


def _placement(ctx: Context, routed: list[_Routed]) -> Placement:
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
