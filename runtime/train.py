"""Training entry point: plan each batch one step ahead, execute it with NSP, record every step.

    torchrun --nproc-per-node 4 -m runtime.train --planner nsp --trace wikipedia --model tiny \\
        --steps 20 --tokens-per-batch 8k --max-context 2k --seed 0 --records out/nsp.jsonl

Every rank builds the same workload (``nspsim.workload``) against a cluster preset describing the
machine actually used (``cpu`` under gloo by default, one "GPU" per process), the same model from the
seed and the same batches (``BatchSampler.batch(i)`` is random access). Rank 0 plans batch ``i + 1``
on a background thread while batch ``i`` executes (optionally simulating the plan too) and
broadcasts each plan; the executor checks that all ranks hold the same plan before its first
collective. The simulated prediction is of the configuration that runs (:mod:`runtime.prediction`:
the executed marks, the simulation mode matching ``--lookahead``, none for options the simulator does
not model). Rank 0 gathers every rank's phase times and writes one JSONL record per step
(:mod:`runtime.records`: the critical rank's breakdown, every rank's, the planner spec as given) and,
next to it, the resolved configuration (``<records>.config.json``) and the executed plans
(``<records>.plans.jsonl``).

With the same seed, batches and initial weights the loss curve does not depend on the planner: every
plan computes the same function of the same tokens, only the placement differs.

Bad arguments end with one line ``runtime.train: error: ...`` and exit status 2. A distributed
failure (a peer died or stalled past ``--comm-timeout``, plans differ) ends every rank with one line
``runtime.train: rank R: error: ...`` and exit status 1; a rank stuck outside a collective is ended
by its watchdog after ``--step-timeout``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

from nspsim.workload import Workload, WorkloadConfig, build_workload
from nspsim.specs.memory import MemoryModel
from nspsim.cli.flags import Parser, output_file
from nspsim.options import parse_options, positive_float
from nspsim.plan import Plan
from nspsim.execution.prepare import prepare_plan
from nspsim.records import BREAKDOWN_CATEGORIES
from nspsim.simulator import SimOptions, Simulator, StepResult
from nspsim.units import parse_tokens
from runtime.cli import fail
from runtime.prediction import Prediction, executed_plan, predict, recompute_policy, simulated_mode
from runtime.records import MeasuredStep

PROG = "runtime.train"


@dataclass(frozen=True, kw_only=True)
class TrainArgs:
    """Resolved command line (written next to the records)."""

    planner: str
    planner_options: dict[str, Any] = field(default_factory=dict)
    trace: str = "wikipedia"
    model: str = "tiny"
    cluster: str | None = None
    steps: int = 10
    start_batch: int = 0
    tokens_per_batch: int = 8192
    max_context: int = 2048
    seed: int = 0
    backend: str = "ulysses"
    token_budget: int | None = None
    spmax: int | None = None
    lr: float = 1e-3
    grad_sync: str = "fsdp"
    recompute: str = "plan"
    lookahead: int | None = None
    kernel: str = "auto"
    device: str = "auto"
    dtype: str = "auto"
    plan_on: str = "rank0"
    tree_recompute: bool = False
    optimize_order: bool = False
    simulate: bool = True
    comm_timeout_s: float = 120.0
    step_timeout_s: float = 600.0
    records: str | None = None

    @property
    def planner_spec(self) -> str:
        """The planner as a spec in the ``nspsim compare`` label format (``nsp``, ``static:degree=2``)."""
        if not self.planner_options:
            return self.planner
        return self.planner + ":" + "+".join(f"{k}={_spec_value(v)}" for k, v in self.planner_options.items())


def _spec_value(value: Any) -> str:
    """``value`` as :func:`nspsim.options.parse_value` reads it back."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def planner_options(spec: str, extra: list[str]) -> tuple[str, dict[str, Any]]:
    """(name, options) of ``--planner name:key=value+key=value`` and ``--planner-option key=value``
    (one parser for every entry point: :func:`nspsim.options.parse_options`; a key given twice is an
    error)."""
    name, _, text = spec.partition(":")
    try:
        return name, dict(parse_options([*filter(None, text.split("+")), *extra]))
    except ValueError as exc:
        raise ValueError(f"planner options: {exc} (--planner name:key=value+key=value, --planner-option key=value)"
                         ) from None


