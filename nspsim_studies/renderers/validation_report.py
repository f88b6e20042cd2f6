"""The validation report (``python -m nspsim_runtime.validate -o DIR`` writes ``DIR/report.html``): first the
verdict line that names the cause of the error (within ``--max-mape``, the machine moved, the model is
wrong), then predicted against measured step time per case with the y = x line and a +-10% band, the
speed reference over the run against the calibration's, the per-category errors, the per-case table
(raw prediction and error, the error off the common level of the interleaved cases, red when the case
stands out, beside the speed factor, corrected prediction and error, and the reference's drift within a
block, flagged), and the machine (load, steal, frequency) during calibration and
validation, as one self-contained plotly page. Keys a payload lacks (``--records`` runs have no
speed reference) are shown as n/a."""

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


def references(payload: dict[str, Any]) -> go.Figure:
    """The speed reference (seconds of the fixed kernel mix, every rank busy) over the run, per rank
    count, with the calibration's median as a dotted line: how fast the machine was, block by block."""
    drift = payload.get("drift") or {}
    fig = go.Figure()
    starts = [t for refs in (drift.get("references") or {}).values() for t, _ in refs]
    origin = min(starts, default=0.0)
    for ranks, refs in sorted((drift.get("references") or {}).items()):
        fig.add_trace(go.Scatter(x=[t - origin for t, _ in refs], y=[s * 1e3 for _, s in refs],
                                 mode="lines+markers", name=f"{ranks} ranks: reference"))  # fmt: skip
        cal = ((drift.get("calibration") or {}).get(ranks) or {}).get("reference_s")
        if cal is not None and refs:
            fig.add_trace(go.Scatter(x=[0, refs[-1][0] - origin], y=[cal * 1e3, cal * 1e3], mode="lines",
                                     line={"dash": "dot"}, name=f"{ranks} ranks: at calibration"))  # fmt: skip
    fig.update_layout(
        title="Speed reference between blocks (higher = slower machine)",
        xaxis_title="seconds since the first reference",
        yaxis_title="ms per kernel mix",
        width=700,
        height=420,
    )
    return fig


def _fmt(value: Any, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def machine_table(payload: dict[str, Any]) -> str:
    """Load, other processes' CPU share, steal and CPU frequency while calibrating (per rank count) and
    validating, as HTML."""
    drift = payload.get("drift") or {}
    rows = [("validation, before", (drift.get("machine") or {}).get("before"), True),
            ("validation, during", (drift.get("machine") or {}).get("during"), False)]  # fmt: skip
    rows += [(f"calibration at {n} ranks", (c or {}).get("machine"), False) for n, c in
             sorted((drift.get("calibration") or {}).items())]  # fmt: skip
    head = (
        "<tr><th>when</th><th>load (1 min)</th><th>foreign load / core</th><th>other processes' CPU</th>"
        "<th>steal</th><th>MHz</th></tr>"
    )
    body = []
    for name, m, raw in rows:
        m = m or {}
        mhz = _fmt(m.get("mhz"), ".0f") if raw else f"{_fmt(m.get('mhz_min'), '.0f')}-{_fmt(m.get('mhz_max'), '.0f')}"
        body.append(
            f"<tr><td>{html.escape(name)}</td><td>{_fmt(m.get('load1'), '.2f')}</td>"
            f"<td>{_fmt(m.get('foreign_load'), '.2f')}</td><td>{_fmt(m.get('foreign_cpu'), '.0%')}</td>"
            f"<td>{_fmt(m.get('steal'), '.1%')}</td><td>{mhz}</td></tr>"
        )
    return f"<table>{head}{''.join(body)}</table>"


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
    """The per-case table as HTML: raw and speed-corrected side by side; a flagged drift in red."""
    head = (
        "<tr><th>case</th><th>ranks</th><th>measured s</th><th>std</th><th>predicted s</th><th>error</th>"
        "<th>off the common level</th><th>speed factor</th><th>corrected s</th><th>corrected error</th>"
        "<th>reference drift</th></tr>"
    )
    rows = []
    for c in payload["cases"]:
        flag = " style='color:#b00;font-weight:bold'" if c.get("drift_flagged") else ""
        out = " style='color:#b00;font-weight:bold'" if c.get("stands_out") else ""
        rows.append(
            f"<tr><td>{html.escape(c['label'])}</td><td>{c['ranks']}</td><td>{c['measured_step_s']:.3f}</td>"
            f"<td>{c['measured_std_s']:.3f}</td><td>{c['predicted_step_s']:.3f}</td><td>{c['error']:+.1%}</td>"
            f"<td{out}>{_fmt(c.get('deviation'), '+.1%')}{' (stands out)' if out else ''}</td>"
            f"<td>{_fmt(c.get('speed_factor'), '.2f')}</td><td>{_fmt(c.get('corrected_predicted_step_s'), '.3f')}</td>"
            f"<td>{_fmt(c.get('corrected_error'), '+.1%')}</td>"
            f"<td{flag}>{_fmt(c.get('reference_drift'), '.0%')}{' (flagged)' if flag else ''}</td></tr>"
        )
    failed = [
        f"<tr><td>{html.escape(k)}</td><td colspan=10>failed: {html.escape(v)}</td></tr>"
        for k, v in payload["failed"].items()
    ]
    return f"<table>{head}{''.join(rows + failed)}</table>"


VERDICT_COLOURS = {"within": "#e6f4e6", "steady": "#e6f4e6", "machine": "#fff3d6", "model": "#fbe0e0"}


def render(payload: dict[str, Any]) -> str:
    """The whole page."""
    tau = payload["kendall_tau"]
    verdict = payload.get("verdict") or {"status": "steady", "line": "verdict: n/a"}
    colour = VERDICT_COLOURS.get(verdict["status"], "#eee")
    first = f"<p style='background:{colour};padding:8px;font-size:1.1em'><b>{html.escape(verdict['line'])}</b></p>"
    lines = (
        f"MAPE {payload['mape']:.1%} (speed-corrected {_fmt(payload.get('corrected_mape'), '.1%')};"
        f" {_fmt(payload.get('spread'), '.1%')} around the common level)"
        f" · seed {payload.get('seed')} · max {payload['max_abs_error']:.1%}"
        f" · geomean {payload['geomean_abs_error']:.1%}"
        f" · pairs resolved {payload['pairs_resolved']}, ordered right {payload['pairs_agree']}"
        f" · Kendall tau {'n/a' if tau is None else f'{tau:.3f}'} · profile {html.escape(str(payload['profile']))}"
    )
    figs = [scatter(payload).to_html(full_html=False, include_plotlyjs=True),
            references(payload).to_html(full_html=False, include_plotlyjs=False),
            categories(payload).to_html(full_html=False, include_plotlyjs=False)]  # fmt: skip
    style = (
        "body{font-family:sans-serif;margin:24px;max-width:1340px}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td:first-child{text-align:left}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>nspsim validation</title><style>{style}</style>"
        f"</head><body><h1>Simulator validation against measured runs</h1>{first}<p>{lines}</p>"
        f"<h2>Cases</h2>{case_table(payload)}<h2>The machine</h2>{machine_table(payload)}{''.join(figs)}</body></html>"
    )


def write(path: Path, payload: dict[str, Any]) -> None:
    """Write the page to ``path``."""
    path.write_text(render(payload))
