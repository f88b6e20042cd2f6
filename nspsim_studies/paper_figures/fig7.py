"""Figure 7 of the NSP paper: end-to-end step time of every strategy, both Qwen3 MoE models x 192K /
384K max context x the three traces, normalised per configuration to the paper's Static SP.

The sweep is ``nspsim_studies/sweeps/fig7.toml`` (one spec: the model and its cluster are a zip, crossed with
context and trace; 64 GPUs, 2M tokens per batch; 20 batches, ``--quick`` 1). The baseline is
``static-paper`` whenever the sweep runs it (the spec names it, ``[run] baseline``; a spec without it
gets it here): the paper's Static SP, the fixed degree fastest over the configuration's batches with
samples packed by tokens as the FlexSP artifact packs its static baseline
(:mod:`nspsim.planners.static.token_packing`). ``static-best``, the same sweep with load-balanced packing,
stays as the stronger variant; a spec without static-paper is normalised to it, as compare does.
Each bar is compare's ratio of sums over the batches;
its whisker the per-batch min-max. Beside ours, per (model, context) panel, the paper's decoded bar
groups (values high; which panel a group belongs to is a low-confidence reading, and the panel's
traces are not named, so they stand as one "paper" category). Trade-off: a panel's paper values are
pooled rather than matched to a trace, because the decoding cannot say which trace a group is.
"""

from __future__ import annotations

import math
import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from nspsim.sweep import SweepSpec, load_spec, resolved_config
from nspsim.units import format_tokens
from nspsim_studies.palette import planner_color
from nspsim_studies.paper_figures import paper_values as pv
from nspsim_studies.paper_figures.common import (
    PAPER_SOURCE,
    StudyArgs,
    SweepRun,
    done_line,
    exit_status,
    failures,
    fmt,
    html_table,
    parse_args,
    run_spec,
    spread,
    with_profile,
    write_study,
)

NAME = "fig7"
SPEC_PATH = Path(__file__).resolve().parents[1] / "sweeps" / "fig7.toml"
FULL_ITERS = 20
QUICK_ITERS = 1
QUICK_CONTEXT = 384 * 1024
PAPER_BASELINE = "static-paper"
PAPER_X = "paper (decoded)"
BASELINE_TEXTS = {
    "static-paper": (
        "normalised per configuration to static-paper, the paper's Static SP: the fixed degree fastest over the "
        "configuration's batches, samples packed by tokens as the FlexSP artifact packs its static baseline "
        "(static-best: the same with load-balanced packing)"
    ),
    "static-best": (
        "normalised per configuration to static-best: compare's load-balanced fixed-degree Static SP at the degree "
        "fastest over the configuration's batches (the sweep has no static-paper, the paper's token-packed one)"
    ),
}


def baseline_text(baseline: str) -> str:
    """What the figure says it is normalised to."""
    return BASELINE_TEXTS.get(baseline, f"normalised per configuration to {baseline}")


def build_spec(quick: bool, path: Path | None = None) -> SweepSpec:
    """The Figure 7 sweep: ``nspsim_studies/sweeps/fig7.toml`` (or ``path``) with 20 batches; under ``--quick`` 1
    batch of the 384K configurations only (the same units as the full run's, planners unchanged: one
    batch of all 12 costs ~160 CPU-s, mostly FlexSP's MILP solves)."""
    spec = load_spec(path or SPEC_PATH)
    run = spec.run
    if run.baseline is None and PAPER_BASELINE in run.planners:
        run = replace(run, baseline=PAPER_BASELINE)
    if not quick:
        return replace(spec, run=replace(run, iters=FULL_ITERS), name=NAME)
    axes = dict(spec.axes)
    if "max_context" in axes:
        axes["max_context"] = tuple(c for c in axes["max_context"] if c == QUICK_CONTEXT) or axes["max_context"][-1:]
    return replace(spec, axes=axes, run=replace(run, iters=QUICK_ITERS), name=NAME)


