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
unsolved chunks' floors (:mod:`~nspsim.planners.flexsp.floor`) exceed the best step so far. Above 64
GPUs the MILP aggregates identical groups into counts (:mod:`~nspsim.planners.flexsp.aggregated`: a
model whose size does not grow with P, then a packing). The metadata records solve times, solver,
model, limits, stop reasons, solves made, pruned and skipped by the plan's budget, and incumbent fallbacks.

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
* ``milp_model="auto"``: the per-slot MILP up to 64 GPUs (Figure 7's plans) and for ``variant="artifact"``,
  the aggregated one above (``"slots"`` or ``"counts"`` force one): the per-slot model took P^2.9 time.
* ``workers=1`` processes solving a count's chunks together (:mod:`~nspsim.planners.flexsp.parallel`; the
  same plans for any count, since every solve is deterministic); at most :data:`MAX_WORKERS`.
* ``plan_time_limit=0`` (none): seconds per plan; once spent, chunks keep their static incumbent
  (counted in ``milp_budget_skipped``; not reproducible); at most :data:`MAX_TIME_LIMIT_S`.
* ``variant="nspsim"``: our count and tie rules; ``"artifact"`` follows the FlexSP artifact's
  (:mod:`~nspsim.planners.flexsp.artifact`: its blaster ties, first count, bucketing and slot pruning;
  the least sum of MILP makespans chooses the count, ``chosen_by=load``).

