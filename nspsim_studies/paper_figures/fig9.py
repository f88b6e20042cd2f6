"""Figure 9 of the NSP paper: node-level routing, which SP node the samples of each length bucket go
to, drawn as the paper draws it: a grid of the tree's nodes (SP64 x1, SP32 x2, SP16 x4, SP8 x8, then
everything below SP8 grouped per SP8 subtree, x8: 23 rows on 64 GPUs) by length bucket (0-8K, 8-32K,
32-128K, 128K+), each bucket column summing to 100%.

Source of the routing: the sweep's rows hold no per-sample routing (its simulation records keep only
per-degree counts), so the grid reads every unit's *cached plan* (``DIR/cache/plans``, keyed as the
sweep keys it: :func:`nspsim.sweep.keys.plan_key`) and counts each sample at its node ``(degree,
index)``; FlexSP's micro-batches are pooled. The sweep is one point (Figure 8's workload on
``commoncrawl``, whose batches hold samples in every bucket, 128K+ included: Qwen3-235B-A22B on 64
H200s, 2M tokens, 384K; a Figure 7 point, so the units are shared with it) with ``nsp``, ``nsp2l`` and
``flexsp`` on 5 batches (``--quick`` 1), counts summed over the batches. Beside ours, a panel with
the paper's decoded cells (only the 0-8K column is decoded cell by cell, low confidence) and the
decoding's reading in the table.
Trade-off: pooling the batches steadies the shares but hides batch-to-batch moves, which the
per-batch node counts in the JSON keep.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from nspsim.compare.summary import LENGTH_BUCKETS
from nspsim.plan import Plan
from nspsim.sweep import Cache, RunSpec, SweepSpec
from nspsim.sweep.keys import plan_key, workload_identity
from nspsim_studies.paper_figures import paper_values as pv
from nspsim_studies.paper_figures.common import (
    PAPER_SOURCE,
    SweepRun,
    describe,
    done_line,
    exit_status,
    failures,
    html_table,
    parse_args,
    run_spec,
    write_study,
)
from nspsim_studies.paper_figures.fig8 import WORKLOAD as FIG8_WORKLOAD

NAME = "fig9"
PLANNERS = ("nsp", "nsp2l", "flexsp")
FULL_ITERS = 5
QUICK_ITERS = 1
SUBTREE = 8  # nodes below this degree are grouped per subtree of this size, as the paper's grid does
BUCKETS = tuple(name for name, _ in LENGTH_BUCKETS)
WORKLOAD: dict[str, Any] = {**FIG8_WORKLOAD, "trace": "commoncrawl"}


def build_spec(quick: bool, workload: dict[str, Any] | None = None) -> SweepSpec:
    """The Figure 9 sweep: one point (``workload``, default :data:`WORKLOAD`), NSP, NSP-2L and FlexSP."""
    iters = QUICK_ITERS if quick else FULL_ITERS
    return SweepSpec(workload=dict(workload or WORKLOAD), run=RunSpec(planners=PLANNERS, iters=iters), name=NAME)


def grid_rows(gpus: int, degrees: tuple[int, ...]) -> list[str]:
    """The grid's row labels, largest node first: every node of degree >= the subtree size, then one
    row per subtree for the nodes below it (23 rows for 64 GPUs and degrees 1-64)."""
    group = min(SUBTREE, gpus)
    rows = [f"sp{d}#{i}" for d in sorted(degrees, reverse=True) if d >= group for i in range(gpus // d)]
    if any(d < group for d in degrees):
        rows += [f"below sp{group}#{k}" for k in range(gpus // group)]
    return rows


def row_of(degree: int, index: int, gpus: int) -> str:
    """The grid row of node ``(degree, index)``."""
    group = min(SUBTREE, gpus)
    return f"sp{degree}#{index}" if degree >= group else f"below sp{group}#{degree * index // group}"


def bucket_of(length: int) -> str:
    """The length bucket of a sample (``LENGTH_BUCKETS``: upper bounds inclusive)."""
    for name, high in LENGTH_BUCKETS:
        if high is None or length <= high:
            return name
    raise AssertionError("the last bucket is open")


def node_counts(plan: Plan) -> dict[str, dict[str, int]]:
    """Samples per (grid row, length bucket) of one plan."""
    gpus = plan.cluster.num_gpus
    out: dict[str, dict[str, int]] = {}
    for length, node in zip(plan.lengths, plan.nodes):
        cell = out.setdefault(row_of(node.degree, node.index, gpus), {})
        bucket = bucket_of(int(length))
        cell[bucket] = cell.get(bucket, 0) + 1
    return out


def routing(run: SweepRun, cache: Cache) -> dict[str, list[dict[str, dict[str, int]]]]:
    """Per planner, the node counts of each batch's cached plan (module docstring)."""
    plan = run.plan
    point = plan.points[0]
    identity = workload_identity(point.config)
    out: dict[str, list[dict[str, dict[str, int]]]] = {}
    for label in PLANNERS:
        spec = plan.specs[label]
        per_batch = []
        for stats in point.batches:
            text = cache.plan_text(plan_key(identity, spec, stats.batch_index, plan.versions, stats.content or None))
            if text is None:
                raise ValueError(
                    f"{label} batch {stats.batch_index}: no cached plan (the unit failed; see the sweep's rows)"
                )
            per_batch.append(node_counts(Plan.from_json(text, origin=f"cached {label} plan")))
        out[label] = per_batch
    return out