def configurations(run: SweepRun) -> list[dict[str, Any]]:
    """Per (model, context, trace) configuration: static-best's and static-paper's degrees, every
    planner's normalised time (ratio of sums) with its per-batch spread, and the paper's panel values."""
    points = _points(run)
    degrees = {p["point"]: p["static_best_degree"] for p in points}
    paper_degrees = {p["point"]: p.get("static_paper_degree") for p in points}
    out = []
    for point, summary in run.summary.groupby("point", sort=True):
        first = summary.iloc[0]
        rows = run.rows[run.rows["point"] == point]
        planners: dict[str, Any] = {}
        for s in summary.itertuples():
            planners[s.planner] = {
                "normalized": s.normalized,
                "speedup": s.speedup,
                "mean_step_time_s": s.mean_step_time_s,
                "spread": spread(rows[rows["planner"] == s.planner]),
                "oom": int(s.oom_count),
                "failed": int(s.failed),
            }
        nsp = planners.get("nsp", {}).get("normalized")
        groups = pv.fig7_groups(first["model"], int(first["max_context"]))
        out.append(
            {
                "point": int(point),
                "model": first["model"],
                "cluster": first["cluster"],
                "max_context": int(first["max_context"]),
                "trace": first["trace"],
                "baseline": first["baseline"],
                "static_best_degree": degrees.get(int(point)),
                "static_paper_degree": paper_degrees.get(int(point)),
                "planners": planners,
                "nsp_vs_flexsp": _ratio(planners, "flexsp", nsp),
                "nsp_vs_flexsp_artifact": _ratio(planners, "flexsp-artifact", nsp),
                "paper_groups": groups,
            }
        )
    return out


def _ratio(planners: dict[str, Any], other: str, nsp: float | None) -> float:
    """``other``'s normalised time over NSP's (NSP's speedup over it); NaN when either is missing."""
    value = planners.get(other, {}).get("normalized")
    return value / nsp if value and nsp and math.isfinite(value / nsp) else math.nan


def _points(run: SweepRun) -> list[dict[str, Any]]:
    points: list[dict[str, Any]] = resolved_config(run.plan)["points"]
    return points


def paper_panel(model: str, max_context: int) -> dict[str, dict[str, Any]]:
    """The paper's decoded speedups in the (model, context) panel: per planner, the groups' values,
    their mean and range (mapping confidence low, values high)."""
    groups = pv.fig7_groups(model, max_context)
    out = {}
    for planner in (*pv.FIG7_PLANNERS, "nsp-vs-flexsp"):
        values = [pv.fig7_value(g, planner) for g in groups]
        speedups = [v.value for v in values]
        out[planner] = {
            "groups": groups,
            "speedups": speedups,
            "normalized": [pv.as_normalised(s) for s in speedups],
            "confidence": {"value": values[0].confidence if values else "high", "panel": "low"},
        }
    return out


Y_RANGE = (0.0, 1.15)  # a ratio: bars from 0 (0.5 made a 0.75 bar look half of 1); taller ones are labelled
TITLE_LINE_PX = 19  # height of one line of the title or its subtitle
PANEL_TITLE_PX = 40  # room the top panels' titles need between the subtitle and the plot
BAR_GROUP_WIDTH = 0.8  # plotly's grouped bars fill 1 - bargap (0.2 by default) of a category


def _label_clipped(fig: go.Figure, here: list[dict[str, Any]], planners: tuple[str, ...], row: int, col: int) -> None:
    """Write the value of every bar taller than :data:`Y_RANGE` at the top of the panel, over its bar
    (grouped bars: one slot per planner in every category)."""
    width = BAR_GROUP_WIDTH / len(planners)
    for i, c in enumerate(here):
        for j, planner in enumerate(planners):
            y = c["planners"].get(planner, {}).get("normalized", math.nan)
            if math.isfinite(y) and y > Y_RANGE[1]:
                fig.add_annotation(
                    x=i + (j - (len(planners) - 1) / 2) * width,
                    y=Y_RANGE[1],
                    text=fmt(y),
                    showarrow=False,
                    textangle=-90,
                    yanchor="top",
                    font={"size": 10, "color": "white"},
                    row=row,
                    col=col,
                )


