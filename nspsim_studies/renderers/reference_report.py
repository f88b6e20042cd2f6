"""The page of ``nspsim validate -o DIR`` (``DIR/validation.html``): per kind, simulated against
published on log axes with y = x and +-10% / +-25% bands, every row a marker (hover: id, source,
figures), rows beyond 25% labelled by id; then the summary per kind (all rows, fit rows, check rows)
and the per-row table with sources and the reasons of rows the model cannot express."""

from __future__ import annotations

import html
import math

import plotly.graph_objects as go

from nspsim.validation.run import SPLIT, ValidationResult

ROLE_COLORS = {"fit": "#1f77b4", "check": "#d62728"}
LABEL_BEYOND = 0.25


def scatter(result: ValidationResult, kind: str) -> go.Figure | None:
    """Simulated against published for one kind, ``None`` when no row of it is expressed."""
    rows = [r for r in result.results if r.row.kind == kind and r.error is not None]
    if not rows:
        return None
    values = [v for r in rows for v in (r.row.published, r.prediction.simulated or 0.0) if v > 0]
    lo, hi = min(values) / 1.5, max(values) * 1.5
    fig = go.Figure()
    for factor, name in ((1.25, "+-25%"), (1.10, "+-10%")):
        fig.add_trace(
            go.Scatter(
                x=[lo, hi, hi, lo],
                y=[lo * factor, hi * factor, hi / factor, lo / factor],
                fill="toself",
                mode="none",
                fillcolor="rgba(120,120,120,0.10)",
                name=name,
                hoverinfo="skip",
            )
        )
    fig.add_trace(
        go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", line={"dash": "dash", "color": "grey"}, name="y = x")
    )
    for role, color in ROLE_COLORS.items():
        mine = [r for r in rows if result.role(r.row) == role]
        if not mine:
            continue
        labels = [r.row.id if abs(r.error or 0.0) > LABEL_BEYOND else "" for r in mine]
        fig.add_trace(
            go.Scatter(
                x=[r.row.published for r in mine],
                y=[r.prediction.simulated for r in mine],
                mode="markers+text",
                text=labels,
                textposition="top center",
                textfont={"size": 9},
                marker={"size": 8, "color": color},
                customdata=[[r.row.id, r.row.unit, f"{r.error:+.1%}", r.row.source.cite[:110]] for r in mine],
                hovertemplate="%{customdata[0]}<br>published %{x:.4g} %{customdata[1]}<br>simulated %{y:.4g}"
                " (%{customdata[2]})<br>%{customdata[3]}<extra></extra>",
                name=f"{role} ({len(mine)})",
            )
        )
    s = result.summary()[kind]
    fig.update_layout(
        title=f"{kind}: {s.n} rows, MAPE {s.mape:.1%}, max |error| {s.max_abs_error:.1%}",
        xaxis={"type": "log", "title": "published (the row's unit)", "range": [math.log10(lo), math.log10(hi)]},
        yaxis={"type": "log", "title": "simulated", "range": [math.log10(lo), math.log10(hi)]},
        width=640,
        height=600,
        legend={"orientation": "h", "y": -0.18},
        margin={"l": 60, "r": 20, "t": 60, "b": 40},
    )
    return fig


def _fmt(value: float | None, pattern: str) -> str:
    return "-" if value is None else format(value, pattern)


def summary_table(result: ValidationResult) -> str:
    """Per kind: rows, expressed rows, MAPE and max |error|; the same over fit and check rows."""
    fit, check = result.split_summary("fit"), result.split_summary("check")
    head = (
        "<tr><th>kind</th><th>rows</th><th>expressed</th><th>MAPE</th><th>max |error|</th>"
        "<th>fit rows</th><th>fit MAPE</th><th>check rows</th><th>check MAPE</th></tr>"
    )
    body = []
    for kind, s in result.summary().items():
        f, c = fit.get(kind), check.get(kind)
        body.append(
            f"<tr><td>{kind}</td><td>{s.rows}</td><td>{s.n}</td><td>{_fmt(s.mape, '.1%')}</td>"
            f"<td>{_fmt(s.max_abs_error, '.1%')}</td><td>{f.n if f else 0}</td>"
            f"<td>{_fmt(f.mape if f else None, '.1%')}</td>"
            f"<td>{c.n if c else 0}</td><td>{_fmt(c.mape if c else None, '.1%')}</td></tr>"
        )
    return f"<table>{head}{''.join(body)}</table>"


def row_table(result: ValidationResult) -> str:
    """Every row: id, kind, role, published, simulated, error, source (or why it is not expressed)."""
    head = (
        "<tr><th>id</th><th>kind</th><th>role</th><th>published</th><th>simulated</th><th>error</th>"
        "<th>source / reason</th></tr>"
    )
    body = []
    for r in result.results:
        sim = r.prediction.simulated
        why = (
            html.escape(r.row.source.cite)
            if sim is not None
            else "<i>not expressible:</i> " + html.escape(str(r.prediction.reason))
        )
        body.append(
            f"<tr><td>{html.escape(r.row.id)}</td><td>{r.row.kind}</td><td>{result.role(r.row)}</td>"
            f"<td>{r.row.published:.4g} {html.escape(r.row.unit)}</td><td>{_fmt(sim, '.4g')}</td>"
            f"<td>{_fmt(r.error, '+.1%')}</td><td class='src'>{why}</td></tr>"
        )
    return f"<table>{head}{''.join(body)}</table>"


def render(result: ValidationResult) -> str:
    """The whole page."""
    figs = [f for f in (scatter(result, k) for k in ("end-to-end", "kernel", "collective")) if f is not None]
    plots = "".join(
        f"<div class='plot'>{fig.to_html(full_html=False, include_plotlyjs=i == 0)}</div>" for i, fig in enumerate(figs)
    )
    style = (
        "body{font-family:sans-serif;margin:24px;max-width:1960px}.plots{display:flex;flex-wrap:wrap;gap:8px}"
        "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
        "td:first-child,td.src{text-align:left}td.src{max-width:720px}"
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>nspsim validate</title>"
        f"<style>{style}</style></head><body><h1>nspsim against published GPU measurements</h1>"
        f"<p>{html.escape(SPLIT)}. Error = simulated / published - 1 in the row's own unit (for a throughput "
        "a positive error is an optimistic model). Blue: rows that fitted a coefficient; red: rows that only check.</p>"
        f"<div class='plots'>{plots}</div><h2>Summary</h2>{summary_table(result)}"
        f"<h2>Rows</h2>{row_table(result)}</body></html>"
    )
