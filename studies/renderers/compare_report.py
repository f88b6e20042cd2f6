"""Self-contained plotly HTML report of a :class:`nspsim.compare.CompareResult` (``nspsim compare -o``).

Sections: a banner when there is no result (every planner ran out of memory on every batch), the
results table (step times in s, ms or us by magnitude; the per-batch spread of the normalised step
time as min / median / max; breakdown columns under their short names, the full name on hover) with
the planners' notes as a list below it, so a long note (static-best's choice of degree) neither
stretches its row nor widens the table past a 1400-px window; what ``max_context`` dropped from the
batches and the resolved configuration; normalised step time per planner with a min-max bar of the
per-batch values and the median marked (the NSP paper's Figure 7 form); the step-time breakdown
stacked per planner, normalised to the baseline (Figure 8); the routing distribution, share of
samples per SP degree in each length bucket (Figure 9); and one iteration's timeline per planner on a
few GPUs (the critical one first), drawn from the accounting track, so each bar is what the breakdown
charges. plotly.js is inlined once, so the file opens offline.

``nspsim compare -o`` loads this module by the name in
``nspsim.cli.commands.compare.REPORT_RENDERER`` and calls :func:`render`: keep its signature.
"""

from __future__ import annotations

import html
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

from nspsim.compare import LENGTH_BUCKETS, CompareResult, PlannerSummary
from nspsim.records import BREAKDOWN_CATEGORIES, BREAKDOWN_SHORT
from nspsim.simulator import StepResult, TimelineEvent
from nspsim.units import format_seconds
from studies.palette import BREAKDOWN_COLORS, planner_color

TIMELINE_GPUS = 6
STYLE = (
    "body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#eee}td{white-space:nowrap}"
    "table.results{font-size:0.9em}table.results th{white-space:normal;vertical-align:bottom}"
    "table.results td:first-child{text-align:left}div.table{max-width:100%;overflow-x:auto}"
    "ul.notes{max-width:75em;font-size:0.9em;overflow-wrap:anywhere}"
)


def render(result: CompareResult) -> str:
    """The whole report as one HTML document."""
    figures = [normalized_figure(result), breakdown_figure(result), routing_figure(result)]
    figures += [timeline_figure(label, step) for label, step in result.timelines.items() if not step.oom]
    body = [pio.to_html(fig, full_html=False, include_plotlyjs=(i == 0)) for i, fig in enumerate(figures)]
    wl = result.config["workload"]
    title = f"nspsim compare: {wl['model']} on {wl['gpus']}x {wl['cluster']}, {wl['trace']}"
    return "\n".join(
        [
            "<!DOCTYPE html><html><head><meta charset='utf-8'>",
            f"<title>{html.escape(title)}</title>",
            f"<style>{STYLE}</style></head><body>",
            f"<h1>{html.escape(title)}</h1>",
            no_result_banner(result),
            results_table(result),
            drops_line(result),
            config_table(result.config),
            *body,
            "</body></html>",
        ]
    )


def no_result_banner(result: CompareResult) -> str:
    """A prominent notice when every planner ran out of memory on every batch (else nothing)."""
    if result.no_result is None:
        return ""
    style = "border:2px solid #c00;background:#fee;padding:0.6em 1em;font-weight:bold"
    return f"<p class='no-result' style='{style}'>No result: {html.escape(result.no_result)}</p>"


def drops_line(result: CompareResult) -> str:
    """What ``max_context`` dropped from the compared batches (a warning colour above the threshold)."""
    drops = result.drops
    if drops is None:
        return ""
    text = f"Batches: {drops.batches}, {drops.kept_samples} samples kept; {drops.describe()} dropped."
    colour = " style='color:#c00'" if drops.warning() is not None else ""
    return f"<p class='drops'{colour}>{html.escape(text)}</p>"


def results_table(result: CompareResult) -> str:
    """The summary table as HTML, then the planners' notes as a list below it (module docstring)."""
    head = [
        ("planner", ""),
        ("mean step", ""),
        (f"normalised to {result.baseline}", "summed step time over the baseline's on the same batches"),
        ("speedup", ""),
        ("per batch min / med / max", "spread of the per-batch normalised step time over the same batches"),
        ("batches normalised", ""),
        ("planning (ms)", ""),
        ("Load / lower bound", ""),
        (
            "estimate error",
            "the estimate that chose each plan over its simulated step, minus 1 (mean; each plan's rung: JSON)",
        ),
        ("OOM", ""),
        *((BREAKDOWN_SHORT[k], f"share of the critical GPU's step: {k}") for k in BREAKDOWN_CATEGORIES),
    ]
    header = "".join(
        f"<th title='{html.escape(tip)}'>{html.escape(h)}</th>" if tip else f"<th>{h}</th>" for h, tip in head
    )
    rows = [_row(s) for s in result.summaries]
    cells = "".join(f"<tr>{''.join(f'<td>{html.escape(c)}</td>' for c in row)}</tr>" for row in rows)
    notes = "".join(
        f"<li><b>{html.escape(s.planner)}</b>: {html.escape(s.note)}</li>" for s in result.summaries if s.note
    )
    legend = ", ".join(f"{BREAKDOWN_SHORT[k]} = {k}" for k in BREAKDOWN_CATEGORIES)
    return (
        f"<h2>Results</h2><div class='table'><table class='results'><tr>{header}</tr>{cells}</table></div>"
        f"<ul class='notes'>{notes}<li>breakdown columns (share of the critical GPU's step): "
        f"{html.escape(legend)}</li></ul>"
    )


