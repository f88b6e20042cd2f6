"""The ``nspsim_runtime.train`` command line, resolved into one validated :class:`TrainArgs`.

The workload flags are nspsim's own (:func:`nspsim.cli.flags.add_workload_args`, with the runtime's
defaults: the ``tiny`` model, 8k tokens per batch, 2k max context) and land in a nested
:class:`nspsim.workload.WorkloadConfig`, so ``nspsim`` and ``nspsim_runtime.train`` cannot drift apart in
what a workload flag means or accepts. Two of the workload's fields describe the machine and are
known only once the world is up (:meth:`TrainArgs.workload_on`): ``gpus`` is the world size (there
is no ``--gpus``), and the cluster preset is ``--cluster`` or, without it, ``cpu`` on CPU and
``h100`` on CUDA. Trade-off: the runtime inherits nspsim's argument checks (a negative ``--seed`` or
``--spmax 0`` is refused while parsing, with nspsim's message).

``--config R.config.json`` reads a run's resolved config back as the defaults (the flags given
override them; :mod:`nspsim.cli.config_file`, :func:`config_settings`): the same arguments but for
``--records``.

``--accumulate W`` makes every W consecutive batches one gradient-accumulation window (one optimizer
step); ``--steps`` still counts batches (passes), so it must be a multiple of W.

Errors are one-line ``ValueError``\\ s (:class:`nspsim.cli.flags.Parser` turns argparse's into one);
every rank parses, so a bad argument ends them all before any set-up.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

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
    parse_with_config,
    section,
    workload_settings,
)
from nspsim.cli.flags import Parser, add_prepare_flag, add_workload_args
from nspsim.cli.outputs import output_file
from nspsim.execution.prepare import Preparation, resolve_preparation
from nspsim.execution.recompute import RECOMPUTE_CHOICES, RecomputeMode
from nspsim.options import parse_options, positive_float
from nspsim.planners import declared_preparation, get_planner
from nspsim.planners.window import CANDIDATES
from nspsim.workload import WorkloadConfig, check_input_digests
from nspsim_runtime.exec_options import GRAD_SYNC_MODES, ExecOptions
from nspsim_runtime.training.window_args import add_window_flags, candidate_names, check_window, window_settings

PROG = "nspsim_runtime.train"

RUNTIME_WORKLOAD = WorkloadConfig(model="tiny", cluster="cpu", gpus=1, tokens_per_batch=8192, max_context=2048)
"""The runtime's workload defaults (one CPU process until the world says otherwise)."""

EXEC_DEFAULTS = ExecOptions()
"""The executor flags' defaults: :class:`~nspsim_runtime.exec_options.ExecOptions`' own."""
EXEC_FLAGS = ("lookahead", "recompute", "kernel", "grad_sync")
"""The ``nspsim_runtime.train`` flags that land in ``TrainArgs.execution``."""

CUDA_CLUSTER = "h100"
"""The cluster preset planned against on CUDA when ``--cluster`` is not given."""

MAX_TIMEOUT_S = 1e6
"""Largest --comm-timeout / --step-timeout (11.6 days): gloo and NCCL take the timeout as a C integer
of milliseconds, and 1e15 s already overflows it."""


