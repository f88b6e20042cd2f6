"""Simulator speed: one training step of Qwen3-30B-A3B plans on 64 and 1024 H100s (issue 4 budgets:
<= 0.25 s and <= 5 s on one core). Not part of the default test run; never asserts wall-clock times.

Run: ``make bench`` or ``pytest benchmarks/bench_simulator.py -m benchmark --benchmark-only -p no:xdist``.
Each case records the step's SimPy events, tasks, simulated units and layers in ``extra_info``; the
measured table lives in ``benchmarks/results/simulator.md``.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest

from nspsim.execution.prepare import prepare_plan
from nspsim.plan import Plan
from nspsim.planners import HEADLINE_PLANNERS, get_planner
from nspsim.simulator import SimOptions, Simulator
from nspsim.workload import Workload, WorkloadConfig, build_workload

pytestmark = pytest.mark.benchmark

PLANNERS: dict[str, dict[str, Any]] = {name: {} for name in HEADLINE_PLANNERS}  # the headline strategies


@cache
def workload(gpus: int) -> Workload:
    """Qwen3-30B-A3B on ``gpus`` H100s, 32K tokens per GPU per batch (2M at 64 GPUs), 192K context."""
    return build_workload(WorkloadConfig(gpus=gpus, tokens_per_batch=2 * 1024**2 * gpus // 64))


@cache
def prepared_plan(gpus: int, planner: str) -> Plan:
    """Batch 0 planned and prepared as ``compare`` executes it (the planner's declared preparation: marks
    and the proxy's issue order; compare also re-ranks the order by simulating candidates, which is not
    what is timed here)."""
    wl = workload(gpus)
    routing = get_planner(planner, **PLANNERS[planner])
    plan = routing.plan(wl.sampler.batch(0), wl)
    prep = routing.preparation
    return prepare_plan(plan, memory=wl.memory, cost=wl.cost, preparation=prep)


def _run(benchmark: Any, gpus: int, planner: str, rounds: int, **options: Any) -> None:
    sim = Simulator.for_workload(workload(gpus), SimOptions(**options))
    plan = prepared_plan(gpus, planner)
    result = benchmark.pedantic(sim.simulate, args=(plan,), rounds=rounds, iterations=1, warmup_rounds=1)
    benchmark.extra_info.update(
        planner=planner,
        gpus=gpus,
        step_time_s=result.step_time_s,
        events=result.events,
        tasks=result.tasks,
        units=result.units,
        layers_simulated=result.layers_simulated,
        micro_batches=plan.num_micro_batches,
        samples=plan.num_samples,
        events_per_s=result.events / benchmark.stats.stats.mean,
        tasks_per_s=result.tasks / benchmark.stats.stats.mean,
    )


@pytest.mark.parametrize("planner", list(PLANNERS))
def test_one_step_64_gpus(benchmark: Any, planner: str) -> None:
    _run(benchmark, 64, planner, rounds=5)


@pytest.mark.parametrize("planner", ["static", "nsp2l", "nsp"])
def test_one_step_1024_gpus(benchmark: Any, planner: str) -> None:
    _run(benchmark, 1024, planner, rounds=3)


@pytest.mark.parametrize("planner", ["static", "nsp"])
def test_one_step_64_gpus_every_layer_every_gpu(benchmark: Any, planner: str) -> None:
    """The raw engine: no layer extrapolation, no symmetry reduction (48 layers x 64 GPUs)."""
    _run(benchmark, 64, planner, rounds=3, extrapolate=False, symmetry=False)
