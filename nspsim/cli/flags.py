"""Shared command-line pieces: flag types, the workload flags, output-path checks, the one-line
error parser and ``--json`` printing.

A leaf module: it imports specs and the workload config, never a command, so every subcommand
(``nspsim/cli/commands/``) and the runtime's entry points (``nspsim_runtime.train``, ``nspsim_runtime.report``)
build their flags from it without an import circle; :mod:`nspsim.cli.main` registers the commands.
User errors end with one line ``nspsim: error: ...`` and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, NoReturn

from nspsim.execution.prepare import PREPARE_CHOICES, PREPARE_HELP
from nspsim.jsonfile import dumps_json
from nspsim.specs.backend import BACKENDS
from nspsim.specs.clusters import CLUSTER_PRESETS
from nspsim.specs.hf import HF_CONFIGS, max_position
from nspsim.specs.model import MODEL_PRESETS
from nspsim.specs.training import (
    ATTENTION_KERNELS,
    CHECKPOINTING,
    DEFAULT_TRAINING,
    TRAINING_FIELDS,
    TRAINING_PRESETS,
    TrainingSpec,
)
from nspsim.trace.base import MAX_SEED
from nspsim.units import format_tokens, parse_tokens
from nspsim.workload import Workload, WorkloadConfig

DEFAULT_WORKLOAD = WorkloadConfig()
"""The workload flags' defaults: :class:`WorkloadConfig`'s own fields."""

EXIT_USAGE = 2


class CliError(ValueError):
    """A user-facing error raised by argument parsing (a ``ValueError``, so callers that report
    ``ValueError`` as a one-line error, such as the runtime's entry points, need nothing more)."""


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` with every option's default, except where there is nothing to say (``None``, a
    switch that takes no value, an empty list) or the help text already states it ("default"); token counts are
    shown as they are typed (``2M``, ``192K``)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text, default = action.help or "", action.default
        switch = action.nargs == 0  # --json, --no-simulate: a default of the stored value says nothing
        quiet = switch or default is None or default is argparse.SUPPRESS or default == []
        if quiet or "default" in text:
            return text
        if action.type is tokens_arg and isinstance(default, int):
            return f"{text} (default: {format_tokens(default)})"
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """argparse that reports errors as one line instead of usage + message, and shows defaults in
    ``--help`` (:class:`HelpFormatter`, on every subparser built with ``parser_class=Parser``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

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


def seed_arg(text: str) -> int:
    """argparse type for a seed: an integer in [0, 2**63 - 1] (:data:`nspsim.trace.base.MAX_SEED`; every
    seed flag of nspsim and ``nspsim_runtime.train`` uses it, so torch never sees one it cannot take)."""
    value = _int_at_least(text, 0, "must be >= 0")
    if value > MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be at most 2**63 - 1 = {MAX_SEED:,}, got {_shown_arg(text)}")
    return value


def _int_at_least(text: str, minimum: int, rule: str) -> int:
    try:
        value = int(text)
    except ValueError:  # not a number, or too many digits for int() (over 4300)
        raise argparse.ArgumentTypeError(f"{_shown_arg(text)} is not an integer") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{rule}, got {_shown_arg(text)}")
    return value


def _shown_arg(text: str) -> str:
    """A flag's value quoted for a message, cut to a readable length (a 400-digit value stays short)."""
    return repr(text) if len(text) <= 40 else f"{text[:20]!r}... ({len(text)} characters)"


def shown(text: str) -> str:
    """``text`` safe to print on a terminal: every character that is not printable (ESC and the other
    control characters, newlines, bidi overrides) becomes its Python escape (``\\x1b``, ``\\u202e``),
    so a string read from a file can neither colour the terminal nor forge an output line. Every
    printer of a string that comes from a file (a plan's planner, model, cluster or trace name) uses
    it; ``--json`` output needs nothing (``json.dumps`` escapes control characters)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def warn(message: str) -> None:
    """One line ``nspsim: warning: ...`` on stderr (the command goes on), escaped as an error line is (it
    may quote a file's path or a spec's value)."""
    print(f"nspsim: warning: {shown(' '.join(message.split()))}", file=sys.stderr)


def add_workload_args(
    parser: argparse.ArgumentParser,
    defaults: WorkloadConfig = DEFAULT_WORKLOAD,
    *,
    trace: bool = True,
    gpus: bool = True,
    cluster_help: str | None = None,
    seed_help: str = "batch sampler seed",
    training: bool = True,
) -> None:
    """Flags shared by every command that needs a workload (info, plan, compare) and by
    ``nspsim_runtime.train``; every default is ``defaults``' field (one place: :class:`WorkloadConfig` or the
    caller's own config, e.g. the runtime's). ``gpus=False`` leaves ``--gpus`` out (the runtime's world
    size decides it), ``cluster_help`` replaces ``--cluster``'s help and, when given, its default with
    ``None`` (the caller chooses the preset, as the runtime does from the device), ``seed_help`` says
    what else the seed seeds, and ``training=False`` leaves the training-setting flags out (the
    runtime executes one training setup, so they would only change its predictions)."""
    if trace:
        parser.add_argument("--trace", default=defaults.trace, help="built-in trace name or length file")
    parser.add_argument(
        "--model",
        default=defaults.model,
        help=f"model preset ({', '.join([*MODEL_PRESETS, *HF_CONFIGS])}) or a transformers config.json path",
    )
    parser.add_argument(
        "--cluster",
        default=defaults.cluster if cluster_help is None else None,
        help=cluster_help
        or f"cluster preset ({', '.join(CLUSTER_PRESETS)}) or a cluster file (.toml; docs/clusters.md)",
    )
    if gpus:
        parser.add_argument(
            "--gpus",
            type=positive_int,
            default=defaults.gpus,
            help="number of GPUs (whole hosts; a count that is no power of two plans as a forest of SP trees)",
        )
    parser.add_argument(
        "--tokens-per-batch",
        type=tokens_arg,
        default=defaults.tokens_per_batch,
        help="global token budget per batch, e.g. 2M",
    )
    parser.add_argument(
        "--max-context",
        type=tokens_arg,
        default=defaults.max_context,
        help="drop samples longer than this, e.g. 192k (dropped samples are reported, with a warning when "
        "they hold over 10%% of the drawn tokens)",
    )
    parser.add_argument("--seed", type=seed_arg, default=defaults.seed, help=seed_help)
    parser.add_argument("--backend", choices=BACKENDS, default=defaults.backend, help="SP backend")
    parser.add_argument(
        "--profile", default=defaults.profile, help="JSON cost profile overriding analytic coefficients"
    )
    parser.add_argument(
        "--token-budget",
        type=tokens_arg,
        default=defaults.token_budget,
        help="override the per-GPU token budget B_tok (default: the memory model's, see nspsim info; "
        "a warning when the override is above it)",
    )
    parser.add_argument(
        "--spmax", type=positive_int, default=defaults.spmax, help="largest SP degree (default: admissible max)"
    )
    if training:
        add_training_flags(parser)


class _Replaced(argparse.Action):
    """A removed flag: one line naming the flag that replaced it."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help=argparse.SUPPRESS, default=argparse.SUPPRESS)

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option_string: str | None = None
    ) -> None:
        parser.error(
            f"{option_string} was replaced by --prepare (recompute: tree-level marks, order: issue order, "
            "all: both; the default is what the planner declares)"
        )


def add_prepare_flag(parser: argparse.ArgumentParser) -> None:
    """``--prepare`` (:data:`~nspsim.execution.prepare.PREPARE_CHOICES`, default ``planner``): the one
    preparation flag of every entry point; the flags it replaced say so in one line."""
    parser.add_argument("--prepare", choices=PREPARE_CHOICES, default="planner", help=PREPARE_HELP)
    for removed in ("--tree-recompute", "--optimize-order"):
        parser.add_argument(removed, action=_Replaced)


def add_training_flags(parser: argparse.ArgumentParser) -> None:
    """The training-system settings: a preset and overrides of its fields (``None``: the preset's)."""
    group = parser.add_argument_group("training settings (a preset, then overrides of its fields)")
    group.add_argument(
        "--training",
        choices=tuple(TRAINING_PRESETS),
        default=DEFAULT_TRAINING,
        help="training preset: fsdp (plain FSDP), paper-235b (the NSP paper's Qwen3-235B setup: EP 8, "
        "optimizer offload)",
    )
    group.add_argument(
        "--checkpointing",
        choices=CHECKPOINTING,
        default=None,
        help=f"activation checkpointing (default: the preset's; {TrainingSpec().checkpointing} for fsdp)",
    )
    group.add_argument(
        "--attention-kernel",
        choices=ATTENTION_KERNELS,
        default=None,
        help="attention kernel whose published throughput prices attention "
        f"(default: the preset's; {TrainingSpec().attention_kernel} for fsdp)",
    )
    group.add_argument(
        "--fused-elementwise",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="norms, activations, RoPE and loss as fused kernels (torch.compile) or op by op (default: fused)",
    )
    group.add_argument(
        "--expert-parallel", type=positive_int, default=None, help="expert-parallel degree (power of two)"
    )
    group.add_argument(
        "--optimizer-offload",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="optimizer states and step on the host CPU",
    )
    group.add_argument(
        "--fsdp-prefetch",
        dest="fsdp_prefetch_layers",
        type=non_negative_int,
        default=None,
        help="layers the FSDP all-gathers run ahead (default 1)",
    )


def training_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`WorkloadConfig` training fields of parsed training flags (each flag's dest is its
    field's name)."""
    return {"training": args.training, **{name: getattr(args, name) for name in TRAINING_FIELDS}}


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
        **(training_settings(args) if hasattr(args, "training") else {}),
    )


def warn_token_budget(workload: Workload) -> None:
    """Warn when ``--token-budget`` exceeds the B_tok the memory model derives: plans may then put
    more tokens on a GPU than fit, and the simulator reports those steps out of memory. Also warn
    when ``--max-context`` exceeds a transformers config's ``max_position_embeddings`` (the model's
    positions were not trained that far; the run is still simulated)."""
    limit = max_position(workload.config.model)
    if limit is not None and workload.config.max_context > limit:
        warn(
            f"--max-context {format_tokens(workload.config.max_context)} is beyond {workload.model.name}'s "
            f"max_position_embeddings {format_tokens(limit)}: samples longer than that are simulated, but the "
            "model was not built for them (extend its RoPE scaling, or lower --max-context)"
        )
    override, fits = workload.config.token_budget, workload.memory.derived_token_budget
    if override is not None and override > fits:
        warn(
            f"--token-budget {override:,} is above the memory model's B_tok={fits:,} tokens per GPU for "
            f"{workload.model.name} on {workload.cluster.label}: plans that use it run out of memory when "
            f"simulated; lower it to at most {fits:,} or leave it out"
        )


def emit(args: argparse.Namespace, data: dict[str, Any], text: str) -> None:
    """Print ``data`` as JSON with ``--json``, else the human-readable ``text``."""
    print(dumps_json(data, what="--json output", indent=2) if args.json else text)


def silence_closed_stdout() -> int:
    """After a ``BrokenPipeError`` on stdout (the reader of ``... | head`` left): point stdout at
    /dev/null so Python's exit-time flush does not fail again, and return the conventional 141."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 141
