"""``nspsim inspect PLAN``: validate a plan file (optionally against a cluster) and summarise it."""

from __future__ import annotations

import argparse
from typing import Any

from nspsim.cli.flags import emit, positive_int
from nspsim.plan import Plan
from nspsim.specs.cluster import get_cluster


def cmd_inspect(args: argparse.Namespace) -> int:
    """Load, validate and summarise a plan."""
    if args.cluster is None and args.gpus is not None:
        raise ValueError("--gpus only applies with --cluster (the plan records its own GPU count)")
    cluster = get_cluster(args.cluster, 64 if args.gpus is None else args.gpus) if args.cluster is not None else None
    plan = Plan.load(args.plan, cluster)
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
        "metadata": dict(plan.metadata),
    }
    degrees = ", ".join(f"SP{d}: {n}" for d, n in plan.samples_per_degree().items())
    text = "\n".join(
        [
            f"plan {plan.content_hash} by {plan.planner} for {plan.model.name} on {plan.cluster.label}",
            f"{plan.num_samples} samples in {plan.num_micro_batches} micro-batch(es); {degrees}",
            f"max sharded tokens per GPU {tokens:.0f} of budget {plan.token_budget}",
        ]
    )
    emit(args, data, text)
    return 0


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``inspect``."""
    inspect = sub.add_parser("inspect", help="validate and summarise a plan file")
    inspect.add_argument("plan", help="plan JSON file")
    inspect.add_argument("--cluster", default=None, help="refuse the plan unless it was made for this cluster")
    inspect.add_argument("--gpus", type=positive_int, default=None, help="GPU count of --cluster (default 64)")
    inspect.add_argument("--json", action="store_true", help="print JSON")
    inspect.set_defaults(func=cmd_inspect)
