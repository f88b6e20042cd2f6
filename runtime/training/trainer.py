"""The training loop of one rank: plan (or receive) batch ``i``, execute it with NSP, step the
optimizer, report the step.

Every rank builds the same workload against a cluster preset describing the machine actually used,
the same model from the seed and the same batches. Rank 0 plans (``--plan-on rank0``) and broadcasts
each plan over the control group; with ``--plan-on all`` every rank plans and the executor's hash
check proves they agree. Trade-off: planning on rank 0 alone costs one object broadcast per step but
keeps the planner's CPU time off the other ranks. A rank stuck outside a collective is ended by its
watchdog after ``--step-timeout``; one stuck in a collective on a dead peer by ``--comm-timeout``.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

from nspsim.execution.recompute import RecomputeMode
from nspsim.plan import Plan
from nspsim.workload import Workload, build_workload
from runtime.data import rank_input, synthetic_stream
from runtime.executor import ExecOptions, ExecutedStep, NSPExecutor
from runtime.groups import GroupCache
from runtime.model import DecoderLM
from runtime.timing import breakdown
from runtime.training.args import TrainArgs
from runtime.training.distributed import Dist, init_distributed
from runtime.training.outputs import Outputs, RankTimes, measured_record
from runtime.training.plan_ahead import PlanAhead, Planned
from runtime.watchdog import Watchdog


class Trainer:
    """Owns the model, optimizer, executor and planner of one rank."""

    def __init__(self, args: TrainArgs, d: Dist, workload: Workload) -> None:
        self.args, self.d, self.workload = args, d, workload
        self.model = DecoderLM(workload.model, seed=args.workload.seed).to(d.device)
        if args.grad_sync == "fsdp" and d.world > 1:
            for layer in self.model.layers:
                fully_shard(layer)
            fully_shard(self.model)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=args.lr)
        groups = GroupCache(
            world=d.world,
            backend="nccl" if d.device.type == "cuda" else "gloo",
            timeout=timedelta(seconds=args.comm_timeout_s),
        )
        bf16 = args.dtype == "bf16" or (args.dtype == "auto" and d.device.type == "cuda")
        # ``--recompute all|none`` is already written into every executed plan (PlanAhead._prepare).
        options = ExecOptions(
            lookahead=args.lookahead,
            recompute=RecomputeMode.PLAN,
            kernel=args.kernel,
            grad_sync=args.grad_sync if d.world > 1 else "allreduce",
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
        self.watchdog = Watchdog(rank=d.rank)

    def _plan(self, index: int) -> tuple[Planned, float]:
        start = time.perf_counter()
        planned = self.planner.get(index) if self.planner is not None else None
        if self.args.plan_on == "rank0" and self.d.world > 1:
            box: list[Any] = [planned]
            dist.broadcast_object_list(box, src=0, group=self.d.control_group)
            planned = box[0]
        assert planned is not None
        return planned, time.perf_counter() - start

    def step(self, step: int) -> tuple[str, Plan] | None:
        """One training step; returns rank 0's JSONL record and the executed plan."""
        index = self.args.start_batch + step
        self.watchdog.arm(f"step {step}", self.args.step_timeout_s)
        start = time.perf_counter()
        planned, plan_wait = self._plan(index)
        if self.planner is not None and step + 1 < self.args.steps:
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

    def _record(
        self, step: int, index: int, planned: Planned, plan_wait: float, result: ExecutedStep, step_s: float
    ) -> str | None:
        """Gather every rank's times to rank 0, which returns the step's JSONL record."""
        mine = RankTimes(
            step_s=step_s,
            breakdown_s=breakdown(result.seconds, result.fwd_bwd_s, step_s),
            sp_comm_s=result.seconds["sp_comm"],
        )
        gathered: list[Any] = [None] * self.d.world
        dist.all_gather_object(gathered, mine, group=self.d.control_group)
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
        ).to_json()

    def close(self) -> None:
        """Stop background threads."""
        self.watchdog.close()
        if self.planner is not None:
            self.planner.close()


def run(args: TrainArgs) -> list[str]:
    """Set up, train ``args.steps`` steps, write outputs; returns rank 0's records (others: [])."""
    d = init_distributed(device=args.device, comm_timeout_s=args.comm_timeout_s)
    workload = build_workload(args.workload_on(world=d.world, device_type=d.device.type))
    trainer = Trainer(args, d, workload)
    outputs = Outputs.open(args, d, workload)
    lines = []
    try:
        for step in range(args.steps):
            out = trainer.step(step)
            if out is not None:
                outputs.emit(*out)
                lines.append(out[0])
    finally:
        trainer.close()
        outputs.close()
    return lines
