"""Self-contained plotly HTML report of a :class:`nspsim.compare.CompareResult` (``nspsim compare -o``).

Sections, first what a reader asks first: a banner when there is no result (every planner ran out of
memory on every batch); the headline: the winner's speedup over the baseline with its per-batch
median, min-max and the bootstrap interval (:data:`nspsim.compare.INTERVAL`) beside it; the results
table (step times in s, ms or us by magnitude; the speedup's per-batch spread and interval; the
normalised step time's min / median / max; breakdown columns under their short names, the full name
on hover) and, below it, a legend line for every compared label (what ``static-best``,
``static-paper``, ``static`` or ``static-<d>`` mean), the interval's method, the planners' notes and
the breakdown names, so a long note neither stretches its row nor widens the table past a 1400-px
window; what ``max_context`` dropped and the resolved configuration; normalised step time per
planner (bars from 0, min-max whisker of the per-batch values, the median marked: the NSP paper's
Figure 7 form); per breakdown category, what each strategy saves or pays against the baseline (share
of the baseline's summed step time; the bars of a strategy add up to 1 - its normalised step time);
the step-time breakdown stacked per planner, normalised to the baseline (Figure 8); the routing
distribution (Figure 9); and the timelines of the batch on which the strategies differ most
(``CompareResult.timeline_iteration``), one row per planner on one shared time axis, a few GPUs each
(the critical one first), drawn from the accounting track, so each bar is what the breakdown charges.
plotly.js is inlined once, so the file opens offline.

``nspsim compare -o`` loads this module by the name in
``nspsim.cli.commands.compare.REPORT_RENDERER`` and calls :func:`render`: keep its signature.
"""

from __future__ import annotations

import html
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

from nspsim.compare import INTERVAL, LENGTH_BUCKETS, CompareResult, PlannerSummary, describe_label
from nspsim.compare.windows import window_lines
from nspsim.records import BREAKDOWN_CATEGORIES, BREAKDOWN_SHORT
from nspsim.units import format_seconds
from nspsim_studies.palette import BREAKDOWN_COLORS, planner_color
from nspsim_studies.renderers.compare_timelines import timelines_figure

STYLE = (
    "body{font-family:sans-serif;margin:2em;max-width:1336px}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}th{background:#eee}td{white-space:nowrap}"
    "table.results{font-size:0.85em}table.results th{white-space:normal;vertical-align:bottom}"
    "table.results td:first-child{text-align:left}div.table{max-width:100%;overflow-x:auto}"
    "ul.notes{max-width:75em;font-size:0.9em;overflow-wrap:anywhere}"
    "p.headline{font-size:1.15em;border-left:4px solid #d62728;padding:0.3em 0.8em;background:#f8f8f8}"
)


LEGEND_ROW_PX = 24  # one legend entry's height: the breakdown figure holds every category's


def render(result: CompareResult) -> str:
    """The whole report as one HTML document."""
    figures = [normalized_figure(result), savings_figure(result), breakdown_figure(result), routing_figure(result)]
    if any(not step.oom for step in result.timelines.values()):
        figures.append(timelines_figure(result))
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
            headline(result),
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


def headline(result: CompareResult) -> str:
    """The winner's speedup over the baseline with its per-batch spread and interval, one paragraph
    (nothing when no other planner shares a batch with the baseline)."""
    best = result.winner
    if best is None or best.speedup_vs_baseline is None:
        return ""
    median, low_high, interval = best.speedup_spread()
    batches = f"{best.normalized_iterations} batch(es)"
    unit = "batch"
    if result.windows:
        size = result.windows[0].passes
        batches += f", run as windows of {size} batches per optimizer step"
        unit = "window"  # passes of different planners hold different samples: windows compare like with like
    text = (
        f"<b>{html.escape(best.planner)}</b> is <b>{best.speedup_vs_baseline:.2f}x</b> faster than "
        f"{html.escape(result.baseline)} (summed step time over {batches}); per {unit}: median {median}, "
        f"min-max {low_high}; 95% interval {interval}."
    )
    return f"<p class='headline'>{text}</p>"


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
        ("speedup", "the baseline's summed step time over this planner's on the same batches"),
        ("speedup per batch: median [min-max]", "median, smallest and largest per-batch speedup over the same batches"),
        ("speedup 95% interval", INTERVAL),
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
    windows = window_lines(result.windows)
    if windows:  # gradient-accumulation windows: the per-step figures are a window's time / W
        notes += f"<li>{html.escape(windows[0])}<ul>" + "".join(
            f"<li>{html.escape(w.strip())}</li>" for w in windows[1:]
        )
        notes += "</ul></li>"
    return (
        f"<h2>Results</h2><div class='table'><table class='results'><tr>{header}</tr>{cells}</table></div>"
        f"{labels_legend(result)}<ul class='notes'>{notes}<li>95% interval: {html.escape(INTERVAL)}, over the "
        f"batches both ran; speedup = 1 / normalised</li><li>breakdown columns (share of the critical GPU's step): "
        f"{html.escape(legend)}</li></ul>"
    )