def figure(
    configs: list[dict[str, Any]], batches: int, planners: tuple[str, ...], baseline: str = PAPER_BASELINE
) -> go.Figure:
    """Four panels (model x context): bars of normalised step time per trace and planner, min-max
    whiskers over the batches, and the paper's decoded panel values (hatched, mean with range)."""
    panels = sorted({(c["model"], c["max_context"]) for c in configs}, key=lambda mc: (mc[1], mc[0]))
    titles = [f"{m}, {format_tokens(ctx)} context" for m, ctx in panels]
    n_rows = max(1, math.ceil(len(panels) / 2))
    fig = make_subplots(rows=n_rows, cols=2, subplot_titles=titles, shared_yaxes=True, vertical_spacing=0.12)
    for k, (model, context) in enumerate(panels):
        row, col = k // 2 + 1, k % 2 + 1
        here = [c for c in configs if (c["model"], c["max_context"]) == (model, context)]
        paper = paper_panel(model, context)
        for planner in planners:
            xs, ys, plus, minus, patterns, texts = [], [], [], [], [], []
            for c in here:
                p = c["planners"].get(planner)
                if p is None:
                    continue
                y, sp = p["normalized"], p["spread"]
                xs.append(c["trace"])
                ys.append(y)
                plus.append(sp["max"] - y if math.isfinite(y) and math.isfinite(sp["max"]) else 0)
                minus.append(y - sp["min"] if math.isfinite(y) and math.isfinite(sp["min"]) else 0)
                patterns.append("")
                texts.append(f"{planner} {c['trace']}: {fmt(y)} (batches {fmt(sp['min'])}-{fmt(sp['max'])})")
            decoded = paper.get(planner, {}).get("normalized") or ([1.0] if planner == baseline else [])
            if decoded:
                mean = sum(decoded) / len(decoded)
                xs.append(PAPER_X)
                ys.append(mean)
                plus.append(max(decoded) - mean)
                minus.append(mean - min(decoded))
                patterns.append("/")
                texts.append(
                    f"paper {planner}, groups {paper['nsp']['groups']}: " + ", ".join(f"{v:.3f}" for v in decoded)
                )
            fig.add_trace(
                go.Bar(
                    x=xs,
                    y=ys,
                    name=planner,
                    legendgroup=planner,
                    showlegend=k == 0,
                    marker={"color": planner_color(planner), "pattern": {"shape": patterns}},
                    error_y={"type": "data", "array": plus, "arrayminus": minus, "visible": True, "thickness": 1},
                    hovertext=texts,
                    hoverinfo="text",
                ),
                row=row,
                col=col,
            )
        fig.add_hline(y=1.0, line={"color": "#555", "dash": "dot", "width": 1}, row=row, col=col)
        _label_clipped(fig, here, planners, row, col)
    fig.update_yaxes(title_text=f"step time / {baseline}", range=list(Y_RANGE), col=1)
    subtitle = [
        *textwrap.wrap(baseline_text(baseline), 150),
        *textwrap.wrap(
            f"bars: ratio of sums over {batches} batch(es), whiskers: per-batch min-max; hatched: "
            f"{PAPER_SOURCE.format(n=7)}: the panel's bar groups as 1/speedup (mean, range; values high, panel "
            "mapping low)",
            150,
        ),
    ]
    top = 20 + TITLE_LINE_PX * (1 + len(subtitle)) + PANEL_TITLE_PX  # the subtitle ends above the panel titles
    fig.update_layout(
        barmode="group",
        height=top + 20 + 380 * n_rows,
        width=1300,
        margin={"t": top},
        title={
            "text": (
                f"NSP paper Figure 7: step time normalised to {baseline}, per configuration<br><sup>"
                + "<br>".join(subtitle)
                + "</sup>"
            ),
            "font": {"size": 15},
            "y": 1.0,
            "yref": "container",
            "yanchor": "top",
            "pad": {"t": 20},
        },
        legend={"orientation": "h", "y": -0.12 if n_rows == 1 else -0.06},
    )
    return fig


