"""Self-contained plotly HTML report of an ``nspsim sweep`` (``nspsim plot DIR``, ``nspsim sweep -o DIR``).

Input: the sweep's per-(point, planner, batch) rows (``DIR/results.parquet``), its per-(point,
planner) summary and its resolved config, as pandas frames and a dict (the row schema is the one
``nspsim sweep`` writes; docs in ``nspsim/sweep``). The figures are drawn from the *per-batch* rows,
so each one shows how far a result moves from batch to batch, and every title states how many
batches (distinct point x batch pairs) it rests on:

1. speedup over the baseline (``1 / normalized``, per batch) against each swept axis, one trace per
   planner. Numeric axes (GPUs, max context, tokens per batch, token budget) are drawn on a log
   axis with a tick at each swept value when they span a factor of 4 or more (a doubling grid is
   then evenly spaced, i.e. log2), as a median line with min-max whiskers of the per-batch speedups,
   the planners a few percent of the axis apart (five overlapping min-max bands were unreadable);
   categorical axes (trace, model, cluster, ...) as one box per planner and value. Speedup axes start
   at 0 (a ratio: equal results show as equal, not as a zoom onto 1.000-1.005). A point's other
   axes are pooled into the same x (the subtitle says which), so a whisker is the spread over
   batches *and* the other axes: the trade-off this axis alone explains is the median's slope.
2. speedup against trace skew: the share of a point's samples over 128K tokens (mean over its
   batches) on x, the per-point median speedup with min-max whiskers on y.
3. exposed SP communication against communication wait, one marker per planner and batch: the
   communication-balance trade-off (small SP groups pay little SP traffic but leave GPUs waiting on
   imbalance; large groups balance the load at the price of SP traffic).
4. planning time against Load / lower bound, one marker per row: what a planner's search buys.
5. with gradient-accumulation windows, each planner's window time over its per-step assignment's
   against the window (:mod:`nspsim_studies.renderers.sweep_windows`); a swept ``window`` is also an
   axis of figure 1 (speedup over the baseline against W).

A legend line per planner label comes first (what ``static-best``, ``static-paper`` or ``static``
mean). Then the summary table (one row per point x planner, with the speedup's interval,
:data:`nspsim.compare.summary.INTERVAL`) and the failed units, if any. Swept axes come
from ``config["axes"]`` (name -> values) where the sweep recorded them, else they are the workload
columns with more than one distinct value. Pooling rather than one figure per combination of the
other axes: a 12-point, 3-axis sweep stays a handful of readable figures; the summary table keeps
every point apart. plotly.js is inlined once, so the file opens offline.

``nspsim plot`` loads this module by the name in ``nspsim.cli.commands.plot.PLOT_RENDERER`` and calls
:func:`render`: keep its signature.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from nspsim.compare import INTERVAL, describe_label
from nspsim.units import format_tokens
from nspsim.workload import WorkloadConfig
from nspsim_studies.palette import planner_color
from nspsim_studies.renderers.sweep_tables import TOKEN_AXES, cell, config_block, errors_list, summary_table
from nspsim_studies.renderers.sweep_windows import has_windows, window_figure

WORKLOAD_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(WorkloadConfig))
NUMERIC_AXES = frozenset({"gpus", "max_context", "tokens_per_batch", "token_budget", "spmax", "seed", "window"})
LOG_SPAN = 4.0  # a numeric axis spanning at least this factor is drawn on a log scale
DODGE = 0.012  # sideways offset of one planner's whiskers, as a share of the axis span
STYLE = (
    "body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;font-size:0.9em}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right;white-space:nowrap}th{background:#eee}"
    "td.l{text-align:left;white-space:normal;overflow-wrap:anywhere}"
    "div.table{max-width:100%;overflow-x:auto;max-height:40em;overflow-y:auto}"
    "ul.errors,ul.labels{font-size:0.9em;overflow-wrap:anywhere}"
)


def render(results: pd.DataFrame, summary: pd.DataFrame, config: dict[str, Any]) -> str:
    """The whole report as one HTML document (module docstring)."""
    planners = planner_order(results, config)
    axes = swept_axes(results, config)
    drawn = figures(results, config)
    if has_windows(summary):  # a sweep with gradient-accumulation windows (nspsim_studies.renderers.sweep_windows)
        drawn.append(window_figure(summary, planners, {p: planner_color(p) for p in planners}))
    body = [pio.to_html(fig, full_html=False, include_plotlyjs=(i == 0)) for i, fig in enumerate(drawn)]
    points = int(results["point"].nunique()) if "point" in results else 0
    title = f"nspsim sweep: {points} point(s) x {len(planners)} planner(s), {batch_count(results)} batches"
    return "\n".join(
        [
            "<!DOCTYPE html><html><head><meta charset='utf-8'>",
            f"<title>{html.escape(title)}</title>",
            f"<style>{STYLE}</style></head><body>",
            f"<h1>{html.escape(title)}</h1>",
            f"<p>Swept axes: {html.escape(', '.join(axes) or 'none')}; baseline "
            f"{html.escape(', '.join(_baselines(results)) or '-')}.</p>",
            labels_legend(planners),
            errors_list(results),
            *body,
            summary_table(summary, axes, planners),
            config_block(config),
            "</body></html>",
        ]
    )


def labels_legend(planners: Sequence[str]) -> str:
    """One line per planner label saying what it means (:func:`nspsim.compare.describe_label`; a label
    it cannot read, from a results file edited by hand, gets none), then how the interval is made."""
    lines = []
    for label in planners:
        try:
            lines.append(f"<li><b>{html.escape(label)}</b>: {html.escape(describe_label(label))}</li>")
        except ValueError:
            lines.append(f"<li><b>{html.escape(label)}</b></li>")
    lines.append(f"<li>speedup 95% interval (summary table): {html.escape(INTERVAL)}</li>")
    return f"<ul class='labels'>{''.join(lines)}</ul>"


def figures(results: pd.DataFrame, config: dict[str, Any]) -> list[go.Figure]:
    """The report's figures in order: speedup against each swept axis, against skew, exposed SP
    communication against communication wait, planning time against Load / lower bound."""
    planners = planner_order(results, config)
    colors = {p: planner_color(p) for p in planners}
    axes = swept_axes(results, config)
    return [
        *(speedup_figure(results, axis, axes, planners, colors) for axis in axes),
        skew_figure(results, planners, colors),
        comm_figure(results, planners, colors),
        planning_figure(results, planners, colors),
    ]


def planner_order(results: pd.DataFrame, config: dict[str, Any]) -> list[str]:
    """Planner labels in the sweep's ``run.planners`` order (then any other label in the rows)."""
    seen = [str(p) for p in pd.unique(results["planner"])] if "planner" in results else []
    declared = [str(p) for p in (config.get("run") or {}).get("planners", []) if str(p) in seen]
    return declared + [p for p in seen if p not in declared]


