"""The ``nspsim`` command line: a thin layer that parses flags into configs and prints results.

Every result command takes ``--json``. User errors (bad flags, unknown presets, malformed files,
impossible budgets) end with one line ``nspsim: error: ...`` on stderr and exit status 2; a
traceback means a bug in nspsim.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from nspsim.cluster_spec import CLUSTER_PRESETS, get_cluster
from nspsim.config import DEFAULT_MAX_CONTEXT, DEFAULT_TOKENS_PER_BATCH, WorkloadConfig, build_workload
from nspsim.model_spec import MODEL_PRESETS
from nspsim.plan import Plan
from nspsim.trace import builtin_trace_names, load_trace
from nspsim.trace_stats import format_stats, trace_stats
from nspsim.units import format_bytes, format_tokens, parse_tokens

EXIT_USAGE = 2

Handler = Callable[[argparse.Namespace], int]


class CliError(Exception):
    """A user-facing error raised by argument parsing."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports errors as one line instead of usage + message."""

    def error(self, message: str) -> NoReturn:
        raise CliError(message)


def tokens_arg(text: str) -> int:
    """argparse type for token counts with k/M suffixes."""
    try:
        return parse_tokens(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_int(text: str) -> int:
    """argparse type for a positive integer."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def add_workload_args(parser: argparse.ArgumentParser, *, trace: bool = True) -> None:
    """Flags shared by every command that needs a workload (plan, simulate, compare)."""
    if trace:
        parser.add_argument("--trace", default="wikipedia", help="built-in trace name or length file")
    parser.add_argument("--model", default="qwen3-30b-a3b", help=f"model preset ({', '.join(MODEL_PRESETS)})")
    parser.add_argument("--cluster", default="h100", help=f"cluster preset ({', '.join(CLUSTER_PRESETS)})")
    parser.add_argument("--gpus", type=positive_int, default=64, help="number of GPUs (a power of two)")
    parser.add_argument("--tokens-per-batch", type=tokens_arg, default=DEFAULT_TOKENS_PER_BATCH,
                        help="global token budget per batch, e.g. 2M")
    parser.add_argument("--max-context", type=tokens_arg, default=DEFAULT_MAX_CONTEXT,
                        help="drop samples longer than this, e.g. 192k")
    parser.add_argument("--seed", type=int, default=0, help="batch sampler seed")
    parser.add_argument("--backend", choices=("ulysses", "ring"), default="ulysses", help="SP backend")
    parser.add_argument("--profile", default=None, help="JSON cost profile overriding analytic coefficients")
    parser.add_argument("--token-budget", type=tokens_arg, default=None, help="override the per-GPU token budget")
    parser.add_argument("--spmax", type=positive_int, default=None, help="largest SP degree (default: admissible max)")


def workload_config(args: argparse.Namespace) -> WorkloadConfig:
    """The resolved :class:`WorkloadConfig` of parsed workload flags."""
    return WorkloadConfig(
        trace=getattr(args, "trace", "wikipedia"), model=args.model, cluster=args.cluster, gpus=args.gpus,
        tokens_per_batch=args.tokens_per_batch, max_context=args.max_context, seed=args.seed,
        backend=args.backend, profile=args.profile, token_budget=args.token_budget, spmax=args.spmax,
    )


def emit(args: argparse.Namespace, data: dict[str, Any], text: str) -> None:
    """Print ``data`` as JSON with ``--json``, else the human-readable ``text``."""
    print(json.dumps(data, indent=2, sort_keys=False) if args.json else text)


# ---- trace -------------------------------------------------------------------------------------
def cmd_trace_stats(args: argparse.Namespace) -> int:
    """``nspsim trace stats TRACE``: length statistics of a trace file or built-in trace."""
    trace = load_trace(args.trace)
    lengths = trace.materialize(args.samples, seed=args.seed)
    stats = trace_stats(lengths)
    data = {"trace": trace.name, "source": trace.source, **stats.to_dict()}
    emit(args, data, format_stats(stats, f"{trace.name} ({trace.source})"))
    return 0


def cmd_trace_list(args: argparse.Namespace) -> int:
    """``nspsim trace list``: the built-in traces."""
    rows = {name: load_trace(name).source for name in builtin_trace_names()}
    emit(args, {"traces": rows}, "\n".join(f"{name:16s} {src}" for name, src in rows.items()))
    return 0


# ---- info --------------------------------------------------------------------------------------
def cmd_info(args: argparse.Namespace) -> int:
    """``nspsim info``: derived model, cluster and memory figures of a workload."""
    wl = build_workload(workload_config(args))
    mem, model = wl.memory, wl.model
    data = {
        "config": wl.config.to_dict(), "total_params": model.total_params, "active_params": model.active_params,
        "spmax": wl.tree.spmax, "token_budget": wl.token_budget, "state_bytes_per_gpu": mem.state_bytes,
        "buffer_bytes_per_gpu": mem.buffer_bytes, "activation_capacity_bytes": mem.activation_capacity,
        "activation_bytes_per_token_recompute": mem.keep_bytes_per_token + mem.working_bytes_per_token,
    }
    text = "\n".join([
        f"model    {model.name}: {model.total_params / 1e9:.2f}B params, {model.active_params / 1e9:.2f}B active",
        f"cluster  {wl.cluster.label}: {wl.cluster.gpu.name}, {wl.cluster.num_nodes} hosts",
        f"spmax    {wl.tree.spmax}",
        f"memory   states {format_bytes(mem.state_bytes)}, buffers {format_bytes(mem.buffer_bytes)}, "
        f"activations {format_bytes(mem.activation_capacity)} per GPU",
        f"budget   B_tok = {wl.token_budget} sharded tokens per GPU ({format_tokens(wl.token_budget)})",
    ])
    emit(args, data, text)
    return 0


# ---- inspect -----------------------------------------------------------------------------------
def cmd_inspect(args: argparse.Namespace) -> int:
    """``nspsim inspect PLAN``: validate a plan file (optionally against a cluster) and summarise it."""
    cluster = get_cluster(args.cluster, args.gpus) if args.cluster else None
    plan = Plan.load(args.plan, cluster)
    tokens = [plan.tokens_per_gpu(mb).max() for mb in range(plan.num_micro_batches)]
    data = {
        "plan_hash": plan.content_hash, "planner": plan.planner, "cluster": plan.cluster.label,
        "model": plan.model.name, "num_samples": plan.num_samples, "num_micro_batches": plan.num_micro_batches,
        "samples_per_degree": plan.samples_per_degree(), "max_tokens_per_gpu": float(max(tokens)),
        "token_budget": plan.token_budget, "disjoint": plan.is_disjoint(), "metadata": dict(plan.metadata),
    }
    degrees = ", ".join(f"SP{d}: {n}" for d, n in plan.samples_per_degree().items())
    text = "\n".join([
        f"plan {plan.content_hash} by {plan.planner} for {plan.model.name} on {plan.cluster.label}",
        f"{plan.num_samples} samples in {plan.num_micro_batches} micro-batch(es); {degrees}",
        f"max sharded tokens per GPU {max(tokens):.0f} of budget {plan.token_budget}",
    ])
    emit(args, data, text)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The full ``nspsim`` parser."""
    parser = _Parser(prog="nspsim", description="Nested sequence parallelism simulator and planners.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    trace = sub.add_parser("trace", help="inspect length traces")
    trace_sub = trace.add_subparsers(dest="trace_command", required=True, parser_class=_Parser)
    stats = trace_sub.add_parser("stats", help="length statistics of a trace")
    stats.add_argument("trace", help=f"trace file or built-in name ({', '.join(builtin_trace_names())})")
    stats.add_argument("--samples", type=positive_int, default=None,
                       help="lengths to draw from a generative trace (default 1,000,000)")
    stats.add_argument("--seed", type=int, default=0)
    stats.add_argument("--json", action="store_true", help="print JSON")
    stats.set_defaults(func=cmd_trace_stats)
    tlist = trace_sub.add_parser("list", help="list built-in traces")
    tlist.add_argument("--json", action="store_true")
    tlist.set_defaults(func=cmd_trace_list)

    info = sub.add_parser("info", help="derived model/cluster/memory figures")
    add_workload_args(info)
    info.add_argument("--json", action="store_true")
    info.set_defaults(func=cmd_info)

    inspect = sub.add_parser("inspect", help="validate and summarise a plan file")
    inspect.add_argument("plan", help="plan JSON file")
    inspect.add_argument("--cluster", default=None, help="refuse the plan unless it was made for this cluster")
    inspect.add_argument("--gpus", type=positive_int, default=64)
    inspect.add_argument("--json", action="store_true")
    inspect.set_defaults(func=cmd_inspect)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``nspsim`` console script."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        handler: Handler = args.func
        return handler(args)
    except (CliError, ValueError, OSError) as exc:
        print(f"nspsim: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("nspsim: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