def _tokens(text: str) -> int:
    try:
        return int(parse_tokens(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


MAX_TIMEOUT_S = 1e6
"""Largest --comm-timeout / --step-timeout (11.6 days): gloo and NCCL take the timeout as a C integer
of milliseconds, and 1e15 s already overflows it."""


def _timeout(text: str) -> float:
    value = positive_float(text)  # refuses nan, inf, 0 and negatives
    if value > MAX_TIMEOUT_S:
        raise argparse.ArgumentTypeError(f"at most {MAX_TIMEOUT_S:.0f} seconds, got {text!r}")
    return value


def _lookahead(text: str) -> int | None:
    if text == "all":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--lookahead takes 'all' or an integer, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    """The command line (see the module docstring); errors raise ``ValueError`` (one line)."""
    p = Parser(prog=PROG, description="Execute planned batches with NSP and record every step.")
    p.add_argument("--planner", required=True,
                   help="planner spec: a registered name, optionally with options as name:key=value+key=value")
    p.add_argument("--planner-option", action="append", default=[], metavar="KEY=VALUE",
                   help="planner option (nspsim.options value rules), repeatable")
    p.add_argument("--trace", default="wikipedia")
    p.add_argument("--model", default="tiny", help="model preset (tiny, tiny-moe, ...)")
    p.add_argument("--cluster", default=None, help="cluster preset describing this machine (default: cpu on CPU)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--start-batch", type=int, default=0, help="index of the first batch")
    p.add_argument("--tokens-per-batch", type=_tokens, default=8192, help="global tokens per batch (8k, 1M, ...)")
    p.add_argument("--max-context", type=_tokens, default=2048)
    p.add_argument("--seed", type=int, default=0, help="seed of batches, tokens and initial weights")
    p.add_argument("--backend", choices=("ulysses", "ring"), default="ulysses")
    p.add_argument("--token-budget", type=_tokens, default=None, help="per-GPU token budget B_tok override")
    p.add_argument("--spmax", type=int, default=None)
    p.add_argument("--lr", type=positive_float, default=1e-3)
    p.add_argument("--grad-sync", choices=("fsdp", "allreduce"), default="fsdp")
    p.add_argument("--recompute", choices=("plan", "all", "none"), default="plan")
    p.add_argument("--lookahead", type=_lookahead, default=None,
                   help="phase streaming: all (default: every prologue first), or at most N prologues ahead (0 = serial)")
    p.add_argument("--kernel", default="auto", help="attention kernel: auto, math, cpu-flash, torch-varlen, flash-attn")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--dtype", choices=("auto", "fp32", "bf16"), default="auto",
                   help="compute dtype: bf16 autocast (fp32 master weights) or fp32; auto = bf16 on CUDA, fp32 on CPU")
    p.add_argument("--plan-on", choices=("rank0", "all"), default="rank0",
                   help="rank0: rank 0 plans and broadcasts; all: every rank plans (hashes are checked)")
    p.add_argument("--tree-recompute", action="store_true",
                   help="derive tree-level save/recompute marks from the memory budget (nspsim.execution.recompute)")
    p.add_argument("--optimize-order", action="store_true",
                   help="reorder each plan's issue order for phase streaming (nspsim.execution.issue_order; simulator-ranked "
                        "unless --no-simulate)")
    p.add_argument("--no-simulate", dest="simulate", action="store_false", help="do not simulate each plan")
    p.add_argument("--comm-timeout", dest="comm_timeout_s", type=_timeout, default=120.0, help="collective timeout, s")
    p.add_argument("--step-timeout", dest="step_timeout_s", type=_timeout, default=600.0, help="watchdog per step, s")
    p.add_argument("--records", default=None, help="JSONL output (rank 0); config and plans are written beside it")
    return p


def parse_args(argv: list[str] | None = None) -> TrainArgs:
    """Parse and validate; ``ValueError`` with a one-line message for bad values."""
    ns = build_parser().parse_args(argv)
    values = {k: v for k, v in vars(ns).items() if k not in ("planner", "planner_option")}
    name, options = planner_options(ns.planner, ns.planner_option)
    args = TrainArgs(planner=name, planner_options=options, **values)
    checks = [(args.steps > 0, f"--steps must be positive, got {args.steps}"),
              (args.start_batch >= 0, f"--start-batch must be >= 0, got {args.start_batch}"),
              (args.lookahead is None or args.lookahead >= 0, f"--lookahead must be >= 0, got {args.lookahead}"),
              (not args.tree_recompute or args.recompute == "plan",
               f"--tree-recompute derives the marks; it cannot be combined with --recompute {args.recompute}")]
    for ok, msg in checks:
        if not ok:
            raise ValueError(msg)
    if args.records is not None:  # every rank checks, so a bad path ends them all before any set-up
        output_file(args.records, flag="--records", inputs=(args.trace,), siblings=(".config.json", ".plans.jsonl"),
                    make_parent=True)
    from nspsim.planners import get_planner

    get_planner(args.planner, **args.planner_options)  # unknown names and options fail before any set-up
    return args


# ---- distributed set-up ------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Dist:
    """This process's place in the run."""

    rank: int
    world: int
    local_rank: int
    device: Any
    control_group: Any


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def init_distributed(args: TrainArgs) -> Dist:
    """``init_process_group`` from torchrun's environment (or as a single process without it)."""
    import torch
    import torch.distributed as dist

    if dist.is_initialized():  # launched by a caller that already set up the world (tests, notebooks)
        return Dist(rank=dist.get_rank(), world=dist.get_world_size(), local_rank=0, device=torch.device("cpu"),
                    control_group=dist.group.WORLD)
    if "RANK" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(_free_port()))
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if args.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda but no CUDA device is visible")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    timeout = timedelta(seconds=args.comm_timeout_s)
    if use_cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl" if use_cuda else "gloo", timeout=timeout)
    control = dist.new_group(backend="gloo", timeout=timeout) if use_cuda else dist.group.WORLD
    torch.set_num_threads(max(1, torch.get_num_threads() if use_cuda else 1))
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    return Dist(rank=dist.get_rank(), world=dist.get_world_size(), local_rank=local_rank, device=device,
                control_group=control)


