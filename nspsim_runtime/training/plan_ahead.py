"""Planning one step ahead: batch ``i + 1`` is planned, prepared and simulated on a background
thread while batch ``i`` executes.

``BatchSampler.batch(i)`` is random access, so the planner needs nothing from the step before. One
worker thread keeps the order of plans and the planner's state single-threaded; the trade-off is
that a plan slower to make than a step to run still delays the next step (``plan_wait_s`` in the
records shows by how much). The simulated prediction is of the configuration that runs
(:mod:`nspsim_runtime.prediction`: the executed marks, the simulation mode matching ``--lookahead``, none for
options the simulator does not model).
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from nspsim.execution.prepare import prepare_plan
from nspsim.plan import Plan
from nspsim.planners import get_planner
from nspsim.simulator import SimOptions, Simulator, StepResult
from nspsim.simulator.modes import SimMode
from nspsim.workload import Workload
from nspsim_runtime.prediction import Prediction, executed_plan, predict, simulated_mode
from nspsim_runtime.training.args import TrainArgs


@dataclass(frozen=True, kw_only=True)
class Planned:
    """An executable plan, what it cost to make and prepare, the simulator's prediction of it, and
    the samples (and their tokens) the batch draw dropped for exceeding ``--max-context``
    (:attr:`nspsim.trace.batching.Batch.dropped_samples` / ``dropped_tokens``)."""

    plan: Plan
    planning_time_s: float
    prediction: Prediction
    dropped_samples: int
    dropped_tokens: int


class PlanAhead:
    """Plans, prepares and simulates batch ``i + 1`` on a background thread while batch ``i`` executes."""

    def __init__(self, args: TrainArgs, workload: Workload) -> None:
        self.workload, self.args = workload, args
        self.planner = get_planner(args.planner, **args.planner_options)
        self._simulators: dict[str, Simulator] = {}
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="planner")
        self._pending: dict[int, Future[Planned]] = {}

    def simulate(self, plan: Plan, mode: str) -> StepResult:
        """The simulator's result for ``plan`` in ``mode`` (one simulator per mode)."""
        if mode not in self._simulators:
            self._simulators[mode] = Simulator.for_workload(self.workload, SimOptions(mode=SimMode(mode)))
        return self._simulators[mode].simulate(plan)

    def _make(self, index: int) -> Planned:
        args = self.args
        start = time.perf_counter()
        batch = self.workload.sampler.batch(index)
        plan = self.planner.plan(batch, self.workload)
        mode, note = simulated_mode(
            plan,
            lookahead=args.execution.lookahead,
            grad_sync=args.execution.grad_sync,
            world=self.workload.cluster.num_gpus,
        )
        if not args.simulate:
            mode, note = None, "not simulated: --no-simulate"
        plan = self._prepare(plan, mode or SimMode.STREAM)
        elapsed = time.perf_counter() - start
        return Planned(
            plan=plan,
            planning_time_s=elapsed,
            prediction=predict(plan, mode, note, self.simulate),
            dropped_samples=batch.dropped_samples,
            dropped_tokens=batch.dropped_tokens,
        )

    def _prepare(self, plan: Plan, rank_mode: str) -> Plan:
        """The executable plan: the marks ``--recompute all|none`` forces, then the preparation
        ``nspsim compare`` and ``nspsim simulate`` apply (:func:`nspsim.execution.prepare.prepare_plan`:
        tree-level marks, the issue order re-ranked by the simulator in ``rank_mode``), as ``--prepare``
        asks (by default as the planner declares)."""
        args, wl = self.args, self.workload
        evaluate = (lambda p: self.simulate(p, rank_mode).step_time_or_inf) if args.simulate else None
        return prepare_plan(
            executed_plan(plan, args.execution.recompute),
            memory=wl.memory,
            cost=wl.cost,
            preparation=args.preparation,
            evaluate=evaluate,
        )

    def prefetch(self, index: int) -> None:
        """Start planning batch ``index``."""
        if index not in self._pending:
            self._pending[index] = self._pool.submit(self._make, index)

    def make_all(self, indices: range) -> None:
        """Plan every batch of ``indices`` now and wait until all are made (``--plan-ahead all``)."""
        for index in indices:
            self.prefetch(index)
        for index in indices:
            self._pending[index].result()

    def get(self, index: int) -> Planned:
        """The plan of batch ``index`` (waits if it is still being made)."""
        self.prefetch(index)
        return self._pending.pop(index).result()

    def close(self) -> None:
        """Stop the planning thread."""
        self._pool.shutdown(wait=False, cancel_futures=True)
