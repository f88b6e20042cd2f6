"""What every planner shares: the ``Planner`` protocol, the per-batch planning context, the internal
placement type and the one way a placement becomes a validated :class:`~nspsim.plan.Plan`.

Planners work in *sorted space*: samples ordered by non-increasing length (``CostTable.order``
maps back to batch order). A :class:`Placement` holds, per sorted sample, its node's degree and
first rank and its micro-batch, as int64 arrays; :func:`finish` maps it back to batch order, derives
the issue order of every micro-batch (roots first, then by rank), evaluates the proxy Load, the lower
bound and a step estimate, and builds the Plan through :func:`nspsim.plan.make_plan`.

Timing: ``planning_time_s`` is the routing algorithm's wall time on one core, from the batch to the
placement (what the NSP paper calls the planner's runtime); ``planning_cpu_s`` is the same span in
process CPU time, which other processes on a shared machine disturb less. Building and validating the Plan object
and evaluating the metadata is the contract's cost, the same for every planner, and is excluded.

Step estimate (used to choose micro-batch counts and the static degree): per micro-batch,
``max(max_p D_fwd, layers * allgather) + max(max_p D_bwd, layers * (allgather + reduce_scatter))``
plus the cost model's fixed cost per micro-batch (``micro_batch_overhead``):
FSDP collectives are hidden behind a pass's compute when it is longer, and every extra micro-batch
repeats them (the NSP paper's main argument against micro-batching). It ignores overlap inside a pass,
which the simulator models.

Preparation: each planner declares, as a class attribute ``preparation``, how the executor prepares its
plans before they run (:class:`nspsim.execution.prepare.Preparation`: tree-level recompute marks, then
an optimised issue order; every entry point's ``prepare`` default is this declaration). Plans routed
for nesting (NSP, NSP-2L, greedy) are designed for both
(``NESTED_PREPARATION``); the baselines run as planned (``AS_PLANNED``: no marks, so full attention
recomputation when memory forces it, and the planner's own issue order). A declaration, not a name
list, so a new planner states what it needs where it is defined; it is a ``ClassVar``, so it is not
a planner option and never enters a plan.

Options: each planner validates its options when it is built (type, range and a documented maximum
where a larger value only costs time, e.g. NSP's ``beam_width``) and, in ``check(workload)``, those
that depend on the workload (a degree or group size against spmax): nothing is clamped silently.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from nspsim.execution.prepare import Preparation
from nspsim.plan import Plan, make_plan
from nspsim.planners.feasibility import check_feasible
from nspsim.planners.lower_bound import lower_bound
from nspsim.planners.proxy import CostTable, ProxyLoad
from nspsim.sp_tree import Node
from nspsim.specs.training import training_label
from nspsim.trace.batching import Batch
from nspsim.workload import Workload

IntArray = npt.NDArray[np.int64]
Metadata = Mapping[str, float | int | str]


@runtime_checkable
class Planner(Protocol):
    """Routes one batch of a workload: ``plan(batch, workload) -> Plan``."""

    @property
    def name(self) -> str:
        """Registry name of the planner."""
        ...

    @property
    def preparation(self) -> Preparation:
        """How the executor prepares this planner's plans (module doc)."""
        ...

    def check(self, workload: Workload) -> None:
        """``ValueError`` if an option cannot apply to ``workload`` (e.g. a degree above its spmax);
        ``plan`` checks too, and ``compare`` calls it for every spec before anything runs."""
        ...

    def plan(self, batch: Batch, workload: Workload) -> Plan:
        """A validated plan for ``batch`` on ``workload``."""
        ...


@dataclass(frozen=True)
class Stopwatch:
    """Wall and CPU clocks at the start of planning."""

    wall: float
    cpu: float

    @staticmethod
    def start() -> Stopwatch:
        """Read both clocks now."""
        return Stopwatch(time.perf_counter(), time.process_time())

    def elapsed(self) -> tuple[float, float]:
        """(wall, CPU) seconds since the start."""
        return time.perf_counter() - self.wall, time.process_time() - self.cpu


@dataclass(frozen=True)
class Placement:
    """Per sorted sample: node degree, node first rank, micro-batch (int64 arrays)."""

    degrees: IntArray
    firsts: IntArray
    micro_batches: IntArray
    metadata: dict[str, float | int | str] = field(default_factory=dict)

    @property
    def num_micro_batches(self) -> int:
        """Number of micro-batches."""
        return int(self.micro_batches.max()) + 1

    @staticmethod
    def single(degrees: IntArray, firsts: IntArray, **metadata: float | int | str) -> Placement:
        """A one-micro-batch placement."""
        return Placement(degrees, firsts, np.zeros(degrees.size, dtype=np.int64), dict(metadata))


@dataclass(frozen=True)
class Context:
    """Everything a planner needs about one batch: workload, full-proxy cost table, levels, and the
    per-GPU token budget routing must keep (B_tok, or a tighter planning budget)."""

    batch: Batch
    workload: Workload
    table: CostTable

    @property
    def num_gpus(self) -> int:
        """P."""
        return self.workload.tree.num_gpus

    @property
    def budget(self) -> int:
        """The routing token budget (B_tok unless the planner tightened it): the cost table's."""
        return self.table.token_budget

    @property
    def levels(self) -> tuple[int, ...]:
        """Admissible SP degrees, largest first."""
        return self.workload.tree.degrees


