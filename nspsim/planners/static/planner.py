"""Static SP (DeepSpeed-Ulysses style): one SP degree s for every sample of the batch.

**Rule.** The P GPUs form P/s disjoint groups of s consecutive ranks. Samples, longest first, are
packed onto the groups to balance the cost-model load under the token budget (each GPU of a group
holds L/s tokens per sample): the *head* (samples costing more than 1/32 of a group's mean load) by
the exact greedy rule (each to the least-loaded group that can hold it, :func:`least_loaded_fill`,
i.e. LPT), the many small samples that remain interleaved by :func:`interleave_fill` (slots
proportional to each group's deficit below the water level), vectorised where LPT would need ~n/(P/s)
rounds; if that breaks a group's token budget, the exact rule packs the tail instead. When the batch
does not fit one pass, the groups of m micro-batches form one pool of m * P/s units and m grows from
the memory minimum until everything fits. A fixed degree was chosen by no estimate (``chosen_by=rule``);
``"auto"`` keeps the degree with the least step estimate (``chosen_by=step``). Trade-off: packing by
the cost model balances FLOPs, not tokens; the token budget is the only memory guard.

**Options** (default, why):

* ``degree="auto"``: every admissible power-of-two degree that holds the longest sample, the least
  step estimate kept (per-micro-batch FSDP included). A fixed degree that cannot hold a sample raises
  ``ValueError``, so a sweep over fixed degrees (``compare``'s static-best) can skip it.
* ``packing="load"``: the stronger, load-balanced packing; ``"tokens"`` is the FlexSP artifact's
  token packing for its static-SP baseline (:mod:`nspsim.planners.static.token_packing`: best fit
  decreasing into groups of 90% of their token budget, bins filling micro-batches in order, no cost
  model), the rule behind the paper's Static SP.

**Reference.** DeepSpeed-Ulysses; the NSP paper's Static SP baseline (section 6.1: "sweep SP degrees
that fit in memory and select the fastest configuration"); docs/planners.md "Static SP".

**Deviations.** ``degree="auto"`` with ``packing="tokens"`` keeps the degree whose token packing has the
least step estimate (the artifact's ``adaptive`` rule chooses by its own cost model's time).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from nspsim.execution.prepare import AS_PLANNED, Preparation
from nspsim.plan import Plan
from nspsim.planners.base import Context, IntArray, Placement, Stopwatch, make_context
from nspsim.planners.estimate import proxy_load, step_estimate
from nspsim.planners.finish import finish
from nspsim.planners.packing import pack_balanced
from nspsim.planners.static.token_packing import pack_by_tokens
from nspsim.sp_tree import is_power_of_two
from nspsim.trace.batching import Batch
from nspsim.workload import Workload

PACKINGS = ("load", "tokens")
"""How samples are packed onto a degree's groups: by cost-model load (LPT) or by tokens (the artifact)."""


@dataclass(frozen=True)
class StaticCandidate:
    """One degree's packing with its proxy Load and step estimate."""

    degree: int
    placement: Placement
    load: float
    step: float


def check_admissible(workload: Workload, degree: int) -> None:
    """``ValueError`` unless ``degree`` is a power of two <= the workload's spmax."""
    spmax = workload.tree.spmax
    if not is_power_of_two(degree) or degree > spmax:
        raise ValueError(f"static SP degree {degree} is not admissible: use a power of two <= spmax={spmax}")


def check_degree(ctx: Context, degree: int, first: int = 0) -> None:
    """``ValueError`` unless ``degree`` is admissible and holds sorted sample ``first`` (the longest)."""
    check_admissible(ctx.workload, degree)
    longest = int(ctx.table.lengths[first])
    if longest > degree * ctx.budget:
        need = next(d for d in reversed(ctx.levels) if longest <= d * ctx.budget)
        raise ValueError(
            f"static SP degree {degree} cannot hold sample {int(ctx.table.order[first])} (length {longest}): its shard "
            f"{-(-longest // degree)} exceeds the token budget B_tok={ctx.budget} tokens per GPU; the smallest degree "
            f"that holds it is {need}"
        )


def _pack(ctx: Context, degree: int, units: int, select: IntArray) -> IntArray | None:
    """Unit of each selected sorted sample, or ``None`` if the units cannot hold them within B_tok."""
    table = ctx.table
    return pack_balanced(
        table.total(degree)[select], table.lengths[select] / degree, units, ctx.budget, table.overhead_total(degree)
    )


