"""Executor preparation: a routed plan becomes the executable plan that runs (NSP paper section 4.2).

Two optional steps, in this order:

1. tree-level recomputation marks for the memory budget (:func:`nspsim.execution.recompute.mark_recompute`):
   which samples keep their attention state and which recompute it in backward;
2. the issue order for inter-level phase streaming (:func:`nspsim.execution.issue_order.optimize_issue_order`),
   scored after the marks (a marked node's recompute pass streams in its backward) and, with
   ``evaluate`` (lower is better, e.g. a simulator's :attr:`~nspsim.simulator.StepResult.step_time_or_inf`),
   re-ranked by it, so the result is never worse than the planner's own order there.

``nspsim compare``, ``nspsim simulate`` and the runtime's plan-ahead thread all call
:func:`prepare_plan`, so a plan is prepared the same way wherever it is simulated or executed.
Both steps are deterministic for a plan and a cost/memory model (``evaluate`` aside).
"""

from __future__ import annotations

from collections.abc import Callable

from nspsim.cost.interface import CostModel
from nspsim.execution.issue_order import optimize_issue_order
from nspsim.execution.recompute import mark_recompute
from nspsim.plan import Plan
from nspsim.specs.memory import MemoryModel


def prepare_plan(
    plan: Plan,
    *,
    memory: MemoryModel,
    cost: CostModel,
    tree_recompute: bool = True,
    optimize_order: bool = True,
    evaluate: Callable[[Plan], float] | None = None,
) -> Plan:
    """``plan`` with tree-level recompute marks (``tree_recompute``) and an optimised issue order
    (``optimize_order``, re-ranked by ``evaluate`` when given); unchanged when both are off."""
    if tree_recompute:
        plan = mark_recompute(plan, memory, cost)
    if optimize_order:
        plan = optimize_issue_order(plan, cost, evaluate=evaluate)
    return plan