def _row(s: PlannerSummary) -> list[str]:
    fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
    ran = s.mean_step_time_s is not None  # a step that never ran has no breakdown
    shares = [f"{100 * s.breakdown_share.get(k, 0.0):.1f}%" if ran else "-" for k in BREAKDOWN_CATEGORIES]
    return [
        s.planner,
        "OOM" if s.mean_step_time_s is None else format_seconds(s.mean_step_time_s),
        fmt(s.normalized_to_static, ".3f"),
        fmt(s.speedup_vs_static, ".2f"),
        _spread(s),
        f"{s.normalized_iterations}/{s.iterations}",
        f"{1e3 * s.mean_planning_time_s:.1f}",
        fmt(s.mean_load_over_lower_bound, ".3f"),
        "-" if s.mean_estimate_error is None else f"{100 * s.mean_estimate_error:+.1f}%",
        f"{s.oom_count}/{s.iterations}",
        *shares,
    ]


def _spread(s: PlannerSummary) -> str:
    low, median, high = s.normalized_min, s.normalized_median, s.normalized_max
    if low is None or median is None or high is None:
        return "-"
    return f"{low:.3f} / {median:.3f} / {high:.3f}"


def config_table(config: dict[str, Any]) -> str:
    """The resolved configuration as HTML."""
    flat = {
        **{f"workload.{k}": v for k, v in config["workload"].items()},
        **{k: v for k, v in config.items() if k != "workload"},
    }
    rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in flat.items())
    return f"<details><summary>Configuration</summary><table>{rows}</table></details>"


def _ok(result: CompareResult) -> list[PlannerSummary]:
    return [s for s in result.summaries if s.mean_step_time_s is not None]


def normalized_figure(result: CompareResult) -> go.Figure:
    """Normalised step time per planner with the speedup on each bar, a min-max error bar of the
    per-batch normalised step time and its median as a diamond (planners that never ran on the same
    batches as the baseline have no bar). The ratio of sums lies within the per-batch min and max (it
    is their mean weighted by the baseline's step times)."""
    ok = [s for s in result.summaries if s.normalized_to_static is not None]
    values = [s.normalized_to_static or 0.0 for s in ok]
    fig = go.Figure(
        go.Bar(
            name="summed step time / baseline's",
            x=[s.planner for s in ok],
            y=values,
            text=[_speedup_label(s) for s in ok],
            textposition="inside",
            insidetextanchor="start",  # at the bar's foot, clear of the whisker at its top
            marker_color=[planner_color(s.planner) for s in ok],
            error_y={
                "type": "data",
                "symmetric": False,
                "array": [(s.normalized_max or v) - v for s, v in zip(ok, values)],
                "arrayminus": [v - (s.normalized_min or v) for s, v in zip(ok, values)],
                "color": "#333",
            },
        )
    )
    fig.add_trace(
        go.Scatter(
            name="per-batch median",
            x=[s.planner for s in ok],
            y=[s.normalized_median for s in ok],
            mode="markers",
            marker={"symbol": "diamond", "size": 9, "color": "black"},
        )
    )
    fig.add_hline(y=1.0, line_dash="dash", line_color="gray")
    missing = [s.planner for s in result.summaries if s.normalized_to_static is None]
    note = f"; no common batch with the baseline: {', '.join(missing)}" if missing else ""
    batches = max((s.normalized_iterations for s in ok), default=0)
    fig.update_layout(
        title=f"Normalised step time over {batches} batch(es) (lower is better; baseline {result.baseline}{note})"
        "<br><sup>bar: summed step time over the baseline's; whisker: per-batch min-max; diamond: per-batch "
        "median</sup>",
        yaxis_title="step time / baseline",
        height=460,
        legend={"orientation": "h", "y": -0.15},
    )
    return fig


def _batches(result: CompareResult) -> int:
    """How many batches the comparison ran (each planner on the same ones)."""
    return len({r.iteration for r in result.records})


def _speedup_label(s: PlannerSummary) -> str:
    text = "-" if s.speedup_vs_static is None else f"{s.speedup_vs_static:.2f}x"
    return text if s.normalized_iterations == s.iterations else f"{text} ({s.normalized_iterations}/{s.iterations})"


