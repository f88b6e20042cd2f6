"""One sweep unit: a planner spec on one batch of one point, planned (or its cached plan read back),
then prepared and simulated exactly as ``compare`` does (:func:`nspsim.compare.runner.prepare_for`,
:func:`nspsim.compare.runner.iteration_record`).

:func:`run_unit` is what a worker process or Ray task runs: it takes a picklable :class:`UnitTask`
and returns a :class:`UnitOutcome` (the new plan's JSON when it planned, the simulation record, or
the error), and writes nothing: the driver owns the cache. An exception inside a unit becomes the
outcome's one-line error, so one bad unit never stops a sweep; ``KeyboardInterrupt`` still does.

A fixed-degree Static unit (``static`` with a ``degree`` option, what ``static-best`` and
``static-paper`` try on every degree) whose degree cannot hold the batch's longest sample has a
deterministic answer, recorded as ``ineligible`` (and cached) rather than as a failure, as compare
passes such a degree over.

Per process, :func:`workload_of` memoises :func:`nspsim.workload.build_workload` by config and
simulators by (config, mode), so a worker that runs many units of a point builds them once.
Trade-off: a unit is one batch, the finest grain that still shares nothing but the workload, which
balances a pool well (a FlexSP unit costs 100x a Static one) at the price of planning each batch in
its own call; within a unit, issue-order candidates are simulated once each (memoised by content).
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass
from typing import Any

from nspsim.compare.runner import cannot_hold, iteration_record, prepare_for
from nspsim.compare.specs import PlannerSpec
from nspsim.plan import Plan
from nspsim.planners import get_planner
from nspsim.simulator import SimOptions, Simulator, StepResult
from nspsim.simulator.modes import SimMode
from nspsim.trace.batching import Batch
from nspsim.workload import Workload, WorkloadConfig, build_workload


@dataclass(frozen=True, kw_only=True)
class UnitTask:
    """Everything a worker needs for one unit (picklable plain values)."""

    workload: WorkloadConfig
    spec: PlannerSpec
    batch_index: int
    plan_key: str
    sim_key: str
    plan_json: str | None = None  # the cached plan, when only the simulation is missing


@dataclass(frozen=True, kw_only=True)
class UnitOutcome:
    """What a unit produced: ``record`` (None when it failed), the plan JSON when it planned anew,
    and ``error`` ("" when it ran)."""

    sim_key: str
    plan_key: str
    record: dict[str, Any] | None
    plan_json: str | None = None
    error: str = ""


@functools.lru_cache(maxsize=32)
def workload_of(config: WorkloadConfig) -> Workload:
    """:func:`build_workload`, memoised per process."""
    return build_workload(config)


@functools.lru_cache(maxsize=64)
def _simulator(config: WorkloadConfig, mode: str) -> Simulator:
    return Simulator.for_workload(workload_of(config), SimOptions(mode=SimMode(mode), timeline=False))


def run_unit(task: UnitTask) -> UnitOutcome:
    """Plan (unless ``task.plan_json``), prepare and simulate one unit; errors become the outcome's."""
    try:
        return _run(task)
    except Exception as exc:  # a failing unit is recorded and the sweep goes on
        message = " ".join(f"{type(exc).__name__}: {exc}".split())
        return UnitOutcome(sim_key=task.sim_key, plan_key=task.plan_key, record=None, error=message)


def plan_batch(spec: PlannerSpec, batch: Batch, workload: Workload) -> Plan:
    """The plan of ``spec``'s planner on ``batch`` (after the planner's workload check)."""
    planner = get_planner(spec.planner, **spec.options)
    planner.check(workload)
    return planner.plan(batch, workload)


def _run(task: UnitTask) -> UnitOutcome:
    workload = workload_of(task.workload)
    batch = workload.sampler.batch(task.batch_index)
    spec = task.spec
    degree = spec.options.get("degree") if spec.planner == "static" else None
    if isinstance(degree, int) and (reason := cannot_hold(workload, [batch], degree)) is not None:
        record = {"batch_index": batch.index, "ineligible": reason}
        return UnitOutcome(sim_key=task.sim_key, plan_key=task.plan_key, record=record)
    new_plan = None
    if task.plan_json is not None:
        plan = Plan.from_json(task.plan_json, origin=f"cached plan {task.plan_key}")
    else:
        plan = plan_batch(spec, batch, workload)
        new_plan = plan.to_json()
    simulator = _simulator(task.workload, str(spec.mode))
    seen: dict[str, StepResult] = {}

    def simulate(p: Plan) -> StepResult:
        if p.content_hash not in seen:
            seen[p.content_hash] = simulator.simulate(p)
        return seen[p.content_hash]

    prepared = prepare_for(spec, workload, plan, evaluate=lambda p: simulate(p).step_time_or_inf)
    result = simulate(prepared)
    full = iteration_record(spec.label, 0, batch, plan, prepared, result)
    record = plain_record(asdict(full))
    for key in ("planner", "iteration"):  # a unit is shared by every label and iteration that names it
        del record[key]
    record["routing"] = {bucket: {str(d): n for d, n in counts.items()} for bucket, counts in full.routing.items()}
    return UnitOutcome(sim_key=task.sim_key, plan_key=task.plan_key, record=record, plan_json=new_plan)


def plain_record(data: dict[str, Any]) -> dict[str, Any]:
    """JSON-ready: enums as their values, non-finite floats (an infinite Load ratio) as ``None``."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, float) and not math.isfinite(value):
            out[key] = None
        elif isinstance(value, str):
            out[key] = str(value)
        else:
            out[key] = value
    return out
