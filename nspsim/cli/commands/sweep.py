"""``nspsim sweep SPEC.toml``: compare's work on every point of a grid of workloads, cached and parallel.

Reads the TOML spec (:mod:`nspsim.sweep.spec`), expands it into units (one planner spec on one batch
of one point), takes what ``DIR/cache/`` already holds and computes the rest on a local process pool
(``--jobs``, default the core count) or as Ray tasks (``--engine ray``: the cluster at
``RAY_ADDRESS``, else a local Ray instance; the optional ``distributed`` extra). A tqdm bar on
stderr counts the units (cached ones up front) with an ETA; ``--json`` turns it off. Into ``-o DIR``
(default ``out/sweep-<spec name>``) go ``results.parquet`` (one row per point, planner and batch),
``summary.parquet`` and ``summary.csv`` (one row per point and planner), ``sweep.config.json`` (the
resolved spec, code versions and every point), with gradient-accumulation windows (``window`` in
``[run]`` or ``[axes]``) ``windows.parquet`` (one row per point, planner and window), then
``report.html``, the trade-off plots (:func:`nspsim.cli.commands.plot.write_report`, which ``nspsim plot DIR``
also uses).

A rerun computes only what is missing; ``--force`` recomputes everything. A failed unit is a row
with its error (retried on the next run) and the sweep goes on. Exit status: 0 when every unit ran;
1 when some failed (every file is still written); 2 for a usage error (a bad spec names the table
and key). Trade-off: the report is drawn after the whole sweep, not point by point as results come.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from nspsim.cli.commands.plot import write_report
from nspsim.cli.flags import emit, positive_int, shown, warn
from nspsim.cli.outputs import wrote
from nspsim.cli.progress import Bar
from nspsim.jsonfile import read_json
from nspsim.output_files import output_lock
from nspsim.sweep import (
    Cache,
    SweepSpec,
    build_rows,
    build_windows,
    execute,
    load_spec,
    plan_sweep,
    resolved_config,
    summarise,
    write_results,
)
from nspsim.sweep.engine import ENGINES, ray_module
from nspsim.sweep.results import CONFIG_FILE
from nspsim.sweep.work import UnitOutcome

EXIT_FAILED_UNITS = 1
MAX_JOBS_PER_CORE = 4
"""Local workers per core at most: more only queue for the cores, and a typo (100000) would fork that
many processes."""
DEFAULT_OUT = Path("out")
EXIT_HELP = (
    "exit status: 0 when every unit ran; 1 when some failed or some grid points could not be built (the "
    "files are still written, the failed rows carry their error and are retried on the next run); 2 for a "
    "usage error"
)


def output_dir(text: str | None, spec_path: str) -> Path:
    """The output folder (``-o``, else ``out/sweep-<spec stem>``), created and checked writable."""
    path = Path(text) if text is not None else DEFAULT_OUT / f"sweep-{Path(spec_path).stem}"
    if text is not None and not text.strip():
        raise ValueError("-o: the output folder is empty")
    if path.exists() and not path.is_dir():
        raise ValueError(f"-o {path}: exists and is not a folder; the sweep writes several files into a folder")
    if path.is_dir() and not _sweep_or_empty(path):
        raise ValueError(
            f"-o {path}: holds other files and no sweep (no {CONFIG_FILE} or cache/); the sweep would write among "
            "them: choose a new or empty folder, or a sweep's own"
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"-o {path}: cannot create the folder ({exc.strerror})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"-o {path}: the folder is not writable")
    return path


def _sweep_or_empty(path: Path) -> bool:
    """Whether ``path`` (a folder) is a sweep's (its config, or a cache of the sweep's layout, is there) or
    holds nothing but
    nspsim's hidden files (a lock left by a sweep that failed before writing)."""
    if (path / CONFIG_FILE).exists() or (path / "cache" / "sims").is_dir() or (path / "cache" / "plans").is_dir():
        return True
    try:
        return all(entry.name.startswith(".nspsim-") for entry in path.iterdir())
    except OSError:
        return True  # unreadable: the writability check below says so


def cmd_sweep(args: argparse.Namespace) -> int:
    """Run the sweep, write its files, print the summary or JSON."""
    started = time.perf_counter()
    spec = load_spec(args.spec)
    _jobs(args)  # a bad --jobs fails before the output folder is made
    if args.engine == "ray":
        ray_module()  # a missing extra fails before any work
    out = output_dir(args.output, args.spec)
    _warn_other_spec(out, args.spec)
    with output_lock(out, "sweep", what="nspsim sweep"):
        return _run(args, spec, out, started)


def _warn_other_spec(out: Path, spec: str) -> None:
    """Warn when ``out`` holds the results of another spec file, which this sweep's results replace
    (its cached units stay and are reused where they match)."""
    try:
        earlier = read_json(out / CONFIG_FILE, "sweep config").get("source")
    except (ValueError, AttributeError):
        return
    if isinstance(earlier, str) and Path(earlier).resolve() != Path(spec).resolve():
        warn(f"-o {out} holds the results of {shown(earlier)}; this sweep's results from {shown(spec)} replace them")


def _jobs(args: argparse.Namespace) -> int:
    """The worker count (``--jobs``, else the core count); ``ValueError`` past :data:`MAX_JOBS_PER_CORE`
    local workers per core."""
    cores = os.cpu_count() or 1
    jobs: int = args.jobs if args.jobs is not None else cores
    if args.engine == "local" and jobs > MAX_JOBS_PER_CORE * cores:
        raise ValueError(
            f"--jobs {jobs}: at most {MAX_JOBS_PER_CORE * cores} local workers ({MAX_JOBS_PER_CORE} per core on "
            f"this machine's {cores}); each is a process"
        )
    return jobs


