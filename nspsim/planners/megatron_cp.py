"""Megatron-LM dynamic (hybrid) context parallelism as a baseline planner: what Megatron users have.

**Rule.** Megatron's ``DefaultDynamicCPScheduler``, read from its source (below): the batch sorted
longest first; each micro-batch opens a CP group of ``gpus_needed`` ranks for its longest remaining
sample, then places every other remaining sample, longest first, by joining or opening the power-of-two
group that leaves the least per-rank attention work ``L**2 / c`` under Megatron's cap, and doubles the
smallest group while ranks stay idle. A plan is chosen by this rule, not by an estimate
(``chosen_by=rule``). Trade-off: the balance is Megatron's attention proxy ``L**2 / c``, which ignores
the linear (MLP, MoE) work and all communication, and degrees are the smallest that fit memory (raised
only to fill idle ranks or to lower the attention maximum), so short samples stay on small, cheap groups
while a long sample's group may finish long after the others; every micro-batch repeats the FSDP
collectives.

**Options** (default, why): ``max_seqlen_per_rank="auto"`` (B_tok: Megatron's capacity per rank, "the
maximum sequence length each rank can handle without overflowing the memory"; a smaller token count
keeps headroom, as Megatron users set it), ``min_cp_size=1`` (Megatron's option of that name) and
``cap_delta=0.05`` (Megatron's ``_DYNAMIC_CP_WORKLOAD_CAP_DELTA``).

**Reference.** Source read (NVIDIA/Megatron-LM, branch ``dev`` at d48bd6b and ``main`` at d98e8a6, 2026-08):

* **Groups.** ``megatron/core/parallel_state.py``: ``create_hybrid_dp_cp_groups(rank, ranks, pg_options)``
  (``main``) and its successor ``create_dynamic_dp_cp_groups(..., min_cp_size)`` (``dev``) pre-create,
  over the flattened DP x CP rank list, one process group per aligned block ``ranks[i:i + s]`` for every
  power of two s below the DP x CP size (from 2 on ``main``, from ``min_cp_size`` on ``dev``); size 1 and
  the whole DP x CP group exist already. A CP group is thus always an aligned power-of-two block: an SP
  tree node here (the DP x CP ranks are the P GPUs; TP and PP are outside this simulator).
* **Degree by length.** ``dcp_gpus_needed(seq_len, max_seq_len_per_rank, min_cp_size)`` in
  ``megatron/core/datasets/data_schedule_utils.py`` (``BalancedCPScheduler.gpus_needed`` on ``main``):
  ``max(min_cp_size, 2 ** ceil(log2(L / max_seqlen_per_dp_cp_rank)))``, the smallest power of two of GPUs
  whose shards hold the sample within the per-rank capacity (at least 1). Computed here in integers
  (smallest c with c * capacity >= L), equal to the float formula for every length below 2**36.
* **Scheduler.** ``DefaultDynamicCPScheduler`` (``dev``, ``megatron/core/datasets/data_schedule.py``,
  enabled by ``--dynamic-context-parallel --sequence-packing-scheduler default_dynamic_cp``) sorts the
  global batch by length, longest first, and calls ``next_hdp_group_packing_aware`` until no sample is
  left; each call forms one micro-batch in which every rank runs one packed sequence on one CP group:

  1. the longest remaining sample opens a group of ``gpus_needed`` ranks at rank 0;
  2. every other remaining sample, longest first, tries each power of two c from its own
     ``gpus_needed`` up to the DP x CP size: joining an existing group of size c (if the group's packed
     tokens per rank plus L / c stay within the capacity) or opening a new group of c ranks from the free
     ranks (the lowest-numbered ones); each option is scored by the largest per-rank work it leaves,
     work being ``L**2 / c`` summed over a rank's samples, and is admissible only up to the cap
     ``L_tall * capacity * (1 + 0.05)`` (``_DYNAMIC_CP_WORKLOAD_CAP_DELTA``; L_tall is the micro-batch's
     longest sample). The lowest score wins; ties keep the first option found (smaller c first, joining
     before opening, groups in creation order). A sample with no admissible option waits for the next
     micro-batch;
  3. while ranks stay idle, the first group of the smallest size doubles (its samples then run at twice
     the degree) and the groups after it shift up (``fill_empty_gpus_once``); if no group can grow,
     ``fill_with_full_dpxcp_group`` replaces the micro-batch by as many samples as the whole DP x CP
     group holds.

  Megatron asserts (it does not wrap around) when a sample needs more ranks than exist: here that is
  ``ValueError``, from the shared feasibility check (sample, length, shard and B_tok named).

The per-rank capacity ``max_seqlen_per_dp_cp_rank`` is "the maximum sequence length each rank can handle
without overflowing the memory": B_tok here (option ``max_seqlen_per_rank="auto"``); a smaller value can
be set, as Megatron users do to keep headroom. ``min_cp_size`` is Megatron's option of that name (1).

**Deviations.** Mapping onto nspsim, and where it differs: a Megatron micro-batch is one nspsim micro-batch (disjoint
aligned groups, every rank in exactly one); the degrees are capped at spmax (Megatron's largest group is
the DP x CP size, P here). With spmax < P the doubling step stops once the smallest group is spmax and
leaves the remaining ranks idle, where Megatron's doubling goes on past spmax; that, not the whole-group
fallback, is the difference. With P a power of two and spmax = P the fallback is never reached (the
idle ranks are always a multiple of the smallest group). New groups open at the lowest free ranks in
non-increasing size order (a later sample is no longer, so its best degree is no larger), so every
group is aligned; the planner checks it.
The ``main`` branch's ``BalancedCPScheduler.next_hdp_group`` (``megatron/core/pipeline_parallel/
hybrid_cp_schedule.py``, ``--hybrid-context-parallel``) runs every sample as its own forward and backward
(no packing, so no per-micro-batch token sum); it has no counterpart in nspsim's micro-batch model and is
not implemented.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from nspsim.execution.prepare import AS_PLANNED, Preparation
from nspsim.plan import Plan
from nspsim.planners.base import Context, Placement, Stopwatch, make_context
from nspsim.planners.finish import finish
from nspsim.sp_tree import is_power_of_two
from nspsim.trace.batching import Batch
from nspsim.workload import Workload

WORKLOAD_CAP_DELTA = 0.05  # Megatron-LM's _DYNAMIC_CP_WORKLOAD_CAP_DELTA
MAX_CAP_DELTA = 1e6  # beyond this the cap never binds; a larger value changes nothing


def gpus_needed(length: int, capacity: int, min_cp_size: int = 1) -> int:
    """Megatron's CP size of a sample: the smallest power of two c >= ``min_cp_size`` with
    ``c * capacity >= length`` (``dcp_gpus_needed``, module docstring)."""
    c = 1
    while c * capacity < length:
        c *= 2
    return max(c, min_cp_size)


@dataclass
class _Group:
    """One CP group of a micro-batch: first rank, size, its samples (sorted positions), per-rank work
    (Megatron's L**2 / c summed) and packed tokens per rank."""

    start: int
    size: int
    samples: list[int] = field(default_factory=list)
    work: float = 0.0
    packed: float = 0.0


def schedule_micro_batch(
    lengths: list[int], pending: list[int], num_gpus: int, top: int, capacity: int, min_cp: int, delta: float
) -> tuple[list[_Group], list[int]]:
    """One Megatron micro-batch of the ``pending`` sorted positions (longest first): its groups, in rank
    order, and the positions left for later micro-batches (``next_hdp_group_packing_aware``, steps 1-3
    of the module docstring; ``top`` is the largest admissible degree)."""
    first = pending[0]
    tall = lengths[first]
    cp = gpus_needed(tall, capacity, min_cp)
    if cp > top:
        raise ValueError(
            f"sample of length {tall} needs a CP group of {cp} GPUs at {capacity} tokens per rank, above the "
            f"largest admissible group of {top}"
        )
    cap = float(tall) * float(capacity) * (1.0 + delta)
    work = (tall * tall) / cp
    groups = [_Group(0, cp, [first], work, tall / cp)]
    by_size: dict[int, list[_Group]] = {cp: [groups[0]]}
    peak, next_free = work, cp
    leftovers: list[int] = []
    for j in pending[1:]:
        length = lengths[j]
        best: tuple[float, int, _Group | None] | None = None
        c = gpus_needed(length, capacity, min_cp)
        while c <= top:
            cost = (length * length) / c
            for group in by_size.get(c, ()):
                if group.packed + length / c > capacity:
                    continue
                score = max(peak, group.work + cost)
                if score <= cap and (best is None or score < best[0]):
                    best = (score, c, group)
            if num_gpus - next_free >= c:
                score = max(peak, cost)
                if score <= cap and (best is None or score < best[0]):
                    best = (score, c, None)
            c *= 2
        if best is None:
            leftovers.append(j)
            continue
        score, c, chosen = best
        if chosen is None:
            chosen = _Group(next_free, c)
            next_free += c
            groups.append(chosen)
            by_size.setdefault(c, []).append(chosen)
        chosen.samples.append(j)
        chosen.work += (length * length) / c
        chosen.packed += length / c
        peak = max(peak, chosen.work)
    _fill_idle_ranks(groups, next_free, num_gpus, top)
    return groups, leftovers


def _fill_idle_ranks(groups: list[_Group], next_free: int, num_gpus: int, top: int) -> None:
    """Double the first group of the smallest size and shift the later groups up until no rank is idle
    (``fill_empty_gpus_once``); stops when the smallest group is already ``top`` (module docstring)."""
    while next_free < num_gpus:
        smallest = min(g.size for g in groups)
        if smallest * 2 > top:
            return
        index = next(i for i, g in enumerate(groups) if g.size == smallest)
        groups[index].size *= 2
        for later in groups[index + 1 :]:
            later.start += smallest
        next_free += smallest


@dataclass(frozen=True, kw_only=True)
class MegatronCPPlanner:
    """Megatron-LM dynamic CP (module docstring); options ``max_seqlen_per_rank`` (``"auto"``: B_tok, or
    a token count <= B_tok), ``min_cp_size`` (a power of two <= spmax) and ``cap_delta`` (Megatron's 0.05)."""

    max_seqlen_per_rank: int | str = "auto"
    min_cp_size: int = 1
    cap_delta: float = WORKLOAD_CAP_DELTA
    name: ClassVar[str] = "megatron-cp"
    preparation: ClassVar[Preparation] = AS_PLANNED
    headline: ClassVar[bool] = False
    relative_cost: ClassVar[float] = 4.0

    def __post_init__(self) -> None:
        value = self.max_seqlen_per_rank
        if value != "auto" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(
                "megatron-cp option max_seqlen_per_rank must be 'auto' (B_tok) or a positive integer token count "
                f"(no k/M suffix), got {value!r}"
            )
        cp = self.min_cp_size
        if isinstance(cp, bool) or not isinstance(cp, int) or not is_power_of_two(cp):
            raise ValueError(f"megatron-cp option min_cp_size must be a power of two (1, 2, 4, ...), got {cp!r}")
        delta = self.cap_delta
        if (
            isinstance(delta, bool)
            or not isinstance(delta, int | float)
            or not math.isfinite(delta)
            or not 0 <= delta <= MAX_CAP_DELTA
        ):
            raise ValueError(
                f"megatron-cp option cap_delta must be a number in [0, {MAX_CAP_DELTA:g}] (Megatron uses "
                f"{WORKLOAD_CAP_DELTA}), got {delta!r}"
            )

    def check(self, workload: Workload) -> None:
        """``min_cp_size`` must be <= spmax and ``max_seqlen_per_rank`` <= B_tok (nothing is clamped)."""
        spmax = workload.tree.spmax
        if self.min_cp_size > spmax:
            raise ValueError(
                f"megatron-cp option min_cp_size={self.min_cp_size} is above spmax={spmax}: use min_cp_size <= {spmax}"
            )
        value, budget = self.max_seqlen_per_rank, workload.token_budget
        if isinstance(value, int) and value > budget:
            raise ValueError(
                f"megatron-cp option max_seqlen_per_rank={value} is above the token budget B_tok={budget}: "
                f"use 'auto' or a value <= {budget}"
            )

    def plan(self, batch: Batch, workload: Workload) -> Plan:
        """Megatron's micro-batches, one after another, until every sample is placed."""
        self.check(workload)
        started = Stopwatch.start()
        capacity = None if self.max_seqlen_per_rank == "auto" else int(self.max_seqlen_per_rank)
        if capacity is not None:
            _check_capacity(batch, workload, capacity)
        ctx = make_context(batch, workload, capacity)
        placement = megatron_placement(ctx, self.min_cp_size, float(self.cap_delta))
        return finish(self.name, ctx, placement, started, {"max_seqlen_per_rank": ctx.budget}, chosen_by="rule")


def _check_capacity(batch: Batch, workload: Workload, capacity: int) -> None:
    """``ValueError`` naming the option when a sample that B_tok would hold at spmax does not fit spmax
    GPUs at ``capacity`` tokens each (longer samples get the shared feasibility error)."""
    lengths = np.asarray(batch.lengths)
    j = int(np.argmax(lengths))
    longest, spmax = int(lengths[j]), workload.tree.spmax
    if spmax * capacity < longest <= spmax * workload.token_budget:
        raise ValueError(
            f"sample {j} of batch {batch.index} (length {longest}) needs more than spmax={spmax} GPUs at "
            f"megatron-cp option max_seqlen_per_rank={capacity} tokens per rank: raise it to at least "
            f"{-(-longest // spmax)} (at most B_tok={workload.token_budget}) or use 'auto'"
        )


def megatron_placement(ctx: Context, min_cp: int, delta: float) -> Placement:
    """Degrees, first ranks and micro-batches of every sorted sample under Megatron's scheduler."""
    lengths = [int(v) for v in ctx.table.lengths.tolist()]
    n, num_gpus, top = len(lengths), ctx.num_gpus, ctx.levels[0]
    degrees, firsts, mbs = (np.zeros(n, dtype=np.int64) for _ in range(3))
    pending, mb = list(range(n)), 0
    raised: Counter[int] = Counter()
    while pending:
        groups, pending = schedule_micro_batch(lengths, pending, num_gpus, top, ctx.budget, min_cp, delta)
        for group in groups:
            assert group.start % group.size == 0, "Megatron CP groups are aligned blocks"
            for j in group.samples:
                degrees[j], firsts[j], mbs[j] = group.size, group.start, mb
                if group.size > gpus_needed(lengths[j], ctx.budget, min_cp):
                    raised[group.size] += 1
        mb += 1
    counts = Counter(degrees.tolist())
    return Placement(
        degrees,
        firsts,
        mbs,
        {
            "megatron_cp_degrees": ",".join(f"{d}:{counts[d]}" for d in sorted(counts, reverse=True)),
            "megatron_cp_raised": sum(raised.values()),
        },
    )
