"""``nspsim plan``: route one batch with a named planner and summarise the plan.

``-o plan.json`` writes the plan and ``plan.config.json`` (the resolved workload, planner, options
and batch index) beside it. The plan is prepared as ``--prepare`` says (by default as its planner
declares, its issue-order candidates ranked by the default simulator, as ``nspsim compare`` does) and
records the preparation, so ``nspsim simulate`` runs it as written. Planner options are
``--option KEY=VALUE`` (repeatable; values are typed by :mod:`nspsim.options`: true/false, int,
finite float, else text), e.g. ``--option beam_width=8 --option monotone=false``. ``--config
P.config.json`` re-runs a plan from its side file (:mod:`nspsim.cli.config_file`; an ``--option``
replaces the file's option of the same key, and another ``--planner`` plans without the file's options).
"""

from __future__ import annotations

import argparse
from typing import Any

from nspsim.api import prepared
from nspsim.cli.config_file import (
    COMMAND_KEY,
    INPUTS_KEY,
    WORKLOAD_FIELDS,
    ConfigFormat,
    Settings,
    add_config_flag,
    inputs_setting,
    keys,
    option_strings,
    require,
    workload_settings,
)
from nspsim.cli.flags import (
    add_prepare_flag,
    add_workload_args,
    emit,
    non_negative_int,
    shown,
    warn,
    warn_token_budget,
    workload_config,
)
from nspsim.cli.outputs import output_file, write_output
from nspsim.compare.summary import BatchDrops, plan_drop_fields
from nspsim.execution.prepare import recorded_preparation
from nspsim.jsonfile import dumps_json
from nspsim.options import parse_options
from nspsim.plan import Plan
from nspsim.planners import PLANNER_NAMES, get_planner
from nspsim.units import format_tokens
from nspsim.workload import build_workload, check_input_digests, input_digests

COMMAND = "nspsim plan"


def plan_summary(plan: Plan) -> dict[str, Any]:
    """The JSON fields of ``nspsim plan --json`` (plus config added by the command)."""
    meta = plan.metadata
    tokens = [plan.tokens_per_gpu(mb) for mb in range(plan.num_micro_batches)]
    return {
        "planner": plan.planner,
        "num_samples": plan.num_samples,
        "micro_batches": plan.num_micro_batches,
        "load_s": meta["load_s"],
        "lower_bound_s": meta["lower_bound_s"],
        "load_over_lower_bound": meta["load_over_lower_bound"],
        "step_estimate_s": meta["step_estimate_s"],
        "planning_time_s": meta["planning_time_s"],
        "max_tokens_per_gpu": max(float(t.max()) for t in tokens),
        "mean_tokens_per_gpu": float(sum(t.sum() for t in tokens)) / (len(tokens[0]) * len(tokens)),
        "token_budget": plan.token_budget,
        "samples_per_degree": {str(d): n for d, n in plan.samples_per_degree().items()},
        "plan_hash": plan.content_hash,
        **plan_drop_fields(plan),
        "metadata": dict(meta),
    }


def format_summary(plan: Plan, data: dict[str, Any]) -> str:
    """Human-readable plan summary."""
    levels = "  ".join(f"SP{d}: {n}" for d, n in data["samples_per_degree"].items())
    extra = {
        k: v
        for k, v in plan.metadata.items()
        if k
        not in {
            "load_s",
            "lower_bound_s",
            "load_over_lower_bound",
            "step_estimate_s",
            "planning_time_s",
            "planning_cpu_s",
            "micro_batches",
            "dropped_samples",
            "dropped_tokens",
        }
    }
    drops = BatchDrops.of_plan(plan)
    return "\n".join(
        [
            f"plan      {plan.content_hash} by {plan.planner}: {plan.model.name} on {plan.cluster.label}",
            f"batch     {shown(plan.batch.trace)} seed {plan.batch.seed} #{plan.batch.index}: "
            f"{plan.num_samples} samples, "
            f"{format_tokens(sum(plan.lengths))} tokens, {plan.num_micro_batches} micro-batch(es)",
            *([] if drops is None else [f"dropped   {drops.describe()}"]),
            f"levels    {levels}",
            f"tokens    per GPU max {data['max_tokens_per_gpu']:.0f}, mean {data['mean_tokens_per_gpu']:.0f} "
            f"of B_tok={plan.token_budget}",
            f"load      {data['load_s']:.4f} s proxy Load; lower bound {data['lower_bound_s']:.4f} s "
            f"(ratio {data['load_over_lower_bound']:.3f}); step estimate {data['step_estimate_s']:.4f} s",
            f"time      {1e3 * data['planning_time_s']:.1f} ms planning "
            f"({1e3 * float(plan.metadata['planning_cpu_s']):.1f} ms CPU)",
            "details   " + ", ".join(f"{k}={_detail(v)}" for k, v in sorted(extra.items())),
        ]
    )