def swept_axes(results: pd.DataFrame, config: dict[str, Any]) -> list[str]:
    """The swept workload fields: ``config["zip"]``'s and ``config["axes"]``'s names that are columns,
    else the workload columns with more than one distinct value (missing values count as one)."""
    declared = {**(config.get("zip") or {}), **(config.get("axes") or {})}
    if isinstance(declared, dict) and declared:
        return [str(a) for a in declared if a in results.columns]
    return [c for c in WORKLOAD_COLUMNS if c in results.columns and results[c].nunique(dropna=False) > 1]


def batch_count(frame: pd.DataFrame) -> int:
    """Distinct (point, batch) pairs in ``frame``: the batches a figure rests on."""
    if frame.empty:
        return 0
    return int(frame[["point", "batch_index"]].drop_duplicates().shape[0])


def speedup_rows(results: pd.DataFrame) -> pd.DataFrame:
    """Rows with a per-batch normalised step time (both the planner and its baseline ran), with
    ``speedup`` = 1 / normalized; the baseline's own rows (always 1) are left out."""
    ok = results[np.isfinite(results["normalized"]) & (results["normalized"] > 0)]
    ok = ok[ok["planner"] != ok["baseline"]]
    return ok.assign(speedup=1.0 / ok["normalized"])


def speedup_spread(results: pd.DataFrame, axis: str) -> pd.DataFrame:
    """Per (planner, value of ``axis``): the batches, and the min, median and max per-batch speedup
    (pooled over the other axes)."""
    numeric = _is_numeric_axis(results[axis], axis)
    rows = speedup_rows(results).assign(_x=lambda f: _axis_values(f, axis, numeric))
    grouped = rows.groupby(["planner", "_x"], sort=True)["speedup"]
    out = grouped.agg(["size", "min", "median", "max"]).reset_index()
    return out.rename(columns={"_x": axis, "size": "batches"})


def _axis_values(frame: pd.DataFrame, axis: str, numeric: bool) -> pd.Series:
    """An axis column for grouping: numbers stay numbers on a ``numeric`` axis; otherwise (or a
    numeric axis with a missing value, such as an automatic token budget) values become their text,
    ``default`` for a missing one."""
    if numeric:
        return frame[axis].astype(float)
    return frame[axis].map(lambda v: cell(axis, v))


def _is_numeric_axis(col: pd.Series, axis: str) -> bool:
    return axis in NUMERIC_AXES and bool(col.notna().all()) and pd.api.types.is_numeric_dtype(col)


