"""Figure 10 of the NSP paper: leave-one-out ablations of NSP on both models, step time normalised to
full NSP.

The sweep zips the model with its cluster (Qwen3-30B-A3B on 64 H100s, Qwen3-235B-A22B on 64 H200s) at
2M tokens, 384K max context, ``wikipedia`` (the decoding's Dataset A, a med/low reading), with the
compare labels of :data:`nspsim.compare.specs.ABLATIONS`: ``nsp-no-recompute`` (w/o Recompute),
``nsp-attn-fwd`` (w/o Cost Model: the attention-forward proxy), ``nsp-no-overlap`` (w/o Overlap),
``nsp-greedy`` (w/o Router), plus ``nsp`` and ``static-best`` (so the speedups over Static SP the
paper prints can be compared too); 8 batches (``--quick`` 1). A variant's bar is the ratio of its
summed step time to NSP's over the same batches, its whisker the per-batch min-max; the paper's bar
is NSP's decoded speedup over the variant's (the weaker of the two confidence marks). Trade-off: the
sweep normalises to static-best, so the NSP ratios are taken here from the per-batch rows, the same
batches on both sides.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from nspsim.sweep import RunSpec, SweepSpec
from nspsim_studies.paper_figures import paper_values as pv
from nspsim_studies.paper_figures.common import (
    PAPER_SOURCE,
    SweepRun,
    done_line,
    exit_status,
    failures,
    fmt,
    html_table,
    parse_args,
    run_spec,
    with_profile,
    write_study,
)

NAME = "fig10"
VARIANTS = pv.FIG10_VARIANTS
PLANNERS = ("static-best", *VARIANTS)
FULL_ITERS = 8
QUICK_ITERS = 1
WORKLOAD: dict[str, Any] = {
    "gpus": 64,
    "tokens_per_batch": 2 * 1024 * 1024,
    "max_context": 384 * 1024,
    "trace": "wikipedia",
}
ZIP: dict[str, tuple[Any, ...]] = {
    "model": ("qwen3-30b-a3b", "qwen3-235b-a22b"),
    "cluster": ("h100", "h200"),
    "training": ("fsdp", "paper-235b"),
}


def build_spec(
    quick: bool, workload: dict[str, Any] | None = None, zipped: dict[str, tuple[Any, ...]] | None = None
) -> SweepSpec:
    """The Figure 10 sweep: both models (a zip with their clusters), static-best, NSP and its ablations."""
    iters = QUICK_ITERS if quick else FULL_ITERS
    return SweepSpec(
        workload=dict(workload or WORKLOAD),
        zip=dict(zipped or ZIP),
        run=RunSpec(planners=PLANNERS, iters=iters),
        name=NAME,
    )


def to_nsp(rows: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Per model and variant: summed step time over NSP's on the batches both ran, the per-batch
    min / max of the ratio, and the speedup over static-best (the sweep's summary)."""
    out: dict[str, dict[str, Any]] = {}
    for model, group in rows.groupby("model", sort=False):
        steps = group.pivot_table(index="iteration", columns="planner", values="step_time_s", aggfunc="first")
        per_model: dict[str, Any] = {}
        for variant in VARIANTS:
            if variant not in steps or "nsp" not in steps:
                continue
            ours, nsp = steps[variant], steps["nsp"]
            both = ours.notna() & nsp.notna() & (nsp > 0)
            ratio = ours[both] / nsp[both]
            vs = ours.notna() & steps["static-best"].notna() if "static-best" in steps else ours.isna() & ours.notna()
            per_model[variant] = {
                "normalized_to_nsp": float(ours[both].sum() / nsp[both].sum()) if both.any() else math.nan,
                "min": float(ratio.min()) if both.any() else math.nan,
                "max": float(ratio.max()) if both.any() else math.nan,
                "batches": int(both.sum()),
                "speedup_vs_static_best": float(steps["static-best"][vs].sum() / ours[vs].sum())
                if vs.any()
                else math.nan,
            }
        out[str(model)] = per_model
    return out


