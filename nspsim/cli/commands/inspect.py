"""``nspsim inspect PLAN``: validate a plan file (optionally against a cluster) and summarise it.

Every string the summary prints comes from the file, so each goes through :func:`shown` (a planner
name holding terminal escape sequences is printed escaped, never interpreted). A plan log (``*.jsonl``)
is validated whole; ``--index N`` picks the plan to summarise (required when it holds several)."""

from __future__ import annotations

import argparse
from typing import Any

from nspsim.cli.flags import emit, non_negative_int, positive_int, shown
from nspsim.plan.log import load_plans, pick_one
from nspsim.specs.clusters import get_cluster


def cmd_inspect(args: argparse.Namespace) -> int:
    """Load, validate and summarise a plan."""
    if args.cluster is None and args.gpus is not None:
        raise ValueError("--gpus only applies with --cluster (the plan records its own GPU count)")
    cluster = get_cluster(args.cluster, 64 if args.gpus is None else args.gpus) if args.cluster is not None else None
    plans = load_plans(args.plan)
    plan = pick_one(plans, args.index, args.plan)
    if cluster is not None:
        plan.check_compatible(cluster)
    tokens = max(float(plan.tokens_per_gpu(mb).max()) for mb in range(plan.num_micro_batches))
    data = {
        "plan_hash": plan.content_hash,
        "planner": plan.planner,
        "cluster": plan.cluster.label,
        "model": plan.model.name,
        "num_samples": plan.num_samples,
        "num_micro_batches": plan.num_micro_batches,
        "samples_per_degree": plan.samples_per_degree(),
        "max_tokens_per_gpu": tokens,
        "token_budget": plan.token_budget,
        "disjoint": plan.is_disjoint(),
        "profile": None if plan.profile is None else vars(plan.profile).copy(),
        "metadata": dict(plan.metadata),
    }
    degrees = ", ".join(f"SP{d}: {n}" for d, n in plan.samples_per_degree().items())
    text = "\n".join(
        [
            f"plan {plan.content_hash} by {shown(plan.planner)} for {shown(plan.model.name)} "
            f"on {shown(plan.cluster.label)}",
            f"{plan.num_samples} samples in {plan.num_micro_batches} micro-batch(es); {degrees}",
            f"max sharded tokens per GPU {tokens:.0f} of budget {plan.token_budget}",
            "costs: analytic"
            if plan.profile is None
            else f"costs: profile {shown(plan.profile.label)} (fingerprint {plan.profile.fingerprint})",
        ]
    )
    emit(args, data, text)
    return 0


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``inspect``."""
    inspect = sub.add_parser("inspect", help="validate and summarise a plan file")
    inspect.add_argument("plan", help="plan JSON file, or a plan log (*.jsonl, one plan per line)")
    inspect.add_argument(
        "--index",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="summarise the N-th plan of the file (0-based)",
    )
    inspect.add_argument("--cluster", default=None, help="refuse the plan unless it was made for this cluster")
    inspect.add_argument("--gpus", type=positive_int, default=None, help="GPU count of --cluster (default 64)")
    inspect.add_argument("--json", action="store_true", help="print JSON")
    inspect.set_defaults(func=cmd_inspect)
