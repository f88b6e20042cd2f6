"""The training loop of one rank: plan (or receive) batch ``i``, execute it with NSP, step the
optimizer, report the step.

Every rank builds the same workload against a cluster preset describing the machine actually used,
the same model from the seed and the same batches. Rank 0 plans (``--plan-on rank0``) and broadcasts
each plan over the control group; with ``--plan-on all`` every rank plans and the executor's hash
check proves they agree. Trade-off: planning on rank 0 alone costs one object broadcast per step but
keeps the planner's CPU time off the other ranks. Planning runs one batch ahead on a background thread (``--plan-ahead
next``), which on a CPU host takes cycles from the ranks (a FlexSP MILP solve is seconds of CPU);
``--plan-ahead all`` plans every batch before the first step instead, so no measured step shares
the cores with a planner. A rank stuck outside a collective is ended by its
watchdog after ``--step-timeout``; one stuck in a collective on a dead peer by ``--comm-timeout``;
one whose torchrun agent is gone by its watchdog. A peer that is gone when the plan is broadcast or
the times gathered (rank 0 failed while planning, say) ends the others with one line saying so
(:class:`nspsim_runtime.executor.PeerFailure`), not gloo's transport error.

With ``--accumulate W`` a step is a *pass* of a window of W batches: at the window's first pass rank 0
plans (or receives) the whole window (:meth:`PlanAhead.get_window`), every rank builds the passes' token
streams (each sample with its source batch's tokens, :func:`nspsim_runtime.data.pass_streams`), and each
pass runs with the loss normalised by the window's tokens; ``zero_grad`` and the optimizer step run
once, after the last pass. ``--accumulate-sync window`` leaves the gradients of every pass but the
last unsynchronised. Trade-off: one record (and one gather of the ranks' times) per pass rather than
per window, so the measured and simulated passes stay comparable one by one.

Before any set-up every rank checks that the planner's options apply to the workload of this world
(a fixed SP degree above the world size is refused, naming the ``torchrun --nproc-per-node`` that
would run it), and rank 0 warns when the cluster preset does not describe the device that runs.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from nspsim.compare.summary import BatchDrops
from nspsim.execution.recompute import RecomputeMode
from nspsim.plan import Plan
from nspsim.plan.window import WindowPlan
from nspsim.planners import get_planner
from nspsim.specs.cluster import ClusterSpec
from nspsim.specs.clusters import get_cluster
from nspsim.workload import Workload, build_workload
from nspsim_runtime.affinity import pin_to_core
from nspsim_runtime.data import TokenStream, pass_streams, rank_input, synthetic_stream
from nspsim_runtime.exec_options import pass_syncs
from nspsim_runtime.executor import ExecutedStep, NSPExecutor, PeerFailure, is_transport_error
from nspsim_runtime.groups import GroupCache
from nspsim_runtime.hf.models import model_impl, training_model
from nspsim_runtime.model import fsdp_shard
from nspsim_runtime.timing import breakdown
from nspsim_runtime.training.args import CUDA_CLUSTER, PROG, TrainArgs
from nspsim_runtime.training.distributed import Dist, init_distributed, under_torchrun
from nspsim_runtime.training.outputs import Outputs, RankTimes, measured_record, window_fields
from nspsim_runtime.training.plan_ahead import PlanAhead, Planned, PlannedWindow
from nspsim_runtime.watchdog import Watchdog


class Trainer:
    """Owns the model, optimizer, executor and planner of one rank."""

    def __init__(self, args: TrainArgs, d: Dist, workload: Workload) -> None:
        self.args, self.d, self.workload = args, d, workload
        self.model = training_model(args.workload.model, workload.model, seed=args.workload.seed).to(d.device)
        self.model_impl = model_impl(self.model)  # before FSDP2 renames the class
        if args.execution.grad_sync == "fsdp" and d.world > 1:
            fsdp_shard(self.model, self.model.layers)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=args.lr)
        groups = GroupCache(
            world=d.world,
            backend="nccl" if d.device.type == "cuda" else "gloo",
            timeout=timedelta(seconds=args.comm_timeout_s),
        )
        bf16 = args.dtype == "bf16" or (args.dtype == "auto" and d.device.type == "cuda")
        # ``--recompute all|none`` is already written into every executed plan (PlanAhead._prepare).
        options = replace(
            args.execution,
            recompute=RecomputeMode.PLAN,
            grad_sync=args.execution.grad_sync if d.world > 1 else "allreduce",
            autocast="bfloat16" if bf16 else None,
        )
        self.executor = NSPExecutor(
            model=self.model,
            spec=workload.model,
            rank=d.rank,
            world=d.world,
            device=d.device,
            groups=groups,
            options=options,
            control_group=d.control_group,
            memory=workload.memory,
        )
        self.planner = PlanAhead(args, workload) if d.rank == 0 or args.plan_on == "all" else None
        if self.planner is not None and args.plan_ahead == "all":  # before any step: never beside one
            self.planner.make_all(range(args.start_batch, args.start_batch + args.steps, args.accumulate))
        self._window: tuple[PlannedWindow, list[TokenStream]] | None = None  # the window being run
        self._window_loss = 0.0  # the running window's loss sum over its passes' tokens
        self.watchdog = Watchdog(rank=d.rank, prog=PROG, watch_parent=under_torchrun())

    def _plan(self, step: int, index: int) -> tuple[Any, float]:
        """Batch ``index``'s :class:`Planned` (with ``--accumulate``, the :class:`PlannedWindow` starting
        there), made here or received from rank 0, and the seconds waited for it."""
        start = time.perf_counter()
        planned: Planned | PlannedWindow | None = None
        if self.planner is not None:
            planned = self.planner.get(index) if self.args.accumulate == 1 else self.planner.get_window(index)
        if self.args.plan_on == "rank0" and self.d.world > 1:
            box: list[Any] = [planned]
            self._control(
                lambda: dist.broadcast_object_list(box, src=0, group=self.d.control_group),
                f"the plan of step {step}",
                source=0,
            )
            planned = box[0]
        assert planned is not None
        return planned, time.perf_counter() - start

    def _control(self, collective: Callable[[], object], what: str, *, source: int | None = None) -> None:
        """Run a control-group ``collective`` exchanging ``what`` (sent by rank ``source``, or by every
        rank); a peer gone or stalled becomes a one-line :class:`PeerFailure` that says which and
        what never arrived, instead of gloo's transport error."""
        try:
            collective()
        except RuntimeError as exc:
            if not is_transport_error(exc):
                raise
            sender = source is not None and self.d.rank != source
            peer = f"rank {source}" if sender else "a peer rank"
            cause = "failed while planning or was stopped" if sender and source == 0 else "failed or was stopped"
            if "imed out" in str(exc):
                raise PeerFailure(
                    f"{peer} did not complete the exchange of {what} within --comm-timeout "
                    f"{self.args.comm_timeout_s:g} s (it is stuck or slower than that); ending this rank"
                ) from None
            raise PeerFailure(
                f"{peer} ended during the exchange of {what} (it {cause}; its own line says why); ending this rank"
            ) from None

    def step(self, step: int) -> tuple[str, Plan | WindowPlan | None] | None:
        """One training step (with ``--accumulate``, one pass); returns rank 0's JSONL record and the
        executed plan (a window's plan with its first pass, ``None`` with the others)."""
        if self.args.accumulate > 1:
            return self._pass(step)
        index = self.args.start_batch + step
        self.watchdog.arm(f"step {step}", self.args.step_timeout_s)
        start = time.perf_counter()
        planned, plan_wait = self._plan(step, index)
        if self.planner is not None and step + 1 < self.args.steps and self.args.plan_ahead == "next":
            self.planner.prefetch(index + 1)
        plan = planned.plan
        stream = synthetic_stream(
            plan.lengths, seed=self.args.workload.seed, index=index, vocab=self.workload.model.vocab
        )
        result = self.executor.run(plan, rank_input(stream, self.d.rank, self.d.world))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        end = self.executor.clock.now()
        self.watchdog.disarm()
        line = self._record(step, index, planned, plan_wait, result, end - start)
        return None if line is None else (line, plan)

    def _pass(self, step: int) -> tuple[str, WindowPlan | None] | None:
        """Pass ``k`` of window ``w`` (``step = w * W + k``): the window is planned at its first pass, the
        optimizer steps after its last (module docstring)."""
        args, size = self.args, self.args.accumulate
        w, k = divmod(step, size)
        first = args.start_batch + w * size
        self.watchdog.arm(f"step {step}", args.step_timeout_s)
        start = time.perf_counter()
        plan_wait = 0.0
        if k == 0:
            planned_window, plan_wait = self._plan(step, first)
            if self.planner is not None and step + size < args.steps and args.plan_ahead == "next":
                self.planner.prefetch(first + size)
            window = planned_window.window
            streams = pass_streams(
                window.source_lengths,
                window.assignment,
                seed=args.workload.seed,
                first_index=first,
                vocab=self.workload.model.vocab,
            )
            self._window, self._window_loss = (planned_window, streams), 0.0
        assert self._window is not None
        planned_window, streams = self._window
        planned, last = planned_window.passes[k], k == size - 1
        result = self.executor.run(
            planned.plan,
            rank_input(streams[k], self.d.rank, self.d.world),
            window_tokens=planned_window.window.total_tokens,
            sync=pass_syncs(last=last, accumulate_sync=args.accumulate_sync, grad_sync=self.executor.options.grad_sync),
        )
        self._window_loss += result.loss * result.num_tokens
        if last:
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        end = self.executor.clock.now()
        self.watchdog.disarm()
        window_loss = self._window_loss / planned_window.window.total_tokens if last else None
        fields = window_fields(planned_window, w, k, window_loss)
        line = self._record(step, first + k, planned, plan_wait, result, end - start, fields)
        return None if line is None else (line, planned_window.window if k == 0 else None)

    def _record(
        self,
        step: int,
        index: int,
        planned: Planned,
        plan_wait: float,
        result: ExecutedStep,
        step_s: float,
        window: dict[str, Any] | None = None,
    ) -> str | None:
        """Gather every rank's times to rank 0, which returns the step's JSONL record."""
        mine = RankTimes(
            step_s=step_s,
            breakdown_s=breakdown(result.seconds, result.fwd_bwd_s, step_s),
            sp_comm_s=result.seconds["sp_comm"],
        )
        gathered: list[Any] = [None] * self.d.world
        self._control(
            lambda: dist.all_gather_object(gathered, mine, group=self.d.control_group),
            f"every rank's times of step {step}",
        )
        if self.d.rank != 0:
            return None
        return measured_record(
            step=step,
            index=index,
            planned=planned,
            plan_wait_s=plan_wait,
            loss=result.loss,
            ranks=gathered,
            spec=self.args.planner_spec,
            memory=self.workload.memory,
            model_impl=self.model_impl,
            window=window,
        ).to_json()

    def close(self) -> None:
        """Stop background threads."""
        self.watchdog.close()
        if self.planner is not None:
            self.planner.close()


