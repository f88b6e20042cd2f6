r"""What every planner shares: the ``Planner`` protocol, the per-batch planning context and the internal
placement type (a placement becomes a Plan in :mod:`nspsim.planners.finish`; it is scored by the
estimate ladder of :mod:`nspsim.planners.estimate`).

Planners work in *sorted space*: samples ordered by non-increasing length (``CostTable.order``
maps back to batch order). A :class:`Placement` holds, per sorted sample, its node's degree and
first rank and its micro-batch, as int64 arrays.

Timing: ``planning_time_s`` is the routing algorithm's wall time on one core, from the batch to the
placement (what the NSP paper calls the planner's runtime); ``planning_cpu_s`` is the same span in
process CPU time, which other processes on a shared machine disturb less. Building and validating the Plan object
and evaluating the metadata is the contract's cost, the same for every planner, and is excluded.

Preparation: each planner declares, as a class attribute ``preparation``, how the executor prepares its
plans before they run (:class:`nspsim.execution.prepare.Preparation`: tree-level recompute marks, then
an optimised issue order; every entry point's ``prepare`` default is this declaration). Plans routed
for nesting (NSP, NSP-2L, greedy) are designed for both
(``NESTED_PREPARATION``); the baselines run as planned (``AS_PLANNED``: no marks, so full attention
recomputation when memory forces it, and the planner's own issue order). A declaration, not a name
list, so a new planner states what it needs where it is defined; it is a ``ClassVar``, so it is not
a planner option and never enters a plan.

Facts: a planner class states, as ``ClassVar``\ s beside its options, its registry ``name``, its
``preparation``, whether it is a ``headline`` strategy (``nspsim compare``'s default set:
static-best plus every headline planner) and its ``relative_cost`` (planning time of one batch
relative to Static SP's, roughly; a sweep submits the costliest units first, so a wrong guess only
costs load balance). The registry (:mod:`nspsim.planners`) is built from the classes, so a new planner
is one class and one line in ``PLANNER_CLASSES``.

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
from nspsim.plan import Plan
from nspsim.planners.compiled import warm
from nspsim.planners.feasibility import check_feasible
from nspsim.planners.proxy import CostTable
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

    @property
    def headline(self) -> bool:
        """Whether ``nspsim compare`` runs it by default (module doc)."""
        ...

    @property
    def relative_cost(self) -> float:
        """Rough planning cost of one batch relative to Static SP's (module doc)."""
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
        """Read both clocks now, after the compiled kernels are ready (compiled or loaded from the disk
        cache once per process, :func:`nspsim.planners.compiled.warm`), so no planning time includes
        a compilation."""
        warm()
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
    chosen_s: float | None = None  # the value of the estimate rung that chose it, when the planner has it

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