def pack_single_pass(ctx: Context, degree: int, select: IntArray) -> IntArray | None:
    """First ranks of the selected sorted samples packed in one pass at ``degree``, or ``None``
    if the degree cannot hold them in one pass."""
    if int(ctx.table.lengths[select[0]]) > degree * ctx.budget:
        return None
    units = _pack(ctx, degree, ctx.num_gpus // degree, select)
    return None if units is None else units * degree


def pack_degree(ctx: Context, degree: int, select: IntArray | None = None, packing: str = "load") -> Placement:
    """Static placement at ``degree`` of the selected sorted samples (all by default), packed by
    ``packing`` (:data:`PACKINGS`, module doc)."""
    sel = np.arange(ctx.table.num_samples) if select is None else select
    check_degree(ctx, degree, int(sel[0]))
    groups = ctx.num_gpus // degree
    if packing == "tokens":
        lengths, ids = ctx.table.lengths[sel], ctx.table.order[sel]
        return _placement(ctx, degree, groups, sel, pack_by_tokens(lengths, ids, degree, groups, ctx.budget))
    tokens = float(ctx.table.lengths[sel].sum())
    m = max(1, math.ceil(tokens / (ctx.num_gpus * ctx.budget * (1 + 1e-9))))
    while True:
        units = _pack(ctx, degree, m * groups, sel)
        if units is not None:
            return _placement(ctx, degree, groups, sel, units)
        m += 1


def _placement(ctx: Context, degree: int, groups: int, sel: IntArray, units: IntArray) -> Placement:
    n = ctx.table.num_samples
    degrees = np.full(n, degree, dtype=np.int64)
    firsts = np.zeros(n, dtype=np.int64)
    mbs = np.zeros(n, dtype=np.int64)
    firsts[sel] = (units % groups) * degree
    raw_mb = units // groups
    _, mbs[sel] = np.unique(raw_mb, return_inverse=True)  # drop empty micro-batches
    return Placement(degrees, firsts, mbs, {"static_degree": degree})


def sweep(ctx: Context, degrees: tuple[int, ...] | None = None, packing: str = "load") -> list[StaticCandidate]:
    """Packings (by ``packing``) at every degree that holds the longest sample (or at ``degrees``)."""
    longest = int(ctx.table.lengths[0])
    chosen = degrees or tuple(d for d in ctx.levels if longest <= d * ctx.budget)
    out = []
    for d in chosen:
        placement = pack_degree(ctx, d, packing=packing)
        out.append(StaticCandidate(d, placement, proxy_load(ctx, placement), step_estimate(ctx, placement)))
    return out


def best(candidates: list[StaticCandidate]) -> StaticCandidate:
    """Smallest step estimate, then smallest Load, then smallest degree."""
    return min(candidates, key=lambda c: (c.step, c.load, c.degree))


@dataclass(frozen=True, kw_only=True)
class StaticPlanner:
    """Static SP with ``degree="auto"`` (best admissible degree for the batch) or a fixed int, packed
    by ``packing``: ``"load"`` (cost-model load balance, the default) or ``"tokens"`` (the FlexSP
    artifact's token packing, the paper's Static SP; module doc)."""

    degree: int | str = "auto"
    packing: str = "load"
    name: ClassVar[str] = "static"
    preparation: ClassVar[Preparation] = AS_PLANNED
    headline: ClassVar[bool] = True
    relative_cost: ClassVar[float] = 1.0

    def __post_init__(self) -> None:
        if self.degree != "auto" and (
            isinstance(self.degree, bool) or not isinstance(self.degree, int) or not is_power_of_two(self.degree)
        ):
            raise ValueError(f"static option degree must be 'auto' or a power of two, got {self.degree!r}")
        if self.packing not in PACKINGS:
            raise ValueError(f"static option packing must be one of {', '.join(PACKINGS)}, got {self.packing!r}")

    def check(self, workload: Workload) -> None:
        """A fixed degree must be admissible on ``workload`` (a power of two <= spmax)."""
        if isinstance(self.degree, int):
            check_admissible(workload, self.degree)

    def plan(self, batch: Batch, workload: Workload) -> Plan:
        """Pack the batch at the fixed degree, or at the best degree for ``"auto"``."""
        self.check(workload)
        started = Stopwatch.start()
        ctx = make_context(batch, workload)
        if isinstance(self.degree, int):
            placement, chosen_by = pack_degree(ctx, self.degree, packing=self.packing), "rule"
        else:
            placement, chosen_by = best(sweep(ctx, packing=self.packing)).placement, "step"
        extra = {"degree_option": str(self.degree), "packing": self.packing}
        return finish(self.name, ctx, placement, started, extra, chosen_by=chosen_by)
