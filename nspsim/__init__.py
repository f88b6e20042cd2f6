"""nspsim: a simulator-first research platform for nested sequence parallelism (NSP).

Pure Python (numpy, scipy, simpy, networkx): the SP tree, traces and batches, model and cluster
specs, the hierarchical cost model, planners, the Plan contract and a discrete-event simulator.
It never imports torch, plotly or ``runtime`` (``tests/architecture/test_layering.py`` enforces this).

The names a script or notebook needs are re-exported here (:mod:`nspsim.api`; docs/api.md)::

    import nspsim
    wl = nspsim.workload_of(model="tiny", cluster="cpu", gpus=4, tokens_per_batch=16384, max_context=4096)
    step = nspsim.simulate_plan(wl, nspsim.plan_batch(wl, "nsp"))
"""

from typing import Any

__version__ = "0.1.0"

__all__ = [
    "PLANNER_NAMES",
    "CompareConfig",
    "CompareResult",
    "Plan",
    "RunSpec",
    "StepResult",
    "Workload",
    "WorkloadConfig",
    "__version__",
    "compare_planners",
    "get_planner",
    "plan_batch",
    "prepared",
    "records_frame",
    "simulate_plan",
    "workload_of",
]


def __dir__() -> list[str]:
    """The module's names and the API's, for tab completion in notebooks."""
    return sorted({*globals(), *__all__})


def __getattr__(name: str) -> Any:
    """The Python API (:mod:`nspsim.api`, docs/api.md), imported on first use so that importing any
    part of nspsim (the command line, the runtime's workers) does not load all of it."""
    if name in __all__ and name != "__version__":
        from nspsim import api

        return getattr(api, name)
    raise AttributeError(f"module 'nspsim' has no attribute {name!r}")