def check_count_option(key: str, value: object, maximum: int, why: str) -> None:
    """``ValueError`` unless option ``key`` is an integer in [1, ``maximum``]; ``why`` says what a
    larger value would cost (the message tells the user)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"option {key} must be a positive integer, got {value!r}")
    if value > maximum:
        raise ValueError(f"option {key} must be at most {maximum:,} ({why}), got {value:,}")


def make_context(batch: Batch, workload: Workload, token_budget: int | None = None) -> Context:
    """Cost table of ``batch`` (full proxy) routed under ``token_budget`` (default B_tok; a tighter
    budget must still hold the longest sample at spmax); ``ValueError`` if a sample fits no group."""
    budget = workload.token_budget if token_budget is None else min(int(token_budget), workload.token_budget)
    table = CostTable(workload.cost, workload.tree, batch.lengths, budget)
    check_feasible(table, batch, workload)
    return Context(batch=batch, workload=workload, table=table)


def micro_batch_estimate(ctx: Context, degrees: IntArray, firsts: IntArray, mask: npt.NDArray[np.bool_]) -> float:
    """Step estimate of the masked sorted samples run as one micro-batch (module doc)."""
    return estimate_of(ctx, ctx.table.evaluate(degrees, firsts, mask))


def estimate_of(ctx: Context, loads: ProxyLoad, remat: npt.NDArray[np.float64] | None = None) -> float:
    """:func:`micro_batch_estimate` of one micro-batch's already evaluated proxy stage times, plus the
    cost model's fixed cost per micro-batch; ``remat`` (seconds per GPU) adds recomputation to the
    backward stage (:mod:`nspsim.planners.remat_estimate`)."""
    cost = ctx.workload.cost
    fsdp = cost.fsdp()
    gather, bwd_comm = cost.num_layers * fsdp.allgather, cost.num_layers * (fsdp.allgather + fsdp.reduce_scatter)
    bwd = loads.d_bwd if remat is None else loads.d_bwd + remat
    return max(float(loads.d_fwd.max()), gather) + max(float(bwd.max()), bwd_comm) + cost.micro_batch_overhead()


def static_floor(ctx: Context, samples: IntArray, degree: int) -> float:
    """No placement of ``samples`` (sorted, longest first) at one ``degree`` has a proxy Load below
    this: their total work spread evenly over the GPUs, or the longest sample's own cost there."""
    cost = ctx.table.total(degree)[samples]
    return max(float(cost.sum()) * degree / ctx.num_gpus, float(cost[0]) + ctx.table.overhead_total(degree))


def step_estimate(ctx: Context, placement: Placement) -> float:
    """Per-micro-batch proxy stage maxima with FSDP collectives repeated per micro-batch (module doc)."""
    return sum(
        micro_batch_estimate(ctx, placement.degrees, placement.firsts, placement.micro_batches == mb)
        for mb in range(placement.num_micro_batches)
    )


def proxy_load(ctx: Context, placement: Placement) -> float:
    """Proxy Load of a placement (micro-batch Loads summed)."""
    return ctx.table.load(placement.degrees, placement.firsts, placement.micro_batches)


def _nodes_and_orders(degrees: IntArray, firsts: IntArray, mbs: IntArray) -> tuple[list[Node], list[list[Node]]]:
    """Node of every sample (one shared object per distinct node) and the active nodes of every
    micro-batch, roots first then by rank; vectorised through integer keys."""
    width = int(firsts.max()) + int(degrees.max()) + 1
    node_key = degrees * width + firsts
    distinct, inverse = np.unique(node_key, return_inverse=True)
    objects = [Node(int(k // width), int(k % width) // int(k // width)) for k in distinct.tolist()]
    nodes = [objects[i] for i in inverse.tolist()]
    top = int(degrees.max()) + 1
    order_key = (mbs * top + (top - degrees)) * width + firsts  # micro-batch, larger degree first, rank
    orders: list[list[Node]] = [[] for _ in range(int(mbs.max()) + 1)]
    for key in np.unique(order_key).tolist():
        mb, rest = divmod(key, top * width)
        degree, first = top - rest // width, rest % width
        orders[mb].append(Node(degree, first // degree))
    return nodes, orders


def finish(name: str, ctx: Context, placement: Placement, started: Stopwatch, extra: Metadata | None = None) -> Plan:
    """Validated Plan (batch order) with metadata: timing, proxy Load, lower bound, step estimate, and
    what ``max_context`` dropped from the batch (``dropped_samples``, ``dropped_tokens``; metadata is
    outside the content hash, so plans hash as before)."""
    elapsed, cpu = started.elapsed()
    table = ctx.table
    load = proxy_load(ctx, placement)
    bound = lower_bound(table)
    metadata: dict[str, float | int | str] = {
        "planning_time_s": elapsed,
        "planning_cpu_s": cpu,
        "load_s": load,
        "lower_bound_s": bound,
        "load_over_lower_bound": load / bound if bound > 0 else float("inf"),
        "step_estimate_s": step_estimate(ctx, placement),
        "micro_batches": placement.num_micro_batches,
        "dropped_samples": ctx.batch.dropped_samples,
        "dropped_tokens": ctx.batch.dropped_tokens,
        "training": training_label(ctx.workload.training),
    }
    if ctx.budget != ctx.workload.token_budget:
        metadata["effective_token_budget"] = ctx.budget
    metadata.update(placement.metadata)
    metadata.update(extra or {})
    inverse = np.empty_like(table.order)
    inverse[table.order] = np.arange(table.order.size)
    deg, first, mbs = (a[inverse] for a in (placement.degrees, placement.firsts, placement.micro_batches))
    nodes, orders = _nodes_and_orders(deg, first, mbs)
    return make_plan(
        planner=name,
        cluster=ctx.workload.cluster,
        model=ctx.workload.model,
        batch=ctx.batch,
        spmax=ctx.workload.tree.spmax,
        token_budget=ctx.workload.token_budget,
        nodes=nodes,
        micro_batches=mbs.tolist(),
        backend=ctx.workload.config.backend,
        issue_order=orders,
        metadata=metadata,
        profile=ctx.workload.profile_ref,
    )
