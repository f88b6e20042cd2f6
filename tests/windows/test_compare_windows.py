"""compare with windows: per-step keys read as window time / W, the window never slower than the
per-step assignment by the simulator, the optimizer step once per window, W = 1 unchanged, bad input."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

from nspsim.api import plan_batch, simulate_plan, workload_of
from nspsim.cli.main import main
from nspsim.compare import CompareConfig, CompareResult, RunSpec, run_compare
from nspsim.simulator import Simulator
from nspsim.workload import WorkloadConfig

WORKLOAD = WorkloadConfig(gpus=8, tokens_per_batch=131072, max_context=32768, trace="code")


@cache
def _run(window: int) -> CompareResult:
    run = RunSpec(planners=("static-best", "nsp"), iters=4, window=window)
    return run_compare(CompareConfig(workload=WORKLOAD, run=run, timeline_iteration=None))


def test_a_pass_that_accumulates_skips_only_the_optimizer_step() -> None:
    wl = workload_of(gpus=8, tokens_per_batch=131072, max_context=32768, trace="code")
    plan = plan_batch(wl, "nsp")
    full = simulate_plan(wl, plan)
    accumulating = Simulator.for_workload(wl).simulate(plan, optimizer_step=False)
    assert full.step_time_s is not None and accumulating.step_time_s is not None
    assert accumulating.step_time_s == pytest.approx(full.step_time_s - wl.cost.optimizer_time(), rel=1e-12)


def test_windows_report_per_step_means_and_never_lose_to_per_step() -> None:
    result = _run(2)
    data = result.to_dict()
    assert len(result.records) == 2 * 4 and len(result.windows) == 2 * 2
    for summary in result.summaries:
        mine = [w for w in result.windows if w.planner == summary.planner]
        assert all(w.window_time_s is not None for w in mine)
        mean_window = sum(w.window_time_s or 0.0 for w in mine) / len(mine)
        assert summary.mean_step_time_s == pytest.approx(mean_window / 2, rel=1e-12)
        for w in mine:  # the simulator judged per-step whenever another assignment was proposed
            assert w.per_step_time_s is not None and w.window_time_s is not None
            assert w.window_time_s <= w.per_step_time_s
            assert w.time_per_token_s == pytest.approx(w.window_time_s / w.tokens)
    rows = {r["planner"]: r for r in data["window_results"]}
    assert set(rows) == {"static-best", "nsp"} and all(r["window_over_per_step"] <= 1.0 for r in rows.values())
    json.dumps(data, allow_nan=False)


def test_per_step_windows_cost_the_per_step_steps_less_the_optimizer_steps_saved() -> None:
    per_step = _run(1)
    windows = _run(2)
    assert "windows" not in per_step.to_dict()  # W = 1: the document is what it was
    wl = workload_of(gpus=8, tokens_per_batch=131072, max_context=32768, trace="code")
    for w in windows.windows:
        if w.candidate != "per-step" or w.planner != "nsp":
            continue
        steps = [r.step_time_s or 0.0 for r in per_step.records if r.planner == "nsp"][
            w.first_batch : w.first_batch + 2
        ]
        assert w.window_time_s == pytest.approx(sum(steps) - wl.cost.optimizer_time(), rel=1e-9)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--iters", "3", "--window", "2"], "must be a multiple of window (2)"),
        (["--window", "0"], "--window"),
        (["--window", "300", "--iters", "300"], "window must be an integer in [1, 256]"),
    ],
)
def test_bad_windows_are_one_line_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(["compare", "--gpus", "8", "--quiet", *argv])
    except SystemExit as exc:  # argparse's own checks exit
        code = int(exc.code or 0)
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_the_cli_prints_the_window_lines(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["compare", "--gpus", "8", "--tokens-per-batch", "128K", "--max-context", "32K", "--trace", "code"]
    assert main([*argv, "--iters", "4", "--window", "2", "--planners", "static-best,nsp", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "windows of 2 batches per optimizer step" in out
    assert "nsp: window" in out and "of the per-step assignment's time" in out


def test_the_report_and_its_results_file_carry_the_window(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    argv = ["compare", "--gpus", "8", "--tokens-per-batch", "128K", "--max-context", "32K", "--trace", "code"]
    report = tmp_path / "r.html"
    assert (
        main([*argv, "--iters", "4", "--window", "2", "--planners", "static-best,nsp", "--quiet", "-o", str(report)])
        == 0
    )
    rows = pq.read_table(tmp_path / "r.results.parquet").to_pandas()
    assert set(rows["window"]) == {2} and len(rows) == 8
    assert json.loads((tmp_path / "r.config.json").read_text())["run"]["window"] == 2
    assert "run as windows of 2 batches per optimizer step" in report.read_text()


def test_the_spread_is_over_windows_not_passes() -> None:
    result = _run(2)
    times = {(w.planner, w.window): w.window_time_s or 0.0 for w in result.windows}
    nsp = next(s for s in result.summaries if s.planner == "nsp")
    speedups = [times[("static-best", k)] / times[("nsp", k)] for k in (0, 1)]
    assert nsp.speedup_min == pytest.approx(min(speedups), rel=1e-12)
    assert nsp.speedup_max == pytest.approx(max(speedups), rel=1e-12)
    assert nsp.normalized_iterations == 4  # the headline ratio still sums every pass
