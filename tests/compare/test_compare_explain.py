"""What the compare report explains (issue 24 item 7): the speedup's per-batch spread and bootstrap
interval, what each strategy saves or pays per category, the batch whose timelines are drawn (where the
strategies differ most) on one shared time axis, a legend line per label, ratio bars from 0, and the
line naming the files ``compare -o`` wrote. The figures' data are asserted, never pixels."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from nspsim.cli.main import main
from nspsim.compare import (
    INTERVAL,
    WIDEST,
    CompareConfig,
    CompareResult,
    IterationRecord,
    RunSpec,
    describe_label,
    ratio_interval,
    run_compare,
    summarise,
    widest_iteration,
)
from nspsim.records import BREAKDOWN_CATEGORIES
from nspsim.workload import WorkloadConfig

SMALL = WorkloadConfig(gpus=16, tokens_per_batch=512 * 1024, max_context=96 * 1024, seed=3)


def record(planner: str, i: int, parts: dict[str, float] | None) -> IterationRecord:
    """One iteration with the given breakdown (``None``: out of memory); the step is its sum."""
    breakdown = {k: (parts or {}).get(k, 0.0) for k in BREAKDOWN_CATEGORIES}
    return IterationRecord(
        planner=planner,
        iteration=i,
        batch_index=i,
        plan_hash=f"{planner}{i}",
        step_time_s=None if parts is None else sum(breakdown.values()),
        breakdown_s=breakdown if parts is not None else {},
        oom=parts is None,
        oom_detail=None if parts is not None else "out of memory",
        planning_time_s=0.0,
        sim_wall_time_s=0.0,
        events=1,
        num_micro_batches=1,
        recompute_policy="keep-all",
        routing={},
    )


def steps(runs: dict[str, list[float | None]]) -> list[IterationRecord]:
    return [record(p, i, None if s is None else {"attn_fwd": s}) for p, ss in runs.items() for i, s in enumerate(ss)]


def test_the_interval_holds_the_headline_is_reproducible_and_widens_with_the_spread() -> None:
    ours, theirs = np.array([0.9, 1.0, 3.6, 1.4, 2.0]), np.array([1.0, 2.0, 4.0, 2.0, 2.5])
    low, high = ratio_interval(ours, theirs)  # type: ignore[misc]
    assert low < ours.sum() / theirs.sum() < high and ratio_interval(ours, theirs) == (low, high)  # fixed seed
    steady = ratio_interval(theirs * 0.8 * (1 + 0.01 * np.arange(5)), theirs)
    assert steady is not None and steady[1] - steady[0] < high - low
    assert ratio_interval(theirs * 0.5, theirs) == (0.5, 0.5)  # every resample gives the same ratio
    assert ratio_interval(ours[:1], theirs[:1]) is None  # one batch: nothing to resample
    assert "bootstrap" in INTERVAL and "seed" in INTERVAL


def test_summaries_give_the_speedup_spread_and_interval_beside_the_headline() -> None:
    runs: dict[str, list[float | None]] = {"static": [1.0, 2.0, 4.0, 2.0, None], "nsp": [0.8, 1.0, 3.6, 1.4, 1.0]}
    static, nsp = summarise(tuple(runs), steps(runs), {}, "static")
    per_batch = np.array([1.0, 2.0, 4.0, 2.0]) / np.array([0.8, 1.0, 3.6, 1.4])  # batch 4: the baseline OOM
    assert (nsp.speedup_min, nsp.speedup_median, nsp.speedup_max) == pytest.approx(
        (per_batch.min(), np.median(per_batch), per_batch.max())
    )
    ci = ratio_interval(np.array([0.8, 1.0, 3.6, 1.4]), np.array([1.0, 2.0, 4.0, 2.0]))
    assert ci is not None and (nsp.normalized_ci_low, nsp.normalized_ci_high) == ci
    assert (nsp.speedup_ci_low, nsp.speedup_ci_high) == pytest.approx((1 / ci[1], 1 / ci[0]))
    assert nsp.speedup_ci_low < nsp.speedup_vs_baseline < nsp.speedup_ci_high  # type: ignore[operator]
    assert nsp.speedup_spread() == (
        f"{np.median(per_batch):.2f}x",
        f"{per_batch.min():.2f}-{per_batch.max():.2f}x",
        f"{1 / ci[1]:.2f}-{1 / ci[0]:.2f}x",
    )
    assert static.baseline == nsp.baseline == "static" and static.speedup_spread()[0] == "1.00x"
    row = CompareResult(config={}, baseline="static", summaries=(static, nsp), records=(), timelines={}).to_dict()
    assert row["interval"] == INTERVAL and "normalized_to_static" not in row["results"][1]
    assert row["results"][1]["normalized_to_baseline"] == nsp.normalized_to_baseline


def test_saved_shares_say_per_category_what_was_saved_or_paid_and_add_up_to_the_headline() -> None:
    base = {"attn_fwd": 2.0, "comm_wait": 1.0, "non_attn": 1.0}
    ours = {"attn_fwd": 1.5, "comm_wait": 0.0, "non_attn": 1.5}  # saves attention and waiting, pays in non_attn
    records = [record("static", 0, base), record("nsp", 0, ours), record("static", 1, base), record("nsp", 1, None)]
    _, nsp = summarise(("static", "nsp"), records, {}, "static")
    assert nsp.saved_share["attn_fwd"] == pytest.approx(0.5 / 4) and nsp.saved_share["comm_wait"] == pytest.approx(0.25)
    assert nsp.saved_share["non_attn"] == pytest.approx(-0.5 / 4)  # paid: below zero
    assert sum(nsp.saved_share.values()) == pytest.approx(1 - nsp.normalized_to_baseline)  # type: ignore[operator]


def test_the_widest_batch_is_where_the_step_times_differ_most() -> None:
    runs: dict[str, list[float | None]] = {"a": [1.0, 4.0, 2.0, 1.0], "b": [1.0, 3.0, 1.0, None]}
    runs["c"] = [1.1, 3.5, 1.5, 9.0]
    spreads = {i: max(s) / min(s) for i in range(4) if len(s := [r[i] for r in runs.values() if r[i]]) > 1}
    assert widest_iteration(steps(runs)) == max(spreads, key=lambda i: spreads[i]) == 3  # OOM planners left out
    assert widest_iteration(steps({"a": [1.0, 2.0], "b": [2.0, 4.0]})) == 0  # a tie: the earliest
    assert widest_iteration(steps({"a": [1.0, 2.0]})) is None  # one planner: nothing differs


@pytest.fixture(scope="module")
def widest_run() -> CompareResult:
    planners = ("static-best", "static", "static-2")
    config = CompareConfig(workload=SMALL, run=RunSpec(planners=planners, iters=3), timeline_iteration=WIDEST)
    return run_compare(config)


def test_compare_draws_the_timelines_of_the_widest_batch(widest_run: CompareResult) -> None:
    chosen = widest_run.timeline_iteration
    assert chosen is not None and chosen == widest_iteration(widest_run.records)
    assert list(widest_run.timelines) == ["static-best", "static", "static-2"]
    for label, step in widest_run.timelines.items():
        (rec,) = [r for r in widest_run.records if r.planner == label and r.iteration == chosen]
        assert step.step_time_s == rec.step_time_s and step.timeline  # the same plan, now with its events
    assert widest_run.to_dict()["timeline_iteration"] == chosen


def test_report_figures_share_the_time_axis_and_draw_ratios_from_zero(widest_run: CompareResult) -> None:
    from nspsim_studies.renderers.compare_report import (
        LEGEND_ROW_PX,
        breakdown_figure,
        normalized_figure,
        render,
        savings_figure,
    )
    from nspsim_studies.renderers.compare_timelines import timelines_figure

    fig = timelines_figure(widest_run)
    longest = max(s.step_time_s or 0.0 for s in widest_run.timelines.values())
    ranges = [tuple(fig.layout[k].range) for k in fig.layout if k.startswith("xaxis")]
    assert len(ranges) == 3 and all(r == (0.0, pytest.approx(1.01 * longest)) for r in ranges)  # one shared axis
    assert f"batch {widest_run.timeline_iteration}" in fig.layout.title.text
    assert normalized_figure(widest_run).layout.yaxis.range[0] == 0.0
    assert breakdown_figure(widest_run).layout.height >= LEGEND_ROW_PX * len(BREAKDOWN_CATEGORIES) + 200  # legend whole
    saved = savings_figure(widest_run)
    others = [s for s in widest_run.summaries if s.planner != widest_run.baseline]
    assert len(saved.data) == len(others)
    for bar, s in zip(saved.data, others):
        assert sum(bar.y) == pytest.approx(100 * (1 - s.normalized_to_baseline))  # type: ignore[operator]
    page = render(widest_run)
    assert all(describe_label(s.planner) in page for s in widest_run.summaries)
    best = widest_run.winner
    assert best is not None and f"<b>{best.speedup_vs_baseline:.2f}x</b>" in page.split("<h2>Results", 1)[0]


def test_every_label_is_explained() -> None:
    assert describe_label("static-4") == describe_label("static:degree=4")
    assert "fixed degree 4" in describe_label("static-4") and "per batch" in describe_label("static")
    lines = {label: describe_label(label) for label in ("static-best", "static-paper", "static", "nsp", "nsp2l")}
    assert len(set(lines.values())) == len(lines) and all(lines.values())
    assert "token" in lines["static-paper"] and "time_limit=5" in describe_label("flexsp:time_limit=5")


def test_compare_names_the_files_it_wrote(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.html"
    argv = ["compare", "--gpus", "16", "--tokens-per-batch", "512k", "--max-context", "96k", "--seed", "3"]
    assert main([*argv, "--iters", "2", "--planners", "static,static-2", "-o", str(out)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == f"nspsim: wrote {out}, {out.with_suffix('.config.json')}, {out.with_suffix('.results.parquet')}"
    assert json.loads(out.with_suffix(".config.json").read_text())["timeline_iteration"] == WIDEST
