"""Where a window's estimate stands above its floor (:mod:`nspsim.planners.window.bound`): the gap between
the passes' summed plan estimates and :func:`~nspsim.planners.window.bound.window_floor`, split into four
non-negative parts, each the step from one relaxation of the floor to the plans as routed.

Per micro-batch j of the passes' plans, with :func:`~nspsim.planners.estimate.stage_step`:

* A_j: the step of the mean stages with every sample at its cheapest memory-feasible degree (the floor's
  per-micro-batch term; sum_j A_j >= the floor at the plans' micro-batch count >= the floor);
* B_j: the step of the mean stages at the degrees the plan chose, with its node latencies and intercepts
  (each sample costs at least its cheapest feasible degree's, and latencies and positive intercepts
  only add, so B_j >= A_j);
* C_j: the step estimate, the step of the busiest GPU's stages (a max is at least the mean: C_j >= B_j);
* the plan estimate (:func:`~nspsim.planners.window.planner.plan_estimate`: recompute-aware where
  evaluated) minus the plan's step estimate, its recomputation (>= 0 by the estimate ladder).

So estimate - floor = ``micro_batches`` (sum A_j - floor: more micro-batches than the floor's count,
each paying the FSDP floors and the fixed cost) + ``degrees`` (sum B_j - A_j: samples above their
cheapest degree, node latencies) + ``imbalance`` (sum C_j - B_j: the busiest GPU above the mean) +
``recompute``. Only the parts an assignment changes can shrink by moving samples between passes;
``degrees`` is the same for any assignment whenever each sample keeps its degree.

Trade-off: the split follows one order of relaxations (a different order would attribute the
interactions differently); it is a measurement of where the gap lies, not a bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nspsim.plan import Plan
from nspsim.planners.estimate import step_floors
from nspsim.planners.proxy import CostTable
from nspsim.planners.window.bound import feasible_cheapest_work, window_floor
from nspsim.planners.window.planner import plan_estimate
from nspsim.trace.batching import Batch
from nspsim.workload import Workload


@dataclass(frozen=True, kw_only=True)
class WindowGap:
    """A window's summed plan estimate, its floor and the four parts of the gap (seconds; module doc)."""

    estimate_s: float
    floor_s: float
    micro_batches_s: float
    degrees_s: float
    imbalance_s: float
    recompute_s: float

    def shares(self) -> dict[str, float]:
        """Each part over the estimate (the gap's parts as fractions of the window's time)."""
        parts = {
            "micro_batches": self.micro_batches_s,
            "degrees": self.degrees_s,
            "imbalance": self.imbalance_s,
            "recompute": self.recompute_s,
        }
        return {name: value / self.estimate_s for name, value in parts.items()}


def window_gap(workload: Workload, batches: Sequence[Batch], plans: Sequence[Plan]) -> WindowGap:
    """The gap of ``plans`` (one per pass, routing any assignment of the window of ``batches``) above the
    window's floor, in parts (module docstring)."""
    floor = window_floor(workload, batches).floor_s
    a = b = c = estimate = 0.0
    for plan in plans:
        lengths, degrees, firsts, micro = plan.arrays
        table = CostTable(workload.cost, workload.tree, lengths, workload.token_budget)
        order = table.order
        degrees, firsts, micro = degrees[order], firsts[order], micro[order]
        cheap_fwd, cheap_bwd = feasible_cheapest_work(table)
        i_fwd, i_bwd = (min(0.0, i) for i in table.intercept)
        p = workload.tree.num_gpus
        for mb in range(plan.num_micro_batches):
            at = micro == mb
            loads = table.evaluate(degrees, firsts, at)
            a += stage_step_of(workload, float(cheap_fwd[at].sum()) / p + i_fwd, float(cheap_bwd[at].sum()) / p + i_bwd)
            b += stage_step_of(workload, float(loads.d_fwd.mean()), float(loads.d_bwd.mean()))
            c += stage_step_of(workload, float(loads.d_fwd.max()), float(loads.d_bwd.max()))
        estimate += plan_estimate(plan)
    return WindowGap(
        estimate_s=estimate,
        floor_s=floor,
        micro_batches_s=a - floor,
        degrees_s=b - a,
        imbalance_s=c - b,
        recompute_s=estimate - c,
    )


def stage_step_of(workload: Workload, fwd: float, bwd: float) -> float:
    """:func:`~nspsim.planners.estimate.stage_step` of the stages ``(fwd, bwd)`` on ``workload``: each
    floored by its FSDP collectives, plus the fixed cost per micro-batch."""
    gather, bwd_comm, overhead = step_floors(workload.cost)
    return max(fwd, gather) + max(bwd, bwd_comm) + overhead