def figure(ours: dict[str, dict[str, Any]], batches: int) -> go.Figure:
    """One panel per model: ours (solid, whiskers) and the paper's (hatched) per variant."""
    models = list(ours)
    fig = make_subplots(rows=1, cols=len(models), subplot_titles=models, shared_yaxes=True)
    labels = [pv.FIG10_PAPER_LABELS[v] for v in VARIANTS]
    for k, model in enumerate(models):
        mine = ours[model]
        ys = [mine.get(v, {}).get("normalized_to_nsp", math.nan) for v in VARIANTS]
        plus = [max(0.0, mine[v]["max"] - y) if v in mine and math.isfinite(y) else 0 for v, y in zip(VARIANTS, ys)]
        minus = [max(0.0, y - mine[v]["min"]) if v in mine and math.isfinite(y) else 0 for v, y in zip(VARIANTS, ys)]
        fig.add_trace(
            go.Bar(
                x=labels,
                y=ys,
                name="ours",
                legendgroup="ours",
                showlegend=k == 0,
                marker_color="#d62728",
                text=[fmt(y) for y in ys],
                textposition="outside",
                error_y={"type": "data", "array": plus, "arrayminus": minus, "visible": True},
            ),
            row=1,
            col=k + 1,
        )
        if model in pv.FIG10:
            paper = [pv.fig10_normalised(model, v) for v in VARIANTS]
            fig.add_trace(
                go.Bar(
                    x=labels,
                    y=[v for v, _ in paper],
                    name="paper (decoded)",
                    legendgroup="paper",
                    showlegend=k == 0,
                    marker={"color": "#888", "pattern": {"shape": "/"}},
                    text=[f"{v:.3f} ({mark})" for v, mark in paper],
                    textposition="outside",
                ),
                row=1,
                col=k + 1,
            )
        fig.add_hline(y=1.0, line={"color": "#555", "dash": "dot", "width": 1}, row=1, col=k + 1)
    fig.update_yaxes(title_text="step time / full NSP", col=1)
    fig.update_layout(
        barmode="group",
        width=1300,
        height=650,
        margin={"t": 120},
        title={
            "text": (
                "NSP paper Figure 10: leave-one-out ablations, step time normalised to full NSP "
                f"(higher = the component helps more)<br><sup>{WORKLOAD['trace']}, max context "
                f"{WORKLOAD['max_context'] // 1024}K, {WORKLOAD['gpus']} GPUs; ours: ratio of sums over {batches} "
                f"batch(es), whiskers per-batch min-max<br>hatched: {PAPER_SOURCE.format(n=10)}, NSP speedup / "
                "variant speedup (weaker mark)</sup>"
            ),
            "font": {"size": 15},
        },
    )
    return fig


def tables(ours: dict[str, dict[str, Any]]) -> list[str]:
    """Ours and the paper's per model and variant: normalised to NSP and speedup over Static SP."""
    body = []
    for model, per in ours.items():
        for v in VARIANTS:
            q = per.get(v, {})
            paper = {p.key: p for p in pv.FIG10.get(model, ())}
            norm, mark = pv.fig10_normalised(model, v) if model in pv.FIG10 else (math.nan, "-")
            body.append(
                [
                    f"{model}: {pv.FIG10_PAPER_LABELS[v]} ({v})",
                    f"{fmt(q.get('normalized_to_nsp'))} [{fmt(q.get('min'))}-{fmt(q.get('max'))}]",
                    f"{fmt(q.get('speedup_vs_static_best'), '.2f')}x",
                    f"{fmt(norm)} ({mark})",
                    f"{paper[v].value:.2f}x ({paper[v].confidence}{', ' + paper[v].note if paper[v].note else ''})"
                    if v in paper
                    else "-",
                ]
            )
    return [
        html_table(
            [
                "model: variant",
                "ours / NSP [per-batch min-max]",
                "ours vs static-best",
                "paper / NSP (mark)",
                "paper vs Static SP",
            ],
            body,
            f"Paper: {PAPER_SOURCE.format(n=10)}, Dataset A (taken as wikipedia). Ours: static-best is compare's "
            "load-balanced fixed-degree baseline.",
        )
    ]


def main(argv: list[str] | None = None) -> int:
    """Run (or reload) the Figure 10 sweep and write fig10.html / .json / .config.json."""
    args = parse_args(NAME, "NSP paper Figure 10: leave-one-out ablations on both models", argv)
    spec = with_profile(build_spec(args.quick), args.profile)
    run: SweepRun = run_spec(spec, args.out, jobs=args.jobs)
    ours = to_nsp(run.rows)
    data = {
        "figure": 10,
        "normalised_to": "nsp",
        "workload": WORKLOAD,
        "ours": ours,
        "paper": {
            "source": PAPER_SOURCE.format(n=10),
            "speedups": {m: [v.to_dict() for v in vals] for m, vals in pv.FIG10.items()},
            "normalised_to_nsp": {m: {v: pv.fig10_normalised(m, v) for v in VARIANTS} for m in pv.FIG10},
        },
        "failures": failures(run),
        "wall_s": run.wall_s,
        "units_computed": run.computed,
        "units_cached": run.cached,
    }
    paths = write_study(args.out, NAME, run, figure(ours, spec.run.iters), tables(ours), data, {"quick": args.quick})
    print(done_line(NAME, f"{spec.run.iters} batch(es)", run, paths["html"]))
    return exit_status(NAME, run)


if __name__ == "__main__":
    sys.exit(main())
