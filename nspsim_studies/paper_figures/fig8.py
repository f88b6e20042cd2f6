"""Figure 8 of the NSP paper: the step-time breakdown of one representative Qwen3-235B iteration under
Static SP-32 and SP-64, FlexSP and NSP, normalised to Static SP-32.

The sweep is one point (Qwen3-235B-A22B on 64 H200s, 2M tokens, 384K max context, ``wikipedia``),
on 5 batches (``--quick`` 1). Static SP is the paper's: one degree, samples packed by tokens as the
FlexSP artifact packs them (``static:degree=32+packing=tokens`` and ``degree=64``; rule in
:mod:`nspsim.planners.static.token_packing`), and the figure normalises to its SP-32. The load-packed SP-32
(``static-32``, compare's fixed-degree label: samples packed by cost-model load) stands beside as
the stronger variant, so the baseline's weight in every ratio can be seen; ``flexsp`` and ``nsp``
complete it. The representative iteration is the batch whose NSP / SP-32 ratio is the
median of the batches' (with 1 batch, that batch). Each bar stacks the ``bd_*`` categories of that
batch divided by SP-32's step on the same batch, so the stack's height is the normalised step time;
the paper's decoded totals (high) stand beside as markers. The paper does not name the trace, the
context or the batch, hence these choices; the table also gives the mean over all batches, so the
choice of one batch can be judged. Trade-off: one batch shows a breakdown the paper's way, but a
single batch can be atypical, which the all-batch column and the per-batch range expose.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from nspsim.records import BREAKDOWN_CATEGORIES
from nspsim.sweep import RunSpec, SweepSpec
from nspsim_studies.palette import BREAKDOWN_COLORS
from nspsim_studies.paper_figures import paper_values as pv
from nspsim_studies.paper_figures.common import (
    PAPER_SOURCE,
    SweepRun,
    describe,
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

NAME = "fig8"
PAPER_SP32 = "static:degree=32+packing=tokens"
PAPER_SP64 = "static:degree=64+packing=tokens"
LOAD_SP32 = "static-32"
PLANNERS = (PAPER_SP32, PAPER_SP64, LOAD_SP32, "flexsp", "flexsp-artifact", "nsp")
BASELINE = PAPER_SP32
# Each strategy's short name in the figure, and the paper's decoded bar it stands for (None: not in the paper).
NAMES = {
    PAPER_SP32: "SP-32",
    PAPER_SP64: "SP-64",
    LOAD_SP32: "SP-32 load-packed",
    "flexsp": "FlexSP",
    "flexsp-artifact": "FlexSP (artifact)",
    "nsp": "NSP",
}
PAPER_KEY: dict[str, str | None] = {
    PAPER_SP32: "static-32",
    PAPER_SP64: "static-64",
    LOAD_SP32: None,
    "flexsp": "flexsp",
    "flexsp-artifact": "flexsp",
    "nsp": "nsp",
}
FULL_ITERS = 5
QUICK_ITERS = 1
WORKLOAD: dict[str, Any] = {
    "model": pv.FIG8_MODEL,
    "cluster": "h200",
    "training": "paper-235b",
    "gpus": 64,
    "tokens_per_batch": 2 * 1024 * 1024,
    "max_context": 384 * 1024,
    "trace": "wikipedia",
}


def build_spec(quick: bool, workload: dict[str, Any] | None = None) -> SweepSpec:
    """The Figure 8 sweep: one point (``workload``, default :data:`WORKLOAD`), the strategies of :data:`PLANNERS`."""
    iters = QUICK_ITERS if quick else FULL_ITERS
    run = RunSpec(planners=PLANNERS, iters=iters, baseline=BASELINE)
    return SweepSpec(workload=dict(workload or WORKLOAD), run=run, name=NAME)


def representative(rows: pd.DataFrame) -> int:
    """The iteration whose NSP / SP-32 ratio is the median (the lower middle for an even count); the
    first iteration when NSP has no finite ratio."""
    nsp = rows[(rows["planner"] == "nsp") & rows["normalized"].map(math.isfinite)].sort_values(
        ["normalized", "iteration"]
    )
    if nsp.empty:
        return int(rows["iteration"].min())
    return int(nsp.iloc[(len(nsp) - 1) // 2]["iteration"])


def breakdown(rows: pd.DataFrame, iteration: int) -> dict[str, dict[str, float]]:
    """Per planner, each category's seconds on ``iteration`` over SP-32's step on the same batch, and the total."""
    on = rows[rows["iteration"] == iteration]
    base = on[on["planner"] == BASELINE]["step_time_s"]
    ref = float(base.iloc[0]) if len(base) else math.nan
    out = {}
    for planner in PLANNERS:
        r = on[on["planner"] == planner]
        if r.empty:
            continue
        row = r.iloc[0]
        parts = {c: float(row[f"bd_{c}"]) / ref if ref > 0 else math.nan for c in BREAKDOWN_CATEGORIES}
        out[planner] = {**parts, "total": float(row["step_time_s"]) / ref if ref > 0 else math.nan}
    return out


def paper_value(planner: str) -> pv.PaperValue | None:
    """The paper's decoded Figure 8 total that ``planner`` stands for, or ``None`` (not in the paper)."""
    key = PAPER_KEY.get(planner)
    return next((v for v in pv.FIG8 if v.key == key), None)


