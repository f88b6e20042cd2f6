"""``nspsim simulate PLAN``: predict one training step of a plan file and explain where the time goes.

The model, cluster (a preset, or the cluster file the plan records), GPU count, SP backend and cost
profile come from the plan itself (it refuses a plan whose recorded cluster or model fingerprint
differs from the preset or file now, and a recorded profile
that cannot be read or has changed; ``--profile`` overrides the recorded one, with a warning when it
differs). So do the training settings (checkpointing, attention kernel, expert parallelism, ...: the
label the planner recorded in the plan's metadata); a setting flag given here overrides that one,
with a warning, and a ``--training`` preset other than the default replaces them all. ``--timeline
out.json`` writes a Chrome trace (open it in ui.perfetto.dev) and ``out.config.json`` beside it. A
plan log (``*.jsonl``, one plan per line: ``nspsim_runtime.train``'s ``<records>.plans.jsonl``) simulates
every plan as a table of steps (``--json``: a list); ``--index N`` picks one, which is then reported
like a plan file. Plans are prepared as ``--prepare`` says (by default as their planner declares, as
``nspsim compare`` and ``nspsim_runtime.train`` prepare them; a plan that records its preparation, such as
a runtime plan log's, runs as it is).

Exit status (:data:`EXIT_OOM_HELP`): 0 when every simulated step fits in memory, 1 when one does
not (the result, printed as usual, is a real answer: "out of memory"; ``--timeline`` then writes
nothing), 2 for a usage error.

``--config T.config.json`` (what ``--timeline T.json`` wrote, or ``--json``'s ``config``) simulates the same plan
with the same options again (:mod:`nspsim.cli.config_file`); flags override its values.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any

from nspsim.cli.config_file import COMMAND_KEY, ConfigFormat, Settings, add_config_flag, keys, require, section
from nspsim.cli.flags import (
    add_prepare_flag,
    add_training_flags,
    emit,
    non_negative_int,
    positive_int,
    seed_arg,
    shown,
    training_settings,
    warn,
)
from nspsim.cli.outputs import output_file, write_output
from nspsim.cli.simulate_text import approximation_fields, format_result, format_table
from nspsim.compare.summary import BatchDrops, plan_drop_fields
from nspsim.cost.profile import load_profile
from nspsim.execution.prepare import AS_PLANNED, prepare_plan, recorded_preparation, resolve_preparation
from nspsim.jsonfile import dumps_json
from nspsim.options import non_negative_float
from nspsim.plan import Plan
from nspsim.plan.log import PLAN_LOG_SUFFIX, load_plans, pick_plans
from nspsim.plan.refs import ProfileRef
from nspsim.planners import plan_preparation
from nspsim.simulator import SimOptions, Simulator, StepResult, chrome_trace_json
from nspsim.simulator.approximate import MIN_APPROX_LAYERS
from nspsim.simulator.modes import MODES, SimMode
from nspsim.specs.training import DEFAULT_TRAINING, TRAINING_FIELDS, parse_training_label, training_label
from nspsim.workload import Workload, WorkloadConfig, build_workload

COMMAND = "nspsim simulate"

EXIT_OOM = 1
EXIT_OOM_HELP = (
    "exit status: 0 when every simulated step fits in memory; 1 when one runs out of memory (the result "
    "is printed as usual and says so; --timeline then writes nothing); 2 for a usage error"
)


def plan_training(plan: Plan, args: argparse.Namespace) -> dict[str, Any]:
    """The training settings to simulate ``plan`` with: those it was planned with (its metadata label),
    each overridden by a flag given here; a ``--training`` preset other than the default replaces them."""
    given = training_settings(args)
    recorded = plan.metadata.get("training")
    if recorded is None or given["training"] != DEFAULT_TRAINING:
        return given
    try:
        settings = parse_training_label(str(recorded))
    except ValueError as exc:
        raise ValueError(f"plan {plan.content_hash}: {exc}") from None
    return {**settings, **{k: v for k, v in given.items() if v is not None}}


def plan_workload_config(plan: Plan, profile: str | None, training: dict[str, Any] | None = None) -> WorkloadConfig:
    """The workload a plan was made for (its batch is not re-drawn: the plan holds the lengths), with the
    ``training`` settings (:func:`plan_training`: the plan's own unless flags override them)."""
    return WorkloadConfig(
        **(training or {}),
        model=plan.model.name,
        cluster=plan.cluster.source,
        gpus=plan.cluster.num_gpus,
        backend=plan.backend,
        profile=profile,
        spmax=plan.spmax,
    )


def profile_source(plan: Plan, given: str | None, warnings: set[str]) -> str | None:
    """The cost profile to simulate ``plan`` with: ``--profile`` when given (adding a warning to
    ``warnings`` when it is not the profile the plan records), else the one the plan records, which
    must still load with the recorded fingerprint (``ValueError`` otherwise: never a silent fallback
    to analytic costs)."""
    recorded = plan.profile
    if given is not None:
        now = ProfileRef.of(load_profile(given), given)
        if recorded is None or now.fingerprint != recorded.fingerprint:
            made = "analytic costs" if recorded is None else f"cost profile {_profile_label(recorded)}"
            warnings.add(
                f"--profile {given} (fingerprint {now.fingerprint}) overrides the {made} the plan was made with"
            )
        return given
    if recorded is None:
        return None
    try:
        now = ProfileRef.of(load_profile(recorded.source), recorded.source)
    except ValueError as exc:
        raise ValueError(
            f"the plan was made with cost profile {_profile_label(recorded)}, which cannot be loaded ({exc}); "
            "pass --profile PATH to simulate it with that profile (or another)"
        ) from None
    if now.fingerprint != recorded.fingerprint:
        raise ValueError(
            f"the plan was made with cost profile {_profile_label(recorded)}, but {shown(recorded.source)} has "
            f"changed since (fingerprint now {now.fingerprint}); pass --profile {shown(recorded.source)} to "
            "simulate with it as it is now"
        )
    return recorded.source


def _profile_label(ref: ProfileRef) -> str:
    return f"{shown(ref.label)} (fingerprint {ref.fingerprint})"


def cmd_simulate(args: argparse.Namespace) -> int:
    """Load, prepare (``--prepare``: as the planner declares by default), simulate and report a plan,
    or every plan of a plan log."""
    if args.plan is None:
        raise ValueError("give a plan file (PLAN), or --config with the config a simulation wrote")
    timeline = (
        None
        if args.timeline is None
        else output_file(
            args.timeline,
            flag="--timeline",
            siblings=(".config.json",),
            inputs=(args.plan, str(Path(args.plan).with_suffix(".config.json")), args.profile),
            make_parent=True,
            writer=COMMAND,
        )
    )  # the plan's sidecar too
    is_log = str(args.plan).endswith(PLAN_LOG_SUFFIX)
    plans = load_plans(args.plan)
    picked = pick_plans(plans, args.index, args.plan)
    check_config_plan(args, [plan for _, plan in picked])
    table = is_log and args.index is None
    if timeline is not None and table:
        raise ValueError(
            f"--timeline writes the trace of one plan, but {args.plan} is a plan log of {len(plans)} plan(s): "
            f"pick one with --index N (0..{len(plans) - 1})"
        )
    warnings: set[str] = set()
    sources = [profile_source(plan, args.profile, warnings) for _, plan in picked]  # refuse before simulating
    for _, plan in picked:
        made = plan.metadata.get("training")
        now = training_label(plan_workload_config(plan, None, plan_training(plan, args)).training_spec())
        if made is not None and str(made) != now:
            warnings.add(f"the plan was made with training settings '{made}' but is simulated with '{now}'")
    for message in sorted(warnings):
        warn(message)
    drops = [d for _, plan in picked if (d := BatchDrops.of_plan(plan)) is not None]
    dropped = BatchDrops.combine(drops).warning() if drops else None
    if dropped is not None:
        warn(dropped)
    runner = _Runner(args)
    runs = [(i, *runner.run(plan, source, i if is_log else None)) for (i, plan), source in zip(picked, sources)]
    oom = [i for i, _, result, _ in runs if result.oom]
    if table:
        data = [
            {"index": i, "config": config, **plan_drop_fields(plan), **result.to_dict(), **approximation_fields(result)}
            for i, plan, result, config in runs
        ]
        print(dumps_json(data, what="--json output", indent=2) if args.json else format_table(args.plan, runs))
    else:
        _, plan, result, config = runs[0]
        if timeline is not None and not result.oom:
            write_output(
                timeline,
                chrome_trace_json(result.timeline, metadata={"config": config}),
                flag="--timeline",
                siblings={".config.json": dumps_json(config, what="config", indent=2)},
            )
        record = {"config": config, **plan_drop_fields(plan), **result.to_dict(), **approximation_fields(result)}
        emit(args, record, format_result(plan, result))
    if oom:
        steps = "the simulated step" if not table else f"{len(oom)} of {len(runs)} simulated steps"
        written = "; no timeline written" if timeline is not None else ""
        print(f"nspsim: {steps} ran out of memory{written} (exit status {EXIT_OOM})", file=sys.stderr)
        return EXIT_OOM
    return 0


class _Runner:
    """Simulates plans with the command's options, one workload and pair of simulators per distinct
    workload (every plan of a runtime log shares one)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.options = SimOptions(
            mode=args.mode,
            extrapolate=not args.no_extrapolate,
            jitter=args.jitter,
            timeline=args.timeline is not None,
            sim_layers=args.sim_layers,
            approx_layers=args.approx_layers,
        )
        self._cache: dict[WorkloadConfig, tuple[Workload, Simulator, Simulator]] = {}

    def _simulators(self, config: WorkloadConfig) -> tuple[Workload, Simulator, Simulator]:
        if config not in self._cache:
            workload = build_workload(config)
            seed = self.args.seed
            self._cache[config] = (
                workload,
                Simulator.for_workload(workload, self.options, seed=seed),
                Simulator.for_workload(workload, replace(self.options, timeline=False), seed=seed),
            )
        return self._cache[config]

    def run(self, plan: Plan, profile: str | None, index: int | None) -> tuple[Plan, StepResult, dict[str, Any]]:
        """(prepared plan, result, resolved config) of one plan."""
        args = self.args
        workload, simulator, ranker = self._simulators(plan_workload_config(plan, profile, plan_training(plan, args)))
        if args.approx_layers >= workload.model.num_layers:
            raise ValueError(
                f"--approx-layers {args.approx_layers}: {shown(workload.model.name)} has {workload.model.num_layers} "
                "layers; give fewer to simulate, or leave the flag out for an exact simulation"
            )
        scored: dict[str, StepResult] = {}

        def step_time(candidate: Plan) -> float:
            scored[candidate.content_hash] = ranker.simulate(candidate)
            return scored[candidate.content_hash].step_time_or_inf

        recorded = recorded_preparation(plan)
        preparation = plan_preparation(plan, args.prepare)
        if preparation is not None:
            plan = prepare_plan(
                plan, memory=workload.memory, cost=workload.cost, preparation=preparation, evaluate=step_time
            )
        steps = preparation or resolve_preparation(recorded or "none", AS_PLANNED)
        result = scored.get(plan.content_hash) if not self.options.timeline else None
        result = result or simulator.simulate(plan)
        batch = plan.batch  # the batch the plan routes, not the flags' defaults (which it does not use)
        config = {
            COMMAND_KEY: COMMAND,
            **workload.config.to_dict(),
            "trace": batch.trace,
            "seed": batch.seed,
            "tokens_per_batch": batch.tokens_per_batch,
            "max_context": batch.max_context,
            "plan": str(args.plan),
            **({} if index is None else {"plan_index": index}),
            "plan_hash": plan.content_hash,
            "simulation": asdict(self.options) | {"seed": args.seed},
            "prepare": args.prepare,
            "preparation": f"as written ({recorded})" if preparation is None else preparation.label,
            "tree_recompute": steps.tree_recompute,
            "optimize_order": steps.optimize_order,
        }
        return plan, result, config


SIMULATION_FLAGS = {key: key for key in ("mode", "jitter", "sim_layers", "approx_layers", "seed")}
"""``simulation`` keys of a written config -> their flags' dests (``extrapolate`` is ``--no-extrapolate``'s
opposite; ``timeline`` follows ``--timeline``; the other :class:`SimOptions` fields have no flag and
are read back, not set)."""
RESOLVED = (  # what the plan and the run resolved: read back, not set (the workload comes from the plan)
    *(f.name for f in fields(WorkloadConfig) if f.name not in ("profile", *TRAINING_FIELDS, "training")),
    "plan_hash",
    "preparation",
    "tree_recompute",
    "optimize_order",
)


def check_config_plan(args: argparse.Namespace, plans: list[Plan]) -> None:
    """With ``--config``, the plan file it names must still hold the plan it simulated (its recorded
    ``plan_hash``); a plan file given on the command line instead is the user's choice."""
    recorded = getattr(args, "config_plan", None)
    if recorded is None or args.plan != recorded[0]:
        return
    hashes = {plan.content_hash for plan in plans}
    if recorded[1] not in hashes:
        raise ValueError(
            f"--config: {shown(args.plan)} now holds plan {', '.join(sorted(hashes))}, not plan {recorded[1]} "
            "that the config simulated; give the plan file as an argument to simulate it anyway"
        )


