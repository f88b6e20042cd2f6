"""The sweep report's window figure: each planner's window time over its per-step assignment's time
(``window_over_per_step``, from the sweep's summary) against the gradient-accumulation window W.

One line per planner through the median over the points of each W (the points' other axes pooled),
with min-max whiskers; W = 1 sits at 1 by definition (per-step planning is the only assignment of a
one-batch window), so the line reads as what planning across W batches gains over per-step planning
of the same batches (below 1 is a gain). The speedup over the baseline against W is the report's
ordinary speedup figure (``window`` is then a swept axis). Trade-off: drawn from the summary (one
value per point and planner) rather than from ``windows.parquet`` (one per window), so the report
needs no file beyond the three it always reads; the spread is over points, not over windows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

COLUMN = "window_over_per_step"


def has_windows(summary: pd.DataFrame) -> bool:
    """Whether the summary is a windowed sweep's with some window above 1."""
    if "window" not in summary or COLUMN not in summary:
        return False
    return bool((pd.to_numeric(summary["window"], errors="coerce") > 1).any())


def window_spread(summary: pd.DataFrame) -> pd.DataFrame:
    """Per (planner, window): the points, and the min, median and max ``window_over_per_step``."""
    ok = summary[np.isfinite(pd.to_numeric(summary[COLUMN], errors="coerce"))]
    grouped = ok.groupby(["planner", "window"], sort=True)[COLUMN]
    return grouped.agg(["size", "min", "median", "max"]).reset_index().rename(columns={"size": "points"})


def window_figure(summary: pd.DataFrame, planners: Sequence[str], colors: dict[str, str]) -> go.Figure:
    """The figure (module docstring)."""
    spread = window_spread(summary)
    fig = go.Figure()
    for planner in planners:
        mine = spread[spread["planner"] == planner]
        if mine.empty:
            continue
        fig.add_trace(
            go.Scatter(
                x=list(mine["window"]),
                y=list(mine["median"]),
                mode="lines+markers",
                name=planner,
                line={"color": colors[planner]},
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": list(mine["max"] - mine["median"]),
                    "arrayminus": list(mine["median"] - mine["min"]),
                    "color": colors[planner],
                },
                customdata=np.stack([mine["min"], mine["max"], mine["points"]], axis=1),
                hovertemplate="W=%{x}: %{y:.3f} median (min %{customdata[0]:.3f}, max %{customdata[1]:.3f}, "
                "%{customdata[2]} points)",
            )
        )
    windows = sorted(int(w) for w in spread["window"].unique())
    fig.add_hline(y=1.0, line_dash="dash", line_color="gray")
    fig.update_layout(
        title=f"Window time over the per-step assignment's against the window: {len(summary)} point-planner "
        "summaries<br><sup>median over points, whisker min-max; below 1: planning across the window's batches "
        "beat per-step planning of the same batches</sup>",
        xaxis={"title": "window W (batches per optimizer step)", "type": "log", "tickvals": windows},
        yaxis={"title": "window time / per-step time"},
        height=440,
    )
    return fig