def _tick_text(axis: str, value: float) -> str:
    return format_tokens(value) if axis in TOKEN_AXES else f"{value:g}"


def speedup_figure(
    results: pd.DataFrame, axis: str, axes: Sequence[str], planners: Sequence[str], colors: dict[str, str]
) -> go.Figure:
    """Figure 1 for one swept axis (module docstring): a median line with min-max whiskers per planner
    on a numeric axis, boxes per planner and value on a categorical one."""
    rows = speedup_rows(results)
    fig = go.Figure()
    numeric = axis in rows and _is_numeric_axis(results[axis], axis)
    spread = speedup_spread(results, axis) if axis in rows else pd.DataFrame()
    drawn = [p for p in planners if not spread.empty and (spread["planner"] == p).any()]
    values = sorted(set(spread[axis])) if numeric and not spread.empty else []
    log = bool(values) and min(values) > 0 and max(values) / min(values) >= LOG_SPAN
    for k, planner in enumerate(drawn):
        color = colors[planner]
        if numeric:
            mine = spread[spread["planner"] == planner]
            x = [_dodge(v, k - (len(drawn) - 1) / 2, values, log) for v in mine[axis]]
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=list(mine["median"]),
                    mode="lines+markers",
                    line={"color": color},
                    name=planner,
                    error_y={
                        "type": "data",
                        "symmetric": False,
                        "array": list(mine["max"] - mine["median"]),
                        "arrayminus": list(mine["median"] - mine["min"]),
                        "color": color,
                        "thickness": 1.5,
                    },
                    customdata=np.stack([mine[axis], mine["min"], mine["max"], mine["batches"]], axis=1),
                    hovertemplate=f"{axis} %{{customdata[0]:g}}: %{{y:.3f}}x median (min %{{customdata[1]:.3f}}, "
                    "max %{customdata[2]:.3f}, %{customdata[3]} batches)",
                )
            )
        else:
            mine_rows = rows[rows["planner"] == planner]
            fig.add_trace(
                go.Box(
                    x=_axis_values(mine_rows, axis, numeric=False),
                    y=mine_rows["speedup"],
                    name=planner,
                    marker_color=color,
                    boxpoints="all",
                    jitter=0.3,
                    pointpos=0,
                )
            )
    fig.add_hline(y=1.0, line_dash="dash", line_color="gray")
    others = [a for a in axes if a != axis]
    pooled = f"; pooled over {', '.join(others)}" if others else ""
    shape = "median and min-max whisker per value" if numeric else "box per value, one dot per batch"
    fig.update_layout(
        title=f"Speedup over {_baseline_text(results)} against {axis}: {batch_count(rows)} batches"
        f"<br><sup>per-batch speedup (1 / normalised step time), {shape}{pooled}</sup>",
        xaxis_title=axis,
        yaxis={"title": "speedup (x)", "rangemode": "tozero"},  # a ratio: from 0, no zoom onto 1.000-1.005
        height=460,
        boxmode="group",
    )
    if values:
        fig.update_xaxes(
            type="log" if log else "linear", tickvals=values, ticktext=[_tick_text(axis, v) for v in values]
        )
    elif not spread.empty:
        fig.update_xaxes(type="category")
    return _no_data(fig, rows.empty)


def _dodge(value: float, offset: float, values: Sequence[float], log: bool) -> float:
    """``value`` moved sideways by ``offset`` planner slots (a few percent of the axis), so the
    planners' whiskers at one swept value stand side by side instead of on top of each other."""
    if log:
        return float(value * 2 ** (DODGE * math.log2(max(values) / min(values)) * offset))
    return float(value + DODGE * ((max(values) - min(values)) or 1.0) * offset)


def skew_points(results: pd.DataFrame) -> pd.DataFrame:
    """Per (planner, point): the point's skew (mean share of samples over 128K over its batches), the
    batches, and the min, median and max per-batch speedup."""
    skew = results.groupby("point")["share_over_128k"].mean().rename("skew")
    rows = speedup_rows(results)
    out = rows.groupby(["planner", "point"])["speedup"].agg(["size", "min", "median", "max"]).reset_index()
    return out.rename(columns={"size": "batches"}).join(skew, on="point")