def labels_legend(result: CompareResult) -> str:
    """One line per compared label saying what it means (:func:`nspsim.compare.describe_label`), the
    baseline marked."""
    items = "".join(
        f"<li><b>{html.escape(s.planner)}</b>{' (baseline)' if s.planner == result.baseline else ''}: "
        f"{html.escape(describe_label(s.planner))}</li>"
        for s in result.summaries
    )
    return f"<ul class='notes labels'>{items}</ul>"


def _row(s: PlannerSummary) -> list[str]:
    fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
    ran = s.mean_step_time_s is not None  # a step that never ran has no breakdown
    shares = [f"{100 * s.breakdown_share.get(k, 0.0):.1f}%" if ran else "-" for k in BREAKDOWN_CATEGORIES]
    return [
        s.planner,
        "OOM" if s.mean_step_time_s is None else format_seconds(s.mean_step_time_s),
        fmt(s.normalized_to_baseline, ".3f"),
        fmt(s.speedup_vs_baseline, ".2f"),
        *_speedup_cells(s),
        f"{s.normalized_iterations}/{s.iterations}",
        f"{1e3 * s.mean_planning_time_s:.1f}",
        fmt(s.mean_load_over_lower_bound, ".3f"),
        "-" if s.mean_estimate_error is None else f"{100 * s.mean_estimate_error:+.1f}%",
        f"{s.oom_count}/{s.iterations}",
        *shares,
    ]


def _speedup_cells(s: PlannerSummary) -> list[str]:
    """[median [min-max], interval] of the per-batch speedup."""
    median, low_high, interval = s.speedup_spread()
    return [median if median == "-" else f"{median} [{low_high}]", interval]


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
    ok = [s for s in result.summaries if s.normalized_to_baseline is not None]
    values = [s.normalized_to_baseline or 0.0 for s in ok]
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
    missing = [s.planner for s in result.summaries if s.normalized_to_baseline is None]
    note = f"; no common batch with the baseline: {', '.join(missing)}" if missing else ""
    batches = max((s.normalized_iterations for s in ok), default=0)
    top = max([1.0, *values, *(s.normalized_max or 0.0 for s in ok)])
    fig.update_layout(
        title=f"Normalised step time over {batches} batch(es) (lower is better; baseline {result.baseline}{note})"
        "<br><sup>bar: summed step time over the baseline's; whisker: per-batch min-max; diamond: per-batch "
        "median</sup>",
        yaxis={"title": "step time / baseline", "range": [0.0, 1.08 * top]},  # a ratio: bars from 0
        height=460,
        legend={"orientation": "h", "y": -0.15},
    )
    return fig


def savings_figure(result: CompareResult) -> go.Figure:
    """Per breakdown category, what each strategy saves (above 0) or pays (below 0) against the
    baseline, as a share of the baseline's summed step time over the batches both ran: a strategy's
    bars add up to 1 - its normalised step time, so this says where its speedup comes from."""
    shown = [s for s in result.summaries if s.planner != result.baseline and s.saved_share]
    fig = go.Figure()
    for s in shown:
        fig.add_trace(
            go.Bar(
                name=f"{s.planner} (total {100 * sum(s.saved_share.values()):+.1f}%)",
                x=[BREAKDOWN_SHORT[k] for k in BREAKDOWN_CATEGORIES],
                y=[100 * s.saved_share[k] for k in BREAKDOWN_CATEGORIES],
                customdata=list(BREAKDOWN_CATEGORIES),
                hovertemplate="%{customdata}: %{y:+.2f}%<extra>" + html.escape(s.planner) + "</extra>",
                marker_color=planner_color(s.planner),
            )
        )
    fig.add_hline(y=0.0, line_color="#333")
    fig.update_layout(
        barmode="group",
        title=f"What each strategy saves (+) or pays (-) against {result.baseline}, per category"
        f"<br><sup>share of {result.baseline}'s summed step time over the batches both ran (critical GPU); "
        "each strategy's bars add up to its total</sup>",
        yaxis_title=f"% of {result.baseline}'s step saved",
        xaxis_title="breakdown category",
        height=440,
        legend={"orientation": "h", "y": -0.2},
    )
    return fig


def _batches(result: CompareResult) -> int:
    """How many batches the comparison ran (each planner on the same ones)."""
    return len({r.iteration for r in result.records})


def _speedup_label(s: PlannerSummary) -> str:
    text = "-" if s.speedup_vs_baseline is None else f"{s.speedup_vs_baseline:.2f}x"
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
        height=max(120 + 45 * len(ok), LEGEND_ROW_PX * len(BREAKDOWN_CATEGORIES) + 200),  # margins + every legend entry
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