@dataclass(frozen=True, kw_only=True)
class TrainArgs:
    """Resolved command line (written next to the records).

    ``workload`` holds the workload flags; its ``gpus`` and (unless ``cluster`` names a preset)
    ``cluster`` are replaced by the machine's in :meth:`workload_on`. ``cluster`` is ``--cluster`` as
    given: ``None`` lets the device choose. ``execution`` holds the executor flags (``--lookahead``,
    ``--recompute``, ``--kernel``, ``--grad-sync``); the trainer adds what only the device decides
    (autocast, all-reduce on one rank). ``accumulate`` is the window size W (1: one optimizer step per
    batch), ``accumulate_sync`` when FSDP2 synchronises a window's gradients, ``window_candidates`` the
    window planner's candidate assignments.
    """

    planner: str
    planner_options: dict[str, Any] = field(default_factory=dict)
    workload: WorkloadConfig = RUNTIME_WORKLOAD
    cluster: str | None = None
    steps: int = 10
    start_batch: int = 0
    lr: float = 1e-3
    accumulate: int = 1
    accumulate_sync: str = "pass"
    window_candidates: tuple[str, ...] = CANDIDATES
    execution: ExecOptions = field(default_factory=ExecOptions)
    device: str = "auto"
    dtype: str = "auto"
    plan_on: str = "rank0"
    plan_ahead: str = "next"
    prepare: str = "planner"
    simulate: bool = True
    comm_timeout_s: float = 120.0
    step_timeout_s: float = 600.0
    records: str | None = None

    def __post_init__(self) -> None:
        checks = [
            (self.steps > 0, f"--steps must be positive, got {self.steps}"),
            (self.start_batch >= 0, f"--start-batch must be >= 0, got {self.start_batch}"),
            (
                self.execution.lookahead is None or self.execution.lookahead >= 0,
                f"--lookahead must be >= 0, got {self.execution.lookahead}",
            ),
            (
                self.prepare not in ("recompute", "all") or self.execution.recompute == RecomputeMode.PLAN,
                f"--prepare {self.prepare} derives the marks; it cannot be combined with "
                f"--recompute {self.execution.recompute}",
            ),
            (
                self.cluster is None or self.cluster == self.workload.cluster,
                f"cluster {self.cluster!r} differs from the workload's {self.workload.cluster!r}; "
                "give the same preset to both",
            ),
        ]
        for ok, msg in checks:
            if not ok:
                raise ValueError(msg)
        check_window(
            self.accumulate,
            steps=self.steps,
            sync=self.accumulate_sync,
            candidates=self.window_candidates,
            grad_sync=self.execution.grad_sync,
        )

    @property
    def preparation(self) -> Preparation:
        """The preparation ``--prepare`` resolves to for this planner (by default its declaration); the
        tree-level marks are dropped when ``--recompute all|none`` forces the marks instead."""
        resolved = resolve_preparation(self.prepare, declared_preparation(self.planner))
        return resolved if self.execution.recompute == RecomputeMode.PLAN else replace(resolved, tree_recompute=False)

    @property
    def planner_spec(self) -> str:
        """The planner as a spec in the ``nspsim compare`` label format (``nsp``, ``static:degree=2``)."""
        if not self.planner_options:
            return self.planner
        return self.planner + ":" + "+".join(f"{k}={_spec_value(v)}" for k, v in self.planner_options.items())

    def workload_on(self, *, world: int, device_type: str) -> WorkloadConfig:
        """The workload every rank plans against on this machine: ``world`` GPUs of the preset
        ``cluster``, else ``cpu`` on CPU and :data:`CUDA_CLUSTER` on CUDA (the preset must describe the
        machine that runs)."""
        cluster = self.cluster or ("cpu" if device_type == "cpu" else CUDA_CLUSTER)
        return replace(self.workload, cluster=cluster, gpus=world)


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
        raise ValueError(
            f"planner options: {exc} (--planner name:key=value+key=value, --planner-option key=value)"
        ) from None


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


def _model(model: str | None, hf_config: str | None) -> str:
    """The workload's model: ``--hf-config FILE`` (an existing file), else ``--model``, else the default."""
    if hf_config is None:
        return model or RUNTIME_WORKLOAD.model
    if model is not None:
        raise ValueError(f"give --model or --hf-config, not both (--model {model}, --hf-config {hf_config})")
    if not Path(hf_config).is_file():
        raise ValueError(f"--hf-config {hf_config}: no such file (a transformers config.json)")
    return hf_config


