"""NSP: prefix-completion SP-tree routing (paper Algorithm 1, docs/planners.md) and its NSP-2L ablation.

Samples sorted by non-increasing length; the first ``prefix_k`` are searched with a beam of
``beam_width`` states over every feasible node of the SP tree (:mod:`nspsim.planners.nsp.beam`), the rest
are completed greedily onto effective leaf units (:mod:`nspsim.planners.nsp.tail`). Among the completed,
token-feasible states the one with the smallest proxy Load wins. (Algorithm 1 returns the smallest
critical load max_p C_p; comparing the few completed states by the proxy Load itself - which C_p
surrogates - costs one evaluation each and is what makes the static seed below a guarantee.)

Static seed: with the full proxy, the best one-pass Static SP packing of the same samples (every
degree that holds them, :mod:`nspsim.planners.static.planner`) also competes in that final choice,
so NSP's Load is never worse than the best static Load on the batch. A degree whose floor (its total
work spread evenly, or its longest sample alone) already reaches the beam's Load cannot win and is
not packed. With
``proxy="attn-fwd"`` (the "w/o cost model" ablation) the planner scores everything with
attention-forward time only, and the seed is skipped because choosing it needs the full cost model.

Defaults, each chosen by measurement (docs/planners.md):

* ``lookahead=True`` scores a state by max(critical load, water level) instead of the paper's bare
  critical load (a documented deviation; ``lookahead=False`` is the literal rule). Without it the
  beam lands at about Static SP's Load; with it within 2-4% of the lower bound.
* ``monotone=False``: with the lookahead, forcing longer samples onto degrees no smaller than shorter
  ones cost 23% Load on the 1024-GPU code-trace batch and never helped.
* ``prefix_k="auto"``: the samples whose single-GPU cost is at least a share of the mean per-GPU
  work (a leaf cannot absorb them without imbalance); the rest are the greedy tail. The share is
  1/4 up to 256 GPUs and 0.35 beyond: at 1024 GPUs 0.35 gave the same Load on wikipedia and code
  (3 batches each, an A/B run) with 33% / 21% less routing time (105 -> 71 ms, 81 -> 64 ms); at 64
  GPUs it cost 0.4-0.6% Load on code, so small clusters keep 1/4 (docs/planners.md).
* ``beam_width="auto"``: 2 up to 256 GPUs (within 0.05% of width 8, 0.02-0.5% better than 1 on the
  code trace), 1 beyond (widths 1-4 equal there, and each extra state costs a full expansion). An
  explicit width is at most :data:`MAX_BEAM_WIDTH` (64, 8x the widest that ever changed a Load):
  routing time grows linearly with the width (width 4096 took 13 s on one 2M-token batch at 64 GPUs,
  100,000 ran past 120 s), and ``prefix_k`` larger than the batch searches every sample.

Token balance: ``token_balance_ratio`` (default ``"auto"``) tightens the routing budget to r times the
mean tokens per GPU when the batch is memory-bound or the model runs expert parallelism
(:mod:`nspsim.planners.nsp.token_balance`). The static
seed is packed under the same tightened budget, so the guarantee reads: NSP's Load is never worse
than the best one-pass static Load *under the same routing budget*. (Seeding with a static plan under
the full B_tok would let the Load comparison undo the balance the ratio asks for: the Load proxy is
what cannot see the recomputation that token imbalance causes.)

Memory-bound batches (``remat_aware``, full proxy; the mean tokens per GPU exceed what fits with
all attention kept), four changes, each measured on Qwen3-235B-A22B / 64 H200s (docs/planners.md):

* recompute-aware beam (:mod:`nspsim.planners.nsp.beam`): every state tracks the attention bytes its
  placed samples keep per GPU, and a placement whose attention no longer fits the free bytes under
  the routing budget adds its recompute pass to the node. The paper keeps routing recompute-blind
  ("the Planner need not be made recompute-aware"); with our memory model (attention of every
  sample at 32K tokens per GPU does not fit, 20K does) the blind beam put 28-35K-token samples on
  degree-1 and degree-2 nodes that then recomputed, and lost to its own static seeds;
* the final choice among the beam's plan and the static seeds minimises the recompute-aware step
  estimate (Load plus the recomputation the executor's tree marking would do, with FSDP floors,
  :func:`recompute_aware_estimate`); there the "never worse than the best static seed" guarantee
  is stated on that estimate, not on Load;
* the micro-batch count and split: the batch is also routed as m = memory minimum ..
  +``EXTRA_MICRO_BATCHES`` micro-batches, each count split two ways - token-balanced mixes of long
  and short samples, and (m > 1) FlexSP's contiguous sorted chunks, which put the long samples
  together so that a micro-batch of short ones keeps its attention at degree 1 - each micro-batch
  under the whole batch's token-balance ratio over its own tokens; the candidate with the least
  summed estimate wins, and every micro-batch takes the least estimate among its beams and static
  seeds. The paper runs one pass; a second micro-batch is NSP's own cost-model decision here, as it
  is FlexSP's;
* under expert parallelism the estimate is phase-wise per EP group (the EP all-to-alls synchronise
  a group between attention and the experts every layer), and every micro-batch's beam also runs on
  the EP-aligned levels (degree 1 and degrees of at least one EP group), whose nodes never make an
  EP group's GPUs unequal (both in :mod:`nspsim.planners.nsp.route`). Measured on 235B
  wikipedia 192K batch 0: the one-pass nested plan the all-GPU estimate preferred simulated
  25.05 s, the plan chosen now 22.30 s (BASP 22.22, FlexSP 22.11). Cost: up to 5 splits x 2 beams
  and the static seeds (pruned by the estimate's Load floor, :meth:`NSPPlanner._least_estimate`) per
  memory-bound batch, routing 0.5-0.95 s median per 235B batch (63 ms median before).

A memory-bound plan records the split that won (``micro_batch_split``: ``tokens`` or ``sorted``) and
the estimate the choice minimised (``chosen_estimate_s``, ``chosen_by=recompute-aware``; the common
``step_estimate_s`` sees neither
recomputation nor the EP groups' phases). Compute-bound batches keep the Load choice and the Load
guarantee. ``remat_aware=False`` (with
``token_balance_ratio="off"``) restores the paper's pure Load choice everywhere.

NSP-2L is the same planner with the tree levels restricted to {spmax, 1}. If the batch cannot fit
one pass (sum L > P * B_tok, or no state keeps B_tok), the samples are dealt to the fewest
micro-batches that work (token-balanced) and each is routed alone - an extension; the paper uses one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from nspsim.execution.prepare import NESTED_PREPARATION, Preparation
from nspsim.plan import Plan
from nspsim.planners.base import Context, IntArray, Placement, Stopwatch, check_count_option, make_context
from nspsim.planners.estimate import recompute_aware_step, static_floor
from nspsim.planners.finish import finish
from nspsim.planners.microbatch import candidate_splits, min_micro_batches, token_split
from nspsim.planners.nsp.beam import Beam, NodeLayout, Placing, SampleMemory, expand, node_layout
from nspsim.planners.nsp.route import Route, candidate_levels
from nspsim.planners.nsp.tail import TreeStates, complete
from nspsim.planners.nsp.token_balance import check_ratio, effective_budget, is_memory_bound, resolved_ratio
from nspsim.planners.packing import BUDGET_RTOL
from nspsim.planners.proxy import PROXIES, CostTable
from nspsim.planners.static.planner import pack_single_pass
from nspsim.trace.batching import Batch
from nspsim.workload import Workload

AUTO_PREFIX_SHARE = 0.25
AUTO_PREFIX_SHARE_LARGE = 0.35  # above AUTO_WIDE_BEAM_MAX_GPUS
AUTO_WIDE_BEAM_MAX_GPUS = 256
EXTRA_MICRO_BATCHES = 2
"""Micro-batch counts a memory-bound batch tries beyond its memory minimum (module doc)."""
MAX_BEAM_WIDTH = 64
"""Widest explicit ``beam_width`` (module doc): under a second for a 2M-token batch on 64 GPUs, about
4 s for a 32M-token batch on 1024 (whole ``nspsim plan`` runs)."""


def _check_positive(value: object, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"option {what} must be a positive integer, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class NSPPlanner:
    """Algorithm 1 with options ``prefix_k``, ``beam_width``, ``monotone``, ``lookahead``, ``proxy``,
    ``seed_static``, ``token_balance_ratio``, ``remat_aware`` (see the module docstring for their defaults)."""

    prefix_k: int | str = "auto"
    beam_width: int | str = "auto"
    monotone: bool = False
    lookahead: bool = True
    proxy: str = "full"
    seed_static: bool = True
    token_balance_ratio: float | str = "auto"
    remat_aware: bool = True
    name: ClassVar[str] = "nsp"
    preparation: ClassVar[Preparation] = NESTED_PREPARATION
    headline: ClassVar[bool] = True
    relative_cost: ClassVar[float] = 8.0

    def __post_init__(self) -> None:
        if self.prefix_k != "auto":
            _check_positive(self.prefix_k, "prefix_k")
        if self.beam_width != "auto":
            check_count_option(
                "beam_width", self.beam_width, MAX_BEAM_WIDTH, "routing time grows with the width, the Load does not"
            )
        for flag in ("monotone", "lookahead", "seed_static", "remat_aware"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"option {flag} must be true or false, got {getattr(self, flag)!r}")
        if self.proxy not in PROXIES:
            raise ValueError(f"option proxy must be one of {', '.join(PROXIES)}, got {self.proxy!r}")
        check_ratio(self.token_balance_ratio)

    def levels(self, workload: Workload) -> tuple[int, ...]:
        """Tree levels the planner may use (all admissible degrees)."""
        return workload.tree.degrees

    def check(self, workload: Workload) -> None:
        """No option depends on the workload."""

    def plan(self, batch: Batch, workload: Workload) -> Plan:
        """Route the batch (see the module docstring)."""
        started = Stopwatch.start()
        ctx = make_context(batch, workload, effective_budget(self.token_balance_ratio, workload, batch.lengths))
        search = (
            ctx.table
            if self.proxy == "full"
            else CostTable(workload.cost, workload.tree, batch.lengths, ctx.budget, kind=self.proxy)
        )
        placement = self._route_batch(ctx, search)
        extra: dict[str, float | int | str] = {
            "prefix_k": str(self.prefix_k),
            "beam_width": beam_width(self.beam_width, ctx.num_gpus),
            "monotone": int(self.monotone),
            "lookahead": int(self.lookahead),
            "proxy": self.proxy,
            "token_balance_ratio": str(self.token_balance_ratio),
            "remat_aware": int(self.remat_aware),
        }
        chosen_by = "load" if placement.chosen_s is None else "recompute-aware"
        return finish(self.name, ctx, placement, started, extra, chosen_by=chosen_by)

    def _route_batch(self, ctx: Context, search: CostTable) -> Placement:
        n = ctx.table.num_samples
        m = min_micro_batches(int(ctx.table.lengths.sum()), ctx.num_gpus, ctx.budget)
        if self._recompute_aware(ctx, ctx.table.lengths):
            return self._memory_bound_batch(ctx, search, m)
        while True:
            parts = token_split(ctx.table.lengths, m, ctx.num_gpus * ctx.budget)
            routes = [self.route(ctx, search, part) for part in parts]
            if all(r is not None for r in routes):
                return _assemble(n, parts, routes)
            m += 1

    def _recompute_aware(self, ctx: Context, lengths: IntArray) -> bool:
        """Whether samples of ``lengths`` are routed recompute-aware: a memory-bound pass under the full proxy."""
        return self.remat_aware and self.proxy == "full" and is_memory_bound(ctx.workload, int(lengths.sum()))

    def _memory_bound_batch(self, ctx: Context, search: CostTable, first: int) -> Placement:
        """Memory-bound batch: route it as ``first`` .. ``first + EXTRA_MICRO_BATCHES`` micro-batches
        (more while none routes), each count split two ways (token-balanced mixes and contiguous sorted chunks), every
        micro-batch's beam run on the planner's levels and, under expert parallelism, on the
        EP-aligned levels too; keep the split with the least summed recompute-aware step estimate
        (module doc)."""
        n = ctx.table.num_samples
        ratio = resolved_ratio(self.token_balance_ratio, ctx.workload, int(ctx.table.lengths.sum()))
        level_sets = candidate_levels(self.levels(ctx.workload), ctx.workload.training.expert_parallel)
        best: tuple[float, list[IntArray], list[Route | None], str] | None = None
        for m in range(first, n + 1):
            if best is not None and m > first + EXTRA_MICRO_BATCHES:
                break
            for split, parts in candidate_splits(ctx.table.lengths, m, ctx.num_gpus * ctx.workload.token_budget):
                routed = [self._route_part(ctx, search, part, ratio, level_sets) for part in parts]
                if any(r is None for r, _ in routed):
                    continue
                estimate = sum(e for _, e in routed)
                if best is None or estimate < best[0]:
                    best = (estimate, parts, [r for r, _ in routed], split)
        if best is None:
            raise ValueError("NSP found no routing of the batch under its token budget")
        # The estimate the choice minimised (the plain step_estimate_s sees neither recompute nor EP phases).
        return replace(_assemble(n, best[1], best[2], {"micro_batch_split": best[3]}), chosen_s=best[0])

    def _route_part(
        self,
        ctx: Context,
        search: CostTable,
        part: IntArray,
        ratio: float | None,
        level_sets: list[tuple[int, ...]] | None = None,
    ) -> tuple[Route | None, float]:
        """One micro-batch of a memory-bound batch under its own routing budget (the whole batch's
        token-balance ``ratio`` over the part's tokens), its beam run on each of ``level_sets``
        (default: the planner's levels); its route and recompute-aware step estimate (``inf`` when it
        cannot be routed)."""
        lengths = tuple(int(x) for x in ctx.table.lengths[part])
        budget = effective_budget("off" if ratio is None else ratio, ctx.workload, lengths)
        part_ctx = replace(ctx, table=ctx.table.with_budget(budget))
        part_search = part_ctx.table if search is ctx.table else search.with_budget(budget)
        route = self.route(part_ctx, part_search, part, level_sets)
        if route is None:
            return None, np.inf
        return route, recompute_aware_step(part_ctx, part, route.degrees, route.firsts)

    def route(
        self, ctx: Context, search: CostTable, select: IntArray, level_sets: list[tuple[int, ...]] | None = None
    ) -> Route | None:
        """Route the selected sorted samples in one pass, or ``None`` if no state keeps B_tok: the
        beam on each of ``level_sets`` (default: the planner's levels; a route found on another set
        than the first is marked ``beam-ep``) and the static seeds at the planner's levels; the least
        recompute-aware estimate wins on a memory-bound pass or a micro-batch of a memory-bound batch
        (``level_sets`` given), the least Load otherwise."""
        levels = self.levels(ctx.workload)
        bound = self._recompute_aware(ctx, ctx.table.lengths[select])
        candidates: list[Route] = []
        for i, searched in enumerate(level_sets or [levels]):
            layout = node_layout(ctx.num_gpus, searched)
            k = prefix_size(search, select, searched, self.prefix_k)
            memory = _prefix_memory(ctx, search, select[:k], layout) if bound else None
            found = _beam_routes(search, select, layout, k, self, memory)
            candidates += found if i == 0 else [replace(r, source="beam-ep") for r in found]
        # A micro-batch of a memory-bound batch (level sets given) is scored by the estimate, as its
        # batch's split is; Load decides elsewhere.
        if self.proxy == "full" and (bound or level_sets is not None):
            return self._least_estimate(ctx, select, levels, candidates)
        if self.seed_static and self.proxy == "full":
            candidates += _static_routes(ctx, select, levels, min((r.load for r in candidates), default=np.inf))
        return min(candidates, key=lambda r: r.load, default=None)

    def _least_estimate(
        self, ctx: Context, select: IntArray, levels: tuple[int, ...], beams: list[Route]
    ) -> Route | None:
        """The candidate (``beams``, then the static seeds) with the least recompute-aware estimate,
        the first on ties. A seed degree whose Load floor already reaches the best beam's estimate is
        not packed: the estimate is never below Load (every stage is at least its Load stage, with
        non-negative recompute and floors), and Load never below the floor."""
        scored = [(recompute_aware_step(ctx, select, r.degrees, r.firsts), r) for r in beams]
        if self.seed_static:
            beaten = min((e for e, _ in scored), default=np.inf)
            scored += [
                (recompute_aware_step(ctx, select, r.degrees, r.firsts), r)
                for r in _static_routes(ctx, select, levels, beaten)
            ]
        return min(scored, key=lambda item: item[0], default=(np.inf, None))[1]  # min keeps the first on ties


@dataclass(frozen=True, kw_only=True)
class NSP2LPlanner(NSPPlanner):
    """NSP-2L: the same planner on the levels {spmax, 1} only."""

    name: ClassVar[str] = "nsp2l"
    preparation: ClassVar[Preparation] = NESTED_PREPARATION
    headline: ClassVar[bool] = True
    relative_cost: ClassVar[float] = 4.0

    def levels(self, workload: Workload) -> tuple[int, ...]:
        """spmax and 1."""
        spmax = workload.tree.spmax
        return (spmax, 1) if spmax > 1 else (1,)


def beam_width(option: int | str, num_gpus: int) -> int:
    """``option`` if an int; ``"auto"``: 2 up to ``AUTO_WIDE_BEAM_MAX_GPUS`` GPUs, else 1 (wider beams
    gained < 0.1% Load there and cost time, docs/planners.md)."""
    if isinstance(option, int):
        return option
    return 2 if num_gpus <= AUTO_WIDE_BEAM_MAX_GPUS else 1


def prefix_size(search: CostTable, select: IntArray, levels: tuple[int, ...], option: int | str) -> int:
    """``option`` if an int; for ``"auto"`` the samples whose single-GPU cost is at least
    :func:`prefix_share` of the mean per-GPU work (the ones a leaf cannot absorb), at least 1."""
    if isinstance(option, int):
        return min(option, select.size)
    leaf = search.total(min(levels))[select]
    mean = float(leaf.sum()) / search.tree.num_gpus
    return max(1, int(np.count_nonzero(leaf >= prefix_share(search.tree.num_gpus) * mean)))


def prefix_share(num_gpus: int) -> float:
    """The auto prefix's share of the mean per-GPU work: 1/4 up to ``AUTO_WIDE_BEAM_MAX_GPUS``, 0.35 beyond."""
    return AUTO_PREFIX_SHARE if num_gpus <= AUTO_WIDE_BEAM_MAX_GPUS else AUTO_PREFIX_SHARE_LARGE


def _prefix_memory(ctx: Context, search: CostTable, prefix: IntArray, layout: NodeLayout) -> list[SampleMemory]:
    """The recompute-aware search's memory side of every prefix sample (:class:`SampleMemory`): at
    each level, the attention bytes a GPU keeps for it and the recompute pass it runs otherwise, in
    the search proxy's units (the ``attn-fwd`` ablation never gets here); free bytes are what every
    GPU has once filled to the routing budget."""
    wl = ctx.workload
    memory, cost = wl.memory, wl.cost
    free = memory.activation_capacity - memory.base_bytes(float(search.token_budget))
    distinct, inverse = np.unique(search.lengths[prefix], return_inverse=True)
    attn = np.empty((distinct.size, len(layout.levels)))
    remat = np.empty_like(attn)
    for col, d in enumerate(layout.levels):
        for row, length in enumerate(distinct.tolist()):
            attn[row, col] = memory.node_attention_bytes(float(length), d)
            redo = cost.recompute_attention(np.array([length], dtype=np.int64), d)
            remat[row, col] = cost.num_layers * (redo.prologue + redo.compute)
    return [SampleMemory(attn[i], remat[i], free) for i in inverse.tolist()]


def _placings(
    search: CostTable, select: IntArray, layout: NodeLayout, k: int, memory: list[SampleMemory] | None = None
) -> list[Placing]:
    """Per prefix sample: per-level cost and latency, the remaining single-GPU work after it, and
    (recompute-aware search) its memory side."""
    prefix = select[:k]
    per_level = np.stack([search.total(d)[prefix] for d in layout.levels], axis=1)
    latency = np.array([search.overhead_total(d) for d in layout.levels])
    leaf = search.total(min(layout.levels))[select]
    rest = np.concatenate([np.cumsum(leaf[::-1])[::-1], [0.0]])[1 : k + 1]
    return [
        Placing(int(search.lengths[j]), per_level[i], latency, float(rest[i]), None if memory is None else memory[i])
        for i, j in enumerate(prefix.tolist())
    ]


def _beam_routes(
    search: CostTable,
    select: IntArray,
    layout: NodeLayout,
    k: int,
    options: NSPPlanner,
    memory: list[SampleMemory] | None = None,
) -> list[Route]:
    """Prefix beam search, greedy tail completion of every surviving state (all at once), then the
    completed token-feasible state with the smallest Load (evaluated in order of max_p C_p, which
    bounds Load from below, until no later state can win)."""
    beam: Beam | None = Beam.empty(search.tree.num_gpus, layout, track_memory=memory is not None)
    width = beam_width(options.beam_width, search.tree.num_gpus)
    for item in _placings(search, select, layout, k, memory):
        assert beam is not None
        beam = expand(beam, item, layout, search.token_budget, width, options.monotone, options.lookahead)
        if beam is None:
            return []
    assert beam is not None
    states = TreeStates(beam.loads.copy(), beam.tokens.copy(), ~beam.idle, layout)
    tail_deg, tail_first = complete(states, search, select[k:])
    mask = np.zeros(search.num_samples, dtype=bool)
    mask[select] = True
    feasible = states.tokens.max(axis=1) <= search.token_budget * (1 + BUDGET_RTOL)
    critical = states.loads.max(axis=1)
    best: Route | None = None
    for s in np.argsort(critical, kind="stable").tolist():
        if not feasible[s]:
            continue
        if best is not None and critical[s] >= best.load:
            break  # Load >= max_p C_p: no later state can win
        pre_deg, pre_first = beam.assignment(s, layout)
        degrees = np.zeros(search.num_samples, dtype=np.int64)
        firsts = np.zeros(search.num_samples, dtype=np.int64)
        degrees[select] = np.concatenate([pre_deg, tail_deg[s]])
        firsts[select] = np.concatenate([pre_first, tail_first[s]])
        load = search.evaluate(degrees, firsts, mask).load
        if best is None or load < best.load:
            best = Route(degrees[select], firsts[select], load, "beam")
    return [] if best is None else [best]


def _static_routes(ctx: Context, select: IntArray, levels: tuple[int, ...], beaten: float) -> list[Route]:
    """One-pass static packings of the selected samples at every level that holds them, skipping a
    level whose floor already reaches ``beaten``: its total work spread evenly (sum_j d c_j(d) / P)
    or the longest sample's own cost there."""
    table = ctx.table
    mask = np.zeros(table.num_samples, dtype=bool)
    mask[select] = True
    routes = []
    for d in levels:
        if static_floor(ctx, select, d) >= beaten:  # static at d cannot beat the beam
            continue
        firsts_sel = pack_single_pass(ctx, d, select)
        if firsts_sel is None:
            continue
        degrees = np.full(table.num_samples, d, dtype=np.int64)
        firsts = np.zeros(table.num_samples, dtype=np.int64)
        firsts[select] = firsts_sel
        routes.append(Route(degrees[select], firsts_sel, table.evaluate(degrees, firsts, mask).load, f"static-{d}"))
    return routes


def _assemble(
    n: int, parts: list[IntArray], routes: list[Route | None], extra: dict[str, float | str] | None = None
) -> Placement:
    degrees = np.zeros(n, dtype=np.int64)
    firsts = np.zeros(n, dtype=np.int64)
    mbs = np.zeros(n, dtype=np.int64)
    sources = []
    for mb, (part, route) in enumerate(zip(parts, routes)):
        assert route is not None
        degrees[part], firsts[part], mbs[part] = route.degrees, route.firsts, mb
        sources.append(route.source)
    return Placement(degrees, firsts, mbs, {"route_source": ",".join(sources), **(extra or {})})
