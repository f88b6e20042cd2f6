"""The validation report (``python -m nspsim_runtime.validate -o DIR`` writes ``DIR/report.html``): predicted
against measured step time per case with the y = x line and a +-10% band, the per-category errors,
and the per-case table, as one self-contained plotly page."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import plotly.graph_objects as go


def scatter(payload: dict[str, Any]) -> go.Figure:
    """Predicted against measured, one marker per case (error bars: measured standard deviation)."""
    cases = payload["cases"]
    top = max([c["measured_step_s"] for c in cases] + [c["predicted_step_s"] for c in cases]) * 1.1
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[0, top, top, 0], y=[0, top * 1.1, top * 0.9, 0], fill="toself", mode="none",
                             fillcolor="rgba(120,120,120,0.15)", name="+-10%"))  # fmt: skip
    fig.add_trace(
        go.Scatter(x=[0, top], y=[0, top], mode="lines", line={"dash": "dash", "color": "grey"}, name="y = x")
    )
    for ranks in sorted({c["ranks"] for c in cases}):
        sel = [c for c in cases if c["ranks"] == ranks]
        fig.add_trace(
            go.Scatter(
                x=[c["measured_step_s"] for c in sel],
                y=[c["predicted_step_s"] for c in sel],
                error_x={"type": "data", "array": [c["measured_std_s"] for c in sel]},
                mode="markers",
                marker={"size": 10},
                text=[c["label"] for c in sel],
                hovertemplate="%{text}<br>measured %{x:.3f} s<br>predicted %{y:.3f} s<extra></extra>",
                name=f"{ranks} ranks",
            )
        )
    fig.update_layout(
        title=f"Predicted vs measured step time ({len(cases)} cases; MAPE {payload['mape']:.1%})",
        xaxis_title="measured s/step (mean after warm-up; bar: std over steps)",
        yaxis_title="predicted s/step",
        width=700,
        height=600,
    )
    return fig


def categories(payload: dict[str, Any]) -> go.Figure:
    """Per-category error (share of the measured step) per case, stacked."""
    cases = payload["cases"]
    keys = sorted({k for c in cases for k in c["breakdown_error"]})
    fig = go.Figure()
    for k in keys:
        fig.add_trace(
            go.Bar(x=[c["label"] for c in cases], y=[c["breakdown_error"].get(k, 0.0) for c in cases], name=k)
        )
    fig.update_layout(
        barmode="relative",
        title="Error by category (predicted - measured, share of the measured step)",
        yaxis_tickformat=".0%",
        height=500,
        width=1300,
        xaxis_tickangle=-35,
    )
    return fig


def case_table(payload: dict[str, Any]) -> str:
    """The per-case table as HTML."""
    head = "<tr><th>case</th><th>ranks</th><th>measured s</th><th>std</th><th>predicted s</th><th>error</th></tr>"
    rows = [
        f"<tr><td>{html.escape(c['label'])}</td><td>{c['ranks']}</td><td>{c['measured_step_s']:.3f}</td>"
        f"<td>{c['measured_std_s']:.3f}</td><td>{c['predicted_step_s']:.3f}</td><td>{c['error']:+.1%}</td></tr>"
        for c in payload["cases"]
    ]
    failed = [
        f"<tr><td>{html.escape(k)}</td><td colspan=5>failed: {html.escape(v)}</td></tr>"
        for k, v in payload["failed"].items()
    ]
    return f"<table>{head}{''.join(rows + failed)}</table>"


def render(payload: dict[str, Any]) -> str:
    """The whole page."""
    tau = payload["kendall_tau"]
    lines = (
        f"MAPE {payload['mape']:.1%} · max {payload['max_abs_error']:.1%} · geomean {payload['geomean_abs_error']:.1%}"
        f" · pairs resolved {payload['pairs_resolved']}, ordered right {payload['pairs_agree']}"
        f" · Kendall tau {'n/a' if tau is None else f'{tau:.3f}'} · profile {html.escape(str(payload['profile']))}"
    )
    figs = [scatter(payload).to_html(full_html=False, include_plotlyjs=True),
            categories(payload).to_html(full_html=False, include_plotlyjs=False)]  # fmt: skip
    style = (
        "body{font-family:sans-serif;margin:24px;max-width:1340px}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td:first-child{text-align:left}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>nspsim validation</title><style>{style}</style>"
        f"</head><body><h1>Simulator validation against measured runs</h1><p>{lines}</p>{''.join(figs)}"
        f"<h2>Cases</h2>{case_table(payload)}</body></html>"
    )


def write(path: Path, payload: dict[str, Any]) -> None:
    """Write the page to ``path``."""
    path.write_text(render(payload))