def tables(
    configs: list[dict[str, Any]], batches: int, planners: tuple[str, ...], baseline: str = PAPER_BASELINE
) -> list[str]:
    """Ours per configuration (the baseline's step and degree first), then the paper's decoded groups
    per panel."""
    others = [p for p in planners if p != baseline]
    header = [
        "model, context, trace",
        f"{baseline} step (s), degree",
        *others,
        "NSP speedup",
        "NSP vs FlexSP",
        "NSP vs FlexSP (artifact)",
    ]
    degree_key = {"static-best": "static_best_degree", "static-paper": "static_paper_degree"}.get(baseline, "")
    body = []
    for c in configs:
        p = c["planners"]
        base = p.get(baseline, {})
        degree = c.get(degree_key)
        cells = [
            f"{c['model']}, {format_tokens(c['max_context'])}, {c['trace']}",
            f"{fmt(base.get('mean_step_time_s'), '.2f')}" + (f", SP{degree}" if degree else ""),
        ]
        for planner in others:
            q = p.get(planner)
            sp = q["spread"] if q else {"min": math.nan, "max": math.nan}
            low_high = f"{fmt(sp['min'], '.2f')}\u2011{fmt(sp['max'], '.2f')}"  # a non-breaking hyphen: wraps before [
            cells.append(f"{fmt(q['normalized'])} [{low_high}]" if q else "-")
        nsp = p.get("nsp", {})
        cells += [f"{fmt(nsp.get('speedup'), '.2f')}x", f"{fmt(c['nsp_vs_flexsp'], '.2f')}x"]
        cells.append(f"{fmt(c.get('nsp_vs_flexsp_artifact', math.nan), '.2f')}x")
        body.append(cells)
    ours = html_table(
        header,
        body,
        f"Ours: {baseline_text(baseline)}; each cell is the ratio of sums over {batches} batch(es) "
        "[per-batch min-max].",
    )
    paper_rows = []
    for g in range(1, 13):
        model, context = pv.FIG7_PANEL_OF_GROUP[g]
        vals = [pv.fig7_value(g, planner) for planner in (*pv.FIG7_PLANNERS, "nsp-vs-flexsp")]
        paper_rows.append(
            [f"group {g}: {model}, {format_tokens(context)} (low)", *(f"{v.value:.2f}x ({v.confidence})" for v in vals)]
        )
    lo_hi = "; ".join(f"{k} {a:.2f}-{b:.2f}x ({c})" for k, (a, b, c) in pv.FIG7_RANGES.items())
    paper = html_table(
        ["bar group (panel by extraction order)", "FlexSP", "NSP-2L", "NSP", "NSP vs FlexSP"],
        paper_rows,
        f"Paper: {PAPER_SOURCE.format(n=7)}. Speedups over Static SP. Ranges that hold whatever the mapping: {lo_hi}; "
        f"NSP median {pv.FIG7_NSP_MEDIAN.value:.2f}x ({pv.FIG7_NSP_MEDIAN.confidence}).",
    )
    return [ours, paper]


def main(argv: list[str] | None = None) -> int:
    """Run (or reload from the cache) the Figure 7 sweep and write fig7.html / .json / .config.json."""
    args: StudyArgs = parse_args(NAME, "NSP paper Figure 7: end-to-end step time, both models x context x trace", argv)
    spec = with_profile(build_spec(args.quick), args.profile)
    run = run_spec(spec, args.out, jobs=args.jobs)
    configs = configurations(run)
    batches = spec.run.iters
    baseline = run.plan.baseline
    data = {
        "figure": 7,
        "baseline": baseline,
        "baseline_note": baseline_text(baseline),
        "batches": batches,
        "configurations": configs,
        "paper": {
            "source": PAPER_SOURCE.format(n=7),
            "groups": [v.to_dict() for v in pv.FIG7],
            "panel_of_group": {
                str(g): {"model": m, "max_context": c, "confidence": "low"}
                for g, (m, c) in pv.FIG7_PANEL_OF_GROUP.items()
            },
            "ranges": {k: {"min": a, "max": b, "confidence": c} for k, (a, b, c) in pv.FIG7_RANGES.items()},
        },
        "failures": failures(run),
        "wall_s": run.wall_s,
        "units_computed": run.computed,
        "units_cached": run.cached,
    }
    paths = write_study(
        args.out,
        NAME,
        run,
        figure(configs, batches, spec.run.planners, baseline),
        tables(configs, batches, spec.run.planners, baseline),
        data,
        {"quick": args.quick, "iters": batches},
    )
    print(done_line(NAME, f"{len(configs)} configurations x {batches} batch(es)", run, paths["html"]))
    return exit_status(NAME, run)


def frame_of(configs: list[dict[str, Any]]) -> pd.DataFrame:
    """The configurations as a flat frame (planner columns of normalised time), e.g. for the docs' table."""
    return pd.DataFrame(
        [
            {
                "model": c["model"],
                "max_context": c["max_context"],
                "trace": c["trace"],
                **{p: v["normalized"] for p, v in c["planners"].items()},
            }
            for c in configs
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