def cmd_plan(args: argparse.Namespace) -> int:
    """Draw the batch, plan it, print (and optionally write) the result."""
    path = (
        None
        if args.output is None
        else output_file(
            args.output,
            flag="-o",
            inputs=(args.trace, args.profile),
            siblings=(".config.json",),
            make_parent=True,
            writer=COMMAND,
        )
    )
    # the --config file's options are its planner's; --option replaces one of the same key
    options = {**args.planner_options.get(args.planner, {}), **parse_options(args.option)}
    planner = get_planner(args.planner, **options)
    check_input_digests(getattr(args, "config_inputs", {}), workload_config(args))  # --config: the same files
    workload = build_workload(workload_config(args))
    warn_token_budget(workload)
    batch = workload.sampler.batch(args.batch_index)
    drops = BatchDrops.of_batches([batch]).warning()
    if drops is not None:
        warn(f"batch {batch.index}: {drops}")
    plan = prepared(workload, planner.plan(batch, workload), args.prepare)
    config = {
        COMMAND_KEY: COMMAND,
        **workload.config.to_dict(),
        "planner": args.planner,
        "planner_options": options,
        "batch_index": args.batch_index,
        "prepare": args.prepare,
        "preparation": recorded_preparation(plan) or "none",
        "inputs": input_digests(workload.config),
    }
    data = {"config": config, **plan_summary(plan)}
    if path is not None:
        write_output(
            path,
            plan.to_json(indent=1),
            flag="-o",
            siblings={".config.json": dumps_json(config, what="config", indent=2)},
        )
    emit(args, data, format_summary(plan, data))
    return 0


def config_settings(data: dict[str, Any]) -> Settings:
    """The flags of a written plan config (:mod:`nspsim.cli.config_file`): the workload, planner, its
    options (kept by planner: they apply when the file's planner plans, under ``--option`` of the same
    key), batch index and ``--prepare``; ``preparation`` is what ``--prepare`` resolved to."""
    inputs = ("planner", "batch_index", "prepare")
    keys(data, (COMMAND_KEY, *WORKLOAD_FIELDS, *inputs, "planner_options", "preparation", INPUTS_KEY))
    require(data, (*WORKLOAD_FIELDS, *inputs, "planner_options"))
    out = workload_settings(data, WORKLOAD_FIELDS) | {name: (name, data[name]) for name in inputs}
    out |= inputs_setting(data)
    if "planner_options" in data:
        option_strings(data["planner_options"], "planner_options")  # plain values only
        if not isinstance(data.get("planner"), str):
            raise ValueError("planner_options: given without the planner they belong to (planner)")
        out["planner_options"] = ("planner_options", {data["planner"]: data["planner_options"]})
    return out


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``plan``."""
    cmd = sub.add_parser("plan", help="route one batch with a planner and summarise the plan")
    cmd.add_argument("--planner", default="nsp", choices=PLANNER_NAMES, help="planner name")
    add_workload_args(cmd)
    cmd.add_argument("--batch-index", type=non_negative_int, default=0, help="which batch of the trace")
    cmd.add_argument(
        "--option",
        "-O",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="planner option, repeatable (e.g. beam_width=8, degree=16, time_limit=1)",
    )
    add_prepare_flag(cmd)
    cmd.add_argument("-o", "--output", default=None, help="write the plan JSON here (and .config.json beside it)")
    cmd.add_argument("--json", action="store_true", help="print JSON")
    add_config_flag(cmd, ConfigFormat(command=COMMAND, settings=config_settings))
    cmd.set_defaults(func=cmd_plan, planner_options={})


def _detail(value: object) -> str:
    """A metadata value as the summary shows it: floats to 4 decimals (seconds, ratios), else as is."""
    return f"{value:.4f}" if isinstance(value, float) else str(value)