def breakdown_figure(result: CompareResult) -> go.Figure:
    """Critical-GPU breakdown per planner, stacked, normalised to the baseline's mean step time (in
    seconds when the baseline never fits in memory)."""
    ok = _ok(result)
    base = next((s.mean_step_time_s for s in ok if s.planner == result.baseline), None)
    scale = base or 1.0
    fig = go.Figure()
    for cat in BREAKDOWN_CATEGORIES:
        fig.add_trace(
            go.Bar(
                name=cat,
                y=[s.planner for s in ok],
                x=[s.mean_breakdown_s[cat] / scale for s in ok],
                orientation="h",
                marker_color=BREAKDOWN_COLORS[cat],
            )
        )
    unit = "relative to the baseline" if base else "seconds; the baseline never fits in memory"
    fig.update_layout(
        barmode="stack",
        title=f"Step-time breakdown (critical GPU; mean of up to {_batches(result)} batches, those that fit in memory; "
        f"{unit})",
        xaxis_title="relative step time" if base else "seconds",
        height=120 + 45 * len(ok),
        yaxis_autorange="reversed",
    )
    return fig


def routing_figure(result: CompareResult) -> go.Figure:
    """Share of samples per SP degree in each length bucket, one panel per planner."""
    ok = _ok(result)
    fig = make_subplots(rows=1, cols=max(len(ok), 1), subplot_titles=[s.planner for s in ok], shared_yaxes=True)
    degrees = sorted({d for s in ok for shares in s.routing_share.values() for d in shares}, reverse=True)
    palette = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#ff9da6", "#9d755d"]
    for col, s in enumerate(ok, start=1):
        for k, degree in enumerate(degrees):
            fig.add_trace(
                go.Bar(
                    name=f"SP{degree}",
                    legendgroup=f"SP{degree}",
                    showlegend=col == 1,
                    x=[name for name, _ in LENGTH_BUCKETS],
                    y=[s.routing_share.get(name, {}).get(degree, 0.0) for name, _ in LENGTH_BUCKETS],
                    marker_color=palette[k % len(palette)],
                ),
                row=1,
                col=col,
            )
    fig.update_layout(
        barmode="stack",
        title=f"Routing: share of samples per SP degree by length bucket, over {_batches(result)} batch(es)",
        height=420,
        yaxis_title="share of samples in bucket",
    )
    return fig


def timeline_figure(label: str, step: StepResult) -> go.Figure:
    """One iteration's accounting on a few GPUs: kernels and what each idle interval waited for."""
    gpus = _timeline_gpus(step)
    events = [e for e in step.timeline if e.gpu in gpus and _tiles(e)]
    fig = go.Figure()
    for cat in BREAKDOWN_CATEGORIES:
        spans = _merge([e for e in events if e.category == cat])
        if spans:
            fig.add_trace(
                go.Bar(
                    name=cat,
                    orientation="h",
                    base=[a for _, a, _ in spans],
                    x=[b - a for _, a, b in spans],
                    y=[f"GPU {g}" for g, _, _ in spans],
                    marker_color=BREAKDOWN_COLORS[cat],
                    marker_line_width=0,
                )
            )
    fig.update_layout(
        barmode="overlay",
        bargap=0.2,
        height=150 + 40 * len(gpus),
        title=f"Timeline of one iteration: {label} (step {format_seconds(step.step_time_s or 0.0)}, "
        f"critical GPU {step.critical_gpu})",
        xaxis_title="time (s)",
        yaxis={"categoryorder": "array", "categoryarray": [f"GPU {g}" for g in reversed(gpus)]},
    )
    return fig


def _tiles(event: TimelineEvent) -> bool:
    """Events that tile a GPU's time: kernels and the accounting of idle intervals."""
    return event.track == "exposed" or (event.track == "compute" and not event.name.startswith("wait"))


def _timeline_gpus(step: StepResult) -> list[int]:
    crit = step.critical_gpu or 0
    spread = [round(i * (step.num_gpus - 1) / (TIMELINE_GPUS - 2)) for i in range(TIMELINE_GPUS - 1)]
    return list(dict.fromkeys([crit, *spread]))[:TIMELINE_GPUS]


def _merge(events: list[TimelineEvent], gap: float = 1e-9) -> list[tuple[int, float, float]]:
    """Merge touching intervals of one category per GPU (fewer bars, same picture)."""
    out: list[tuple[int, float, float]] = []
    for e in sorted(events, key=lambda e: (e.gpu, e.start)):
        if out and out[-1][0] == e.gpu and e.start <= out[-1][2] + gap:
            out[-1] = (e.gpu, out[-1][1], max(out[-1][2], e.end))
        else:
            out.append((e.gpu, e.start, e.end))
    return out
