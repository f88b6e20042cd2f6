"""The window study (issue 27 item 5): on the Figure 7 configurations (both Qwen3 MoE models x 192K / 384K
x wikipedia, code, commoncrawl; 64 GPUs, 2M tokens a batch) with gradient-accumulation windows of W in
{1, 2, 4, 8} batches, each planner's time per global batch (window) relative to per-step NSP on the same
batches, with the per-window spread, beside the floor no window assignment can beat
(:func:`nspsim.planners.window.bound.window_floor`).

The sweep is ``nspsim_studies/sweeps/windows.toml`` (static-best and NSP; ``--flexsp`` adds FlexSP, whose
MILP makes it ~80 CPU-min at 16 batches). Its cache lives in ``DIR/cache`` and its tables (results,
summary, windows.parquet, config) in ``DIR``, as ``nspsim sweep SPEC -o DIR`` writes them, so either
command warms the other. The analysis (:mod:`nspsim_studies.windows_tables`) reads the per-window rows:
per-step NSP's window time is NSP's per-step assignment judged by the simulator on that window
(``per_step_time_s``; at W = 1 its step time). Writes ``DIR/windows_study.md`` (table and findings),
``.html`` (figure and table), ``.json`` and ``.config.json`` (the resolved config).

    python -m nspsim_studies.windows_study -o out/windows --iters 16 --jobs 2

Trade-off: the floor is on the planners' estimates (what can be proved), the ratios on simulated time;
the table gives both and each per-step NSP window's simulated-over-estimated ratio, so a reader sees how
far the proof carries to the simulator.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import NoReturn

import pandas as pd
import plotly.io as pio

from nspsim.cost.profile import load_profile
from nspsim.jsonfile import dumps_json
from nspsim.sweep import SweepSpec, build_windows, load_spec, resolved_config, summarise, write_results
from nspsim.units import format_tokens, parse_tokens
from nspsim_studies.paper_figures.common import STYLE, clean, run_spec
from nspsim_studies.windows_tables import Point, analyse, figure, markdown

NAME = "windows_study"
SPEC_PATH = Path(__file__).resolve().parent / "sweeps" / "windows.toml"
DEFAULT_OUT = Path("out/windows")
FLEXSP = "flexsp"


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line and exit status 2."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line (module docstring); a bad value exits with one line."""
    parser = _Parser(prog=f"python -m nspsim_studies.{NAME}", description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", type=Path, default=DEFAULT_OUT, help=f"folder (default {DEFAULT_OUT})")
    parser.add_argument("--spec", type=Path, default=SPEC_PATH, help="sweep spec (default: the study's)")
    parser.add_argument("--iters", type=int, default=None, help="batches per point (a multiple of every W)")
    parser.add_argument("--jobs", type=int, default=1, help="parallel sweep workers (default 1)")
    parser.add_argument(
        "--max-context", default=None, help="only this max context of the spec's (e.g. 384k: half the points)"
    )
    parser.add_argument("--flexsp", action="store_true", help="add FlexSP (~80 CPU-min at 16 batches)")
    parser.add_argument("--profile", default=None, help="cost profile for every point")
    parser.add_argument(
        "--tables-only",
        action="store_true",
        help="analyse the tables DIR already holds (results, windows.parquet) without planning the sweep",
    )
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    if args.output.exists() and not args.output.is_dir():
        parser.error(f"-o {args.output}: it is a file, not a folder")
    try:
        if args.profile is not None:
            load_profile(args.profile)
        args.sweep = build_spec(args.iters, args.flexsp, args.profile, args.spec, args.max_context)
    except (OSError, ValueError) as exc:
        parser.error(str(exc))
    return args


def build_spec(
    iters: int | None, flexsp: bool, profile: str | None, path: Path = SPEC_PATH, max_context: str | None = None
) -> SweepSpec:
    """The study's sweep: the spec at ``path`` with ``iters`` batches (the spec's when ``None``), FlexSP
    added under ``flexsp``, every point priced by ``profile``, only ``max_context`` of the spec's contexts
    when given; ``ValueError`` when ``iters`` is not a multiple of every window or the context is not swept."""
    spec = load_spec(path)
    if max_context is not None:
        context = parse_tokens(max_context)
        swept = tuple(spec.axes.get("max_context", ()))
        if context not in swept:
            shown = ", ".join(format_tokens(c) for c in swept) or "none"
            raise ValueError(f"--max-context {max_context}: the spec sweeps max contexts {shown}")
        spec = replace(spec, axes={**spec.axes, "max_context": (context,)})
    run = spec.run
    if iters is not None:
        sizes = sorted({int(w) for w in spec.axes.get("window", (run.window,))})
        if iters < 1 or any(iters % w for w in sizes):
            raise ValueError(f"--iters must be a positive multiple of every window {sizes}, got {iters}")
        run = replace(run, iters=iters)
    if flexsp and FLEXSP not in run.planners:
        run = replace(run, planners=(*run.planners, FLEXSP))
    workload = spec.workload if profile is None else {**spec.workload, "profile": profile}
    return replace(spec, run=run, workload=workload, name=NAME)


def main(argv: Sequence[str] | None = None) -> int:
    """Run (or reload from the cache) the sweep, then write the study's table, figure and config."""
    args = parse(argv)
    spec: SweepSpec = args.sweep
    out: Path = args.output
    points = [Point(index=i, config=c, window=w) for i, (c, w) in enumerate(spec.grid())]
    if args.tables_only:
        try:
            rows, windows = pd.read_parquet(out / "results.parquet"), pd.read_parquet(out / "windows.parquet")
        except OSError as exc:
            print(f"{NAME}: --tables-only: cannot read the sweep's tables in {out} ({exc})", file=sys.stderr)
            return 2
        config: dict[str, object] = json.loads((out / "sweep.config.json").read_text())
        bad = int((rows["error"] != "").sum())
        done = f"{NAME}: analysed the tables in {out}"
    else:
        run = run_spec(spec, out, jobs=args.jobs)
        config = resolved_config(run.plan, source=f"nspsim_studies/{NAME}.py")
        records = run.records
        window_rows = build_windows(run.plan) or []
        write_results(out, records, summarise(records), config, window_rows)
        rows, windows = pd.DataFrame(records), pd.DataFrame(window_rows)
        bad = int((rows["error"] != "").sum())
        done = f"{NAME}: {run.computed} units computed, {run.cached} cached, {run.wall_s:.0f} s"
    result = analyse(points, rows, windows)
    study = {"study": NAME, "iters": spec.run.iters, "planners": list(spec.run.planners), "sweep": config}
    text = markdown(result, spec.run.iters)
    (out / f"{NAME}.md").write_text(text, encoding="utf-8")
    body = pio.to_html(figure(result), full_html=False, include_plotlyjs="cdn")  # small enough to keep with results
    page = f"<!doctype html><html><head><meta charset='utf-8'><title>{NAME}</title><style>{STYLE}</style></head>"
    (out / f"{NAME}.html").write_text(f"{page}<body>{body}<pre>{text}</pre></body></html>", encoding="utf-8")
    (out / f"{NAME}.json").write_text(dumps_json(clean(result.to_json()), what=NAME, indent=2) + "\n")
    (out / f"{NAME}.config.json").write_text(dumps_json(clean(study), what=f"{NAME} config", indent=2) + "\n")
    print(f"{done}; wrote {out / NAME}.md")
    if bad:
        print(f"{NAME}: {bad} rows failed; see {out / 'results.parquet'}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
