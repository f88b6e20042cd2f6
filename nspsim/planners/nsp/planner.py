"""NSP: prefix-completion SP-tree routing (NSP paper Algorithm 1) and its NSP-2L ablation.

**Rule.** Samples sorted longest first; the first ``prefix_k`` are searched by a beam over every
feasible node of the SP tree (:mod:`~nspsim.planners.nsp.beam`), the rest completed greedily onto
effective leaf units (:mod:`~nspsim.planners.nsp.tail`); among the completed, token-feasible states
the least proxy Load wins, and with the full proxy the best one-pass Static SP packing of the same
samples competes too (a static seed; a degree whose Load floor reaches the beam's is not packed), so
NSP's Load is never worse than the best static Load under the same routing budget. A batch one pass
cannot hold is dealt to the fewest micro-batches that work, each routed alone. On a memory-bound batch
(mean tokens per GPU above what keeps all attention) the beam tracks kept attention bytes, the batch
is also tried as up to ``EXTRA_MICRO_BATCHES`` more micro-batches split two ways (token-balanced mixes,
FlexSP's sorted chunks), under expert parallelism also on the EP-aligned levels
(:mod:`~nspsim.planners.nsp.route`), and the candidates are compared on the recompute-aware rung of the
estimate ladder (:mod:`nspsim.planners.estimate`): the plan records ``chosen_by=recompute-aware``,
elsewhere ``load``. Splits and candidates that provably cannot win are not routed or estimated
(:mod:`~nspsim.planners.nsp.pruning`): the choice is the same.
NSP-2L is the same planner on the levels {spmax, 1}.

**Options** (default, why):

* ``prefix_k="auto"``: the samples whose one-GPU cost is at least 1/4 (0.35 beyond 256 GPUs) of the
  mean per-GPU work; a leaf cannot absorb them without imbalance.
* ``beam_width="auto"``: 2 up to 256 GPUs, 1 beyond; wider never changed a Load there. At most
  :data:`MAX_BEAM_WIDTH`: routing time grows linearly with the width.
* ``lookahead=True``: score a state by max(critical load, water level); the bare critical load lands
  near Static SP's Load.
* ``monotone=False``: with the lookahead, forcing longer samples onto larger degrees only cost Load.
* ``seed_static=True``: the static seed and its guarantee.
* ``proxy="full"``: the cost model; ``"attn-fwd"`` is the paper's "w/o cost model" ablation (no seed).
* ``token_balance_ratio="auto"``: tighten the routing budget to r x the mean tokens per GPU when the
  batch is memory-bound or the model runs expert parallelism
  (:mod:`~nspsim.planners.nsp.token_balance`, the paper's 4.1.2).
* ``remat_aware=True``: the memory-bound changes above; ``False`` (with ``token_balance_ratio="off"``)
  is the paper's pure Load choice everywhere.

**Reference.** NSP paper section 4.1 and Algorithm 1; docs/planners.md "NSP (Algorithm 1)".

**Deviations** (each measured; the figures are in docs/planners.md): the lookahead score; the final
choice by proxy Load rather than critical load; the static seed; the recompute-aware beam, split and
choice on memory-bound batches (the paper keeps routing recompute-blind and runs one pass); more than
one micro-batch when one pass cannot hold the batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from nspsim.execution.prepare import NESTED_PREPARATION, Preparation
from nspsim.plan import Plan
from nspsim.planners.base import Context, IntArray, Placement, Stopwatch, check_count_option, make_context
from nspsim.planners.estimate import micro_batch_floor, recompute_aware_step, static_floor
from nspsim.planners.finish import finish
from nspsim.planners.microbatch import candidate_splits, min_micro_batches, token_split
from nspsim.planners.nsp.beam import NodeLayout, Prefix, Searched, node_layout
from nspsim.planners.nsp.beam_kernel import search_compiled, warm_search
from nspsim.planners.nsp.pruning import beaten, part_cap
from nspsim.planners.nsp.route import Route, candidate_levels
from nspsim.planners.nsp.tail import TreeStates, complete, warm_tail
from nspsim.planners.nsp.token_balance import check_ratio, effective_budget, is_memory_bound, resolved_ratio
from nspsim.planners.packing import BUDGET_RTOL
from nspsim.planners.proxy import PROXIES, CostTable, FloatArray
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
        warm_search()
        warm_tail()
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
                floors = [micro_batch_floor(ctx, part) for part in parts]
                routed: list[tuple[Route | None, float]] = []
                for i, part in enumerate(parts):
                    done, cap = sum(e for _, e in routed), np.inf
                    if best is not None:
                        if beaten(done + sum(floors[i:]), best[0]):
                            break  # the rest cannot bring the split below the best
                        cap = part_cap(best[0], done, sum(floors[i + 1 :]))
                    routed.append(self._route_part(ctx, search, part, ratio, level_sets, cap))
                    if routed[-1][0] is None:
                        break
                if len(routed) < len(parts) or any(r is None for r, _ in routed):
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
        cap: float = np.inf,
    ) -> tuple[Route | None, float]:
        """One micro-batch of a memory-bound batch under its own routing budget (the whole batch's
        token-balance ``ratio`` over the part's tokens), its beam run on each of ``level_sets``
        (default: the planner's levels); its route and recompute-aware step estimate (``inf`` when it
        cannot be routed, or when no route's estimate can be below ``cap``, :meth:`_least_estimate`)."""
        budget = effective_budget("off" if ratio is None else ratio, ctx.workload, ctx.table.lengths[part])
        part_ctx = replace(ctx, table=ctx.table.with_budget(budget))
        part_search = part_ctx.table if search is ctx.table else search.with_budget(budget)
        route = self.route(part_ctx, part_search, part, level_sets, cap)
        if route is None:
            return None, np.inf
        if route.estimate is not None:  # the choice estimated it already (the same call, the same float)
            return route, route.estimate
        return route, recompute_aware_step(part_ctx, part, route.degrees, route.firsts)

    def route(
        self,
        ctx: Context,
        search: CostTable,
        select: IntArray,
        level_sets: list[tuple[int, ...]] | None = None,
        cap: float = np.inf,
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
            if search is not ctx.table:  # its stage times are the search proxy's, not the estimate's
                found = [replace(r, loads=None) for r in found]
            candidates += found if i == 0 else [replace(r, source="beam-ep") for r in found]
        # A micro-batch of a memory-bound batch (level sets given) is scored by the estimate, as its
        # batch's split is; Load decides elsewhere.
        if self.proxy == "full" and (bound or level_sets is not None):
            return self._least_estimate(ctx, select, levels, candidates, cap)
        if self.seed_static and self.proxy == "full":
            candidates += _static_routes(ctx, select, levels, min((r.load for r in candidates), default=np.inf))
        return min(candidates, key=lambda r: r.load, default=None)

    def _least_estimate(
        self, ctx: Context, select: IntArray, levels: tuple[int, ...], beams: list[Route], cap: float = np.inf
    ) -> Route | None:
        """The candidate (``beams``, then the static seeds) with the least recompute-aware estimate,
        the first on ties. A seed degree whose Load floor already reaches the best beam's estimate is
        not packed, and a candidate whose Load reaches the best estimate so far is not estimated: the
        estimate is never below Load (every stage is at least its Load stage, with non-negative
        recompute and floors; :data:`LOAD_MARGIN` covers the rounding of the phase-wise form), and
        Load never below the floor. ``cap``: the split this micro-batch belongs to wins only if its
        estimate is below ``cap``, so a candidate or seed that cannot get below it is skipped too (if
        none is left, or the least estimate is not below it, the split loses whichever is returned)."""
        best: tuple[float, Route] | None = None
        for r in beams:
            best = _better(ctx, select, r, best, cap)
        if self.seed_static:
            for r in _static_routes(ctx, select, levels, min(cap, np.inf if best is None else best[0])):
                best = _better(ctx, select, r, best, cap)
        return None if best is None else replace(best[1], estimate=best[0])


LOAD_MARGIN = 1e-12
"""Relative slack of the rule "estimate >= Load" (:func:`_better`): the phase-wise estimate re-adds a
GPU's attention and non-attention, which can round a few units in the last place below its Load;
1e-12 is 1000x that (``tests/planners/test_estimate_ladder.py`` checks the rule with this margin)."""


def _better(
    ctx: Context, select: IntArray, route: Route, best: tuple[float, Route] | None, cap: float = np.inf
) -> tuple[float, Route] | None:
    """``route`` with its recompute-aware estimate if there is no ``best`` yet or the estimate is
    strictly lower, else ``best``; a route whose Load already reaches ``best`` or ``cap`` is not
    estimated (its estimate cannot be lower, :meth:`NSPPlanner._least_estimate`)."""
    if route.load * (1 - LOAD_MARGIN) >= (cap if best is None else min(cap, best[0])):
        return best
    estimate = recompute_aware_step(ctx, select, route.degrees, route.firsts, route.loads)
    return (estimate, route) if best is None or estimate < best[0] else best


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


def _prefix_memory(
    ctx: Context, search: CostTable, prefix: IntArray, layout: NodeLayout
) -> tuple[FloatArray, FloatArray, float]:
    """The recompute-aware search's memory side of the prefix samples (:class:`Prefix` ``attn``,
    ``remat``, ``free``): at each level, the attention bytes a GPU keeps for a sample and the
    recompute pass it runs otherwise, in the search proxy's units (the ``attn-fwd`` ablation never
    gets here); free bytes are what every GPU has once filled to the routing budget."""
    memory = ctx.workload.memory
    free = memory.activation_capacity - memory.base_bytes(float(search.token_budget))
    tokens = search.lengths[prefix].astype(np.float64)
    attn = np.stack([tokens / d * memory.attention_bytes_per_token(d) for d in layout.levels], axis=1)
    remat = np.stack([search.recompute_singles(d)[prefix] for d in layout.levels], axis=1)
    return attn, remat, free


def _prefix(
    search: CostTable, select: IntArray, layout: NodeLayout, k: int, memory: tuple[FloatArray, FloatArray, float] | None
) -> Prefix:
    """The first ``k`` selected samples as a :class:`Prefix`: per-level cost and latency, the
    remaining single-GPU work after each, and (recompute-aware search) their memory side."""
    prefix = select[:k]
    per_level = np.stack([search.total(d)[prefix] for d in layout.levels], axis=1)
    latency = np.array([search.overhead_total(d) for d in layout.levels])
    leaf = search.total(min(layout.levels))[select]
    rest = np.concatenate([np.cumsum(leaf[::-1])[::-1], [0.0]])[1 : k + 1]
    lengths = search.lengths[prefix].astype(np.int64)
    if memory is None:
        return Prefix(lengths, per_level, latency, rest)
    return Prefix(lengths, per_level, latency, rest, *memory)


SEARCH: Callable[[Prefix, NodeLayout, int, int, bool, bool], Searched | None] = search_compiled
"""The prefix search the planner runs (compiled; the A/B benchmark swaps in the numpy reference)."""


def _beam_routes(
    search: CostTable,
    select: IntArray,
    layout: NodeLayout,
    k: int,
    options: NSPPlanner,
    memory: tuple[FloatArray, FloatArray, float] | None = None,
) -> list[Route]:
    """Prefix beam search, greedy tail completion of every surviving state (all at once), then the
    completed token-feasible state with the smallest Load (evaluated in order of max_p C_p, which
    bounds Load from below, until no later state can win)."""
    width = beam_width(options.beam_width, search.tree.num_gpus)
    found = SEARCH(
        _prefix(search, select, layout, k, memory),
        layout,
        search.token_budget,
        width,
        options.monotone,
        options.lookahead,
    )
    if found is None:
        return []
    states = TreeStates(found.loads.copy(), found.tokens.copy(), ~found.idle, layout)
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
        degrees = np.zeros(search.num_samples, dtype=np.int64)
        firsts = np.zeros(search.num_samples, dtype=np.int64)
        degrees[select] = np.concatenate([found.degrees[s], tail_deg[s]])
        firsts[select] = np.concatenate([found.firsts[s], tail_first[s]])
        loads = search.evaluate(degrees, firsts, mask)
        if best is None or loads.load < best.load:
            best = Route(degrees[select], firsts[select], loads.load, "beam", loads)
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
        loads = table.evaluate(degrees, firsts, mask)
        routes.append(Route(degrees[select], firsts_sel, loads.load, f"static-{d}", loads))
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