def _paper_text(planner: str) -> str:
    value = paper_value(planner)
    return f"{value.value:.2f} ({value.confidence})" if value else "not in the paper"


def figure(parts: dict[str, dict[str, float]], batch_index: int, batches: int, where: str) -> go.Figure:
    """Stacked categories per strategy, normalised to the paper's SP-32, with the paper's decoded totals."""
    fig = go.Figure()
    planners = [p for p in PLANNERS if p in parts]
    x = [NAMES[p] for p in planners]
    for category in BREAKDOWN_CATEGORIES:
        color = BREAKDOWN_COLORS[category]
        fig.add_trace(go.Bar(x=x, y=[parts[p][category] for p in planners], name=category, marker_color=color))
    marked = [(NAMES[p], value.value) for p in planners if (value := paper_value(p)) is not None]
    fig.add_trace(
        go.Scatter(
            x=[name for name, _ in marked],
            y=[value for _, value in marked],
            mode="markers",
            marker={"symbol": "diamond", "size": 14, "color": "black", "line": {"color": "white", "width": 1}},
            name="paper total (decoded, high)",
        )
    )
    ticks = [f"{NAMES[p]}<br>ours {parts[p]['total']:.2f} · paper {_paper_text(p)}" for p in planners]
    fig.update_xaxes(tickvals=x, ticktext=ticks)
    fig.update_layout(
        barmode="stack",
        width=1200,
        height=700,
        margin={"t": 120},
        yaxis_title="time / the paper's Static SP-32 step (same batch)",
        title={
            "text": (
                f"NSP paper Figure 8: step-time breakdown, {where}, batch {batch_index}<br>"
                "<sup>normalised to the paper's Static SP-32 (token-packed) on the same batch; "
                f"representative = median NSP/SP-32 of {batches} batch(es); diamonds: "
                f"{PAPER_SOURCE.format(n=8)}, totals only</sup>"
            ),
            "font": {"size": 15},
        },
    )
    return fig


def tables(parts: dict[str, dict[str, float]], run: SweepRun, batch_index: int) -> list[str]:
    """The breakdown of the representative batch, then the mean over all batches and the paper's totals."""
    header = ["strategy", "planner spec", *BREAKDOWN_CATEGORIES, "total (ours)", "all batches [min-max]", "paper total"]
    body = []
    for planner, p in parts.items():
        rows = run.rows[run.rows["planner"] == planner]
        s = run.summary[run.summary["planner"] == planner]
        sp = spread(rows)
        norm = float(s["normalized"].iloc[0]) if len(s) else math.nan
        body.append(
            [
                NAMES[planner],
                planner,
                *(fmt(p[c]) for c in BREAKDOWN_CATEGORIES),
                fmt(p["total"]),
                f"{fmt(norm)} [{fmt(sp['min'])}-{fmt(sp['max'])}]",
                _paper_text(planner),
            ]
        )
    caption = (
        f"Batch {batch_index}: each category's seconds over the paper's Static SP-32 step (token-packed, "
        f"{BASELINE}) on the same batch. 'All batches' is the ratio of sums over "
        f"{len(set(run.rows['iteration']))} batch(es). {NAMES[LOAD_SP32]} ({LOAD_SP32}) packs by cost-model load, "
        f"the stronger variant; SP-64 is one group, so its packing does not matter. Paper: {PAPER_SOURCE.format(n=8)}; "
        + "; ".join(f"{v.key}: {v.note}" for v in pv.FIG8)
        + "."
    )
    return [html_table(header, body, caption)]


def main(argv: list[str] | None = None) -> int:
    """Run (or reload) the Figure 8 sweep and write fig8.html / .json / .config.json."""
    args = parse_args(NAME, "NSP paper Figure 8: breakdown of one representative 235B iteration", argv)
    spec = with_profile(build_spec(args.quick), args.profile)
    run = run_spec(spec, args.out, jobs=args.jobs)
    iteration = representative(run.rows)
    batch_index = int(run.rows[run.rows["iteration"] == iteration]["batch_index"].iloc[0])
    parts = breakdown(run.rows, iteration)
    data = {
        "figure": 8,
        "baseline": BASELINE,
        "names": NAMES,
        "paper_keys": PAPER_KEY,
        "workload": WORKLOAD,
        "representative_iteration": iteration,
        "batch_index": batch_index,
        "breakdown_normalised": parts,
        "all_batches": {
            p: {"normalized": float(s.normalized), **spread(run.rows[run.rows["planner"] == p])}
            for p, s in zip(run.summary["planner"], run.summary.itertuples())
        },
        "paper": {
            "source": PAPER_SOURCE.format(n=8),
            "totals": [v.to_dict() for v in pv.FIG8],
            "categories": pv.FIG8_CATEGORIES,
        },
        "failures": failures(run),
        "wall_s": run.wall_s,
        "units_computed": run.computed,
        "units_cached": run.cached,
    }
    figure_ = figure(parts, batch_index, spec.run.iters, describe(spec.points()[0]))
    paths = write_study(args.out, NAME, run, figure_, tables(parts, run, batch_index), data, {"quick": args.quick})
    print(done_line(NAME, f"batch {batch_index} of {spec.run.iters}", run, paths["html"]))
    return exit_status(NAME, run)


if __name__ == "__main__":
    sys.exit(main())