def build_parser() -> argparse.ArgumentParser:
    """The command line (see :mod:`nspsim_runtime.train`); errors raise ``ValueError`` (one line)."""
    p = Parser(prog=PROG, description="Execute planned batches with NSP and record every step.")
    p.add_argument(
        "--planner",
        default=None,
        help="planner spec: a registered name, optionally with options as name:key=value+key=value "
        "(required, unless --config gives it)",
    )
    p.add_argument(
        "--planner-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="planner option (nspsim.options value rules), repeatable",
    )
    add_workload_args(
        p,
        RUNTIME_WORKLOAD,
        gpus=False,
        cluster_help="cluster preset or cluster file (.toml) describing this machine (default: cpu on CPU)",
        seed_help="seed of batches, tokens and initial weights",
        training=False,
    )
    # --model's default is applied in parse_args, so that --model and --hf-config together are refused.
    model = next(a for a in p._actions if a.dest == "model")
    model.default, model.help = None, f"{model.help} (default: {RUNTIME_WORKLOAD.model})"
    p.add_argument(
        "--hf-config",
        metavar="FILE",
        default=None,
        help="a transformers config.json to train (the documented spelling of --model FILE; needs the hf extra)",
    )
    p.add_argument("--steps", type=int, default=10, help="training steps to run, one planned batch each")
    p.add_argument("--start-batch", type=int, default=0, help="index of the first batch")
    p.add_argument("--lr", type=positive_float, default=1e-3, help="AdamW learning rate")
    add_window_flags(p)
    p.add_argument(
        "--grad-sync",
        choices=GRAD_SYNC_MODES,
        default=EXEC_DEFAULTS.grad_sync,
        help="gradient synchronisation: fsdp (FSDP2 per layer, as simulated) or allreduce (one flat "
        "all-reduce after the last micro-batch; no step prediction)",
    )
    p.add_argument(
        "--recompute",
        choices=RECOMPUTE_CHOICES,
        default=EXEC_DEFAULTS.recompute,
        help="attention save/recompute marks: plan (the plan's marks, else the memory model's decision), "
        "all (recompute every sample's attention) or none (keep all)",
    )
    p.add_argument(
        "--lookahead",
        type=_lookahead,
        default=EXEC_DEFAULTS.lookahead,
        help="phase streaming: all (default: every prologue first), or at most N prologues ahead (0 = serial)",
    )
    p.add_argument(
        "--kernel",
        default=EXEC_DEFAULTS.kernel,
        help="attention kernel: auto, math, cpu-flash, torch-varlen, flash-attn",
    )
    p.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="where ranks run: cpu (gloo), cuda (NCCL) or auto (CUDA when available)",
    )
    p.add_argument(
        "--dtype",
        choices=("auto", "fp32", "bf16"),
        default="auto",
        help="compute dtype: bf16 autocast (fp32 master weights) or fp32; auto = bf16 on CUDA, fp32 on CPU",
    )
    p.add_argument(
        "--plan-on",
        choices=("rank0", "all"),
        default="rank0",
        help="rank0: rank 0 plans and broadcasts; all: every rank plans (hashes are checked)",
    )
    p.add_argument(
        "--plan-ahead",
        choices=("next", "all"),
        default="next",
        help="next: plan batch i+1 on a background thread while batch i runs; all: plan every batch before the "
        "first step, so planning never shares the cores with a measured step (what nspsim_runtime.validate uses)",
    )
    add_prepare_flag(p)
    p.add_argument("--no-simulate", dest="simulate", action="store_false", help="do not simulate each plan")
    p.add_argument("--comm-timeout", dest="comm_timeout_s", type=_timeout, default=120.0, help="collective timeout, s")
    p.add_argument("--step-timeout", dest="step_timeout_s", type=_timeout, default=600.0, help="watchdog per step, s")
    p.add_argument("--records", default=None, help="JSONL output (rank 0); config and plans are written beside it")
    add_config_flag(p, ConfigFormat(command=PROG, settings=config_settings))
    return p