def shares(per_batch: list[dict[str, dict[str, int]]], rows: list[str]) -> np.ndarray:
    """Percent of each bucket's samples (pooled over batches) per grid row: rows x buckets, columns sum to
    100 (or are all zero when a bucket is empty)."""
    counts = np.zeros((len(rows), len(BUCKETS)))
    for counted in per_batch:
        for r, cells in counted.items():
            for b, n in cells.items():
                counts[rows.index(r), BUCKETS.index(b)] += n
    totals = counts.sum(axis=0)
    return np.divide(counts * 100.0, totals, out=np.zeros_like(counts), where=totals > 0)


def paper_grid(rows: list[str]) -> np.ndarray:
    """The paper's decoded cells on our rows (NaN where not decoded): the 0-8K column's sub-SP8 subtrees."""
    grid = np.full((len(rows), len(BUCKETS)), math.nan)
    for value in pv.FIG9:
        bucket, _, node = value.key.partition("/")
        if node.startswith("below-sp8#") and f"below sp8#{node.removeprefix('below-sp8#')}" in rows:
            grid[rows.index(f"below sp8#{node.removeprefix('below-sp8#')}"), BUCKETS.index(bucket)] = value.value
    return grid


def figure(
    grids: dict[str, np.ndarray], rows: list[str], batches: int, totals: dict[str, list[int]], where: str
) -> go.Figure:
    """One heatmap per planner, then the paper's decoded cells."""
    panels = [*grids, "paper"]
    titles = [f"{p} ({sum(g[:, :].sum(axis=1) > 0)} of {len(rows)} rows used)" for p, g in grids.items()]
    titles.append("paper (decoded, low)")
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=titles, shared_yaxes=True, horizontal_spacing=0.03)
    paper = paper_grid(rows)
    for k, name in enumerate(panels):
        z = paper if name == "paper" else grids[name]
        text = [[("" if math.isnan(v) or v == 0 else f"{v:.0f}%") for v in line] for line in z]
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=list(BUCKETS),
                y=rows,
                text=text,
                texttemplate="%{text}",
                colorscale="Blues",
                zmin=0,
                zmax=100,
                showscale=k == 0,
                colorbar={"title": "% of bucket"},
                hovertemplate="%{y} %{x}: %{z:.1f}%<extra>" + name + "</extra>",
            ),
            row=1,
            col=k + 1,
        )
    fig.update_yaxes(autorange="reversed", type="category")
    counts = "; ".join(f"{b}: {n}" for b, n in zip(BUCKETS, next(iter(totals.values()), [])))
    fig.update_layout(
        width=1350,
        height=850,
        margin={"t": 130},
        title={
            "text": (
                f"NSP paper Figure 9: node-level routing by length bucket, {where}<br>"
                "<sup>share of each bucket's samples per node (columns sum to 100%), "
                f"pooled over {batches} batch(es); samples per bucket {counts}<br>right: {PAPER_SOURCE.format(n=9)}; "
                "only the 0-8K column is decoded cell by cell</sup>"
            ),
            "font": {"size": 15},
        },
    )
    return fig


def tables(grids: dict[str, np.ndarray], rows: list[str]) -> list[str]:
    """Ours (share per row and bucket, each planner), then the paper's decoded cells and reading."""
    header = ["node", *(f"{p} {b}" for p in grids for b in BUCKETS)]
    body = [[r, *(f"{grids[p][i, j]:.0f}" for p in grids for j in range(len(BUCKETS)))] for i, r in enumerate(rows)]
    ours = html_table(
        header, body, "Ours: percent of each length bucket's samples on each node (pooled over the batches)."
    )
    paper = html_table(
        ["decoded value", "value", "confidence", "note"],
        [[v.key, f"{v.value:g}", v.confidence, v.note] for v in pv.FIG9],
        f"Paper: {PAPER_SOURCE.format(n=9)}. Reading: {pv.FIG9_READING}.",
    )
    return [ours, paper]


def main(argv: list[str] | None = None) -> int:
    """Run (or reload) the Figure 9 sweep and write fig9.html / .json / .config.json."""
    args = parse_args(NAME, "NSP paper Figure 9: node-level routing by length bucket", argv)
    spec = build_spec(args.quick)
    run = run_spec(spec, args.out, jobs=args.jobs)
    point = run.plan.points[0]
    rows = grid_rows(point.config.gpus, point.degrees)
    counted = routing(run, Cache(args.out / "cache"))
    grids = {p: shares(per_batch, rows) for p, per_batch in counted.items()}
    totals = {
        p: [int(sum(c.get(r, {}).get(b, 0) for c in per_batch for r in rows)) for b in BUCKETS]
        for p, per_batch in counted.items()
    }
    data = {
        "figure": 9,
        "workload": WORKLOAD,
        "rows": rows,
        "buckets": list(BUCKETS),
        "routing_source": "each unit's cached plan in DIR/cache/plans (sweep rows hold no per-sample routing)",
        "share_percent": {p: g.tolist() for p, g in grids.items()},
        "rows_used": {p: int((g.sum(axis=1) > 0).sum()) for p, g in grids.items()},
        "samples_per_bucket": totals,
        "per_batch_counts": counted,
        "paper": {
            "source": PAPER_SOURCE.format(n=9),
            "values": [v.to_dict() for v in pv.FIG9],
            "reading": pv.FIG9_READING,
        },
        "failures": failures(run),
        "wall_s": run.wall_s,
    }
    paths = write_study(
        args.out,
        NAME,
        run,
        figure(grids, rows, spec.run.iters, totals, describe(point.config)),
        tables(grids, rows),
        data,
        {"quick": args.quick},
    )
    print(done_line(NAME, f"{spec.run.iters} batch(es)", run, paths["html"]))
    return exit_status(NAME, run)


if __name__ == "__main__":
    sys.exit(main())