def device_mismatch(cluster: ClusterSpec, device_type: str) -> str | None:
    """Why the cluster preset does not describe the device that runs (a GPU preset on the CPU, the
    ``cpu`` preset on CUDA), or ``None``: plans and simulated times would describe other hardware."""
    cpu_preset = cluster.gpu.name == get_cluster("cpu", 1).gpu.name
    if device_type == "cpu" and not cpu_preset:
        return (
            f"the cluster preset {cluster.name!r} describes {cluster.gpu.name} GPUs, but this run executes on "
            f"the CPU: plans and simulated step times are for {cluster.name}, not for this machine "
            "(omit --cluster to plan against the cpu preset)"
        )
    if device_type == "cuda" and cpu_preset:
        return (
            f"the cluster preset {cluster.name!r} describes CPU ranks under gloo, but this run executes on "
            f"CUDA: plans and simulated step times are for CPU ranks, not for these GPUs "
            f"(omit --cluster to plan against {CUDA_CLUSTER}, or name the preset of these GPUs)"
        )
    return None


MAX_HINT_WORLD = 1024
"""Largest world size :func:`ranks_needed` tries."""


def ranks_needed(args: TrainArgs, device_type: str, world: int) -> int | None:
    """The smallest world (a power of two times ``world``, up to :data:`MAX_HINT_WORLD`) on which the
    planner's options apply, or ``None`` if more ranks would not help (a limit of the model, the
    backend or ``--spmax``, or an option that no world admits)."""
    planner = get_planner(args.planner, **args.planner_options)
    more = 2 * world
    while more <= MAX_HINT_WORLD:
        try:
            planner.check(build_workload(args.workload_on(world=more, device_type=device_type)))
            return more
        except ValueError:
            more *= 2
    return None


