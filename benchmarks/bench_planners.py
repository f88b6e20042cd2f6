"""Planning latency of every planner (pytest-benchmark; never asserts times).

Scales: 64 GPUs with 2M-token batches and 1024 GPUs with 32M-token batches (Qwen3-30B-A3B on H100,
the default workload otherwise), on ``wikipedia`` and the heavier-tailed ``code`` trace. Each
benchmark times ``planner.plan(batch, workload)`` as a user calls it (routing plus building and
validating the Plan) and records the routing time the plan reports (``planning_time_s``) and its
proxy Load / lower bound in ``extra_info``. FlexSP runs with its default deterministic work limit at
64 GPUs and with ``time_limit=1`` s per MILP solve at 1024 GPUs (where the clock stops its solves,
see benchmarks/results/planners.md); FlexSP and greedy run one round at 1024 GPUs.
``benchmarks/planner_report.py`` writes the markdown table.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import pytest

from nspsim.planners import get_planner
from nspsim.workload import Workload, WorkloadConfig, build_workload

pytestmark = pytest.mark.benchmark

SCALES = {"64": (64, 2 * 1024**2), "1024": (1024, 32 * 1024**2)}
OPTIONS: dict[str, dict[str, dict[str, Any]]] = {"64": {}, "1024": {"flexsp": {"time_limit": 1.0}}}
SLOW_AT_1024 = {"flexsp", "greedy"}


@lru_cache(maxsize=8)
def workload(gpus: int, tokens: int, trace: str) -> Workload:
    return build_workload(WorkloadConfig(gpus=gpus, tokens_per_batch=tokens, trace=trace))


@pytest.mark.parametrize("trace", ["wikipedia", "code"])
@pytest.mark.parametrize("scale", list(SCALES))
@pytest.mark.parametrize("name", ["static", "nsp2l", "nsp", "greedy", "basp", "flexsp"])
def test_planning_latency(benchmark: Any, name: str, scale: str, trace: str) -> None:
    wl = workload(*SCALES[scale], trace)
    batch = wl.sampler.batch(0)
    planner = get_planner(name, **OPTIONS[scale].get(name, {}))
    slow = name == "flexsp" or (scale == "1024" and name in SLOW_AT_1024)
    rounds = 1 if slow else (3 if scale == "1024" else 10)
    plan = benchmark.pedantic(
        planner.plan, args=(batch, wl), rounds=rounds, iterations=1, warmup_rounds=0 if slow else 1
    )
    meta = plan.metadata
    benchmark.extra_info.update(
        planning_time_s=meta["planning_time_s"],
        load_s=meta["load_s"],
        load_over_lower_bound=meta["load_over_lower_bound"],
        num_samples=plan.num_samples,
    )
    assert plan.num_samples == batch.num_samples