def resolve_workload(args: TrainArgs, d: Dist) -> Workload:
    """The workload every rank plans against (the cluster preset must describe this machine)."""
    cluster = args.cluster or ("cpu" if d.device.type == "cpu" else "h100")
    config = WorkloadConfig(trace=args.trace, model=args.model, cluster=cluster, gpus=d.world,
                            tokens_per_batch=args.tokens_per_batch, max_context=args.max_context, seed=args.seed,
                            backend=args.backend, token_budget=args.token_budget, spmax=args.spmax)
    return build_workload(config)


# ---- planning one step ahead -------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Planned:
    """An executable plan, what it cost to make and prepare, and the simulator's prediction of it."""

    plan: Plan
    planning_time_s: float
    prediction: Prediction


class PlanAhead:
    """Plans, prepares and simulates batch ``i + 1`` on a background thread while batch ``i`` executes."""

    def __init__(self, args: TrainArgs, workload: Workload) -> None:
        from nspsim.planners import get_planner

        self.workload, self.args = workload, args
        self.planner = get_planner(args.planner, **args.planner_options)
        self._simulators: dict[str, Simulator] = {}
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="planner")
        self._pending: dict[int, Future[Planned]] = {}

    def simulate(self, plan: Plan, mode: str) -> StepResult:
        """The simulator's result for ``plan`` in ``mode`` (one simulator per mode)."""
        if mode not in self._simulators:
            self._simulators[mode] = Simulator.for_workload(self.workload, SimOptions(mode=mode))
        return self._simulators[mode].simulate(plan)

    def _make(self, index: int) -> Planned:
        args = self.args
        start = time.perf_counter()
        plan = self.planner.plan(self.workload.sampler.batch(index), self.workload)
        mode, note = simulated_mode(plan, lookahead=args.lookahead, grad_sync=args.grad_sync,
                                    world=self.workload.cluster.num_gpus)
        if not args.simulate:
            mode, note = None, "not simulated: --no-simulate"
        plan = self._prepare(plan, mode or "stream")
        elapsed = time.perf_counter() - start
        return Planned(plan=plan, planning_time_s=elapsed, prediction=predict(plan, mode, note, self.simulate))

    def _prepare(self, plan: Plan, rank_mode: str) -> Plan:
        """The executable plan: the marks ``--recompute all|none`` forces, then the preparation
        ``nspsim compare`` and ``nspsim simulate`` apply (:func:`nspsim.execution.prepare.prepare_plan`: tree-level
        marks, the issue order re-ranked by the simulator in ``rank_mode``), as the flags ask."""
        args, wl = self.args, self.workload
        evaluate = (lambda p: self.simulate(p, rank_mode).step_time_or_inf) if args.simulate else None
        return prepare_plan(executed_plan(plan, args.recompute), memory=wl.memory, cost=wl.cost,
                            tree_recompute=args.tree_recompute, optimize_order=args.optimize_order, evaluate=evaluate)

    def prefetch(self, index: int) -> None:
        """Start planning batch ``index``."""
        if index not in self._pending:
            self._pending[index] = self._pool.submit(self._make, index)

    def get(self, index: int) -> Planned:
        """The plan of batch ``index`` (waits if it is still being made)."""
        self.prefetch(index)
        return self._pending.pop(index).result()

    def close(self) -> None:
        """Stop the planning thread."""
        self._pool.shutdown(wait=False, cancel_futures=True)