WORKLOAD_FLAGS = (
    "trace",
    "model",
    "tokens_per_batch",
    "max_context",
    "seed",
    "backend",
    "profile",
    "token_budget",
    "spmax",
)
"""The workload fields ``nspsim_runtime.train`` has flags for (the world size and the machine decide the rest)."""
RUNTIME_FLAGS = (
    "cluster",
    "steps",
    "start_batch",
    "lr",
    "accumulate",
    "accumulate_sync",
    "device",
    "dtype",
    "plan_on",
    "plan_ahead",
    "prepare",
    "simulate",
    "comm_timeout_s",
    "step_timeout_s",
)
"""The :class:`TrainArgs` fields whose flags' dests are their names."""


def config_settings(data: dict[str, Any]) -> Settings:
    """The flags of a written ``R.config.json`` (:mod:`nspsim.cli.config_file`): the workload flags and
    ``runtime`` (the resolved :class:`TrainArgs`); the planner and its options as one ``--planner``
    spec. Not set: the world, device and torch version this machine has, the workload's cluster and
    GPUs (``runtime.cluster`` and the world decide them), what the trainer derives (autocast, sync
    timing) and ``--records`` (a re-run writes where its own flags say)."""
    keys(data, (COMMAND_KEY, "workload", "runtime", "world", "device", "torch", "token_budget", INPUTS_KEY))
    runtime = section(data, "runtime", tuple(f.name for f in fields(TrainArgs) if f.name != "workload"))
    execution = section(runtime, "execution", tuple(f.name for f in fields(ExecOptions)), "runtime.")
    out = workload_settings(section(data, "workload", WORKLOAD_FIELDS), WORKLOAD_FLAGS, "workload.")
    out |= inputs_setting(data)
    out |= {name: (f"runtime.{name}", runtime[name]) for name in RUNTIME_FLAGS if name in runtime}
    out |= window_settings(runtime)
    out |= {name: (f"runtime.execution.{name}", execution[name]) for name in EXEC_FLAGS if name in execution}
    if "planner" in runtime:
        if not isinstance(runtime["planner"], str):
            raise ValueError(f"runtime.planner: a planner name, got {runtime['planner']!r}")
        options = option_strings(runtime.get("planner_options", {}), "runtime.planner_options")
        spec = runtime["planner"] + "".join(
            (":" if i == 0 else "+") + f"{k}={v}" for i, (k, v) in enumerate(options.items())
        )
        out["planner"] = ("runtime.planner", spec)
    return out


def parse_args(argv: list[str] | None = None) -> TrainArgs:
    """Parse and validate; ``ValueError`` with a one-line message for bad values."""
    values = vars(parse_with_config(build_parser(), argv))
    values.pop("config")
    recorded = values.pop("config_inputs", {})
    if values["planner"] is None:
        raise ValueError("the following arguments are required: --planner")
    values["model"] = _model(values.pop("model"), values.pop("hf_config"))
    name, options = planner_options(values.pop("planner"), values.pop("planner_option"))
    cluster = values.pop("cluster")
    given = {f.name: values.pop(f.name) for f in fields(WorkloadConfig) if f.name in values}
    workload = replace(RUNTIME_WORKLOAD, cluster=cluster or RUNTIME_WORKLOAD.cluster, **given)
    check_input_digests({k: v for k, v in recorded.items() if k != "cluster" or cluster}, workload)
    execution = ExecOptions(**{key: values.pop(key) for key in EXEC_FLAGS})
    values["window_candidates"] = candidate_names(values["window_candidates"])
    args = TrainArgs(
        planner=name, planner_options=options, workload=workload, cluster=cluster, execution=execution, **values
    )
    if args.records is not None:  # every rank checks, so a bad path ends them all before any set-up
        output_file(
            args.records,
            flag="--records",
            inputs=(workload.trace, workload.profile),
            siblings=(".config.json", ".plans.jsonl"),
            make_parent=True,
            writer=PROG,
        )
    get_planner(args.planner, **args.planner_options)  # unknown names and options fail before any set-up
    return args