**Reference.** FlexSP (ASPLOS'25) and its artifact, PKU-DAIR/Hetu-Galvatron branch ``flexsp``;
docs/planners.md "FlexSP" and "FlexSP: ours and the artifact's" (the per-stage comparison).

**Deviations** (variant ``nspsim``): the count is chosen by our step estimate rather than the MILP
makespans; the static incumbent; counts past the window until one plans; above 64 GPUs the aggregated
MILP and its packing (the artifact keeps a variable per group at any scale).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from nspsim.execution.prepare import AS_PLANNED, Preparation
from nspsim.plan import Plan
from nspsim.planners.base import Context, IntArray, Placement, Stopwatch, check_count_option, make_context
from nspsim.planners.estimate import step_estimate
from nspsim.planners.finish import finish
from nspsim.planners.flexsp.aggregated import AUTO_SLOTS_UP_TO
from nspsim.planners.flexsp.artifact import VARIANTS, slot_limits
from nspsim.planners.flexsp.bucketing import MAX_BUCKETS, Buckets, bucketize, bucketize_artifact
from nspsim.planners.flexsp.floor import PRUNE_RTOL, StepFloor, chunk_estimate
from nspsim.planners.flexsp.milp import DEFAULT_WORK_LIMIT, SOLVERS, Limits, MilpProblem, MilpRun, MilpSolution
from nspsim.planners.flexsp.parallel import BUDGET_SKIPPED, MILP_MODELS, Job, Solves
from nspsim.planners.flexsp.routing import Routed, chunk_problem, placement_of, realise, static_incumbent
from nspsim.planners.microbatch import (
    MAX_MICRO_BATCHES,
    artifact_first_count,
    blaster_split,
    blaster_split_artifact,
    min_micro_batches,
)
from nspsim.trace.batching import Batch
from nspsim.workload import Workload

DEFAULT_TIME_LIMIT_S = 10.0
MAX_TIME_LIMIT_S = 3600.0
"""Longest ``time_limit`` per MILP solve: an hour; a sweep makes up to a few dozen solves."""
MAX_WORK_LIMIT = 10**6
"""Largest ``work_limit``: 100,000 times the default (whose solves take ~1 s at 64 GPUs); the time
limit stops a solve long before."""
MAX_WORKERS = 64
"""Most worker processes for parallel solves (a sweep has at most a few dozen chunks)."""


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
    milp_model: str = "auto"
    workers: int = 1
    plan_time_limit: float = 0.0
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
        if self.milp_model not in MILP_MODELS:
            raise ValueError(f"option milp_model must be one of {', '.join(MILP_MODELS)}, got {self.milp_model!r}")
        check_count_option("workers", self.workers, MAX_WORKERS, "a sweep has at most a few dozen chunks to solve")
        budget = self.plan_time_limit
        if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not 0 <= budget <= MAX_TIME_LIMIT_S:
            raise ValueError(
                f"option plan_time_limit must be 0 (no budget) or a number of seconds per plan up to "
                f"{MAX_TIME_LIMIT_S:.0f}, got {budget!r}"
            )
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
        with Solves(self.workers, float(self.plan_time_limit)) as solves:
            if self.variant == "artifact":
                return self._sweep_artifact(ctx, solves)
            n = ctx.table.num_samples
            first = min_micro_batches(int(ctx.table.lengths.sum()), ctx.num_gpus, ctx.budget)
            last = min(max(first, min(first + self.count_window - 1, self.max_micro_batches)), n)
            floor = StepFloor.of(ctx, self.sizes(ctx)) if prune else None
            best: tuple[float, Placement] | None = None
            facts = SweepFacts(model=self.model_for(ctx))
            m = first
            while m <= last or (best is None and m <= n):  # past the window only until a count plans
                placement = self._try_count(ctx, m, facts, floor, None if best is None else best[0], solves)
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

    def _sweep_artifact(self, ctx: Context, solves: Solves) -> tuple[Placement, SweepFacts]:
        """The artifact's sweep (:mod:`~nspsim.planners.flexsp.artifact`): ``count_window`` counts
        from its first valid one; the feasible count with the least sum of MILP makespans."""
        lengths = ctx.table.lengths
        first = artifact_first_count(lengths, ctx.num_gpus * ctx.budget)
        last = min(first + self.count_window - 1, ctx.table.num_samples)
        best: tuple[float, Placement] | None = None
        facts = SweepFacts(counts=f"{first}-{last}", model=self.model_for(ctx))
        for m in range(first, last + 1):
            routed = self._route(ctx, blaster_split_artifact(lengths, m), facts, solves)
            if routed is not None:
                total = sum(r.solution.makespan for r in routed)
                if best is None or total < best[0]:
                    best = (total, placement_of(ctx, routed))
        if best is None:
            raise ValueError(
                f"FlexSP (variant=artifact) found no plan with {first}..{last} micro-batches under "
                f"B_tok={ctx.budget}, as the artifact would not; variant=nspsim tries further counts"
            )
        return best[1], facts

    def _limit_facts(self, sweep: SweepFacts) -> dict[str, float | int | str]:
        """Limits and, over every solve of the sweep, how many the clock stopped or the plan's budget
        skipped (not reproducible); how many counts and chunk solves the floors pruned."""
        solves = sweep.solves
        return {
            "milp_time_limit_s": float(self.time_limit),
            "milp_work_limit": self.work_limit,
            "milp_solves": len(solves),
            "milp_time_limited": sum("time-limit" in s.status for s in solves),
            "milp_budget_skipped": sum(BUDGET_SKIPPED in s.status for s in solves),
            "milp_plan_time_limit_s": float(self.plan_time_limit),
            "milp_work_total": sum(s.work for s in solves),
            "milp_counts_pruned": sweep.counts_pruned,
            "milp_solves_pruned": sweep.solves_pruned,
            "flexsp_variant": self.variant,
            "flexsp_counts": sweep.counts,
            "flexsp_milp_model": sweep.model,
            "flexsp_workers": self.workers,
        }

    @property
    def limits(self) -> Limits:
        """Per-solve limits from the options."""
        return Limits(time_limit=float(self.time_limit), work_limit=self.work_limit, mip_gap=float(self.mip_gap))

    def sizes(self, ctx: Context) -> tuple[int, ...]:
        """Allowed group sizes: powers of two from min_group (``"auto"``: 2, or 1 when spmax is 1) to spmax."""
        low = self.min_group if isinstance(self.min_group, int) else min(2, ctx.workload.tree.spmax)
        return tuple(d for d in ctx.levels if d >= low)

    def model_for(self, ctx: Context) -> str:
        """The MILP solved: ``milp_model``; ``auto`` is the per-slot model up to AUTO_SLOTS_UP_TO GPUs and
        with ``variant="artifact"`` (the artifact's own model at any scale), the aggregated one otherwise."""
        if self.milp_model != "auto":
            return self.milp_model
        return "slots" if ctx.num_gpus <= AUTO_SLOTS_UP_TO or self.variant == "artifact" else "counts"

    def _try_count(
        self,
        ctx: Context,
        m: int,
        sweep: SweepFacts,
        floor: StepFloor | None,
        cutoff: float | None,
        solves: Solves,
    ) -> Placement | None:
        """Route the m chunks (longest first); ``None`` if one fails or, with a ``floor`` and the best
        step so far (``cutoff``), once the count cannot beat it."""
        chunks = blaster_split(ctx.table.lengths, m)
        if any(int(ctx.table.lengths[c].sum()) > ctx.num_gpus * ctx.budget for c in chunks):
            return None
        floors = [0.0] * len(chunks) if floor is None else [floor.micro_batch(c) for c in chunks]
        step = 1 if self.workers == 1 else len(chunks)  # with workers, a count's chunks are solved together
        routed: list[Routed] = []
        exact = 0.0
        for i in range(0, len(chunks), step):
            if floor is not None and cutoff is not None and exact + sum(floors[i:]) > cutoff * (1 + PRUNE_RTOL):
                sweep.counts_pruned += 1
                sweep.solves_pruned += len(chunks) - i
                return None
            more = self._route(ctx, chunks[i : i + step], sweep, solves)
            if more is None:
                return None
            routed += more
            if floor is not None:
                exact += sum(chunk_estimate(ctx, r.samples, r.degrees, r.firsts) for r in more)
        return placement_of(ctx, routed)

    def _route(self, ctx: Context, chunks: list[IntArray], sweep: SweepFacts, solves: Solves) -> list[Routed] | None:
        """Route ``chunks``: solved together when there are workers, else one by one; ``None`` once one fails."""
        out: list[Routed] = []
        batches = [chunks] if self.workers > 1 else [[c] for c in chunks]
        for batch in batches:
            prepared = [self._prepare(ctx, chunk) for chunk in batch]
            jobs = [Job(problem, sweep.model, self.solver, self.limits) for _, _, problem, _ in prepared]
            runs = solves.run(jobs, [p[3] is not None for p in prepared])
            for chunk, prep, run in zip(batch, prepared, runs):
                r = self._finish(ctx, chunk, prep, run)
                if r is None:
                    return None
                out.append(r)
                sweep.solves.append(r.solution)
        return out

    def _prepare(self, ctx: Context, chunk: IntArray) -> tuple[Buckets, int, MilpProblem, MilpSolution | None]:
        """Bucket the chunk; its MILP, started from the static incumbent when one size packs it."""
        lengths = ctx.table.lengths[chunk]
        sizes = self.sizes(ctx)
        if self.variant == "artifact":
            buckets, count = bucketize_artifact(lengths, ctx.num_gpus * ctx.budget, self.buckets)
            limit: dict[int, int] | None = slot_limits(lengths, sizes, ctx.num_gpus, ctx.budget)
        else:
            buckets, limit = bucketize(lengths, self.buckets), None
            count = buckets.maxima.size
        problem = chunk_problem(ctx, buckets, sizes, limit)
        incumbent = static_incumbent(problem)
        if incumbent is not None:
            problem = MilpProblem(
                **{
                    **problem.__dict__,
                    "upper": incumbent.makespan * (1 + 1e-9),
                    "start": (incumbent.slot_sizes, incumbent.assignment),
                }
            )
        return buckets, count, problem, incumbent

    def _finish(
        self,
        ctx: Context,
        chunk: IntArray,
        prepared: tuple[Buckets, int, MilpProblem, MilpSolution | None],
        run: MilpRun,
    ) -> Routed | None:
        """The chunk routed by the solve, or by its incumbent when the solve found nothing better (or was
        skipped by the plan's budget); ``None`` if neither places it."""
        buckets, count, _, incumbent = prepared
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
        return Routed(chunk, degrees, firsts, solved, count)


@dataclass
class SweepFacts:
    """What one sweep over micro-batch counts did: every solve made, and how many counts (and their
    chunk solves) the floors pruned."""

    solves: list[MilpSolution] = field(default_factory=list)
    counts_pruned: int = 0
    model: str = "slots"
    solves_pruned: int = 0
    counts: str = ""
