"""``nspsim_studies.renderers.sweep_report`` on constructed sweep frames (the row schema ``nspsim sweep`` writes): which
axes are swept, the figures, the exact batch counts in their titles and the per-batch spread values."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pytest

from nspsim.records import BREAKDOWN_CATEGORIES
from nspsim.workload import WorkloadConfig

pytest.importorskip("plotly")
from nspsim_studies.renderers import sweep_report, sweep_tables  # noqa: E402

NAN = float("nan")


def row(point: int, planner: str, batch: int, step: float, norm: float, **workload: Any) -> dict[str, Any]:
    """One (point, planner, batch) row of the schema; ``step`` NaN is an out-of-memory batch."""
    wl = {**WorkloadConfig().to_dict(), "backend": "ulysses", **workload}
    return {
        "point": point,
        "point_key": f"k{point}",
        **wl,
        "planner": planner,
        "baseline": "static-best",
        "iteration": batch,
        "batch_index": batch,
        "step_time_s": step,
        "normalized": norm,
        "oom": math.isnan(step),
        "error": "",
        **{f"bd_{k}": 0.0 for k in BREAKDOWN_CATEGORIES},
        "bd_sp_exposed_comm": 0.01 * (batch + 1),
        "bd_comm_wait": 0.02 * (batch + 1),
        "planning_time_s": 0.001 * (batch + 1),
        "load_over_lower_bound": 1.0 + 0.1 * batch,
        "num_micro_batches": 1,
        "recompute_policy": "keep-all",
        "plan_hash": f"{planner}{point}{batch}",
        "batch_samples": 100,
        "batch_tokens": 2**21,
        "share_over_128k": 0.01 * (point + 1) * (batch + 1),
        "dropped_samples": 0,
        "dropped_tokens": 0,
        "cached": False,
    }


# nsp's per-batch normalised step times: speedups point 0 = 2, 1.25, 1; point 1 = 4, 2, 2.5 (batch 3 OOM)
NSP = {0: (16, [0.5, 0.8, 1.0]), 1: (64, [0.25, 0.5, 0.4, NAN])}


def frames() -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    rows = []
    for point, (gpus, norms) in NSP.items():
        for b, norm in enumerate(norms):
            rows.append(row(point, "static-best", b, 2.0, 1.0, gpus=gpus))
            rows.append(row(point, "nsp", b, 2.0 * norm, norm, gpus=gpus))
    results = pd.DataFrame(rows)
    summary = results.groupby(["point", "planner"], as_index=False).agg(
        gpus=("gpus", "first"),
        batches=("batch_index", "size"),
        normalized=("normalized", "mean"),
        normalized_min=("normalized", "min"),
        normalized_median=("normalized", "median"),
        normalized_max=("normalized", "max"),
    )
    summary = summary.assign(speedup=1 / summary["normalized"], ok_batches=summary["batches"], oom_count=0, failed=0)
    return results, summary, {"axes": {"gpus": [16, 64]}, "run": {"planners": ["static-best", "nsp"]}}


def test_speedup_spread_is_min_median_max_of_the_per_batch_speedups() -> None:
    results, _, _ = frames()
    spread = sweep_report.speedup_spread(results, "gpus")
    assert list(spread["planner"]) == ["nsp", "nsp"]  # the baseline's own rows (always 1) are left out
    assert list(spread["gpus"]) == [16.0, 64.0] and list(spread["batches"]) == [3, 3]
    assert list(spread["min"]) == pytest.approx([1.0, 2.0])
    assert list(spread["median"]) == pytest.approx([1.25, 2.5])
    assert list(spread["max"]) == pytest.approx([2.0, 4.0])


def test_speedup_figure_draws_median_and_min_max_whiskers_on_a_log2_axis_and_counts_batches() -> None:
    results, _, config = frames()
    fig = sweep_report.speedup_figure(results, "gpus", ["gpus"], ["static-best", "nsp"], {"nsp": "#4c78a8"})
    (line,) = fig.data  # the baseline's own speedup (1) is the dashed line, not a trace
    assert list(line.x) == [16.0, 64.0]  # one planner drawn: no sideways offset
    assert list(line.y) == pytest.approx([1.25, 2.5])
    assert list(line.error_y.array) == pytest.approx([0.75, 1.5])  # max - median
    assert list(line.error_y.arrayminus) == pytest.approx([0.25, 0.5])  # median - min
    assert fig.layout.xaxis.type == "log" and list(fig.layout.xaxis.tickvals) == [16.0, 64.0]
    assert list(fig.layout.xaxis.ticktext) == ["16", "64"]
    assert fig.layout.title.text.startswith("Speedup over static-best against gpus: 6 batches<br>")  # not batch 3


def test_planners_stand_side_by_side_on_a_numeric_axis() -> None:
    results, _, _ = frames()
    flex = results[results["planner"] == "nsp"].assign(planner="flexsp")
    fig = sweep_report.speedup_figure(
        pd.concat([results, flex]),
        "gpus",
        ["gpus"],
        ["static-best", "flexsp", "nsp"],
        {"nsp": "#000000", "flexsp": "#111111"},
    )
    left, right = fig.data
    assert (left.name, right.name) == ("flexsp", "nsp")
    # half a slot each side of the value: 2 ** (0.012 * log2(64 / 16) * -+0.5)
    assert list(left.x) == pytest.approx([16 * 2**-0.012, 64 * 2**-0.012])
    assert list(right.x) == pytest.approx([16 * 2**0.012, 64 * 2**0.012])
    assert list(right.customdata[:, 0]) == [16.0, 64.0]  # the hover shows the swept value itself


def test_skew_points_take_each_points_mean_share_over_128k() -> None:
    results, _, _ = frames()
    points = sweep_report.skew_points(results).set_index("point")
    assert points.loc[0, "skew"] == pytest.approx(0.02)  # 0.01 * (1 + 2 + 3) / 3
    assert points.loc[1, "skew"] == pytest.approx(0.05)  # 0.02 * (1 + 2 + 3 + 4) / 4
    assert points.loc[1, "median"] == pytest.approx(2.5) and points.loc[1, "batches"] == 3


def test_render_has_every_figure_with_exact_batch_counts() -> None:
    results, summary, config = frames()
    titles = [fig.layout.title.text.split("<br>")[0] for fig in sweep_report.figures(results, config)]
    assert titles == [
        "Speedup over static-best against gpus: 6 batches",  # nsp's OOM batch 3 has no speedup
        "Speedup over static-best against trace skew: 6 batches, 2 points",
        "Exposed SP communication against communication wait: 7 batches, 13 planner-batch rows",  # all but the OOM
        "Planning time against Load / lower bound: 7 batches, 14 planner-batch rows",  # planned, then ran out
    ]
    page = sweep_report.render(results, summary, config)
    assert page.startswith("<!DOCTYPE html>") and page.count("Plotly.newPlot(") == 4  # plotly.js inlined once:
    assert page.count("window.PlotlyConfig") == 1 and len(page) > 3_000_000  # the file opens offline
    assert "<h1>nspsim sweep: 2 point(s) x 2 planner(s), 7 batches</h1>" in page
    # the constructed summary's mean normalised 0.767 (the frame's own rule) and its per-batch spread
    cells = ("16", "nsp", "1.30x", "-", "0.767", "0.500 / 0.800 / 1.000", "3/3")  # no interval in this summary: -
    assert "".join(f"<td>{c}</td>" for c in cells) in page


def test_axes_come_from_the_config_else_from_columns_that_vary() -> None:
    results, _, config = frames()
    assert sweep_report.swept_axes(results, config) == ["gpus"]
    assert sweep_report.swept_axes(results.assign(trace=results["point"].map({0: "code", 1: "wiki"})), {}) == [
        "trace",
        "gpus",
    ]


def test_a_categorical_axis_is_drawn_as_boxes_per_planner() -> None:
    results, _, _ = frames()
    results = results.assign(trace=results["point"].map({0: "code", 1: "wikipedia"}))
    fig = sweep_report.speedup_figure(results, "trace", ["trace", "gpus"], ["static-best", "nsp"], {"nsp": "#000000"})
    (box,) = fig.data
    assert box.type == "box" and sorted(set(box.x)) == ["code", "wikipedia"] and len(box.y) == 6
    assert fig.layout.xaxis.type == "category" and "pooled over gpus" in fig.layout.title.text


def test_a_numeric_axis_with_a_default_value_is_drawn_as_categories() -> None:
    """An automatic token budget (None, read back from Parquet as NaN) next to 128K."""
    results, _, _ = frames()
    results = results.assign(token_budget=results["point"].map({0: NAN, 1: 131072.0}))
    spread = sweep_report.speedup_spread(results, "token_budget")
    assert list(spread["token_budget"]) == ["128K", "default"] and list(spread["median"]) == pytest.approx([2.5, 1.25])
    fig = sweep_report.speedup_figure(results, "token_budget", ["token_budget"], ["nsp"], {"nsp": "#000000"})
    assert fig.data[0].type == "box" and sorted(set(fig.data[0].x)) == ["128K", "default"]


def test_failed_units_are_listed_and_an_empty_figure_says_so() -> None:
    results, summary, config = frames()
    results.loc[0, "error"] = "RuntimeError: boom"
    page = sweep_report.render(results, summary, config)
    assert "1 failed unit(s)" in page and "RuntimeError: boom" in page
    empty = sweep_report.speedup_figure(results.iloc[:0], "gpus", ["gpus"], ["nsp"], {"nsp": "#000000"})
    assert "0 batches" in empty.layout.title.text and "no data" in empty.layout.annotations[0].text


def test_speedup_axes_start_at_zero_and_the_summary_gives_the_interval_and_what_labels_mean() -> None:
    """All speedups 1.00 drew a y axis zoomed onto 1.000-1.005; a ratio's axis starts at 0. The summary
    table gives the speedup's interval (from the normalised one), a summary written before it a dash."""
    results, summary, config = frames()
    colors = {"nsp": "#4c78a8", "static-best": "#7f7f7f"}
    for fig in (
        sweep_report.speedup_figure(results, "gpus", ["gpus"], ["static-best", "nsp"], colors),
        sweep_report.skew_figure(results, ["static-best", "nsp"], colors),
    ):
        assert fig.layout.yaxis.rangemode == "tozero"
    with_ci = summary.assign(normalized_ci_low=0.5, normalized_ci_high=0.8)
    table = sweep_tables.summary_table(with_ci, ["gpus"], ["static-best", "nsp"])
    assert "speedup 95% interval" in table and f"<td>{1 / 0.8:.2f}-{1 / 0.5:.2f}x</td>" in table
    assert "<td>-</td>" in sweep_tables.summary_table(summary, ["gpus"], ["static-best", "nsp"])
    page = sweep_report.render(results, with_ci, config)
    assert "<b>static-best</b>: Static SP at the one fixed degree" in page and "bootstrap" in page
