"""What the four paper-figure studies share: the command line, running a sweep spec through the sweep
API with its cache in ``DIR/cache``, and writing ``DIR/figN.html``, ``DIR/figN.json`` and the resolved
config ``DIR/figN.config.json`` (the sweep's own tables go to ``DIR/figN/``).

Every study builds a :class:`nspsim.sweep.SweepSpec` (its config builder, tested on its own), runs it
with :func:`run_spec` (plan, execute on the local pool with a tqdm bar, tabulate) and draws from the
per-batch rows. All four default to one output folder, ``out/paper-figures``, so they share one cache:
Figure 8's and Figure 10's units are Figure 7's where the workloads agree, and a rerun is warm.
Trade-off: one shared cache folder grows with every study, but no unit is ever computed twice.
"""

from __future__ import annotations

import argparse
import html
import math
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NoReturn

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from nspsim.cli.progress import Bar
from nspsim.cost.profile import load_profile
from nspsim.jsonfile import dumps_json
from nspsim.sweep import (
    Cache,
    SweepPlan,
    SweepSpec,
    build_rows,
    execute,
    plan_sweep,
    resolved_config,
    summarise,
    write_results,
)
from nspsim.sweep.results import ROW_COLUMNS
from nspsim.sweep.work import UnitOutcome
from nspsim.units import format_tokens
from nspsim.workload import WorkloadConfig

DEFAULT_OUT = Path("out/paper-figures")
STYLE = (
    "body{font-family:sans-serif;margin:2em;max-width:1300px}table{border-collapse:collapse;font-size:0.85em;"
    "margin:1em 0}td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}"
    "th{background:#eee;vertical-align:bottom}td.l,th.l{text-align:left}p.note{color:#444;max-width:1100px}"
    "div.table{max-width:100%;overflow-x:auto}"
)
"""Cells wrap at their spaces only ("0.81 [0.70-0.95]" onto two lines, a number never), so a wide table
fits a 1400-px window instead of running past it; a table that still cannot scrolls in its own box."""
PAPER_SOURCE = "NSP paper, Figure {n}, decoded in nsp-figures.md (confidence: high / med / low)"


@dataclass(frozen=True, kw_only=True)
class StudyArgs:
    """A study's command line: quick or full, the output folder, the worker count."""

    quick: bool
    out: Path
    jobs: int
    profile: str | None = None

    def __post_init__(self) -> None:
        if self.jobs < 1:
            raise ValueError(f"--jobs must be at least 1, got {self.jobs}")


class _OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one line (``prog: error: ...``, exit status 2), without the usage."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


