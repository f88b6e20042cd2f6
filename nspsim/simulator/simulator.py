"""The :class:`Simulator`: predicts one training step of any plan on a modelled cluster.

Pipeline per :meth:`Simulator.simulate` call: check the plan belongs to this cluster and model;
decide save/recompute and peak memory (:mod:`~nspsim.execution.activation`; out of memory ends
here); price the plan's work with the cost model (:mod:`~nspsim.simulator.work`); build the task
program (:mod:`~nspsim.simulator.step_model`) with a few decoder layers, GPUs with identical
programs merged into one unit (:func:`~nspsim.simulator.work.reduce_to_units`); run it on a fresh
SimPy clock (:mod:`~nspsim.simulator.engine`); extrapolate the repeated layers exactly
(:mod:`~nspsim.simulator.periodic`) or, if no layer repeats within ``sim_layers``, rerun with every
layer. The short run is skipped when the GPUs cannot settle into one pace within it
(:func:`~nspsim.simulator.periodic.settling_layers`), as on every default workload. Opt-in
(``approx_layers`` = K): run K layers and, unless they repeat exactly, extend them approximately
(:mod:`~nspsim.simulator.approximate`); the result says so.

The simulator owns its options and its random seed; every call builds its own clock, ids and
generator (seeded by the simulator's seed and the plan's content hash), so results are
deterministic for a seed and two simulators never interfere.
"""

from __future__ import annotations

import gc
import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from nspsim.cost.interface import CostModel
from nspsim.execution.activation import ActivationPlan, plan_activations
from nspsim.plan import Plan
from nspsim.records import BREAKDOWN_CATEGORIES
from nspsim.simulator.approximate import MIN_APPROX_LAYERS, Extension, extend, min_layers
from nspsim.simulator.engine import Executor
from nspsim.simulator.hardware import CollectiveFactory
from nspsim.simulator.modes import MODES, SimMode, prefetch_layers
from nspsim.simulator.periodic import Repeat, find_repeats, settling_layers
from nspsim.simulator.program import COMM_WAIT, Program
from nspsim.simulator.results import StepResult
from nspsim.simulator.sharing import ITERATIONS as SHARING_ITERATIONS
from nspsim.simulator.sharing import kernel_tasks, stretch_factors
from nspsim.simulator.step_model import StepModel
from nspsim.simulator.timeline import build_timeline
from nspsim.simulator.work import StepWork, reduce_to_units, step_work
from nspsim.specs.cluster import ClusterSpec
from nspsim.specs.memory import MemoryModel
from nspsim.specs.model import ModelSpec
from nspsim.specs.training import TrainingSpec
from nspsim.workload import Workload

MIN_SIM_LAYERS = 6