def check_planner(args: TrainArgs, workload: Workload, device_type: str) -> None:
    """``ValueError`` unless the planner's options apply to ``workload`` (every rank checks before
    any set-up, so all end alike); when only more ranks would make them apply, the message says how
    many and how to start them (one process is one rank: the world size bounds every SP degree)."""
    try:
        get_planner(args.planner, **args.planner_options).check(workload)
    except ValueError as exc:
        world = workload.cluster.num_gpus
        needed = ranks_needed(args, device_type, world)
        if needed is None:
            raise
        raise ValueError(
            f"{exc}; the SP degree is bounded by the world size, and this run has {world} "
            f"rank{'s' if world > 1 else ''} (one per process): start {needed} with "
            f"python -m nspsim_runtime.run --standalone --nproc-per-node {needed} -m nspsim_runtime.train ..."
        ) from None


DROP_CHECK_BATCHES = 32
"""How many of a run's first batches the drop warning looks at (drawing all of a long run's batches
before its first step would delay it; the share of a trace's long samples is steady over batches)."""


def dropped_warning(workload: Workload, args: TrainArgs) -> str | None:
    """The warning ``nspsim plan``/``compare`` give when ``max_context`` drops over 10% of the drawn
    tokens, over the run's first batches (at most :data:`DROP_CHECK_BATCHES`; ``None`` below it)."""
    count = min(args.steps, DROP_CHECK_BATCHES)
    batches = [workload.sampler.batch(args.start_batch + i) for i in range(count)]
    text = BatchDrops.of_batches(batches).warning()
    if text is None:
        return None
    first = f"the first {count} of {args.steps} batches" if count < args.steps else f"{count} batch(es)"
    return f"{first}: {text}"