# ---- the loop -----------------------------------------------------------------------------------------
class Trainer:
    """Owns the model, optimizer, executor and planner of one rank."""

    def __init__(self, args: TrainArgs, d: Dist, workload: Workload) -> None:
        import torch

        from runtime.executor import ExecOptions, NSPExecutor
        from runtime.groups import GroupCache
        from runtime.model import DecoderLM
        from runtime.watchdog import Watchdog

        self.args, self.d, self.workload = args, d, workload
        self.model = DecoderLM(workload.model, seed=args.seed).to(d.device)
        if args.grad_sync == "fsdp" and d.world > 1:
            from torch.distributed.fsdp import fully_shard

            for layer in self.model.layers:
                fully_shard(layer)
            fully_shard(self.model)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=args.lr)
        groups = GroupCache(world=d.world, backend="nccl" if d.device.type == "cuda" else "gloo",
                            timeout=timedelta(seconds=args.comm_timeout_s))
        bf16 = args.dtype == "bf16" or (args.dtype == "auto" and d.device.type == "cuda")
        # ``--recompute all|none`` is already written into every executed plan (``_prepare``).
        options = ExecOptions(lookahead=args.lookahead, recompute="plan", kernel=args.kernel,
                              grad_sync=args.grad_sync if d.world > 1 else "allreduce",
                              autocast="bfloat16" if bf16 else None)
        self.executor = NSPExecutor(model=self.model, spec=workload.model, rank=d.rank, world=d.world,
                                    device=d.device, groups=groups, options=options,
                                    control_group=d.control_group, memory=workload.memory)
        self.planner = PlanAhead(args, workload) if d.rank == 0 or args.plan_on == "all" else None
        self.watchdog = Watchdog(rank=d.rank)

    def _plan(self, index: int) -> tuple[Planned, float]:
        import torch.distributed as dist

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
        from runtime.data import rank_input, synthetic_stream

        index = self.args.start_batch + step
        self.watchdog.arm(f"step {step}", self.args.step_timeout_s)
        start = time.perf_counter()
        planned, plan_wait = self._plan(index)
        if self.planner is not None and step + 1 < self.args.steps:
            self.planner.prefetch(index + 1)
        plan = planned.plan
        stream = synthetic_stream(plan.lengths, seed=self.args.seed, index=index, vocab=self.workload.model.vocab)
        result = self.executor.run(plan, rank_input(stream, self.d.rank, self.d.world))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        end = self.executor.clock.now()
        self.watchdog.disarm()
        line = self._record(step, index, planned, plan_wait, result, end - start)
        return None if line is None else (line, plan)

    def _record(self, step: int, index: int, planned: Planned, plan_wait: float, result: Any,
                step_s: float) -> str | None:
        """Gather every rank's times to rank 0, which returns the step's JSONL record."""
        import torch.distributed as dist

        from runtime.timing import breakdown

        mine = RankTimes(step_s=step_s, breakdown_s=breakdown(result.seconds, result.fwd_bwd_s, step_s),
                         sp_comm_s=result.seconds["sp_comm"])
        gathered: list[Any] = [None] * self.d.world
        dist.all_gather_object(gathered, mine, group=self.d.control_group)
        if self.d.rank != 0:
            return None
        return measured_record(step=step, index=index, planned=planned, plan_wait_s=plan_wait, loss=result.loss,
                               ranks=gathered, spec=self.args.planner_spec, memory=self.workload.memory).to_json()

    def close(self) -> None:
        """Stop background threads."""
        self.watchdog.close()
        if self.planner is not None:
            self.planner.close()


@dataclass(frozen=True, kw_only=True)
class RankTimes:
    """One rank's measured step: wall time, breakdown (summing to it) and SP communication span."""

    step_s: float
    breakdown_s: dict[str, float]
    sp_comm_s: float


def critical_rank(ranks: list[RankTimes]) -> int:
    """The rank whose forward and backward finished last: the one the others waited for at the
    barrier before the gradient sync (least ``comm_wait``; the lowest such rank on ties)."""
    return int(np.argmin([r.breakdown_s["comm_wait"] for r in ranks]))