def _run(args: argparse.Namespace, spec: SweepSpec, out: Path, started: float) -> int:
    """The sweep into ``out`` (whose lock the caller holds)."""
    cache = Cache(out / "cache")
    plan = plan_sweep(spec, cache, force=args.force)
    for point in plan.points:
        if point.error:
            varied = _axes_text({n: () for n in spec.varied}, {**point.config.to_dict(), "window": point.window})
            warn(f"point {point.index} ({varied}): {point.error}")
    jobs = _jobs(args)
    counts = {"computed": 0, "failed": 0}
    with Bar(
        total=plan.units, initial=len(plan.cached), desc="sweep", unit="unit", file=sys.stderr, disable=args.json
    ) as bar:
        bar.set_postfix(cached=len(plan.cached), computed=0, failed=0)

        def tick(outcome: UnitOutcome) -> None:
            counts["failed" if outcome.error else "computed"] += 1
            bar.set_postfix(cached=len(plan.cached), **counts)
            bar.update(1)

        execute(plan, cache, engine=args.engine, jobs=jobs, on_outcome=tick)
    if cache.rejected:
        path, problem = cache.rejected[0]
        more = f" (and {len(cache.rejected) - 1} more)" if len(cache.rejected) > 1 else ""
        warn(f"{len(cache.rejected)} cache record(s) could not be used and were recomputed: {path}: {problem}{more}")
    rows = build_rows(plan)
    windows = build_windows(plan)
    summary = summarise(rows, windows)
    paths = write_results(out, rows, summary, resolved_config(plan, source=args.spec), windows)
    wrote(paths.values())
    report = None
    try:
        report = write_report(out)
    except ValueError as exc:  # the results stand without their drawing (e.g. plotly not importable)
        warn(f"no report: {exc}")
    failed_units = len(plan.errors)
    data: dict[str, Any] = {
        "points": len(plan.points),
        "failed_points": sum(bool(p.error) for p in plan.points),
        "rows": len(rows),
        "units": plan.units,
        "computed": plan.computed,
        "cached": len(plan.cached),
        "failed": failed_units,
        "plans_reused": plan.plans_reused,
        "failed_rows": sum(bool(r["error"]) for r in rows),
        **{k: str(v) for k, v in paths.items()},
        "report_path": None if report is None else str(report),
        "engine": args.engine,
        "jobs": jobs,
        "wall_s": round(time.perf_counter() - started, 3),
    }
    emit(args, data, format_summary(summary, {n: () for n in spec.varied}, data))
    return EXIT_FAILED_UNITS if failed_units or data["failed_points"] else 0


def _axes_text(axes: dict[str, Any], values: dict[str, Any]) -> str:
    return " ".join(f"{k}={shown(str(values[k]))}" for k in axes) or "the only point"  # values from the spec


def _num(value: float, fmt: str) -> str:
    return format(value, fmt) if math.isfinite(value) else "-"


def format_summary(summary: list[dict[str, Any]], axes: dict[str, Any], data: dict[str, Any]) -> str:
    """The per-point summary as a text table (with windows, ``win/ps``: the window time over the per-step
    assignment's), then the counts and where the files are."""
    windowed = bool(summary) and "window_over_per_step" in summary[0]
    lines = [
        f"{'pt':>3s} {'planner':<18s} {'norm':>7s} {'min':>6s} {'median':>6s} {'max':>6s} {'speedup':>7s} "
        f"{'OOM':>4s} {'fail':>4s}" + (f" {'win/ps':>6s}" if windowed else "") + "  axes"
    ]
    for s in summary:
        ratio = f" {_num(s['window_over_per_step'], '6.3f'):>6s}" if windowed else ""
        lines.append(
            f"{s['point']:>3d} {s['planner']:<18s} {_num(s['normalized'], '7.3f')} {_num(s['normalized_min'], '6.3f')} "
            f"{_num(s['normalized_median'], '6.3f')} {_num(s['normalized_max'], '6.3f')} "
            f"{_num(s['speedup'], '6.2f') + 'x' if math.isfinite(s['speedup']) else '-':>7s} "
            f"{s['oom_count']:>4d} {s['failed']:>4d}{ratio}  {_axes_text(axes, s)}"
        )
    lines.append(
        f"{data['points']} point(s), {data['rows']} rows; units: {data['computed']} computed, {data['cached']} cached, "
        f"{data['failed']} failed ({data['plans_reused']} plans reused); {data['wall_s']:.1f} s"
    )
    lines.append(
        f"normalised per batch to {summary[0]['baseline'] if summary else '-'}; results: {data['results_path']}"
    )
    return "\n".join(lines)


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``sweep``."""
    p = sub.add_parser(
        "sweep", help="compare strategies on every point of a grid of workloads (cached, parallel)", epilog=EXIT_HELP
    )
    p.add_argument("spec", metavar="SPEC.toml", help="sweep spec: [workload] fixed values, [axes] lists, [run]")
    p.add_argument("-o", "--output", default=None, metavar="DIR", help="output folder (default: out/sweep-<spec name>)")
    p.add_argument("--jobs", type=positive_int, default=None, help="parallel workers (default: the core count)")
    p.add_argument("--engine", choices=ENGINES, default="local", help="local process pool, or Ray tasks")
    p.add_argument("--force", action="store_true", help="recompute every unit (ignore the cache)")
    p.add_argument("--json", action="store_true", help="print one JSON object (counts and paths); no progress bar")
    p.set_defaults(func=cmd_sweep)
