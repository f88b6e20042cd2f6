"""The window study's analysis (:mod:`nspsim_studies.windows_study`): from a windowed sweep's pass rows and
``windows.parquet`` rows, per configuration (model, context, trace), window size W, planner and window,
the window's simulated time over per-step NSP's on the same batches, and the floor of the window
(:func:`nspsim.planners.window.bound.window_floor`) over per-step NSP's estimate.

Definitions, per window (at W = 1 a window is a batch):

* ``vs_nsp``: the planner's window time over per-step NSP's (NSP's per-step assignment, simulated with
  the window's accumulation: ``per_step_time_s`` of NSP's window row; at W = 1 NSP's step time).
* ``vs_own``: the planner's window time over its own per-step assignment's (``window_over_per_step``).
* ``floor_vs_nsp_estimate``: the floor over the sum of per-step NSP's plan estimates (each plan's highest
  recorded rung, from the W = 1 point's NSP rows, which route the same batches bit for bit): 1 minus it
  is the most any window assignment can gain over per-step NSP by estimate.
* ``nsp_sim_over_estimate``: per-step NSP's simulated time over that estimate (how far the proof, on
  estimates, carries to simulated time).

Per (configuration, W, planner) the ratios are ratios of sums over the windows; the spread is the
per-window min and max. Trade-off: the floor needs every window's batches drawn again and a cost table
built (a fraction of a second per window), not read from the sweep, so the analysis depends on the
workload code as the sweep does, and a reader can recompute any row from the config alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from nspsim.planners.window.bound import window_floor
from nspsim.units import format_tokens
from nspsim.workload import WorkloadConfig, build_workload
from nspsim_studies.palette import planner_color

NSP = "nsp"
CONFIG = ["model", "max_context", "trace"]
NEVER_SLOWER_SLACK = 1e-9
"""Relative slack of "a window is never slower than its per-step assignment": both are sums of the same
simulated floats in different orders only where per-step won."""


@dataclass(frozen=True)
class Point:
    """A sweep point as the analysis needs it: its index, workload and window W."""

    index: int
    config: WorkloadConfig
    window: int


@dataclass(frozen=True)
class WindowStudy:
    """Per-window figures (``windows``), their per-(configuration, W, planner) summary (``summary``), the
    per-configuration traits (``traits``) and the windows slower than their per-step assignment."""

    windows: pd.DataFrame
    summary: pd.DataFrame
    traits: pd.DataFrame
    slower: pd.DataFrame

    def to_json(self) -> dict[str, Any]:
        """The study's figures as JSON-ready records."""
        return {
            "summary": self.summary.to_dict("records"),
            "traits": self.traits.to_dict("records"),
            "windows": self.windows.to_dict("records"),
            "slower_than_per_step": self.slower.to_dict("records"),
        }


def _config(point: Point) -> dict[str, Any]:
    c = point.config
    return {"model": c.model, "max_context": int(c.max_context), "trace": c.trace}


def _estimate(frame: pd.DataFrame) -> pd.Series:
    """Each plan's highest recorded estimate rung (the window planner's ``plan_estimate``)."""
    return np.maximum(frame["step_estimate_s"], frame["chosen_estimate_s"])