def measured_record(*, step: int, index: int, planned: Planned, plan_wait_s: float, loss: float,
                    ranks: list[RankTimes], spec: str, memory: MemoryModel) -> MeasuredStep:
    """The :class:`runtime.records.MeasuredStep` of one step from every rank's times."""
    plan, pred = planned.plan, planned.prediction
    crit = critical_rank(ranks)
    policy, share = recompute_policy(plan, memory)
    return MeasuredStep(
        step=step, batch_index=index, planner_spec=spec, planner=plan.planner, plan_hash=plan.content_hash,
        backend=plan.backend, num_gpus=len(ranks), cluster=plan.cluster.label, model=plan.model.name,
        num_samples=plan.num_samples, num_tokens=int(sum(plan.lengths)), num_micro_batches=plan.num_micro_batches,
        samples_per_degree=plan.samples_per_degree(), recompute_policy=policy, remat_share=share, loss=loss,
        step_time_s=ranks[crit].step_s, breakdown_s=ranks[crit].breakdown_s, critical_gpu=crit,
        per_gpu_step_time_s=[r.step_s for r in ranks],
        per_gpu_breakdown_s={k: [r.breakdown_s[k] for r in ranks] for k in BREAKDOWN_CATEGORIES},
        sp_comm_s=ranks[crit].sp_comm_s, per_gpu_sp_comm_s=[r.sp_comm_s for r in ranks], planning_time_s=planned.planning_time_s, plan_wait_s=plan_wait_s,
        simulated_mode=pred.mode, simulated_step_time_s=pred.step_time_s, simulated_breakdown_s=pred.breakdown_s,
        simulated_note=pred.note)


def output_paths(records: str) -> tuple[Path, Path, Path]:
    """(records, resolved config, executed plans) paths."""
    path = Path(records)
    stem = path.with_suffix("") if path.suffix else path
    return path, stem.with_name(stem.name + ".config.json"), stem.with_name(stem.name + ".plans.jsonl")


def run(args: TrainArgs) -> list[str]:
    """Set up, train ``args.steps`` steps, write outputs; returns rank 0's records (others: [])."""
    d = init_distributed(args)
    workload = resolve_workload(args, d)
    trainer = Trainer(args, d, workload)
    files = _open_outputs(args, d, workload)
    lines = []
    try:
        for step in range(args.steps):
            out = trainer.step(step)
            if out is not None:
                _emit(*out, files)
                lines.append(out[0])
    finally:
        trainer.close()
        for f in files:
            f.close()
    return lines


def _open_outputs(args: TrainArgs, d: Dist, workload: Workload) -> list[Any]:
    if d.rank != 0 or args.records is None:
        return []
    records, config, plans = output_paths(args.records)
    records.parent.mkdir(parents=True, exist_ok=True)
    import torch

    config.write_text(json.dumps({"workload": workload.config.to_dict(), "runtime": asdict(args),
                                  "world": d.world, "device": str(d.device), "torch": torch.__version__,
                                  "token_budget": workload.token_budget}, indent=1, sort_keys=True))
    return [records.open("w"), plans.open("w")]


def _emit(line: str, plan: Plan, files: list[Any]) -> None:
    rec = json.loads(line)
    sim = rec["simulated_step_time_s"]
    print(f"step {rec['step']} batch {rec['batch_index']} planner {rec['planner_spec']} loss {rec['loss']:.5f} "
          f"time {rec['step_time_s']:.3f}s" + (f" (simulated {sim:.3f}s)" if sim is not None else "")
          + f" plan {rec['plan_hash']}", flush=True)
    if files:
        files[0].write(line + "\n")
        files[0].flush()
        files[1].write(plan.to_json() + "\n")
        files[1].flush()


def main(argv: list[str] | None = None) -> None:
    """Entry point (see the module docstring)."""
    try:
        args = parse_args(argv)
    except ValueError as exc:
        fail(PROG, exc, 2, hard=True)
    rank = int(os.environ["RANK"]) if "RANK" in os.environ else None
    try:
        run(args)
    except ValueError as exc:
        fail(PROG, exc, 2, rank, hard=True)
    except Exception as exc:  # noqa: BLE001 (distributed failures: one clear line, then exit)
        fail(PROG, exc, 1, rank, hard=True)
    os._exit(0)


if __name__ == "__main__":
    main()
