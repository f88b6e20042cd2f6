"""Sweeps: compare's work on every point of a grid of workloads, cached per unit and run in parallel.

The parts, in the order a sweep uses them:

* :mod:`nspsim.sweep.spec`: the TOML spec (fixed workload values, axes, the run) as frozen dataclasses;
* :mod:`nspsim.sweep.keys`: content keys of plans and simulations, and the code versions in them;
* :mod:`nspsim.sweep.cache`: the on-disk cache (atomic writes; plans apart from simulations);
* :mod:`nspsim.sweep.work`: one unit (a planner spec on one batch, or one window, of one point), what a worker runs;
* :mod:`nspsim.sweep.engine`: expanding the grid into units, the local process pool and the Ray engine;
* :mod:`nspsim.sweep.results`: rows, per-point summaries and the files they are written to
  (:mod:`nspsim.sweep.schema` their Arrow schemas, :mod:`nspsim.sweep.windows` the window figures).

:func:`run_sweep` is the whole of it for callers that need no progress reporting.
"""

from __future__ import annotations

from nspsim.compare.specs import RunSpec
from nspsim.sweep.cache import Cache
from nspsim.sweep.engine import ENGINES, SweepPlan, execute, plan_sweep
from nspsim.sweep.keys import CodeVersions, code_versions
from nspsim.sweep.results import ROW_COLUMNS, build_rows, build_windows, resolved_config, summarise, write_results
from nspsim.sweep.spec import SweepSpec, load_spec, parse_spec

__all__ = [
    "ENGINES",
    "ROW_COLUMNS",
    "Cache",
    "CodeVersions",
    "RunSpec",
    "SweepPlan",
    "SweepSpec",
    "build_rows",
    "build_windows",
    "code_versions",
    "execute",
    "load_spec",
    "parse_spec",
    "plan_sweep",
    "resolved_config",
    "run_sweep",
    "summarise",
    "write_results",
]


def run_sweep(
    spec: SweepSpec, cache: Cache, *, engine: str = "local", jobs: int = 1, force: bool = False
) -> tuple[SweepPlan, list[dict[str, object]]]:
    """Plan, execute and tabulate ``spec`` with ``cache``: the finished plan and its rows."""
    plan = plan_sweep(spec, cache, force=force)
    execute(plan, cache, engine=engine, jobs=jobs)
    return plan, build_rows(plan)
