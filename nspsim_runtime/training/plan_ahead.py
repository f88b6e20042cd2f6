"""Planning one step ahead: batch ``i + 1`` is planned, prepared and simulated on a background
thread while batch ``i`` executes.

``BatchSampler.batch(i)`` is random access, so the planner needs nothing from the step before. One
worker thread keeps the order of plans and the planner's state single-threaded; the trade-off is
that a plan slower to make than a step to run still delays the next step (``plan_wait_s`` in the
records shows by how much). The simulated prediction is of the configuration that runs
(:mod:`nspsim_runtime.prediction`: the executed marks, the simulation mode matching ``--lookahead``, none for
options the simulator does not model).

With ``--accumulate W`` the unit planned ahead is a window (:meth:`PlanAhead.get_window`): its W
batches are drawn, :class:`nspsim.planners.window.WindowPlanner` assigns their samples to W passes (the
``--planner`` routes each pass), and every pass is prepared and simulated as a step, every pass but
the last without the optimizer step, as ``nspsim compare --window W`` does. When the configuration is
simulated the simulator judges the per-step candidate against the best-estimated other (compare's
judge), otherwise the planners' estimates decide. Trade-off: a window's whole planning (W routings
per candidate, plus the judge's simulations) happens before its first pass and is charged to it, so
planning ahead hides it behind the previous window's W passes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

from nspsim.execution.prepare import prepare_plan
from nspsim.plan import Plan
from nspsim.plan.window import WindowPlan, pass_batches
from nspsim.planners import get_planner
from nspsim.planners.window import WindowPlanner
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


@dataclass(frozen=True, kw_only=True)
class PlannedWindow:
    """An accumulation window ready to execute: the executed window plan (the window planner's
    assignment with every pass's plan as prepared and executed) and each pass as :class:`Planned`
    (its prediction with the optimizer step on the last pass only, its source batch's dropped samples;
    the window's planning time on the first pass, zero on the others)."""

    window: WindowPlan
    passes: tuple[Planned, ...]


class PlanAhead:
    """Plans, prepares and simulates batch ``i + 1`` on a background thread while batch ``i`` executes."""

    def __init__(self, args: TrainArgs, workload: Workload) -> None:
        self.workload, self.args = workload, args
        self.planner = get_planner(args.planner, **args.planner_options)
        self._simulators: dict[str, Simulator] = {}
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="planner")
        self._pending: dict[int, Future[Any]] = {}

    def simulate(self, plan: Plan, mode: str, optimizer_step: bool = True) -> StepResult:
        """The simulator's result for ``plan`` in ``mode`` (one simulator per mode); without
        ``optimizer_step``, a pass of a window that a later pass ends."""
        if mode not in self._simulators:
            self._simulators[mode] = Simulator.for_workload(self.workload, SimOptions(mode=SimMode(mode)))
        return self._simulators[mode].simulate(plan, optimizer_step=optimizer_step)

    def _mode(self, plan: Plan) -> tuple[SimMode | None, str]:
        args = self.args
        return simulated_mode(
            plan,
            lookahead=args.execution.lookahead,
            grad_sync=args.execution.grad_sync,
            world=self.workload.cluster.num_gpus,
            accumulate_sync=args.accumulate_sync,
        )

    def _make(self, index: int) -> Planned:
        args = self.args
        start = time.perf_counter()
        batch = self.workload.sampler.batch(index)
        plan = self.planner.plan(batch, self.workload)
        mode, note = self._mode(plan)
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

    def _make_window(self, first: int) -> PlannedWindow:
        args, wl = self.args, self.workload
        start = time.perf_counter()
        sources = [wl.sampler.batch(first + k) for k in range(args.accumulate)]
        ready: dict[tuple[str, bool], tuple[Plan, SimMode | None, str]] = {}

        def executable(plan: Plan, last: bool) -> tuple[Plan, SimMode | None, str]:
            """The prepared pass plan, its simulation mode and note (each candidate's passes prepared once)."""
            key = (plan.content_hash, last)
            if key not in ready:
                mode, note = self._mode(plan) if args.simulate else (None, "not simulated: --no-simulate")
                ready[key] = (self._prepare(plan, mode or SimMode.STREAM, optimizer_step=last), mode, note)
            return ready[key]

        def judge(plans: Sequence[Plan]) -> float:
            """Simulated seconds of a window whose passes run ``plans`` (compare's window judge)."""
            total = 0.0
            for k, plan in enumerate(plans):
                last = k == len(plans) - 1
                executed, mode, _ = executable(plan, last)
                assert mode is not None
                total += self.simulate(executed, mode, optimizer_step=last).step_time_or_inf
            return total

        # the judge needs a simulator mode that does not depend on the plan (a bounded lookahead's does)
        judged = args.simulate and args.execution.lookahead in (None, 0) and self._sync_simulated()
        planner = WindowPlanner(step=self.planner, candidates=args.window_candidates)
        window = planner.plan(sources, wl, judge=judge if judged else None)
        batches = pass_batches(sources, window.assignment)
        plans, predictions = [], []
        for k, plan in enumerate(window.plans):
            last = k == len(window.plans) - 1
            executed, mode, note = executable(plan, last)
            plans.append(executed)
            predictions.append(predict(executed, mode, note, partial(self.simulate, optimizer_step=last)))
        elapsed = time.perf_counter() - start
        passes = tuple(
            Planned(
                plan=plan,
                planning_time_s=elapsed if k == 0 else 0.0,
                prediction=prediction,
                dropped_samples=batch.dropped_samples,
                dropped_tokens=batch.dropped_tokens,
            )
            for k, (plan, prediction, batch) in enumerate(zip(plans, predictions, batches))
        )
        executed_window = WindowPlan(
            sources=window.sources,
            source_lengths=window.source_lengths,
            assignment=window.assignment,
            plans=tuple(plans),
            metadata=window.metadata,
        )
        return PlannedWindow(window=executed_window, passes=passes)

    def _sync_simulated(self) -> bool:
        """Whether the gradient synchronisation that runs has a simulator counterpart."""
        execution, world = self.args.execution, self.workload.cluster.num_gpus
        return world == 1 or (execution.grad_sync == "fsdp" and self.args.accumulate_sync == "pass")

    def _prepare(self, plan: Plan, rank_mode: str, optimizer_step: bool = True) -> Plan:
        """The executable plan: the marks ``--recompute all|none`` forces, then the preparation
        ``nspsim compare`` and ``nspsim simulate`` apply (:func:`nspsim.execution.prepare.prepare_plan`:
        tree-level marks, the issue order re-ranked by the simulator in ``rank_mode``), as ``--prepare``
        asks (by default as the planner declares)."""
        args, wl = self.args, self.workload
        evaluate = (lambda p: self.simulate(p, rank_mode, optimizer_step).step_time_or_inf) if args.simulate else None
        return prepare_plan(
            executed_plan(plan, args.execution.recompute),
            memory=wl.memory,
            cost=wl.cost,
            preparation=args.preparation,
            evaluate=evaluate,
        )

    def prefetch(self, index: int) -> None:
        """Start planning batch ``index`` (with ``--accumulate W``, the window of W batches starting there)."""
        if index not in self._pending:
            make = self._make if self.args.accumulate == 1 else self._make_window
            self._pending[index] = self._pool.submit(make, index)

    def make_all(self, indices: range) -> None:
        """Plan every batch (or window) starting at ``indices`` now and wait until all are made
        (``--plan-ahead all``)."""
        for index in indices:
            self.prefetch(index)
        for index in indices:
            self._pending[index].result()

    def get(self, index: int) -> Planned:
        """The plan of batch ``index`` (waits if it is still being made)."""
        self.prefetch(index)
        planned: Planned = self._pending.pop(index).result()
        return planned

    def get_window(self, first: int) -> PlannedWindow:
        """The window of ``--accumulate`` batches starting at batch ``first`` (waits if it is still being made)."""
        self.prefetch(first)
        window: PlannedWindow = self._pending.pop(first).result()
        return window

    def close(self) -> None:
        """Stop the planning thread."""
        self._pool.shutdown(wait=False, cancel_futures=True)
