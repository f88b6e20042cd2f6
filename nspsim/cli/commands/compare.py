"""``nspsim compare``: the main job. Plan and simulate several strategies on the same batches.

Prints a table (mean step time, normalised to the Static SP baseline, speedup, breakdown shares,
planning time, out-of-memory count) with a progress bar on stderr, ``--json`` prints the records,
and ``-o report.html`` writes a self-contained plotly report plus, beside it, ``report.config.json``
(the resolved config, which ``--config`` reads back: :mod:`nspsim.cli.config_file`) and
``report.results.parquet`` (one row per planner and batch in a sweep's row schema,
:func:`nspsim.sweep.results.compare_rows`: pandas reads it as it reads a sweep's ``results.parquet``),
the three written as one set and named in one ``nspsim: wrote ...`` line on stderr (unless ``--quiet``).
With no arguments it runs the built-in default: Qwen3-30B-A3B on 64 H100s, 2M tokens per batch, 192K
max context, the ``wikipedia`` trace, ``DEFAULT_ITERS`` batches.

Warnings (one line each on stderr, the run goes on): ``--token-budget`` above the memory model's B_tok,
and ``--max-context`` dropping more than ``DROPPED_WARN_SHARE`` (10%) of the drawn tokens. Exit
status (:data:`EXIT_HELP`): 0 with a result; 1 when every planner ran out of memory on every batch
(the table, JSON and report are still written, and say so); 2 for a usage error.

The report crosses the one boundary from nspsim into ``studies`` (where plotly lives): the module named
by ``REPORT_RENDERER`` is imported by that name, lazily, only when ``-o`` is given, and must provide
``render(CompareResult) -> str``. One named lazy import, rather than a separate ``python -m`` renderer
process, because the report draws each planner's in-memory timeline (tens of thousands of events)
that a process boundary would have to serialise and parse back; the constant keeps the dependency in
one place that the layering test can check (an ``importlib`` call is invisible to an import graph).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import pyarrow.parquet as pq
from tqdm import tqdm

from nspsim.cli.config_file import (
    COMMAND_KEY,
    INPUTS_KEY,
    WORKLOAD_FIELDS,
    ConfigFormat,
    Settings,
    add_config_flag,
    inputs_setting,
    keys,
    section,
    stamped,
    workload_settings,
)
from nspsim.cli.flags import (
    add_prepare_flag,
    add_workload_args,
    emit,
    non_negative_int,
    positive_int,
    warn,
    warn_token_budget,
    workload_config,
)
from nspsim.cli.outputs import output_file, write_output
from nspsim.cli.progress import Bar
from nspsim.cli.renderer_error import renderer_error
from nspsim.compare import (
    ABLATIONS,
    INTERVAL,
    MAX_ITERS,
    VARIANTS,
    WIDEST,
    CompareConfig,
    CompareResult,
    RunSpec,
    default_planners,
    run_compare,
)
from nspsim.compare.windows import window_lines
from nspsim.jsonfile import dumps_json
from nspsim.options import positive_float
from nspsim.planners.flexsp.planner import MAX_TIME_LIMIT_S
from nspsim.records import BREAKDOWN_CATEGORIES, BREAKDOWN_SHORT
from nspsim.simulator.approximate import MIN_APPROX_LAYERS
from nspsim.simulator.modes import MODES
from nspsim.sweep.results import compare_rows, table
from nspsim.sweep.schema import row_schema
from nspsim.units import format_seconds
from nspsim.workload import WorkloadConfig, build_workload, check_input_digests

RUN_DEFAULTS = RunSpec()  # the flags' defaults are RunSpec's own fields
SIDE_FILES = (".config.json", ".results.parquet")  # written beside -o X.html: X.config.json, X.results.parquet
COMMAND = "nspsim compare"
RUN_FIELDS = tuple(RunSpec.__dataclass_fields__)
DERIVED = (  # what the run resolved and wrote beside its inputs: read back, not set
    "timeline_iteration",
    "baseline",
    "static_best_degree",
    "static_paper_degree",
    "token_budget",
    "memory_token_budget",
    "spmax",
)
REPORT_RENDERER = "nspsim_studies.renderers.compare_report"  # the only studies module nspsim loads (module doc)
EXIT_ALL_OUT_OF_MEMORY = 1
EXIT_HELP = (
    "exit status: 0 with a result; 1 when every planner ran out of memory on every batch (the table, "
    "JSON and report are still written and say so); 2 for a usage error"
)


class ProgressBar:
    """Progress of the planned-and-simulated batches on ``stream`` (stderr), drawn by tqdm: counts,
    elapsed time, rate and ETA, with the running planner as the description.

    On a terminal, one tqdm bar updated in place (closed, with its newline, at the last step or by
    :meth:`close`). Elsewhere (a log file, a pipe, CI) a live bar would fill the log with carriage
    returns, so one plain line, tqdm's own :meth:`tqdm.tqdm.format_meter`, is printed at every tenth of
    the run and at its end, as before tqdm. ``--quiet`` gives no progress object at all."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.started = time.perf_counter()
        self.tty = stream.isatty()
        self.bar: tqdm[None] | None = None

    def __call__(self, done: int, total: int, label: str) -> None:
        if self.tty:
            if self.bar is None:
                self.bar = Bar(total=total, file=self.stream, unit="run", dynamic_ncols=True, leave=True)
            self.bar.set_description_str(label, refresh=False)
            self.bar.update(done - self.bar.n)
            if done >= total:
                self.close()
        elif done == total or done % max(total // 10, 1) == 0:
            elapsed = time.perf_counter() - self.started
            line = tqdm.format_meter(done, total, elapsed, prefix=label, ascii=True, unit="run")
            print(line, file=self.stream, flush=True)

    def close(self) -> None:
        """End the terminal bar (its final state and a newline); nothing off a terminal or when done."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def cmd_compare(args: argparse.Namespace) -> int:
    """Run the comparison, print the table or JSON, and write the report if asked."""
    planners = (
        default_planners() if args.planners is None else tuple(p.strip() for p in args.planners.split(",") if p.strip())
    )
    run = RunSpec(
        planners=planners,
        iters=args.iters,
        first_batch=args.first_batch,
        mode=args.mode,
        planner_options={"flexsp": {"time_limit": args.flexsp_time_limit}},
        baseline=args.baseline,
        prepare=args.prepare,
        window=args.window,
        approx_layers=args.approx_layers,
    )
    config = CompareConfig(
        workload=workload_config(args), run=run, timeline_iteration=WIDEST if args.output is not None else None
    )
    check_input_digests(getattr(args, "config_inputs", {}), config.workload)  # --config: the same files
    path = None
    if args.output is not None:
        if Path(args.output).suffix.lower() not in (".html", ".htm"):
            raise ValueError(f"report path {args.output!r} must end with .html after a file name, e.g. report.html")
        path = output_file(
            args.output,
            flag="-o",
            inputs=(args.trace, args.profile),
            siblings=SIDE_FILES,
            make_parent=True,
            writer=COMMAND,
        )
    report = _report_module() if path is not None else None
    warn_token_budget(build_workload(config.workload))
    progress = None if args.quiet else ProgressBar(sys.stderr)
    try:
        result = run_compare(config, progress=progress)
    finally:  # an error mid-run starts on its own line, after the bar
        if progress is not None:
            progress.close()
    if result.drops is not None and (dropped := result.drops.warning()) is not None:
        warn(f"{result.drops.batches} batch(es): {dropped}")
    if path is not None:
        _write_report(path, result, report, config.workload, quiet=args.quiet)
    emit(args, {**result.to_dict(), "config": stamped(COMMAND, result.config)}, format_table(result))
    if result.no_result is not None:
        print(f"nspsim: {result.no_result} (exit status {EXIT_ALL_OUT_OF_MEMORY})", file=sys.stderr)
        return EXIT_ALL_OUT_OF_MEMORY
    return 0


def config_settings(data: dict[str, Any]) -> Settings:
    """The flags of a written compare config (:mod:`nspsim.cli.config_file`): ``workload`` and ``run``
    are the inputs; the rest was resolved by the run (:data:`DERIVED`). compare's only planner option
    flag is ``--flexsp-time-limit``; other options belong in the labels (``name:key=value``)."""
    keys(data, (COMMAND_KEY, "workload", "run", INPUTS_KEY, *DERIVED))
    if isinstance(data.get("run"), dict) and "approx_layers" not in data["run"]:  # an exact run writes none
        data = {**data, "run": {**data["run"], "approx_layers": 0}}
    run = section(data, "run", RUN_FIELDS)
    out = workload_settings(section(data, "workload", WORKLOAD_FIELDS), WORKLOAD_FIELDS, "workload.")
    out |= inputs_setting(data)
    out |= {
        name: (f"run.{name}", run[name])
        for name in ("iters", "first_batch", "mode", "baseline", "prepare", "window", "approx_layers")
        if name in run
    }
    if "planners" in run:
        planners = run["planners"]
        if not isinstance(planners, list) or not all(isinstance(p, str) and "," not in p for p in planners):
            raise ValueError(f"run.planners: a list of planner labels, got {planners!r}")
        out["planners"] = ("run.planners", ",".join(planners))
    options = run.get("planner_options", {})
    limit = options.get("flexsp", {}) if isinstance(options, dict) else None
    if not isinstance(limit, dict) or set(options) - {"flexsp"} or set(limit) - {"time_limit"}:
        raise ValueError(
            f"run.planner_options: compare sets only flexsp's time_limit (--flexsp-time-limit), got {options!r}; "
            "give other planner options in the labels (run.planners, name:key=value)"
        )
    if "time_limit" in limit:
        out["flexsp_time_limit"] = ("run.planner_options.flexsp.time_limit", limit["time_limit"])
    return out


CONFIG_FORMAT = ConfigFormat(command=COMMAND, settings=config_settings)


def _time_limit(text: str) -> float:
    """argparse type for ``--flexsp-time-limit``: positive, finite, at most FlexSP's maximum."""
    value = positive_float(text)
    if value > MAX_TIME_LIMIT_S:
        raise argparse.ArgumentTypeError(f"at most {MAX_TIME_LIMIT_S:.0f} seconds per MILP solve, got {text!r}")
    return value


def _report_module() -> Any:
    """The ``REPORT_RENDERER`` module, imported lazily (plotly lives in the studies layer)."""
    try:
        return importlib.import_module(REPORT_RENDERER)
    except ImportError as exc:
        raise renderer_error(REPORT_RENDERER, exc, "build the HTML report (-o)") from None


def _write_report(path: Path, result: CompareResult, report: Any, workload: WorkloadConfig, *, quiet: bool) -> None:
    """The report and, as one set with it (:func:`write_output`), the config and the rows beside it."""
    rows = table(compare_rows(result, workload), row_schema(windowed=bool(result.windows)))
    config = dumps_json(stamped(COMMAND, result.config), what="config", indent=2)
    write_output(
        path,
        report.render(result),
        flag="-o",
        siblings={".config.json": config, ".results.parquet": lambda target: pq.write_table(rows, target)},
        quiet=quiet,
    )


def format_table(result: CompareResult) -> str:
    """The comparison as a text table, then how static-best was chosen. A ``*`` marks a normalisation
    over fewer batches than the run (those where this planner or the baseline ran out of memory)."""
    cats = " ".join(f"{BREAKDOWN_SHORT[k]:>5s}" for k in BREAKDOWN_CATEGORIES)
    lines = [
        f"{'planner':<18s} {'step':>9s} {'norm':>7s} {'speedup':>7s} {'med':>6s} {'min-max':>11s} {'95% CI':>11s}  "
        f"{cats}  {'plan(ms)':>8s} {'Load/LB':>7s} {'OOM':>4s}"
    ]
    for s in result.summaries:
        step = f"{format_seconds(s.mean_step_time_s):>9s}" if s.mean_step_time_s is not None else f"{'OOM':>9s}"
        partial = "*" if 0 < s.normalized_iterations < s.iterations else " "
        norm = f"{s.normalized_to_baseline:6.3f}{partial}" if s.normalized_to_baseline is not None else f"{'-':>7s}"
        speed = f"{s.speedup_vs_baseline:6.2f}x" if s.speedup_vs_baseline is not None else f"{'-':>7s}"
        median, low_high, interval = s.speedup_spread()
        spread = f"{median:>6s} {low_high:>11s} {interval:>11s}"
        bound = f"{s.mean_load_over_lower_bound:7.3f}" if s.mean_load_over_lower_bound is not None else f"{'-':>7s}"
        shares = " ".join(
            f"{100 * s.breakdown_share.get(k, 0.0):4.1f}%" if s.mean_step_time_s is not None else f"{'-':>5s}"
            for k in BREAKDOWN_CATEGORIES
        )  # no share of a step that never ran
        lines.append(
            f"{s.planner:<18s} {step} {norm} {speed} {spread}  {shares}  {1e3 * s.mean_planning_time_s:8.1f} "
            f"{bound} {s.oom_count:>2d}/{s.iterations}"
        )
    wl = result.config["workload"]
    lines.append(
        f"normalised to {result.baseline}; {result.config['run']['iters']} batches of {wl['trace']}, "
        f"{wl['model']} on {wl['gpus']}x {wl['cluster']}; breakdown shares of the critical GPU's step; "
        f"Load/LB: routed proxy Load over the batch's lower bound; med, min-max: the per-batch speedup over the "
        f"same batches; 95% CI: {INTERVAL} (the normalised spread: --json)"
    )
    if any(0 < s.normalized_iterations < s.iterations for s in result.summaries):
        lines.append("* normalised over the batches on which both this planner and the baseline fit in memory")
    if result.drops is not None:
        lines.append(f"batches: {result.drops.kept_samples} samples kept; {result.drops.describe()} dropped")
    lines.extend(f"{s.planner}: {s.note}" for s in result.summaries if s.note)
    lines.extend(window_lines(result.windows))
    if result.approximation is not None:
        lines.append(result.approximation.line())
    if result.no_result is not None:
        lines.append(f"NO RESULT: {result.no_result}")
    return "\n".join(lines)


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``compare``."""
    p = sub.add_parser(
        "compare", help="plan and simulate strategies on the same batches (the main job)", epilog=EXIT_HELP
    )
    add_workload_args(p)
    p.add_argument(
        "--iters", type=positive_int, default=RUN_DEFAULTS.iters, help=f"batches to compare on (at most {MAX_ITERS:,})"
    )
    p.add_argument("--first-batch", type=int, default=RUN_DEFAULTS.first_batch, help="index of the first batch")
    p.add_argument(
        "--window",
        type=positive_int,
        default=RUN_DEFAULTS.window,
        metavar="W",
        help="batches per optimizer step (gradient accumulation), each W consecutive batches planned as one "
        "window whose samples may move between its passes; --iters must be a multiple of W (default: 1, per step)",
    )
    p.add_argument(
        "--planners",
        default=None,
        help="comma-separated planner specs (default: static-best and every registered main planner); "
        f"also static-<d>, static-paper (the paper's Static SP: token packing), the ablations "
        f"{', '.join(ABLATIONS)}, the baseline variants {', '.join(VARIANTS)}, and options as "
        "name:key=value+key=value",
    )
    p.add_argument(
        "--baseline",
        default=None,
        metavar="LABEL",
        help="the compared planner to normalise to, e.g. static-paper (default: static-best if compared, else "
        "static-paper, else static, else the first planner)",
    )
    p.add_argument(
        "--flexsp-time-limit",
        type=_time_limit,
        default=RUN_DEFAULTS.planner_options["flexsp"]["time_limit"],
        help=f"seconds per FlexSP MILP solve, a safety net (default: the artifact's 10, at most "
        f"{MAX_TIME_LIMIT_S:.0f}); its deterministic work limit (flexsp:work_limit=N) stops the solves first "
        "and bounds planning time",
    )
    p.add_argument("--mode", choices=MODES, default=RUN_DEFAULTS.mode, help="executor overlap mode for every planner")
    p.add_argument(
        "--approx-layers",
        type=non_negative_int,
        default=RUN_DEFAULTS.approx_layers,
        metavar="K",
        help=f"approximate: simulate K layers (at least {MIN_APPROX_LAYERS}) and extend the rest at each pass's "
        "measured pace; the first planner's first batch is also simulated exactly once and the error printed "
        "(default: 0, exact; not with -o)",
    )
    add_prepare_flag(p)
    p.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="REPORT.html",
        help="write a plotly HTML report, and beside it REPORT.config.json (the resolved config, for --config) and "
        "REPORT.results.parquet (one row per planner and batch, in a sweep's row schema)",
    )
    p.add_argument("--json", action="store_true", help="print JSON (config and results)")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no line naming the files written")
    add_config_flag(p, CONFIG_FORMAT)
    p.set_defaults(func=cmd_compare)