def skew_figure(results: pd.DataFrame, planners: Sequence[str], colors: dict[str, str]) -> go.Figure:
    """Figure 2 (module docstring): per-point median speedup with min-max whiskers against skew."""
    rows = speedup_rows(results)
    points = skew_points(results)
    fig = go.Figure()
    for planner in planners:
        mine = points[points["planner"] == planner].sort_values("skew")
        if mine.empty:
            continue
        fig.add_trace(
            go.Scatter(
                x=mine["skew"],
                y=mine["median"],
                mode="markers",
                name=planner,
                marker={"color": colors[planner], "size": 9},
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": mine["max"] - mine["median"],
                    "arrayminus": mine["median"] - mine["min"],
                    "color": colors[planner],
                },
                customdata=mine[["point", "batches"]],
                hovertemplate="point %{customdata[0]}: %{y:.3f}x median over %{customdata[1]} batches",
            )
        )
    fig.add_hline(y=1.0, line_dash="dash", line_color="gray")
    fig.update_layout(
        title=f"Speedup over {_baseline_text(results)} against trace skew: {batch_count(rows)} batches, "
        f"{rows['point'].nunique()} points<br><sup>x: share of a point's samples over 128K tokens (mean over its "
        "batches); marker: per-batch median, whisker: min-max</sup>",
        xaxis_title="share of samples over 128K tokens",
        yaxis={"title": "speedup (x)", "rangemode": "tozero"},
        xaxis_tickformat=".3~%",  # .1% printed 0.1% at three ticks of a 0-0.2% axis
        xaxis_rangemode="nonnegative",
        height=460,
    )
    return _no_data(fig, rows.empty)


def ran_rows(results: pd.DataFrame) -> pd.DataFrame:
    """Rows whose step ran (a finite step time, no error)."""
    ok = results[np.isfinite(results["step_time_s"])]
    return ok[ok["error"].fillna("") == ""] if "error" in ok else ok


def comm_figure(results: pd.DataFrame, planners: Sequence[str], colors: dict[str, str]) -> go.Figure:
    """Figure 3 (module docstring): exposed SP communication against communication wait, per row."""
    rows = ran_rows(results)
    fig = _planner_scatter(
        rows,
        planners,
        colors,
        lambda mine: (1e3 * mine["bd_comm_wait"], 1e3 * mine["bd_sp_exposed_comm"]),
        "wait %{x:.1f} ms, SP %{y:.1f} ms",
    )
    fig.update_layout(
        title=f"Exposed SP communication against communication wait: {batch_count(rows)} batches, "
        f"{len(rows)} planner-batch rows<br><sup>critical GPU's step, one marker per planner and batch; "
        "lower left is better</sup>",
        xaxis_title="communication wait (ms)",
        yaxis_title="exposed SP communication (ms)",
        height=480,
    )
    return _no_data(fig, rows.empty)


def _planner_scatter(
    rows: pd.DataFrame,
    planners: Sequence[str],
    colors: dict[str, str],
    xy: Callable[[pd.DataFrame], tuple[Any, Any]],
    hover: str,
) -> go.Figure:
    """One marker per row, one trace per planner; ``xy`` gives a planner's rows' x and y."""
    fig = go.Figure()
    for planner in planners:
        mine = rows[rows["planner"] == planner]
        if mine.empty:
            continue
        x, y = xy(mine)
        fig.add_trace(
            go.Scatter(
                x=x,
                y=y,
                mode="markers",
                name=planner,
                marker={"color": colors[planner], "size": 7, "opacity": 0.7},
                customdata=mine[["point", "batch_index"]],
                hovertemplate="point %{customdata[0]}, batch %{customdata[1]}: " + hover,
            )
        )
    return fig


def planning_figure(results: pd.DataFrame, planners: Sequence[str], colors: dict[str, str]) -> go.Figure:
    """Figure 4 (module docstring): planning time against Load / lower bound, per row."""
    rows = results[np.isfinite(results["load_over_lower_bound"]) & np.isfinite(results["planning_time_s"])]
    fig = _planner_scatter(
        rows,
        planners,
        colors,
        lambda mine: (mine["load_over_lower_bound"], 1e3 * mine["planning_time_s"]),
        "Load/LB %{x:.3f}, %{y:.1f} ms",
    )
    fig.update_layout(
        title=f"Planning time against Load / lower bound: {batch_count(rows)} batches, {len(rows)} planner-batch "
        "rows<br><sup>routed proxy Load over the batch's lower bound (1 is optimal); one marker per planner and "
        "batch</sup>",
        xaxis_title="Load / lower bound",
        yaxis_title="planning time (ms)",
        yaxis_type="log",
        height=480,
    )
    return _no_data(fig, rows.empty)


def _baselines(results: pd.DataFrame) -> list[str]:
    return [str(b) for b in pd.unique(results["baseline"])] if "baseline" in results else []


def _baseline_text(results: pd.DataFrame) -> str:
    return "/".join(_baselines(results)) or "the baseline"


def _no_data(fig: go.Figure, empty: bool) -> go.Figure:
    if empty:
        fig.add_annotation(text="no data: no batch ran for this figure", showarrow=False, x=0.5, y=0.5)
    return fig