@dataclass(frozen=True, kw_only=True)
class SimOptions:
    """How to simulate.

    ``mode``: ``stream`` (phase streaming and FSDP overlap), ``no-stream`` (attention phases of a GPU
    do not overlap each other), ``serial`` (nothing overlaps). ``sim_layers``: layers simulated
    before extrapolating (``extrapolate``). ``jitter``: coefficient of variation of a lognormal
    factor on every kernel (0 = deterministic durations; > 0 disables extrapolation).
    ``timeline``: keep per-GPU events in the result. ``symmetry``: simulate GPUs with identical
    programs once (exact; off when ``jitter`` > 0, since noise differs per GPU). ``approx_layers``:
    0 (off) or K >= ``MIN_APPROX_LAYERS``: simulate K layers and extend the rest approximately
    (:mod:`~nspsim.simulator.approximate`; needs no jitter and no timeline; K >= the model's layers
    simulates every layer).
    """

    mode: SimMode = SimMode.STREAM
    extrapolate: bool = True
    sim_layers: int = 12
    jitter: float = 0.0
    timeline: bool = False
    symmetry: bool = True
    approx_layers: int = 0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown simulation mode {self.mode!r} (known: {', '.join(MODES)})")
        object.__setattr__(self, "mode", SimMode(self.mode))  # a plain "serial" becomes the member
        layers = self.sim_layers
        if not isinstance(layers, int) or isinstance(layers, bool) or layers < MIN_SIM_LAYERS:
            raise ValueError(
                f"sim_layers must be an integer >= {MIN_SIM_LAYERS} to detect repeated layers, got {self.sim_layers!r}"
            )
        if isinstance(self.jitter, bool) or not isinstance(self.jitter, (int, float)) or not 0 <= self.jitter < 1:
            raise ValueError(f"jitter must be in [0, 1), got {self.jitter!r}")
        for name in ("extrapolate", "timeline", "symmetry"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        self._check_approx()

    def _check_approx(self) -> None:
        k = self.approx_layers
        if not isinstance(k, int) or isinstance(k, bool) or (k != 0 and k < MIN_APPROX_LAYERS):
            raise ValueError(
                f"approx_layers must be 0 (off) or an integer >= {MIN_APPROX_LAYERS} (layers to simulate before "
                f"extending the rest approximately), got {k!r}"
            )
        if k and self.jitter > 0:
            raise ValueError("approx_layers needs jitter 0: with noise no simulated layer gives the others' pace")
        if k and self.timeline:
            raise ValueError("approx_layers keeps no timeline (the layers not simulated have no events); drop one")


@contextmanager
def _cyclic_gc_paused_if_alone() -> Iterator[None]:
    """Pause Python's cycle collector while a step's linked tasks are built and run, but only when the
    calling thread is the process's only Python thread.

    The collector would rescan the tens of thousands of live tasks over and over (measured: 1.3x at 64
    GPUs, about 2x for nested plans on 1024 GPUs, docs/simulator.md). Its switch is process-wide, so
    with any other thread alive (a training loop planning ahead on a worker thread) it is left alone:
    nothing else can observe the pause, and the task graph is freed by reference counting either way
    (:meth:`~nspsim.simulator.engine.Executor.release` breaks its cycles).
    """
    if threading.active_count() > 1 or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class Simulator:
    """Discrete-event simulator of training steps for one (model, cluster, training, cost) setting."""

    def __init__(
        self,
        *,
        cost: CostModel,
        model: ModelSpec,
        cluster: ClusterSpec,
        training: TrainingSpec,
        memory: MemoryModel,
        options: SimOptions | None = None,
        seed: int = 0,
    ) -> None:
        if cost.num_layers != model.num_layers:
            raise ValueError(f"cost model has {cost.num_layers} layers but {model.name} has {model.num_layers}")
        self.cost, self.model, self.cluster, self.training, self.memory = cost, model, cluster, training, memory
        self.options = options or SimOptions()
        self.seed = seed
        self.collectives = CollectiveFactory(cost, cluster)
        fewest = min_layers(self._prefetch())
        if 0 < self.options.approx_layers < fewest:
            raise ValueError(
                f"approx_layers {self.options.approx_layers} leaves no pace window with FSDP gathers "
                f"{self._prefetch()} layer(s) ahead: simulate at least {fewest} layers"
            )

    @staticmethod
    def for_workload(workload: Workload, options: SimOptions | None = None, seed: int = 0) -> Simulator:
        """A simulator for the specs, cost and memory model of ``workload``."""
        return Simulator(
            cost=workload.cost,
            model=workload.model,
            cluster=workload.cluster,
            training=workload.training,
            memory=workload.memory,
            options=options,
            seed=seed,
        )

    def simulate(self, plan: Plan, *, optimizer_step: bool = True) -> StepResult:
        """Predict one step of ``plan``; an out-of-memory plan gives a result with ``oom=True``. With
        ``optimizer_step=False`` the plan is a pass of a gradient-accumulation window that another pass
        ends: it ends with its gradients reduced, without the optimizer step."""
        with _cyclic_gc_paused_if_alone():
            return self._simulate(plan, optimizer_step)

    def _simulate(self, plan: Plan, optimizer_step: bool = True) -> StepResult:
        started = time.perf_counter()
        self._check(plan)
        act = plan_activations(plan, self.memory)
        if act.oom is not None:
            return self._oom_result(plan, act, started)
        work = step_work(plan, self.cost, self.model, self.training, act.remat, optimizer_step=optimizer_step)
        if self.options.symmetry and self.options.jitter == 0:
            work = reduce_to_units(work)
        slots = self.cost.compute_slots()
        if slots is not None and self.cluster.gpus_per_node > slots:  # ranks share a host's cores
            program, ex = self._run_shared(work, plan, slots)
            result = self._result(plan, act, work, program, ex, [], self.model.num_layers, started)
            ex.release()
            return result
        extension = None
        for layers in self._layer_schedule(work):
            program, ex = self._run(work, layers, plan)
            repeats = find_repeats(program, self.model.num_layers, layers, self._repeat_window())
            if repeats is None and layers == self.options.approx_layers:
                repeats, extension = [], extend(program, ex.accounts(), self.model.num_layers, self._prefetch())
            if repeats is not None:
                break
            ex.release()
        result = self._result(plan, act, work, program, ex, repeats or [], layers, started, extension)
        ex.release()
        return result

    # ---- steps -----------------------------------------------------------------------------------
    def _check(self, plan: Plan) -> None:
        plan.check_compatible(self.cluster, self.model)
        if plan.backend != self.training.backend:
            raise ValueError(
                f"plan uses the {plan.backend} SP backend but the simulator models {self.training.backend}"
            )

    def _repeat_window(self) -> int:
        """Layers that must repeat by one shift before extrapolating: r-1 .. r+2, or up to r+d+1 when
        the FSDP gathers run d > 1 layers ahead (their issue times carry state that far)."""
        return max(4, self.training.fsdp_prefetch_layers + 3)

    def _layer_schedule(self, work: StepWork) -> list[int]:
        """Layer counts to try: ``sim_layers``, then every layer. The short attempt is skipped when
        :func:`~nspsim.simulator.periodic.settling_layers` says the GPUs cannot settle into one pace
        within it: groups of unequal work that FSDP gathers do not pace run at their own rates for
        dozens of layers (every default 64- and 1024-GPU workload), and the attempt only adds 25-50%
        (docs/simulator.md). A middle attempt at twice ``sim_layers`` was dropped for the same reason."""
        total, opts = self.model.num_layers, self.options
        if 0 < opts.approx_layers < total and opts.jitter == 0:
            return [opts.approx_layers]
        if not opts.extrapolate or opts.jitter > 0 or opts.sim_layers >= total:
            return [total]
        overlap = opts.mode == SimMode.STREAM
        if settling_layers(work, self._prefetch(), overlap=overlap) > opts.sim_layers - self._repeat_window():
            return [total]
        return [opts.sim_layers, total]

    def _prefetch(self) -> int:
        return prefetch_layers(self.options.mode, self.training.fsdp_prefetch_layers)

    def _run_shared(self, work: StepWork, plan: Plan, slots: float) -> tuple[Program, Executor]:
        """Every layer, with kernels stretched by core sharing (:mod:`nspsim.simulator.sharing`)."""
        layers = self.model.num_layers
        program, ex = self._run(work, layers, plan)
        members = work.unit_members()
        for _ in range(SHARING_ITERATIONS):
            factors = stretch_factors(program, kernel_tasks(program), members, self.cluster.gpus_per_node, slots)
            ex.release()
            program, ex = self._run(work, layers, plan, stretch=factors)
        return program, ex

    def _run(
        self, work: StepWork, layers: int, plan: Plan, stretch: np.ndarray | None = None
    ) -> tuple[Program, Executor]:
        rng = np.random.default_rng([self.seed, int(plan.content_hash, 16) % (1 << 63)])
        sigma = math.sqrt(math.log1p(self.options.jitter**2))
        noise = (lambda s: s * float(rng.lognormal(-sigma * sigma / 2, sigma))) if self.options.jitter > 0 else None
        if stretch is not None:  # the k-th kernel drawn is the k-th of kernel_tasks (creation order)
            factors, jitter = iter(stretch.tolist()), noise
            noise = lambda s: (s if jitter is None else jitter(s)) * next(factors)  # noqa: E731
        program = StepModel(work, self.collectives, mode=self.options.mode, layers=layers, noise=noise).build()
        ex = Executor(program, record_blame=self.options.timeline, lockstep=self.cost.lockstep_waits())
        ex.run()
        return program, ex

    # ---- results ---------------------------------------------------------------------------------
    def _result(
        self,
        plan: Plan,
        act: ActivationPlan,
        work: StepWork,
        program: Program,
        ex: Executor,
        repeats: list[Repeat],
        layers: int,
        started: float,
        extension: Extension | None = None,
    ) -> StepResult:
        unit = np.array(work.gpu_unit)
        ends = np.array(ex.free)[unit]
        last = ends.max()
        extra = sum(rep.copies * rep.shift for rep in repeats)
        acc = ex.accounts()
        per_unit = acc.sum(axis=0)
        for rep in repeats:
            per_unit += rep.copies * acc[rep.segment]
        if extension is not None:  # every unit ends later by its own added accounts, the step by the slowest's
            per_unit += extension.accounts
            ends = ends + extension.accounts.sum(axis=1)[unit]
            last = last + extension.step
        per_gpu = per_unit[unit]
        per_gpu[:, COMM_WAIT] += last - ends
        # The GPU the others waited for: least comm wait once every GPU is topped up to the step's
        # end (the runtime's definition). Ending last alone is ambiguous: a final world collective makes
        # every GPU end together, and argmax picked the lowest index, often a GPU that mostly waited.
        critical = int(np.argmin(per_gpu[:, COMM_WAIT]))
        step = float(last + extra)
        timeline = (
            build_timeline(program, ex.blame or [], repeats, work.unit_members()) if self.options.timeline else ()
        )
        return StepResult(
            planner=plan.planner,
            plan_hash=plan.content_hash,
            num_gpus=plan.cluster.num_gpus,
            mode=self.options.mode,
            oom=False,
            step_time_s=step,
            breakdown_s={k: float(per_gpu[critical, i]) for i, k in enumerate(BREAKDOWN_CATEGORIES)},
            per_gpu_breakdown_s=per_gpu,
            critical_gpu=critical,
            peak_memory_bytes=tuple(float(x) for x in act.peak_bytes),
            recompute_policy=act.policy,
            remat_share=act.remat_fraction,
            num_micro_batches=plan.num_micro_batches,
            num_layers=self.model.num_layers,
            layers_simulated=layers,
            extrapolated=bool(repeats),
            approximate=extension is not None,
            events=ex.events,
            tasks=len(program.tasks),
            units=work.num_units,
            sim_wall_time_s=time.perf_counter() - started,
            timeline=timeline,
        )

    def _oom_result(self, plan: Plan, act: ActivationPlan, started: float) -> StepResult:
        return StepResult(
            planner=plan.planner,
            plan_hash=plan.content_hash,
            num_gpus=plan.cluster.num_gpus,
            mode=self.options.mode,
            oom=True,
            oom_detail=act.oom,
            peak_memory_bytes=tuple(float(x) for x in act.peak_bytes),
            recompute_policy=act.policy,
            remat_share=act.remat_fraction,
            num_micro_batches=plan.num_micro_batches,
            num_layers=self.model.num_layers,
            sim_wall_time_s=time.perf_counter() - started,
        )
