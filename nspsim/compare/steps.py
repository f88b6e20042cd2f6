"""One step, or one gradient-accumulation window, planned, prepared and simulated: the code that
``compare``'s runner (:mod:`nspsim.compare.runner`) and a sweep unit (:mod:`nspsim.sweep.work`) share,
so a sweep's rows are compare's records by construction, not by a copy kept in step.

A step: the planner's plan, prepared as the spec says (:func:`prepare_for`: tree-level recompute
marks, then an issue order ranked by simulated step time), simulated, recorded
(:func:`iteration_record`). A window (:func:`run_window`): the window planner
(:class:`nspsim.planners.window.WindowPlanner`, candidates :data:`WINDOW_CANDIDATES`) routes every
candidate assignment with the spec's planner, and the simulator judges the per-step candidate against
the best-estimated other one: a candidate's time is the sum of its passes' times, each pass prepared
as the spec says and simulated, every pass but the last without the optimizer step (its gradients
accumulate). The chosen window's passes are then prepared and simulated the same way.

Simulation is the caller's (``simulate(plan, optimizer_step)``), so each caller memoises as suits it:
compare across its whole run, a sweep unit within the unit. Trade-off: a pass is prepared twice when
its candidate was judged (once inside the judge, once for its record); preparation is deterministic
and the second simulation is a memo hit, so this costs a re-ranking of issue orders, not a simulation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from nspsim.compare.specs import PlannerSpec
from nspsim.compare.summary import IterationRecord, routing_counts
from nspsim.execution.prepare import prepare_plan
from nspsim.plan import Plan
from nspsim.plan.window import WindowPlan, pass_batches
from nspsim.planners.base import Planner
from nspsim.planners.window import CANDIDATES, WindowPlanner
from nspsim.simulator import StepResult
from nspsim.trace.batching import Batch
from nspsim.units import format_tokens
from nspsim.workload import Workload

WINDOW_CANDIDATES: tuple[str, ...] = CANDIDATES
"""The candidate assignments compare and sweep offer the window planner (a sweep's window keys hold them)."""

SimulatePass = Callable[[Plan, bool], StepResult]
"""The simulated step of a plan, ending with the optimizer step (``True``) or accumulating (``False``)."""


@dataclass(frozen=True)
class WindowPass:
    """One pass of a simulated window: the batch it routed, its plan as planned and as prepared, and
    the prepared plan's simulated step."""

    batch: Batch
    planned: Plan
    prepared: Plan
    result: StepResult


def cannot_hold(workload: Workload, batches: Sequence[Batch], degree: int) -> str | None:
    """Why a fixed ``degree`` cannot run some batch of ``batches`` at all (a sample longer than
    ``degree * B_tok``), naming the first such batch and sample length; ``None`` if it can."""
    budget = workload.token_budget
    for batch in batches:
        longest = max(batch.lengths)
        if longest > degree * budget:
            return (
                f"cannot hold a sample of length {longest:,} ({format_tokens(longest)}) in batch {batch.index}: "
                f"at most {degree * budget:,} tokens fit {degree} GPU(s) of B_tok={budget:,}"
            )
    return None


def prepare_for(spec: PlannerSpec, workload: Workload, plan: Plan, evaluate: Callable[[Plan], float]) -> Plan:
    """``plan`` prepared as ``spec`` says (tree-level recompute marks, optimised issue order ranked by
    ``evaluate``, the simulated step time of a candidate); shared by compare and sweep units."""
    return prepare_plan(
        plan, memory=workload.memory, cost=workload.cost, preparation=spec.preparation, evaluate=evaluate
    )


def run_window(
    spec: PlannerSpec, planner: Planner, sources: Sequence[Batch], workload: Workload, simulate: SimulatePass
) -> tuple[WindowPlan, list[WindowPass]]:
    """The window of ``sources`` planned with ``planner`` (the simulator judging, module docstring) and
    its passes prepared and simulated, the last with the optimizer step."""

    def evaluator(last: bool) -> Callable[[Plan], float]:
        return lambda p: simulate(p, last).step_time_or_inf

    def judge(plans: Sequence[Plan]) -> float:
        total = 0.0
        for k, plan in enumerate(plans):
            evaluate = evaluator(k == len(plans) - 1)
            total += evaluate(prepare_for(spec, workload, plan, evaluate=evaluate))
        return total

    window = WindowPlanner(step=planner, candidates=WINDOW_CANDIDATES).plan(sources, workload, judge=judge)
    passes = []
    for k, (batch, plan) in enumerate(zip(pass_batches(sources, window.assignment), window.plans)):
        last = k == len(sources) - 1
        prepared = prepare_for(spec, workload, plan, evaluate=evaluator(last))
        passes.append(WindowPass(batch, plan, prepared, simulate(prepared, last)))
    return window, passes


def iteration_record(
    label: str, iteration: int, batch: Batch, planned: Plan, prepared: Plan, result: StepResult
) -> IterationRecord:
    """The record of one planner on one batch: planning figures from the ``planned`` plan's metadata,
    the rest from the ``prepared`` plan and its simulated ``result``."""
    ratio = planned.metadata.get("load_over_lower_bound")
    estimates = planned.estimates
    step = result.step_time_s
    error = None if estimates is None or not step else estimates.chosen_estimate_s / step - 1
    return IterationRecord(
        planner=label,
        iteration=iteration,
        batch_index=batch.index,
        plan_hash=prepared.content_hash,
        step_time_s=result.step_time_s,
        breakdown_s=dict(result.breakdown_s),
        oom=result.oom,
        oom_detail=result.oom_detail,
        planning_time_s=float(planned.metadata.get("planning_time_s", 0.0)),
        sim_wall_time_s=result.sim_wall_time_s,
        events=result.events,
        num_micro_batches=prepared.num_micro_batches,
        recompute_policy=result.recompute_policy,
        routing=routing_counts(prepared),
        load_over_lower_bound=None if ratio is None else float(ratio),
        dropped_samples=batch.dropped_samples,
        dropped_tokens=batch.dropped_tokens,
        estimates=estimates,
        estimate_error=error,
    )
