"""``nspsim trace stats TRACE`` and ``nspsim trace list``."""

from __future__ import annotations

import argparse
from typing import Any

from nspsim.cli.flags import Parser, emit, positive_int, seed_arg, shown
from nspsim.trace import builtin_trace_names, load_trace
from nspsim.trace.stats import format_stats, trace_stats

MAX_SAMPLES = 10_000_000  # 3-4.4 s and ~0.6 GB peak here; 10x more ran over 20 s with no output (a seeming hang)


def sample_count(text: str) -> int:
    """argparse type for ``--samples``: a positive integer up to :data:`MAX_SAMPLES`."""
    value = positive_int(text)
    if value > MAX_SAMPLES:
        raise argparse.ArgumentTypeError(f"at most {MAX_SAMPLES:,} samples, got {value:,}")
    return value


def cmd_stats(args: argparse.Namespace) -> int:
    """Length statistics of a trace file or built-in trace."""
    trace = load_trace(args.trace)
    stats = trace_stats(trace.materialize(args.samples, seed=args.seed))
    data = {"trace": trace.name, "source": trace.source, "identity": trace.identity, **stats.to_dict()}
    if trace.file is not None:  # read from a file: which one, and the hash of the bytes read
        data["file"] = {"path": trace.file.path, "content_hash": trace.file.content_hash}
    title = f"{trace.name} ({trace.source})" + (f", recorded as {trace.identity}" if trace.file else "")
    title = shown(title)  # a histogram file's name and source are the file's words: never raw escapes
    emit(args, data, format_stats(stats, title))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    """The built-in traces and their sources."""
    rows = {name: load_trace(name).source for name in builtin_trace_names()}
    emit(args, {"traces": rows}, "\n".join(f"{name:16s} {src}" for name, src in rows.items()))
    return 0


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``trace stats`` and ``trace list``."""
    trace = sub.add_parser("trace", help="inspect length traces")
    trace_sub = trace.add_subparsers(dest="trace_command", required=True, parser_class=Parser)
    stats = trace_sub.add_parser("stats", help="length statistics of a trace")
    stats.add_argument("trace", help=f"trace file or built-in name ({', '.join(builtin_trace_names())})")
    stats.add_argument(
        "--samples",
        type=sample_count,
        default=None,
        help=f"lengths to draw from a generative trace (default 1,000,000, at most {MAX_SAMPLES:,})",
    )
    stats.add_argument("--seed", type=seed_arg, default=0, help="seed for generative traces")
    stats.add_argument("--json", action="store_true", help="print JSON")
    stats.set_defaults(func=cmd_stats)
    listing = trace_sub.add_parser("list", help="list built-in traces")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(func=cmd_list)
