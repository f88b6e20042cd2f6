"""The ``nspsim`` command line: a thin layer that parses flags into configs and prints results.

Each subcommand lives in ``nspsim/commands/<name>.py`` and exposes ``register(subparsers)``; this
module holds the shared flag helpers and the error policy. Every result command takes ``--json``.
User errors (bad flags, unknown presets, malformed files, impossible budgets) end with one line
``nspsim: error: ...`` on stderr and exit status 2; a traceback means a bug in nspsim.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NoReturn

from nspsim.specs.backend import BACKENDS, SPBackend
from nspsim.specs.cluster import CLUSTER_PRESETS
from nspsim.specs.model import MODEL_PRESETS
from nspsim.units import parse_tokens
from nspsim.workload import DEFAULT_MAX_CONTEXT, DEFAULT_TOKENS_PER_BATCH, WorkloadConfig

EXIT_USAGE = 2


class CliError(ValueError):
    """A user-facing error raised by argument parsing (a ``ValueError``, so callers that report
    ``ValueError`` as a one-line error, such as the runtime's entry points, need nothing more)."""


class Parser(argparse.ArgumentParser):
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
    """argparse type for an integer >= 1."""
    return _int_at_least(text, 1, "must be positive")


def non_negative_int(text: str) -> int:
    """argparse type for an integer >= 0 (seeds, indices)."""
    return _int_at_least(text, 0, "must be >= 0")


def _int_at_least(text: str, minimum: int, rule: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{rule}, got {value}")
    return value


def output_file(
    text: str, *, flag: str, inputs: Iterable[str | None] = (), siblings: Iterable[str] = (), make_parent: bool = False
) -> Path:
    """Check an output path before any work is done, so a long run cannot fail at its very end.

    Refuses an empty path, a directory, a missing (or, with ``make_parent``, uncreatable) or
    unwritable parent directory, and a path that is one of the command's ``inputs`` (the output, or
    a file written beside it with one of the ``siblings`` suffixes, would overwrite it).
    """
    if not text.strip():
        raise ValueError(f"{flag}: the output path is empty")
    path = Path(text)
    if path.is_dir():
        raise ValueError(f"{flag} {text} is a directory; give a file name")
    parent = path.parent
    if make_parent and not parent.exists():
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"{flag} {text}: cannot create the directory {parent} ({exc.strerror})") from None
    if parent.exists() and not parent.is_dir():
        raise ValueError(f"{flag} {text}: {parent} is a file, not a directory")
    if not parent.is_dir():
        raise ValueError(f"{flag} {text}: the directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {text}: the directory {parent} is not writable")
    outputs = [path, *(path.with_suffix(suffix) for suffix in siblings)]
    for source in (Path(i) for i in inputs if i):
        for out in outputs:
            if out.exists() and source.exists() and out.samefile(source):
                raise ValueError(f"{flag} {text} would overwrite the input file {source}; write elsewhere")
    return path


def add_workload_args(
    parser: argparse.ArgumentParser,
    *,
    trace: bool = True,
    gpus: bool = True,
    model: str = "qwen3-30b-a3b",
    cluster: str | None = "h100",
    cluster_help: str | None = None,
    tokens_per_batch: int = DEFAULT_TOKENS_PER_BATCH,
    max_context: int = DEFAULT_MAX_CONTEXT,
    seed_help: str = "batch sampler seed",
) -> None:
    """Flags shared by every command that needs a workload (info, plan, simulate, compare) and by
    ``runtime.train``, which passes its own defaults: ``gpus=False`` leaves ``--gpus`` out (its world
    size decides it), ``cluster=None`` leaves the preset to the caller (say how in ``cluster_help``),
    and ``seed_help`` says what else the seed seeds."""
    if trace:
        parser.add_argument("--trace", default="wikipedia", help="built-in trace name or length file")
    parser.add_argument("--model", default=model, help=f"model preset ({', '.join(MODEL_PRESETS)})")
    parser.add_argument(
        "--cluster", default=cluster, help=cluster_help or f"cluster preset ({', '.join(CLUSTER_PRESETS)})"
    )
    if gpus:
        parser.add_argument("--gpus", type=positive_int, default=64, help="number of GPUs (a power of two)")
    parser.add_argument(
        "--tokens-per-batch", type=tokens_arg, default=tokens_per_batch, help="global token budget per batch, e.g. 2M"
    )
    parser.add_argument(
        "--max-context", type=tokens_arg, default=max_context, help="drop samples longer than this, e.g. 192k"
    )
    parser.add_argument("--seed", type=non_negative_int, default=0, help=seed_help)
    parser.add_argument("--backend", choices=BACKENDS, default=SPBackend.ULYSSES, help="SP backend")
    parser.add_argument("--profile", default=None, help="JSON cost profile overriding analytic coefficients")
    parser.add_argument("--token-budget", type=tokens_arg, default=None, help="override the per-GPU token budget")
    parser.add_argument("--spmax", type=positive_int, default=None, help="largest SP degree (default: admissible max)")


def workload_config(args: argparse.Namespace) -> WorkloadConfig:
    """The resolved :class:`WorkloadConfig` of parsed workload flags."""
    return WorkloadConfig(
        trace=getattr(args, "trace", "wikipedia"),
        model=args.model,
        cluster=args.cluster,
        gpus=args.gpus,
        tokens_per_batch=args.tokens_per_batch,
        max_context=args.max_context,
        seed=args.seed,
        backend=args.backend,
        profile=args.profile,
        token_budget=args.token_budget,
        spmax=args.spmax,
    )


def emit(args: argparse.Namespace, data: dict[str, Any], text: str) -> None:
    """Print ``data`` as JSON with ``--json``, else the human-readable ``text``."""
    print(json.dumps(data, indent=2) if args.json else text)


def silence_closed_stdout() -> int:
    """After a ``BrokenPipeError`` on stdout (the reader of ``... | head`` left): point stdout at
    /dev/null so Python's exit-time flush does not fail again, and return the conventional 141."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 141
