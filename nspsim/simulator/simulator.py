"""The :class:`Simulator`: predicts one training step of any plan on a modelled cluster.

Pipeline per :meth:`Simulator.simulate` call: check the plan belongs to this cluster and model;
decide save/recompute and peak memory (:mod:`~nspsim.simulator.activation`; out of memory ends
here); price the plan's work with the cost model (:mod:`~nspsim.simulator.work`); build the task
program (:mod:`~nspsim.simulator.step_model`) with a few decoder layers; run it on a fresh SimPy
clock (:mod:`~nspsim.simulator.executor`); extrapolate the repeated layers exactly
(:mod:`~nspsim.simulator.periodic`) or, if they do not repeat, rerun with every layer.

The simulator owns its options and its random seed; every call builds its own clock, ids and
generator (seeded by the simulator's seed and the plan's content hash), so results are
deterministic for a seed and two simulators never interfere.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from nspsim.cluster_spec import ClusterSpec
from nspsim.config import Workload
from nspsim.cost_model import CostModel
from nspsim.memory import MemoryModel
from nspsim.model_spec import ModelSpec
from nspsim.plan import Plan
from nspsim.records import BREAKDOWN_CATEGORIES
from nspsim.simulator.activation import ActivationPlan, plan_activations
from nspsim.simulator.executor import Executor
from nspsim.simulator.periodic import Repeat, find_repeats
from nspsim.simulator.program import COMM_WAIT, Program
from nspsim.simulator.results import StepResult
from nspsim.simulator.step_model import MODES, CollectiveFactory, StepModel
from nspsim.simulator.timeline import build_timeline
from nspsim.simulator.work import StepWork, step_work
from nspsim.training_spec import TrainingSpec

MIN_SIM_LAYERS = 6


@dataclass(frozen=True, kw_only=True)
class SimOptions:
    """How to simulate.

    ``mode``: ``stream`` (phase streaming and FSDP overlap), ``no-stream`` (attention phases of a GPU
    do not overlap each other), ``serial`` (nothing overlaps). ``sim_layers``: layers simulated
    before extrapolating (``extrapolate``). ``jitter``: coefficient of variation of a lognormal
    factor on every kernel (0 = deterministic durations; > 0 disables extrapolation).
    ``timeline``: keep per-GPU events in the result.
    """

    mode: str = "stream"
    extrapolate: bool = True
    sim_layers: int = 12
    jitter: float = 0.0
    timeline: bool = False

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown simulation mode {self.mode!r} (known: {', '.join(MODES)})")
        if self.sim_layers < MIN_SIM_LAYERS:
            raise ValueError(f"sim_layers must be >= {MIN_SIM_LAYERS} to detect repeated layers, got {self.sim_layers}")
        if not 0 <= self.jitter < 1 or not math.isfinite(self.jitter):
            raise ValueError(f"jitter must be in [0, 1), got {self.jitter}")


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Pause Python's cycle collector while a step's tens of thousands of linked tasks are alive.

    It would rescan them over and over during construction (about 3x slower); reference counting
    still frees everything, and the collector's previous state is restored.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class Simulator:
    """Discrete-event simulator of training steps for one (model, cluster, training, cost) setting."""

    def __init__(self, *, cost: CostModel, model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                 memory: MemoryModel, options: SimOptions | None = None, seed: int = 0) -> None:
        if cost.num_layers != model.num_layers:
            raise ValueError(f"cost model has {cost.num_layers} layers but {model.name} has {model.num_layers}")
        self.cost, self.model, self.cluster, self.training, self.memory = cost, model, cluster, training, memory
        self.options = options or SimOptions()
        self.seed = seed
        self.collectives = CollectiveFactory(cost, cluster)

    @staticmethod
    def for_workload(workload: Workload, options: SimOptions | None = None, seed: int = 0) -> Simulator:
        """A simulator for the specs, cost and memory model of ``workload``."""
        return Simulator(cost=workload.cost, model=workload.model, cluster=workload.cluster,
                         training=workload.training, memory=workload.memory, options=options, seed=seed)

    def simulate(self, plan: Plan) -> StepResult:
        """Predict one step of ``plan``; an out-of-memory plan gives a result with ``oom=True``."""
        with _cyclic_gc_paused():
            return self._simulate(plan)

    def _simulate(self, plan: Plan) -> StepResult:
        started = time.perf_counter()
        self._check(plan)
        act = plan_activations(plan, self.memory)
        if act.oom is not None:
            return self._oom_result(plan, act, started)
        work = step_work(plan, self.cost, self.model, self.training, act.remat)
        layers = self._sim_layers()
        program, ex = self._run(work, layers, plan)
        repeats = find_repeats(program, self.model.num_layers, layers)
        if repeats is None:
            layers = self.model.num_layers
            program, ex = self._run(work, layers, plan)
            repeats = []
        return self._result(plan, act, program, ex, repeats, layers, started)

    # ---- steps -----------------------------------------------------------------------------------
    def _check(self, plan: Plan) -> None:
        plan.check_compatible(self.cluster, self.model)
        if plan.backend != self.training.backend:
            raise ValueError(f"plan uses the {plan.backend} SP backend but the simulator models {self.training.backend}")

    def _sim_layers(self) -> int:
        opts = self.options
        if not opts.extrapolate or opts.jitter > 0:
            return self.model.num_layers
        return min(opts.sim_layers, self.model.num_layers)

    def _run(self, work: StepWork, layers: int, plan: Plan) -> tuple[Program, Executor]:
        rng = np.random.default_rng([self.seed, int(plan.content_hash, 16) % (1 << 63)])
        sigma = math.sqrt(math.log1p(self.options.jitter ** 2))
        noise = (lambda s: s * float(rng.lognormal(-sigma * sigma / 2, sigma))) if self.options.jitter > 0 else None
        program = StepModel(work, self.collectives, mode=self.options.mode, layers=layers, noise=noise).build()
        ex = Executor(program, record_blame=self.options.timeline)
        ex.run()
        return program, ex

    # ---- results ---------------------------------------------------------------------------------
    def _result(self, plan: Plan, act: ActivationPlan, program: Program, ex: Executor, repeats: list[Repeat],
                layers: int, started: float) -> StepResult:
        ends = np.array(ex.free)
        extra = sum(rep.copies * rep.shift for rep in repeats)
        acc = ex.accounts()
        per_gpu = acc.sum(axis=0)
        for rep in repeats:
            per_gpu += rep.copies * acc[rep.segment]
        per_gpu[:, COMM_WAIT] += ends.max() - ends
        critical = int(np.argmax(ends))
        step = float(ends.max() + extra)
        timeline = build_timeline(program, ex.blame or [], repeats) if self.options.timeline else ()
        return StepResult(
            planner=plan.planner, plan_hash=plan.content_hash, num_gpus=plan.cluster.num_gpus,
            mode=self.options.mode, oom=False, step_time_s=step,
            breakdown_s={k: float(per_gpu[critical, i]) for i, k in enumerate(BREAKDOWN_CATEGORIES)},
            per_gpu_breakdown_s=per_gpu, critical_gpu=critical,
            peak_memory_bytes=tuple(float(x) for x in act.peak_bytes), recompute_policy=act.policy,
            remat_share=act.remat_fraction, num_micro_batches=plan.num_micro_batches,
            num_layers=self.model.num_layers, layers_simulated=layers, extrapolated=bool(repeats),
            events=ex.events, sim_wall_time_s=time.perf_counter() - started, timeline=timeline,
        )

    def _oom_result(self, plan: Plan, act: ActivationPlan, started: float) -> StepResult:
        return StepResult(
            planner=plan.planner, plan_hash=plan.content_hash, num_gpus=plan.cluster.num_gpus,
            mode=self.options.mode, oom=True, oom_detail=act.oom,
            peak_memory_bytes=tuple(float(x) for x in act.peak_bytes), recompute_policy=act.policy,
            remat_share=act.remat_fraction, num_micro_batches=plan.num_micro_batches,
            num_layers=self.model.num_layers, sim_wall_time_s=time.perf_counter() - started,
        )
