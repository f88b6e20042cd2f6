"""``nspsim sweep`` with gradient-accumulation windows: a ``window`` axis gives compare's pass records
and window records on every point, W = 1 is exactly a sweep without windows (rows, keys, schemas),
spec errors are one line before anything runs, a resumed sweep reuses its cache, the CLI writes
``windows.parquet`` and the report draws the window. Workload: 8 GPUs, 128K-token batches of ``code``
at 32K max context, static-best and NSP on 4 batches (compare's window tests use the same)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest

import nspsim.sweep.keys as keys
from nspsim.cli.main import main
from nspsim.compare import CompareResult, run_compare
from nspsim.compare.specs import parse_planner_spec
from nspsim.sweep import Cache, CodeVersions, build_rows, build_windows, execute, parse_spec, plan_sweep, summarise
from nspsim.sweep.cache import record_problem
from nspsim.sweep.engine import SweepPlan
from nspsim.sweep.keys import point_key, window_key, workload_identity
from nspsim.sweep.results import ROW_COLUMNS, SUMMARY_SCHEMA, resolved_config
from nspsim.sweep.schema import WINDOWS_SCHEMA, row_schema, summary_schema
from nspsim.workload import WorkloadConfig

FIXED = {"gpus": 8, "tokens_per_batch": "128k", "max_context": "32k", "trace": "code"}
RUN = {"planners": ["static-best", "nsp"], "iters": 4}
VOLATILE = ["planning_time_s", "cached"]  # wall-clock planning time; cache origin


def spec_of(**tables: dict[str, Any]) -> Any:
    return parse_spec({"workload": FIXED, "run": RUN, **tables}, name="w")


def sweep(spec: Any, root: Path) -> tuple[SweepPlan, list[dict[str, Any]], list[dict[str, Any]] | None]:
    cache = Cache(root)
    plan = plan_sweep(spec, cache)
    execute(plan, cache)
    return plan, build_rows(plan), build_windows(plan)


@pytest.fixture(scope="module")
def axis(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SweepPlan, pd.DataFrame, pd.DataFrame]:
    """The sweep with ``window = [1, 2]``, its cache under ``DIR/cache`` (so the CLI test reruns it warm)."""
    out = tmp_path_factory.mktemp("windows")
    plan, rows, windows = sweep(spec_of(axes={"window": [1, 2]}), out / "cache")
    assert windows is not None
    return out, plan, pd.DataFrame(rows), pd.DataFrame(windows)


@pytest.fixture(scope="module")
def compared() -> dict[int, CompareResult]:
    spec = spec_of(axes={"window": [1, 2]})
    return {w: run_compare(spec.compare_config(config, w)) for config, w in spec.grid()}


def test_window_axis_rows_and_windows_equal_compare(
    axis: tuple[Path, SweepPlan, pd.DataFrame, pd.DataFrame], compared: dict[int, CompareResult]
) -> None:
    _, plan, df, windows = axis
    assert not plan.errors and len(df) == 2 * 2 * 4 and not df["error"].any()
    assert [p.window for p in plan.points] == [1, 2] and plan.points[0].key != plan.points[1].key
    summary = summarise(df.to_dict("records"), windows.to_dict("records"))
    for point, (w, result) in enumerate(sorted(compared.items())):
        ours = df[df["point"] == point]
        assert (ours["window"] == w).all()
        for record in result.records:  # W = 2: the passes, every one but the last without the optimizer step
            row = ours[(ours["planner"] == record.planner) & (ours["iteration"] == record.iteration)].iloc[0]
            assert row["step_time_s"] == record.step_time_s and row["plan_hash"] == record.plan_hash
            assert row["batch_index"] == record.batch_index and row["num_micro_batches"] == record.num_micro_batches
            assert row["bd_attn_fwd"] == record.breakdown_s["attn_fwd"] and row["oom"] == record.oom
        mine = windows[windows["point"] == point]
        assert len(mine) == len(result.windows) == (0 if w == 1 else 2 * 4 // w)
        for rec in result.windows:
            got = mine[(mine["planner"] == rec.planner) & (mine["window_index"] == rec.window)].iloc[0]
            for name in ("first_batch", "passes", "candidate", "moved_samples", "tokens", "window_hash"):
                assert got[name] == getattr(rec, name), name
            for name in ("window_time_s", "per_step_time_s", "time_per_token_s"):
                assert got[name] == getattr(rec, name), name
        config = resolved_config(plan)["points"][point]
        assert config["static_best_degree"] == result.config["static_best_degree"] and config["window"] == w
        by_planner = {s.planner: s for s in result.summaries}
        window_results = {r["planner"]: r for r in result.to_dict().get("window_results", [])}
        for s in (s for s in summary if s["point"] == point):
            theirs = by_planner[s["planner"]]
            assert s["window"] == w and s["mean_step_time_s"] == pytest.approx(theirs.mean_step_time_s, rel=1e-12)
            assert s["normalized"] == pytest.approx(theirs.normalized_to_baseline, rel=1e-12)
            expected = window_results[s["planner"]]["window_over_per_step"] if w > 1 else 1.0
            assert s["window_over_per_step"] == pytest.approx(expected, rel=1e-12)
            assert s["mean_window_time_s"] == pytest.approx(s["mean_step_time_s"] * w, rel=1e-12)


def test_w1_is_a_sweep_without_windows(tmp_path: Path, axis: tuple[Path, SweepPlan, pd.DataFrame, Any]) -> None:
    out, with_axis, df, _ = axis
    plain, rows, windows = sweep(spec_of(), out / "cache")  # the same cache: W = 1 units keyed as before
    assert plain.tasks == [] and len(plain.cached) == plain.units and windows is None
    assert [p.key for p in plain.points] == [with_axis.points[0].key]
    assert set(rows[0]) == set(ROW_COLUMNS)  # no window column
    one = df[df["window"] == 1].drop(columns=["window", *VOLATILE]).reset_index(drop=True)
    pd.testing.assert_frame_equal(one, pd.DataFrame(rows)[list(one.columns)])
    assert list(summarise(rows)[0]) == SUMMARY_SCHEMA.names
    assert row_schema(False) is not row_schema(True) and summary_schema(False).names == SUMMARY_SCHEMA.names
    assert "window" not in spec_of().to_dict()["run"]  # sweep.config.json as it was
    versions = CodeVersions(planner="p" * 32, simulator="s" * 32)
    identity = workload_identity(WorkloadConfig(gpus=8, tokens_per_batch=131072, max_context=32768, trace="code"))
    assert point_key(identity, 1) == point_key(identity) != point_key(identity, 2)
    nsp = parse_planner_spec("nsp", "stream", {}, "planner")
    base = window_key(identity, nsp, 0, 2, versions)
    assert base != window_key(identity, nsp, 0, 4, versions)  # the window size
    assert base != window_key(identity, nsp, 0, 2, replace(versions, simulator="t" * 32))  # the judge's code
    assert base != window_key(identity, nsp, 0, 2, replace(versions, planner="q" * 32))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(keys, "WINDOW_CANDIDATES", ("per-step", "grouped"))
        assert window_key(identity, nsp, 0, 2, versions) != base  # the candidate set


@pytest.mark.parametrize(
    ("tables", "message"),
    [
        ({"axes": {"window": [1, 3]}}, "[axes] window: iters (4) must be a multiple of window (3)"),
        ({"run": {**RUN, "window": 3}}, "[run]: iters (4) must be a multiple of window (3)"),
        ({"zip": {"window": [2, 4], "seed": [0, 1]}}, None),
        ({"axes": {"window": [0, 2]}}, "[axes] window: a window is a positive integer"),
        ({"axes": {"window": ["2"]}}, "[axes] window: a window is a positive integer"),
        ({"axes": {"window": [2, 2]}}, "[axes] window: values repeat"),
        ({"axes": {"window": [512]}, "run": {**RUN, "iters": 512}}, "window must be an integer in [1, 256]"),
        ({"axes": {"window": [1, 2]}, "run": {**RUN, "window": 2}}, "[axes] window: also set in [run]"),
        ({"workload": {**FIXED, "window": 2}}, "[workload] window: not a workload field: set it in [run]"),
    ],
)
def test_window_spec_errors_are_one_line(tables: dict[str, Any], message: str | None) -> None:
    if message is None:
        spec = spec_of(**tables)
        assert [(c.seed, w) for c, w in spec.grid()] == [(0, 2), (1, 4)] and spec.windowed
        return
    with pytest.raises(ValueError) as info:
        spec_of(**tables)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_cli_iters_not_a_multiple_fails_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text("[workload]\ngpus = 8\n[axes]\nwindow = [1, 3]\n[run]\niters = 4\n")
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "-o", str(out), "--jobs", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "[axes] window: iters (4) must be a multiple of window (3)" in err[0]
    assert not out.exists()


def test_resumed_windowed_sweep_reuses_the_cache(tmp_path: Path) -> None:
    spec = spec_of(run={**RUN, "planners": ["nsp"], "window": 2})
    first = plan_sweep(spec, Cache(tmp_path))
    assert len(first.tasks) == 2 and all(t.window == 2 for t in first.tasks)
    first.tasks = first.tasks[:1]  # interrupted after one window unit
    execute(first, Cache(tmp_path))
    resumed, rows, windows = sweep(spec, tmp_path)
    assert resumed.computed == 1 and len(resumed.cached) == 1 and windows is not None
    again, rows2, windows2 = sweep(spec, tmp_path)
    assert again.tasks == [] and again.computed == 0 and len(again.cached) == 2
    assert [r["step_time_s"] for r in rows] == [r["step_time_s"] for r in rows2] and all(r["cached"] for r in rows2)
    assert [w["window_time_s"] for w in windows] == [w["window_time_s"] for w in windows2 or []]
    # a window record that does not hold together is refused and recomputed
    record = again.records[next(iter(again.cached))]
    assert record_problem(record) is None
    assert "passes" in (record_problem({**record, "passes": record["passes"][:1]}) or "")
    assert "window 'window_time_s'" in (
        record_problem({**record, "window": {**record["window"], "window_time_s": -1}}) or ""
    )


def test_cli_writes_windows_and_the_report_draws_them(
    axis: tuple[Path, SweepPlan, pd.DataFrame, pd.DataFrame], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out, _, df, windows = axis
    spec = tmp_path / "w.toml"
    spec.write_text(
        "[workload]\ngpus = 8\ntokens_per_batch = '128k'\nmax_context = '32k'\ntrace = 'code'\n"
        "[axes]\nwindow = [1, 2]\n[run]\nplanners = ['static-best', 'nsp']\niters = 4\n"
    )
    assert main(["sweep", str(spec), "-o", str(out), "--jobs", "1", "--json"]) == 0  # warm: every unit cached
    capsys.readouterr()
    results = pq.read_table(out / "results.parquet")
    assert results.schema.equals(row_schema(True)) and results.column("window").to_pylist() == list(df["window"])
    assert pq.read_table(out / "summary.parquet").schema.equals(summary_schema(True))
    table = pq.read_table(out / "windows.parquet")
    assert table.schema.equals(WINDOWS_SCHEMA) and table.num_rows == len(windows) == 4
    assert all(math.isfinite(x) and x <= 1.0 for x in table.column("window_over_per_step").to_pylist())
    if (out / "report.html").is_file():  # plotly installed: the window is an axis, and its own figure
        page = (out / "report.html").read_text()
        assert "against window" in page and "Window time over the per-step assignment" in page