def _per_window(points: list[Point], rows: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    """One record per (point, planner, window) with its time and per-step NSP's on the same batches."""
    out = []
    for point in points:
        mine = rows[rows["point"] == point.index]
        size = point.window
        for planner, group in mine.groupby("planner", sort=False):
            group = group.sort_values("iteration")
            if size == 1:
                times = list(group["step_time_s"])
                own = times
                firsts = list(group["batch_index"])
            else:
                wins = windows[(windows["point"] == point.index) & (windows["planner"] == planner)]
                wins = wins.sort_values("window_index")
                times, own, firsts = (
                    list(wins["window_time_s"]),
                    list(wins["per_step_time_s"]),
                    list(wins["first_batch"]),
                )
            for index, (time_s, own_s, first) in enumerate(zip(times, own, firsts)):
                out.append(
                    {
                        **_config(point),
                        "point": point.index,
                        "W": size,
                        "planner": planner,
                        "window_index": index,
                        "first_batch": int(first),
                        "time_s": float(time_s),
                        "own_per_step_s": float(own_s),
                    }
                )
    return pd.DataFrame(out)


def _floors(points: list[Point], rows: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """Per (configuration, W, window): the floor, per-step NSP's estimate (from the W = 1 point's NSP
    rows) and the floor's micro-batch count."""
    singles = {tuple(_config(p).values()): p for p in points if p.window == 1}
    out = []
    for key, group in frame.groupby([*CONFIG, "W"], sort=False):
        config, size = tuple(key[:3]), int(key[3])
        single = singles.get(config)
        if single is None:
            continue
        workload = build_workload(single.config)
        nsp = rows[(rows["point"] == single.index) & (rows["planner"] == NSP)].set_index("batch_index")
        for first in sorted(set(group["first_batch"])):
            batches = [workload.sampler.batch(first + k) for k in range(size)]
            floor = window_floor(workload, batches)
            estimate = float(_estimate(nsp.loc[[b.index for b in batches]]).sum()) if not nsp.empty else math.nan
            out.append(
                {
                    **dict(zip(CONFIG, config)),
                    "W": size,
                    "first_batch": first,
                    "floor_s": floor.floor_s,
                    "floor_micro_batches": floor.micro_batches,
                    "nsp_estimate_s": estimate,
                }
            )
    return pd.DataFrame(out)


def analyse(points: list[Point], rows: pd.DataFrame, windows: pd.DataFrame) -> WindowStudy:
    """The study's figures (module docstring) from a windowed sweep's points (in the sweep's order:
    ``SweepSpec.grid()``), pass rows and window rows."""
    frame = _per_window(points, rows, windows)
    nsp = frame[frame["planner"] == NSP][[*CONFIG, "W", "first_batch", "own_per_step_s"]]
    frame = frame.merge(nsp.rename(columns={"own_per_step_s": "nsp_per_step_s"}), on=[*CONFIG, "W", "first_batch"])
    frame = frame.merge(_floors(points, rows, frame), on=[*CONFIG, "W", "first_batch"], how="left")
    frame["vs_nsp"] = frame["time_s"] / frame["nsp_per_step_s"]
    frame["vs_own"] = frame["time_s"] / frame["own_per_step_s"]
    frame["floor_vs_nsp_estimate"] = frame["floor_s"] / frame["nsp_estimate_s"]
    frame["nsp_sim_over_estimate"] = frame["nsp_per_step_s"] / frame["nsp_estimate_s"]
    slower = frame[frame["time_s"] > frame["own_per_step_s"] * (1 + NEVER_SLOWER_SLACK)]
    return WindowStudy(windows=frame, summary=_summary(frame), traits=_traits(points, rows), slower=slower)


def _summary(frame: pd.DataFrame) -> pd.DataFrame:
    out = []
    for key, g in frame.groupby([*CONFIG, "W", "planner"], sort=False):
        ok = g[np.isfinite(g["vs_nsp"])]
        out.append(
            {
                **dict(zip([*CONFIG, "W", "planner"], key)),
                "windows": len(g),
                "vs_nsp": ok["time_s"].sum() / ok["nsp_per_step_s"].sum() if len(ok) else math.nan,
                "vs_nsp_min": ok["vs_nsp"].min(),
                "vs_nsp_max": ok["vs_nsp"].max(),
                "vs_own": ok["time_s"].sum() / ok["own_per_step_s"].sum() if len(ok) else math.nan,
                "floor_vs_nsp_estimate": ok["floor_s"].sum() / ok["nsp_estimate_s"].sum() if len(ok) else math.nan,
                "floor_vs_nsp_estimate_max": ok["floor_vs_nsp_estimate"].max(),
                "nsp_sim_over_estimate": ok["nsp_per_step_s"].sum() / ok["nsp_estimate_s"].sum()
                if len(ok)
                else math.nan,
            }
        )
    return pd.DataFrame(out)


LONG_TOKENS = 64 * 1024
"""Skew measure: the share of a configuration's tokens in samples longer than this (64K: the samples NSP
routes on SP groups wider than 8 GPUs on these workloads)."""


def _traits(points: list[Point], rows: pd.DataFrame) -> pd.DataFrame:
    """Per configuration (its W = 1 point): the share of its tokens in samples over :data:`LONG_TOKENS`
    and its longest sample (skew), and per-step NSP's mean micro-batches per batch and share of batches
    split into more than one (memory pressure)."""
    out = []
    for point in (p for p in points if p.window == 1):
        nsp = rows[(rows["point"] == point.index) & (rows["planner"] == NSP)]
        workload = build_workload(point.config)
        lengths = np.concatenate([workload.sampler.batch(int(i)).lengths_array() for i in nsp["batch_index"]])
        out.append(
            {
                **_config(point),
                "long_token_share": float(lengths[lengths > LONG_TOKENS].sum() / lengths.sum()),
                "longest": int(lengths.max()),
                "nsp_micro_batches": float(nsp["num_micro_batches"].mean()),
                "nsp_split_batches": float((nsp["num_micro_batches"] > 1).mean()),
            }
        )
    return pd.DataFrame(out)


SHORT_MODELS = {"qwen3-30b-a3b": "30B", "qwen3-235b-a22b": "235B"}


def short_model(model: str) -> str:
    """A model's name in a table: 30B, 235B, else the preset's own name."""
    return SHORT_MODELS.get(model, model)


def _label(row: Any) -> tuple[str, str, str]:
    return short_model(str(row["model"])), format_tokens(int(row["max_context"])), str(row["trace"])


def _num(value: Any, spec: str = ".3f") -> str:
    return "-" if value is None or not math.isfinite(float(value)) else format(float(value), spec)


def markdown(study: WindowStudy, iters: int) -> str:
    """The study's table and traits as Markdown."""
    lines = [
        f"Time per global batch (window) over per-step NSP's on the same {iters} batches (ratio of sums over the "
        "windows; [min-max] per window); `own` = over the planner's own per-step assignment; `floor` = the window "
        "floor over per-step NSP's estimate (1 - floor is the most any assignment can gain, by estimate); "
        "`sim/est` = per-step NSP's simulated time over its estimate.",
        "",
        "| model | context | trace | W | planner | vs per-step NSP | per window | own | floor | sim/est |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for _, r in study.summary.iterrows():
        model, context, trace = _label(r)
        spread = f"[{_num(r['vs_nsp_min'])}-{_num(r['vs_nsp_max'])}]"
        lines.append(
            f"| {model} | {context} | {trace} | {int(r['W'])} | {r['planner']} | {_num(r['vs_nsp'])} | {spread} | "
            f"{_num(r['vs_own'])} | {_num(r['floor_vs_nsp_estimate'])} | {_num(r['nsp_sim_over_estimate'])} |"
        )
    lines += [
        "",
        "| model | context | trace | tokens in samples over 64K | longest sample | NSP micro-batches "
        "| NSP batches split |",
        "|---|---|---|---|---|---|---|",
    ]
    for _, r in study.traits.iterrows():
        model, context, trace = _label(r)
        lines.append(
            f"| {model} | {context} | {trace} | {_num(r['long_token_share'])} | {format_tokens(int(r['longest']))} | "
            f"{_num(r['nsp_micro_batches'], '.2f')} | {_num(r['nsp_split_batches'], '.2f')} |"
        )
    slower = len(study.slower)
    lines += ["", f"Windows slower than their own per-step assignment: {slower} of {len(study.windows)}."]
    return "\n".join(lines) + "\n"


def figure(study: WindowStudy) -> go.Figure:
    """Per configuration (rows: model x context; columns: trace), each planner's window time over per-step
    NSP's against W (median line through the ratio of sums, whiskers the per-window min-max) and the
    floor over per-step NSP's estimate (dashed)."""
    s = study.summary
    panels = s[["model", "max_context"]].drop_duplicates().to_records(index=False).tolist()
    traces = list(dict.fromkeys(s["trace"]))
    titles = [f"{short_model(m)} {format_tokens(int(c))} {t}" for m, c in panels for t in traces]
    fig = make_subplots(rows=len(panels), cols=len(traces), subplot_titles=titles, shared_xaxes=True)
    for i, (model, context) in enumerate(panels):
        for j, trace in enumerate(traces):
            cell = s[(s["model"] == model) & (s["max_context"] == context) & (s["trace"] == trace)]
            first = i == 0 and j == 0
            for planner, g in cell.groupby("planner", sort=False):
                g = g.sort_values("W")
                fig.add_trace(
                    go.Scatter(
                        x=g["W"],
                        y=g["vs_nsp"],
                        mode="lines+markers",
                        name=str(planner),
                        legendgroup=str(planner),
                        showlegend=first,
                        line={"color": planner_color(str(planner))},
                        error_y={
                            "type": "data",
                            "symmetric": False,
                            "array": g["vs_nsp_max"] - g["vs_nsp"],
                            "arrayminus": g["vs_nsp"] - g["vs_nsp_min"],
                        },
                    ),
                    row=i + 1,
                    col=j + 1,
                )
            floor = cell[cell["planner"] == NSP].sort_values("W")
            fig.add_trace(
                go.Scatter(
                    x=floor["W"],
                    y=floor["floor_vs_nsp_estimate"],
                    mode="lines",
                    name="floor / NSP estimate",
                    legendgroup="floor",
                    showlegend=first,
                    line={"color": "gray", "dash": "dash"},
                ),
                row=i + 1,
                col=j + 1,
            )
    fig.update_xaxes(type="log", tickvals=[1, 2, 4, 8], title_text="W")
    fig.update_yaxes(title_text="window time / per-step NSP", col=1)
    fig.update_layout(
        height=260 * len(panels),
        width=1200,
        title="Gradient-accumulation windows on the Figure 7 configurations: time per global batch vs per-step NSP",
    )
    return fig