def config_settings(data: dict[str, Any]) -> Settings:
    """The flags of a written simulate config (:mod:`nspsim.cli.config_file`): the plan file (and
    ``--index``), the cost profile, the training settings it was simulated with, ``--prepare`` and the
    simulation options; the rest came from the plan (:data:`RESOLVED`)."""
    inputs = ("profile", "training", *TRAINING_FIELDS, "prepare")
    keys(data, (COMMAND_KEY, "plan", "plan_index", *inputs, "simulation", *RESOLVED))
    require(data, ("plan", "plan_hash", *inputs))
    simulation = section(data, "simulation", (*(f.name for f in fields(SimOptions)), "seed"))
    out = {name: (name, data[name]) for name in ("plan", *inputs)}
    if not isinstance(data["plan_hash"], str):
        raise ValueError(f"plan_hash: a plan's content hash, got {data['plan_hash']!r}")
    out["config_plan"] = ("plan_hash", (data["plan"], data["plan_hash"]))
    if "plan_index" in data:
        out["index"] = ("plan_index", data["plan_index"])
    out |= {dest: (f"simulation.{key}", simulation[key]) for key, dest in SIMULATION_FLAGS.items() if key in simulation}
    if "extrapolate" in simulation:
        extrapolate = simulation["extrapolate"]
        if not isinstance(extrapolate, bool):
            raise ValueError(f"simulation.extrapolate: true or false, got {extrapolate!r}")
        out["no_extrapolate"] = ("simulation.extrapolate", not extrapolate)
    return out


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``simulate``."""
    p = sub.add_parser(
        "simulate", help="predict one training step of a plan file (or every step of a plan log)", epilog=EXIT_OOM_HELP
    )
    p.add_argument(
        "plan",
        nargs="?",
        default=None,
        help="plan JSON file, or a plan log (*.jsonl, one plan per line: nspsim_runtime.train's plans); with --config, "
        "the one it names unless given",
    )
    p.add_argument(
        "--index",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="simulate only the N-th plan of the file (0-based; nspsim_runtime.train's step N)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--timeline", default=None, metavar="OUT.json", help="write a Chrome trace (Perfetto) here")
    p.add_argument(
        "--mode",
        choices=MODES,
        default=SimMode.STREAM,
        help="stream (phase streaming), no-stream (streaming off), serial (no overlap at all)",
    )
    add_prepare_flag(p)
    p.add_argument(
        "--profile",
        default=None,
        help="JSON cost profile to simulate with (default: the one the plan records, else analytic costs; "
        "a warning when it differs from the recorded one)",
    )
    p.add_argument("--no-extrapolate", action="store_true", help="simulate every layer")
    p.add_argument(
        "--sim-layers",
        type=positive_int,
        default=SimOptions().sim_layers,
        help="layers to simulate before extrapolating repeated ones",
    )
    p.add_argument(
        "--approx-layers",
        type=non_negative_int,
        default=0,
        metavar="K",
        help=f"approximate: simulate K layers (at least {MIN_APPROX_LAYERS}) and extend the rest at each pass's "
        "measured pace, printing the measured error beside the result (default: 0, exact)",
    )
    p.add_argument(
        "--jitter",
        type=non_negative_float,
        default=0.0,
        help="coefficient of variation of kernel times, in [0, 1) (0 = none)",
    )
    p.add_argument("--seed", type=seed_arg, default=0, help="seed of the kernel-time noise")
    add_training_flags(p)
    add_config_flag(p, ConfigFormat(command=COMMAND, settings=config_settings))
    p.set_defaults(func=cmd_simulate)