def parse_args(name: str, description: str, argv: Sequence[str] | None = None) -> StudyArgs:
    """``python -m nspsim_studies.paper_figures.<name> [--quick] [-o DIR] [--jobs N]``; a bad value exits
    with one line."""
    parser = _OneLineParser(prog=f"python -m nspsim_studies.paper_figures.{name}", description=description)
    parser.add_argument("--quick", action="store_true", help="a few batches (under a minute on 2 cores)")
    parser.add_argument("-o", "--output", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    parser.add_argument("--jobs", type=int, default=None, help="parallel sweep workers (default: the core count)")
    parser.add_argument(
        "--profile", default=None, help="cost profile for every point (e.g. flexsp-a100: FlexSP's measured all-to-all)"
    )
    args = parser.parse_args(argv)
    try:
        if args.profile is not None:
            load_profile(args.profile)  # an unreadable profile fails here, not in every unit of the sweep
        _check_output_folder(args.output)
        return StudyArgs(
            quick=args.quick,
            out=args.output,
            jobs=args.jobs if args.jobs is not None else os.cpu_count() or 1,
            profile=args.profile,
        )
    except ValueError as exc:
        parser.error(str(exc))
        raise  # unreachable: parser.error exits


def _check_output_folder(out: Path) -> None:
    """``ValueError`` (one line) unless ``out`` is a folder this process can create and write."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"-o {out}: it is a file, not a folder; give a folder for the study's outputs")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out):
            pass
    except OSError as exc:
        raise ValueError(f"-o {out}: cannot write there ({exc.strerror or exc})") from None


def exit_status(name: str, run: SweepRun) -> int:
    """0 when every unit of the study ran; else one line on stderr (how many rows failed, the first
    reason) and 1, as ``nspsim sweep`` exits, so a study whose points all failed never passes for done."""
    bad = failures(run)
    if not bad:
        return 0
    print(f"{name}: {len(bad)} of {len(run.rows)} rows failed (first: {bad[0]}); see {name}.json", file=sys.stderr)
    return 1


@dataclass(frozen=True, kw_only=True)
class SweepRun:
    """A finished sweep: the plan (records, unit keys), its rows as a frame, the summary and timing."""

    plan: SweepPlan
    records: list[dict[str, Any]]
    rows: pd.DataFrame
    summary: pd.DataFrame
    wall_s: float
    computed: int
    cached: int


def with_profile(spec: SweepSpec, profile: str | None) -> SweepSpec:
    """``spec`` with every point priced by the cost ``profile`` (unchanged for ``None``)."""
    return spec if profile is None else replace(spec, workload={**spec.workload, "profile": profile})


def run_spec(spec: SweepSpec, out: Path, *, jobs: int = 1, progress: bool = True) -> SweepRun:
    """Run ``spec`` with its cache in ``out/cache`` (only missing units are computed)."""
    started = time.perf_counter()
    cache = Cache(out / "cache")
    plan = plan_sweep(spec, cache)
    with Bar(
        total=plan.units, initial=len(plan.cached), desc=spec.name, unit="unit", file=sys.stderr, disable=not progress
    ) as bar:

        def tick(_: UnitOutcome) -> None:
            bar.update(1)

        execute(plan, cache, jobs=jobs, on_outcome=tick)
    rows = build_rows(plan)
    frame = pd.DataFrame(rows, columns=list(ROW_COLUMNS))
    return SweepRun(
        plan=plan,
        records=rows,
        rows=frame,
        summary=pd.DataFrame(summarise(rows)),
        wall_s=time.perf_counter() - started,
        computed=plan.computed,
        cached=len(plan.cached),
    )


def write_study(
    out: Path,
    name: str,
    run: SweepRun,
    figure: go.Figure,
    tables: Sequence[str],
    data: dict[str, Any],
    study: dict[str, Any],
) -> dict[str, Path]:
    """Write ``out/<name>.html`` (the figure, then the tables), ``out/<name>.json`` (``data``), the resolved
    config ``out/<name>.config.json`` (the study's settings and the sweep's resolved config) and the sweep's
    tables under ``out/<name>/``; returns the paths."""
    out.mkdir(parents=True, exist_ok=True)
    tables_dir = out / name
    tables_dir.mkdir(exist_ok=True)
    config = {"study": name, **study, "sweep": resolved_config(run.plan, source=f"nspsim_studies/{name}.py")}
    sweep_paths = write_results(tables_dir, run.records, summarise(run.records), config["sweep"])
    paths = {"html": out / f"{name}.html", "json": out / f"{name}.json", "config": out / f"{name}.config.json"}
    body = pio.to_html(figure, full_html=False, include_plotlyjs=True)
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(name)}</title>"
        f"<style>{STYLE}</style></head><body>{body}{''.join(tables)}</body></html>"
    )
    paths["html"].write_text(page, encoding="utf-8")
    paths["json"].write_text(dumps_json(clean(data), what=f"{name} results", indent=2) + "\n")
    paths["config"].write_text(dumps_json(clean(config), what=f"{name} config", indent=2) + "\n")
    return {**paths, **sweep_paths}


def describe(config: WorkloadConfig) -> str:
    """A point's workload in a title: ``qwen3-235b-a22b on 64 h200, commoncrawl, 384K``."""
    return f"{config.model} on {config.gpus} {config.cluster}, {config.trace}, {format_tokens(config.max_context)}"


def done_line(name: str, what: str, run: SweepRun, html_path: Path) -> str:
    """The line a study prints when it is done: what it ran, the units computed and cached, the time."""
    return f"{name}: {what}; {run.computed} units computed, {run.cached} cached; {run.wall_s:.1f} s; wrote {html_path}"


def clean(obj: Any) -> Any:
    """``obj`` with every non-finite float as ``None`` (JSON has no NaN) and numpy scalars as Python's."""
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [clean(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, str):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def html_table(header: Sequence[str], rows: Sequence[Sequence[Any]], caption: str = "") -> str:
    """A plain HTML table (first column left-aligned); cells escaped."""
    head = "".join(f"<th{' class=l' if i == 0 else ''}>{html.escape(str(h))}</th>" for i, h in enumerate(header))
    body = "".join(
        "<tr>"
        + "".join(f"<td{' class=l' if i == 0 else ''}>{html.escape(str(c))}</td>" for i, c in enumerate(r))
        + "</tr>"
        for r in rows
    )
    cap = f"<p class=note>{html.escape(caption)}</p>" if caption else ""
    return f"{cap}<div class=table><table><tr>{head}</tr>{body}</table></div>"


def fmt(value: Any, spec: str = ".3f") -> str:
    """A number for a table (``-`` when missing or not finite)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return format(value, spec)


def spread(frame: pd.DataFrame, column: str = "normalized") -> dict[str, float]:
    """Ratio of sums is the summary's; here the per-batch min / median / max of ``column`` (finite only)."""
    values = frame[column][frame[column].map(lambda v: math.isfinite(v))]
    if values.empty:
        return {"min": math.nan, "median": math.nan, "max": math.nan, "batches": 0}
    return {
        "min": float(values.min()),
        "median": float(values.median()),
        "max": float(values.max()),
        "batches": len(values),
    }


def failures(run: SweepRun) -> list[str]:
    """One line per failed row (planner, point, error), for the page and the JSON."""
    bad = run.rows[run.rows["error"] != ""]
    return [f"point {r.point} {r.planner} batch {r.batch_index}: {r.error}" for r in bad.itertuples()]
