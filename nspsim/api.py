"""The Python API for scripts and notebooks: build a workload, plan a batch and prepare it as the
command line does, simulate it, compare strategies, and read records as a pandas DataFrame.

Every function is a thin composition of the library's own pieces (no second implementation), so
its numbers are the CLI's: :func:`plan_batch` prepares exactly as ``nspsim plan`` does (by default as
the planner declares, issue-order candidates ranked by the default simulator), so
``simulate_plan(wl, plan_batch(wl))`` equals ``nspsim compare``'s step for that planner and batch.
The names avoid nspsim's subpackages (``nspsim.plan``, ``nspsim.workload``, ``nspsim.compare``), which
an attribute of the package would shadow. ``docs/api.md`` is the
quickstart and is run as a doctest by ``make test``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from dataclasses import fields as dataclass_fields
from typing import Any

import pandas as pd

from nspsim.compare import CompareConfig, CompareResult, IterationRecord, RunSpec, run_compare
from nspsim.execution.prepare import prepare_plan
from nspsim.plan import Plan
from nspsim.plan.estimates import Estimates
from nspsim.planners import PLANNER_NAMES, get_planner, plan_preparation
from nspsim.records import BREAKDOWN_CATEGORIES
from nspsim.simulator import SimOptions, Simulator, StepResult
from nspsim.simulator.modes import MODES, SimMode
from nspsim.trace.base import MAX_SEED
from nspsim.workload import Workload, WorkloadConfig, build_workload


def workload_of(**fields: Any) -> Workload:
    """The workload of ``WorkloadConfig(**fields)`` (model, cluster, gpus, trace, tokens_per_batch,
    max_context, ...; token counts as integers); ``ValueError`` names a bad field."""
    return build_workload(_config(fields))


def _config(fields: dict[str, Any]) -> WorkloadConfig:
    known = [f.name for f in dataclass_fields(WorkloadConfig)]
    unknown = [k for k in fields if k not in known]
    if unknown:
        raise ValueError(f"{unknown[0]!r} is not a workload field (known: {', '.join(known)})")
    return WorkloadConfig(**fields)


def plan_batch(wl: Workload, planner: str = "nsp", *, batch: int = 0, prepare: str = "planner", **options: Any) -> Plan:
    """Batch ``batch`` of ``wl`` routed by ``planner`` (with planner ``options``) and prepared as
    ``prepare`` says (:data:`~nspsim.execution.prepare.PREPARE_CHOICES`; by default as the planner
    declares), exactly as ``nspsim plan`` does; the plan records its preparation."""
    return prepared(wl, get_planner(planner, **options).plan(wl.sampler.batch(batch), wl), prepare)


def prepared(wl: Workload, routed: Plan, prepare: str = "planner") -> Plan:
    """``routed`` prepared as ``prepare`` says (by default as its planner declares; a plan that records
    a preparation stays as written), issue-order candidates ranked by the default simulator."""
    preparation = plan_preparation(routed, prepare)
    if preparation is None:
        return routed
    ranker = Simulator.for_workload(wl, SimOptions()) if preparation.optimize_order else None
    return prepare_plan(
        routed,
        memory=wl.memory,
        cost=wl.cost,
        preparation=preparation,
        evaluate=None if ranker is None else (lambda p: ranker.simulate(p).step_time_or_inf),
    )


def simulate_plan(
    wl: Workload, p: Plan, *, mode: str = SimMode.STREAM, timeline: bool = False, seed: int = 0
) -> StepResult:
    """One simulated step of plan ``p`` on ``wl`` (``mode``: stream, no-stream or serial; ``timeline``
    keeps the per-GPU events)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed must be an integer in [0, {MAX_SEED}], got {seed!r}")
    if mode not in MODES:
        raise ValueError(f"unknown simulation mode {mode!r} (known: {', '.join(MODES)})")
    return Simulator.for_workload(wl, SimOptions(mode=SimMode(mode), timeline=timeline), seed=seed).simulate(p)


def compare_planners(
    planners: str | Sequence[str] | None = None,
    *,
    iters: int = RunSpec().iters,
    prepare: str = "planner",
    baseline: str | None = None,
    **fields: Any,
) -> CompareResult:
    """``nspsim compare`` on ``WorkloadConfig(**fields)``: every planner label of ``planners`` (one
    label or several; default: static-best and the headline planners) on the same ``iters`` batches,
    no timeline."""
    given = (planners,) if isinstance(planners, str) else planners
    labels = RunSpec().planners if given is None else tuple(given)
    run = RunSpec(planners=labels, iters=iters, prepare=prepare, baseline=baseline)
    return run_compare(CompareConfig(workload=_config(fields), run=run, timeline_iteration=None))


FRAME_COLUMNS = (
    *(f.name for f in dataclass_fields(IterationRecord) if f.name not in ("breakdown_s", "routing", "estimates")),
    *(f"bd_{c}" for c in BREAKDOWN_CATEGORIES),
    *(f.name for f in dataclass_fields(Estimates)),
)
"""The columns of :func:`records_frame`, the same whatever ran out of memory."""
_FLOAT_COLUMNS = (
    "step_time_s",
    "load_over_lower_bound",
    "estimate_error",
    *(f"bd_{c}" for c in BREAKDOWN_CATEGORIES),
    "lower_bound_s",
    "load_s",
    "step_estimate_s",
    "chosen_estimate_s",
)


def records_frame(result: CompareResult) -> pd.DataFrame:
    """One row per planner and batch of a comparison (columns :data:`FRAME_COLUMNS`): step time (NaN
    when out of memory), planning time, the breakdown (``bd_<category>`` seconds, NaN when out of
    memory), the estimates (``chosen_by``, ``chosen_estimate_s``, ``estimate_error``, ...) and the plan
    hash."""
    rows = []
    for record in result.records:
        row = {k: v for k, v in asdict(record).items() if k not in ("breakdown_s", "routing", "estimates")}
        row.update({f"bd_{c}": record.breakdown_s.get(c) for c in BREAKDOWN_CATEGORIES})
        row.update(asdict(record.estimates) if record.estimates is not None else {})
        rows.append(row)
    frame = pd.DataFrame(rows, columns=list(FRAME_COLUMNS))
    return frame.astype({c: "float64" for c in _FLOAT_COLUMNS})


__all__ = [
    "PLANNER_NAMES",
    "CompareConfig",
    "CompareResult",
    "Plan",
    "RunSpec",
    "StepResult",
    "Workload",
    "WorkloadConfig",
    "compare_planners",
    "get_planner",
    "plan_batch",
    "prepared",
    "records_frame",
    "simulate_plan",
    "workload_of",
]
