"""Compare parallel strategies on the same batches: plan, prepare, simulate, summarise (docs/paper_figures.md).

Three parts, in the order a comparison uses them:

* :mod:`nspsim.compare.specs`: planner spec labels (``static-best``, ``static-paper``, ``static-<d>``, registered
  planners, NSP ablations, ``name:key=value`` options) and the validated :class:`CompareConfig`;
  every spec and option is checked before anything runs;
* :mod:`nspsim.compare.runner`: :func:`run_compare`, the loop that plans, prepares (as each planner
  declares) and simulates every spec on the same K batches, with the static-best and static-paper sweeps;
* :mod:`nspsim.compare.summary`: the typed records (:class:`IterationRecord`,
  :class:`PlannerSummary`, :class:`CompareResult`), routing counts and the normalisation rule.

The public names of all three are re-exported here (``from nspsim.compare import run_compare``).
"""

from __future__ import annotations

from nspsim.compare.runner import Progress, run_compare
from nspsim.compare.specs import (
    ABLATIONS,
    DEFAULT_FLEXSP_TIME_LIMIT_S,
    DEFAULT_ITERS,
    MAIN_PLANNERS,
    MAX_ITERS,
    VARIANTS,
    WIDEST,
    CompareConfig,
    PlannerSpec,
    RunSpec,
    default_planners,
    describe_label,
    parse_planner_spec,
)
from nspsim.compare.spread import INTERVAL, ratio_interval
from nspsim.compare.summary import (
    DROPPED_WARN_SHARE,
    LENGTH_BUCKETS,
    BatchDrops,
    CompareResult,
    IterationRecord,
    PlannerSummary,
    baseline_of,
    mean_step_time,
    plan_drop_fields,
    routing_counts,
    summarise,
    widest_iteration,
)

__all__ = [
    "ABLATIONS",
    "VARIANTS",
    "DEFAULT_FLEXSP_TIME_LIMIT_S",
    "DEFAULT_ITERS",
    "DROPPED_WARN_SHARE",
    "INTERVAL",
    "WIDEST",
    "LENGTH_BUCKETS",
    "MAIN_PLANNERS",
    "MAX_ITERS",
    "BatchDrops",
    "CompareConfig",
    "CompareResult",
    "IterationRecord",
    "PlannerSpec",
    "PlannerSummary",
    "RunSpec",
    "Progress",
    "baseline_of",
    "default_planners",
    "describe_label",
    "mean_step_time",
    "parse_planner_spec",
    "plan_drop_fields",
    "ratio_interval",
    "routing_counts",
    "run_compare",
    "summarise",
    "widest_iteration",
]