def run(args: TrainArgs) -> list[str]:
    """Set up, train ``args.steps`` steps, write outputs; returns rank 0's records (others: [])."""
    d = init_distributed(device=args.device, comm_timeout_s=args.comm_timeout_s)
    if d.device.type == "cpu":  # one core per rank when they fit (nspsim_runtime.affinity)
        pin_to_core(d.local_rank, int(os.environ.get("LOCAL_WORLD_SIZE", d.world)))
    workload = build_workload(args.workload_on(world=d.world, device_type=d.device.type))
    check_planner(args, workload, d.device.type)
    mismatch = device_mismatch(workload.cluster, d.device.type)
    if mismatch is not None and d.rank == 0:
        print(f"{PROG}: warning: {mismatch}", file=sys.stderr, flush=True)
    dropped = dropped_warning(workload, args)
    if dropped is not None and d.rank == 0:
        print(f"{PROG}: warning: {dropped}", file=sys.stderr, flush=True)
    trainer = Trainer(args, d, workload)
    outputs = Outputs.open(args, d, workload)
    lines = []
    complete = False
    try:
        for step in range(args.steps):
            out = trainer.step(step)
            if out is not None:
                outputs.emit(*out)
                lines.append(out[0])
        complete = True
    finally:
        trainer.close()
        outputs.close(complete=complete)
    return lines
