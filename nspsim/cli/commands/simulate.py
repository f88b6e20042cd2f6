"""``nspsim simulate PLAN``: predict one training step of a plan file and explain where the time goes.

The model, cluster, GPU count and SP backend come from the plan itself (it refuses a plan whose
recorded cluster or model fingerprint differs from the preset). ``--timeline out.json`` writes a
Chrome trace (open it in ui.perfetto.dev) and ``out.config.json`` beside it.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from nspsim.cli.flags import emit, non_negative_int, output_file, positive_int
from nspsim.execution.prepare import prepare_plan
from nspsim.options import non_negative_float
from nspsim.plan import Plan
from nspsim.simulator import SimOptions, Simulator, StepResult, chrome_trace_json
from nspsim.simulator.modes import MODES, SimMode
from nspsim.specs.memory import GIB
from nspsim.workload import WorkloadConfig, build_workload


def plan_workload_config(plan: Plan, profile: str | None) -> WorkloadConfig:
    """The workload a plan was made for (its batch is not re-drawn: the plan holds the lengths)."""
    return WorkloadConfig(
        model=plan.model.name,
        cluster=plan.cluster.name,
        gpus=plan.cluster.num_gpus,
        backend=plan.backend,
        profile=profile,
        spmax=plan.spmax,
    )


def cmd_simulate(args: argparse.Namespace) -> int:
    """Load, optionally prepare (tree recompute marks, issue order), simulate and report a plan."""
    timeline = (
        None
        if args.timeline is None
        else output_file(
            args.timeline,
            flag="--timeline",
            siblings=(".config.json",),
            inputs=(args.plan, str(Path(args.plan).with_suffix(".config.json")), args.profile),
        )
    )  # the plan's sidecar too
    plan = Plan.load(args.plan)
    workload = build_workload(plan_workload_config(plan, args.profile))
    options = SimOptions(
        mode=args.mode,
        extrapolate=not args.no_extrapolate,
        jitter=args.jitter,
        timeline=args.timeline is not None,
        sim_layers=args.sim_layers,
    )
    simulator = Simulator.for_workload(workload, options, seed=args.seed)
    ranker = Simulator.for_workload(workload, replace(options, timeline=False), seed=args.seed)
    scored: dict[str, StepResult] = {}

    def step_time(candidate: Plan) -> float:
        scored[candidate.content_hash] = ranker.simulate(candidate)
        return scored[candidate.content_hash].step_time_or_inf

    plan = prepare_plan(
        plan,
        memory=workload.memory,
        cost=workload.cost,
        tree_recompute=args.tree_recompute,
        optimize_order=args.optimize_order,
        evaluate=step_time,
    )
    result = scored.get(plan.content_hash) if not options.timeline else None
    result = result or simulator.simulate(plan)
    config = {
        **workload.config.to_dict(),
        "plan": str(args.plan),
        "plan_hash": plan.content_hash,
        "simulation": asdict(options) | {"seed": args.seed},
        "tree_recompute": args.tree_recompute,
        "optimize_order": args.optimize_order,
    }
    if timeline is not None:
        _write_timeline(timeline, result, config)
    emit(args, {"config": config, **result.to_dict()}, format_result(plan, result))
    return 0


def _write_timeline(path: Path, result: StepResult, config: dict[str, Any]) -> None:
    if result.oom:
        raise ValueError(f"no timeline: the step does not run ({result.oom_detail})")
    path.write_text(chrome_trace_json(result.timeline, metadata={"config": config}))
    path.with_suffix(".config.json").write_text(json.dumps(config, indent=2))


def format_result(plan: Plan, result: StepResult) -> str:
    """Human-readable summary of one simulated step."""
    head = (
        f"plan {plan.content_hash} by {plan.planner}: {plan.model.name} on {plan.cluster.label}, "
        f"{plan.num_samples} samples, {plan.num_micro_batches} micro-batch(es), mode {result.mode}"
    )
    peak = max(result.peak_memory_bytes)
    memory = (
        f"memory     peak {peak / GIB:.2f} GiB/GPU (GPU {result.peak_memory_bytes.index(peak)}), "
        f"attention {result.recompute_policy}, {result.remat_share:.0%} of samples recomputed"
    )
    if result.oom:
        return "\n".join([head, f"OUT OF MEMORY: {result.oom_detail}", memory])
    shares = result.breakdown_share
    parts = [f"{k} {v:.4f}s ({shares[k]:.1%})" for k, v in result.breakdown_s.items() if v > 0]
    layers = f"{result.layers_simulated} of {result.num_layers} layers simulated" + (
        ", the rest extrapolated" if result.extrapolated else ""
    )
    return "\n".join(
        [
            head,
            f"step time  {result.step_time_s:.4f} s (critical GPU {result.critical_gpu})",
            "breakdown  " + ", ".join(parts),
            memory,
            f"simulated  in {result.sim_wall_time_s:.3f} s, {result.events} events; {layers}",
        ]
    )


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``simulate``."""
    p = sub.add_parser("simulate", help="predict one training step of a plan file")
    p.add_argument("plan", help="plan JSON file")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--timeline", default=None, metavar="OUT.json", help="write a Chrome trace (Perfetto) here")
    p.add_argument(
        "--mode",
        choices=MODES,
        default=SimMode.STREAM,
        help="stream (phase streaming), no-stream (streaming off), serial (no overlap at all)",
    )
    p.add_argument(
        "--tree-recompute",
        action="store_true",
        help="mark save/recompute per sample top-down first (NSP tree-level recomputation)",
    )
    p.add_argument(
        "--optimize-order",
        action="store_true",
        help="optimise the issue order first (candidates re-ranked by this simulator, as compare does)",
    )
    p.add_argument("--profile", default=None, help="JSON cost profile overriding analytic coefficients")
    p.add_argument("--no-extrapolate", action="store_true", help="simulate every layer")
    p.add_argument(
        "--sim-layers",
        type=positive_int,
        default=SimOptions().sim_layers,
        help="layers to simulate before extrapolating repeated ones",
    )
    p.add_argument(
        "--jitter",
        type=non_negative_float,
        default=0.0,
        help="coefficient of variation of kernel times, in [0, 1) (0 = none)",
    )
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed of the kernel-time noise")
    p.set_defaults(func=cmd_simulate)
