"""One sweep unit: a planner spec on one batch of one point, planned (or its cached plan read back),
then prepared and simulated exactly as ``compare`` does (:func:`nspsim.compare.steps.prepare_for`,
:func:`nspsim.compare.steps.iteration_record`).

:func:`run_unit` is what a worker process or Ray task runs: it takes a picklable :class:`UnitTask`
and returns a :class:`UnitOutcome` (the new plan's JSON when it planned, the simulation record, or
the error), and writes nothing: the driver owns the cache. An exception inside a unit becomes the
outcome's one-line error, so one bad unit never stops a sweep; ``KeyboardInterrupt`` still does.

A fixed-degree Static unit (``static`` with a ``degree`` option, what ``static-best`` and
``static-paper`` try on every degree) whose degree cannot hold the batch's longest sample has a
deterministic answer, recorded as ``ineligible`` (and cached) rather than as a failure, as compare
passes such a degree over.

A window unit (``window`` = W > 1: the spec on the W batches of one window from ``batch_index``) runs
the window planner with the simulator as judge and simulates its passes exactly as compare's
windows do (:func:`nspsim.compare.steps.run_window`); its record holds the W pass records (the
per-batch record's fields; a pass that accumulates has no optimizer step) and the window's record
(:class:`nspsim.compare.windows.WindowRecord` without its planner and index). A fixed degree that
cannot hold a sample of the window's batches is ``ineligible`` as a whole.

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

from nspsim.compare.specs import PlannerSpec
from nspsim.compare.steps import cannot_hold, iteration_record, prepare_for, run_window
from nspsim.compare.summary import IterationRecord
from nspsim.compare.windows import window_record
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
    window: int = 1  # W > 1: a window unit of the W batches from batch_index (module docstring)


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
    if task.window > 1:
        return _run_window(task)
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
    record = unit_record(iteration_record(spec.label, 0, batch, plan, prepared, result))
    return UnitOutcome(sim_key=task.sim_key, plan_key=task.plan_key, record=record, plan_json=new_plan)


def unit_record(full: IterationRecord) -> dict[str, Any]:
    """The cached record of a step: the iteration record without the label and iteration (a unit is
    shared by every label and iteration that names it), JSON-ready."""
    record = plain_record(asdict(full))
    for key in ("planner", "iteration"):
        del record[key]
    record["routing"] = {bucket: {str(d): n for d, n in counts.items()} for bucket, counts in full.routing.items()}
    return record


def _run_window(task: UnitTask) -> UnitOutcome:
    """A window unit (module docstring)."""
    workload = workload_of(task.workload)
    sources = [workload.sampler.batch(task.batch_index + k) for k in range(task.window)]
    spec = task.spec
    degree = spec.options.get("degree") if spec.planner == "static" else None
    if isinstance(degree, int) and (reason := cannot_hold(workload, sources, degree)) is not None:
        record = {"batch_index": sources[0].index, "ineligible": reason}
        return UnitOutcome(sim_key=task.sim_key, plan_key=task.plan_key, record=record)
    planner = get_planner(spec.planner, **spec.options)
    planner.check(workload)
    simulator = _simulator(task.workload, str(spec.mode))
    seen: dict[tuple[str, bool], StepResult] = {}

    def simulate(p: Plan, last: bool) -> StepResult:
        key = (p.content_hash, last)
        if key not in seen:
            seen[key] = simulator.simulate(p, optimizer_step=last)
        return seen[key]

    window, passes = run_window(spec, planner, sources, workload, simulate)
    records = [
        unit_record(iteration_record(spec.label, k, p.batch, p.planned, p.prepared, p.result))
        for k, p in enumerate(passes)
    ]
    summary = plain_record(asdict(window_record(spec.label, 0, window, [p.result.step_time_s for p in passes])))
    for key in ("planner", "window"):
        del summary[key]
    record = {"batch_index": sources[0].index, "window": summary, "passes": records}
    return UnitOutcome(sim_key=task.sim_key, plan_key=task.plan_key, record=record)


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
