"""``nspsim sweep``: spec parsing and its errors, the grid, cache keys, the cache (rerun, resume after an
interruption, plans reused across a simulator change), equality with ``compare``, the Ray engine, the
results files and the CLI. Workload: the ``tiny`` model on ``cpu`` GPUs, 64K-token batches of ``code``
(a sweep of a few points runs in about a second)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import nspsim.sweep.work as work
from nspsim.compare import CompareConfig, RunSpec, run_compare
from nspsim.compare.specs import parse_planner_spec
from nspsim.sweep import Cache, CodeVersions, build_rows, code_versions, execute, load_spec, parse_spec, plan_sweep
from nspsim.sweep.keys import batch_content, code_version, plan_key, point_key, sim_key, source_files, workload_identity
from nspsim.sweep.results import ROW_COLUMNS, resolved_config, summarise
from nspsim.workload import WorkloadConfig

FIXED = {"model": "tiny", "cluster": "cpu", "trace": "code", "tokens_per_batch": "64k", "max_context": "32k"}
SPEC = {"workload": FIXED, "axes": {"gpus": [2, 4]}, "run": {"planners": ["static-best", "static", "nsp"], "iters": 2}}
VOLATILE = ["planning_time_s", "cached"]  # wall-clock planning time is recorded, not recomputed; cache origin


def spec_of(**changes: Any) -> Any:
    data = {k: dict(v) for k, v in SPEC.items()}
    for table, values in changes.items():
        data[table].update(values)
    return parse_spec(data, name="t")


def run(spec: Any, root: Path, **kwargs: Any) -> tuple[Any, pd.DataFrame]:
    cache = Cache(root)
    plan = plan_sweep(spec, cache, force=kwargs.pop("force", False), versions=kwargs.pop("versions", None))
    execute(plan, cache, **kwargs)
    return plan, pd.DataFrame(build_rows(plan), columns=list(ROW_COLUMNS))


def stable(df: pd.DataFrame) -> pd.DataFrame:
    return df.drop(columns=VOLATILE).reset_index(drop=True)


# ---- spec ----------------------------------------------------------------------------------------
def test_spec_parses_sizes_axes_and_defaults() -> None:
    fixed = {k: v for k, v in FIXED.items() if k != "trace"}
    spec = parse_spec({**SPEC, "workload": fixed, "axes": {"gpus": [2, 4], "trace": ["code", "wikipedia"]}})
    assert spec.workload["tokens_per_batch"] == 65536 and spec.workload["max_context"] == 32768
    assert spec.run.iters == 2 and spec.run.first_batch == 0 and spec.run.mode == "stream"
    assert spec.run.planner_options["flexsp"]["time_limit"] == 10.0  # compare's default kept
    grid = [(c.gpus, c.trace) for c in spec.points()]
    assert grid == [(2, "code"), (2, "wikipedia"), (4, "code"), (4, "wikipedia")]  # product, first axis slowest
    assert parse_spec({"workload": FIXED}).points() == [
        WorkloadConfig(model="tiny", cluster="cpu", trace="code", tokens_per_batch=65536, max_context=32768)
    ]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"workload": FIXED, "extra": {}}, "unknown table or key 'extra'"),
        ({"workload": {**FIXED, "gpu": 4}}, "[workload] gpu: not a workload field"),
        ({"workload": FIXED, "axes": {"gpus": []}}, "[axes] gpus: an axis needs at least one value"),
        ({"workload": FIXED, "axes": {"gpus": 4}}, "[axes] gpus: an axis is a list"),
        ({"workload": FIXED, "axes": {"gpus": [2, 2]}}, "[axes] gpus: values repeat"),
        ({"workload": FIXED, "axes": {"model": ["tiny"]}}, "[axes] model: also fixed in [workload]"),
        ({"workload": {**FIXED, "gpus": "four"}}, "[workload] gpus: an integer, got 'four'"),
        ({"workload": {**FIXED, "gpus": 0}}, "[workload] gpus: must be positive"),
        ({"workload": {**FIXED, "max_context": "12q"}}, "[workload] max_context: invalid token count"),
        ({"workload": {**FIXED, "backend": "tcp"}}, "[workload] backend: unknown SP backend 'tcp'"),
        ({"workload": FIXED, "run": {"planners": ["nsq"]}}, "[run]: planner 'nsq' is not available"),
        ({"workload": FIXED, "run": {"iters": 0}}, "[run]: iters must be a positive integer"),
        ({"workload": FIXED, "run": {"iter": 2}}, "[run] iter: unknown key"),
        ({"workload": FIXED, "run": {"mode": "fast"}}, "[run]: unknown simulation mode 'fast'"),
        ({"workload": FIXED, "run": {"planner_options": {"flexsp": 3}}}, "[run] planner_options: a table of tables"),
    ],
)
def test_spec_errors_name_the_key(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")):
        parse_spec(data)


def test_a_grid_past_the_point_limit_is_refused_before_any_point_is_built() -> None:
    """10,001 points, or 1M, are counted from the lists' lengths and refused in one line (a 1M-point grid
    used to resolve every point in silence for minutes before the first unit)."""
    with pytest.raises(ValueError, match=r"^the grid has 10,001 points \(10,001 \(\[axes\] seed\)\); a sweep takes"):
        parse_spec({"workload": FIXED, "axes": {"seed": list(range(10_001))}})
    fixed = {k: v for k, v in FIXED.items() if k != "max_context"}
    contexts = [f"{k}k" for k in range(1, 1001)]
    with pytest.raises(ValueError, match=r"^the grid has 1,000,000 points \(1,000 \(\[axes\] seed\) x 1,000") as err:
        parse_spec({"workload": fixed, "zip": {"max_context": contexts}, "axes": {"seed": list(range(1000))}})
    assert "\n" not in str(err.value)


def test_load_spec_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[workload\n")
    with pytest.raises(ValueError, match=r"sweep spec .*bad.toml: not valid TOML"):
        load_spec(bad)
    with pytest.raises(ValueError, match=r"cannot read sweep spec .*none.toml: No such file or directory"):
        load_spec(tmp_path / "none.toml")


# ---- zipped axes -----------------------------------------------------------------------------------
ZIP_FIXED = {k: v for k, v in FIXED.items() if k not in ("model", "cluster")}


def test_zip_varies_together_crossed_with_the_axes_slowest() -> None:
    spec = parse_spec(
        {
            "workload": {k: v for k, v in ZIP_FIXED.items() if k != "max_context"},
            "zip": {"model": ["tiny", "tiny-moe"], "cluster": ["cpu", "cpu"], "gpus": [2, 4]},
            "axes": {"max_context": ["16k", "32k"]},
        }
    )
    grid = [(c.model, c.cluster, c.gpus, c.max_context) for c in spec.points()]
    assert grid == [
        ("tiny", "cpu", 2, 16384),
        ("tiny", "cpu", 2, 32768),
        ("tiny-moe", "cpu", 4, 16384),
        ("tiny-moe", "cpu", 4, 32768),
    ]
    assert spec.varied == ("model", "cluster", "gpus", "max_context")
    assert spec.to_dict()["zip"] == {"model": ["tiny", "tiny-moe"], "cluster": ["cpu", "cpu"], "gpus": [2, 4]}
    assert "zip" not in spec_of().to_dict()  # a spec without [zip] writes its config as before


def test_zip_of_one_list_keys_points_as_the_same_axis(tmp_path: Path) -> None:
    """Point keys are the resolved workload's: a one-list zip and the same [axes] list give the same
    points, keys and units (so a spec without [zip] keys its points as before)."""
    fixed = {**FIXED}
    as_axis = parse_spec({"workload": fixed, "axes": {"gpus": [2, 4]}, "run": SPEC["run"]})
    as_zip = parse_spec({"workload": fixed, "zip": {"gpus": [2, 4]}, "run": SPEC["run"]})
    assert as_zip.points() == as_axis.points()
    versions = CodeVersions(planner="p", simulator="s")
    a = plan_sweep(as_axis, Cache(tmp_path), versions=versions)
    z = plan_sweep(as_zip, Cache(tmp_path), versions=versions)
    assert [p.key for p in a.points] == [p.key for p in z.points] and a.unit_keys == z.unit_keys
    assert [p.key for p in a.points] == [point_key(workload_identity(c)) for c in as_axis.points()]


def test_the_fig7_spec_is_one_file_of_twelve_points() -> None:
    spec = load_spec(Path(__file__).resolve().parents[2] / "nspsim_studies" / "sweeps" / "fig7.toml")
    points = spec.points()
    assert len(points) == 12 and spec.run.iters == 20
    assert [(c.model, c.cluster) for c in points[::6]] == [("qwen3-30b-a3b", "h100"), ("qwen3-235b-a22b", "h200")]


def test_the_sensitivity_spec_varies_links_and_flops_of_figure_7s_384k_points() -> None:
    spec = load_spec(Path(__file__).resolve().parents[2] / "nspsim_studies" / "sweeps" / "sensitivity.toml")
    points = spec.points()
    assert len(points) == 9 and spec.run.iters == 20 and {c.max_context for c in points} == {384 * 1024}
    assert [(c.model, c.cluster) for c in points[::3]] == [
        ("qwen3-30b-a3b", "h100-800g"),
        ("qwen3-30b-a3b", "h20"),
        ("qwen3-235b-a22b", "h200-800g"),
    ]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"zip": {"model": ["tiny", "tiny-moe"], "cluster": ["cpu"]}}, "[zip]: the zipped lists must have one length"),
        ({"zip": {"gpus": [2]}, "axes": {"gpus": [4]}}, "[zip] gpus: also in [axes]; give it in one table only"),
        ({"workload": {"gpus": 2}, "zip": {"gpus": [4]}}, "[zip] gpus: also in [workload]; give it in one table only"),
        ({"zip": {"gpu": [2]}}, "[zip] gpu: not a workload field"),
        ({"zip": {"gpus": 2}}, "[zip] gpus: a zipped axis is a list of values"),
        ({"zip": {"gpus": []}}, "[zip] gpus: a zipped list needs at least one value"),
        ({"zip": {"gpus": [2, 2]}}, "[zip]: positions repeat ((2,), (2,))"),
        ({"zip": {"gpus": ["two"]}}, "[zip] gpus: an integer, got 'two'"),
        ({"zip": ["gpus"]}, "zip must be a table ([zip]), got list"),
    ],
)
def test_zip_errors_are_one_line_naming_the_key(data: dict[str, Any], message: str) -> None:
    data = {**data, "workload": {**ZIP_FIXED, **data.get("workload", {})}}
    with pytest.raises(ValueError) as exc:
        parse_spec(data)
    assert str(exc.value).startswith(message) and "\n" not in str(exc.value)


# ---- keys ----------------------------------------------------------------------------------------
def test_keys_change_with_what_determines_a_unit_and_only_then(tmp_path: Path) -> None:
    versions = CodeVersions(planner="p1", simulator="s1")
    config = WorkloadConfig(model="tiny", cluster="cpu", gpus=4)
    nsp = parse_planner_spec("nsp")
    base = plan_key(workload_identity(config), nsp, 3, versions)
    assert base == plan_key(workload_identity(WorkloadConfig(model="tiny", cluster="cpu", gpus=4)), nsp, 3, versions)
    changed = [
        plan_key(workload_identity(replace(config, gpus=8)), nsp, 3, versions),
        plan_key(workload_identity(replace(config, max_context=65536)), nsp, 3, versions),
        plan_key(workload_identity(config), parse_planner_spec("nsp:beam_width=2"), 3, versions),
        plan_key(workload_identity(config), parse_planner_spec("nsp2l"), 3, versions),
        plan_key(workload_identity(config), nsp, 4, versions),
        plan_key(workload_identity(config), nsp, 3, replace(versions, planner="p2")),
    ]
    assert base not in changed and len(set(changed)) == len(changed)
    # the simulator version and the mode re-key the simulation only; the plan key stays
    assert plan_key(workload_identity(config), nsp, 3, replace(versions, simulator="s2")) == base
    sims = {
        sim_key(base, nsp, versions),
        sim_key(base, nsp, replace(versions, simulator="s2")),
        sim_key(base, replace(nsp, mode="serial"), versions),
        sim_key(base, replace(nsp, preparation=replace(nsp.preparation, tree_recompute=False)), versions),
    }
    assert len(sims) == 4
    # with the batch's content the key holds it instead of max_context: identical batches share a key
    content = batch_content([100, 50], 0, 0)
    wide = replace(config, max_context=65536)
    assert plan_key(workload_identity(config), nsp, 3, versions, content) == plan_key(
        workload_identity(wide), nsp, 3, versions, content
    )
    assert plan_key(workload_identity(config), nsp, 3, versions, content) != plan_key(
        workload_identity(config), nsp, 3, versions, batch_content([100, 50], 1, 70_000)
    )
    # a profile file is keyed by its content, not only its path
    profile = tmp_path / "p.json"
    profile.write_text("{}")
    one = point_key(workload_identity(replace(config, profile=str(profile))))
    profile.write_text('{"a": 1}')
    assert point_key(workload_identity(replace(config, profile=str(profile)))) != one


def test_code_version_follows_file_contents(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sim").mkdir(parents=True)
    (pkg / "a.py").write_text("x = 1\n")
    (pkg / "sim" / "b.py").write_text("y = 1\n")
    (pkg / "notes.txt").write_text("not source")
    planner_side = source_files(pkg, exclude=("sim",))
    assert [p.name for p in planner_side] == ["a.py"]
    before = code_version(tmp_path, planner_side), code_version(tmp_path, source_files(pkg, include=("sim",)))
    (pkg / "sim" / "b.py").write_text("y = 2\n")
    after = code_version(tmp_path, planner_side), code_version(tmp_path, source_files(pkg, include=("sim",)))
    assert before[0] == after[0] and before[1] != after[1]
    live = code_versions()
    assert live == code_versions() and len(live.planner) == len(live.simulator) == 32


# ---- equality with compare, cache, resume -----------------------------------------------------------
def test_rows_equal_compare_on_every_point(tmp_path: Path) -> None:
    spec = spec_of(workload={"token_budget": 12000})  # SP1 cannot hold a 14.5K sample: static-best passes it
    plan, df = run(spec, tmp_path / "c")
    assert len(df) == 2 * 3 * 2 and not df["error"].any() and not df["cached"].any()
    for point, config in enumerate(spec.points()):
        result = run_compare(
            CompareConfig(workload=config, timeline_iteration=None, run=RunSpec(planners=spec.run.planners, iters=2))
        )
        assert result.static_best_ineligible.keys() == {1}
        ours = df[df["point"] == point]
        for record in result.records:
            row = ours[(ours["planner"] == record.planner) & (ours["iteration"] == record.iteration)].iloc[0]
            assert row["step_time_s"] == record.step_time_s and row["plan_hash"] == record.plan_hash
            assert row["bd_attn_fwd"] == record.breakdown_s["attn_fwd"]
            assert row["batch_index"] == record.batch_index and row["num_micro_batches"] == record.num_micro_batches
            assert record.estimates is not None and row["chosen_by"] == record.estimates.chosen_by
            assert (
                row["chosen_estimate_s"] == record.estimates.chosen_estimate_s
                and row["estimate_error"] == record.estimate_error
            )
            assert record.estimate_error == pytest.approx(record.estimates.chosen_estimate_s / record.step_time_s - 1)
        best = next(s for s in result.summaries if s.planner == "nsp")
        summary = next(s for s in summarise(build_rows(plan)) if s["point"] == point and s["planner"] == "nsp")
        assert summary["normalized"] == pytest.approx(best.normalized_to_baseline, rel=1e-12)


def test_rerun_computes_nothing_and_force_everything(tmp_path: Path) -> None:
    spec = spec_of()
    first, rows = run(spec, tmp_path / "c")
    assert first.computed == first.units == len(first.tasks) and not first.cached
    again, rows2 = run(spec, tmp_path / "c")
    assert again.tasks == [] and again.computed == 0 and len(again.cached) == first.units
    assert rows2["cached"].all()
    pd.testing.assert_frame_equal(rows.drop(columns="cached"), rows2.drop(columns="cached"))
    forced, _ = run(spec, tmp_path / "c", force=True)
    assert forced.computed == first.units and forced.plans_reused == 0


def test_points_that_differ_only_in_max_context_share_identical_batches(tmp_path: Path) -> None:
    """The code trace at 32K and 48K max context on 64K-token batches: batches without a sample above
    32K come out identical and run once; the others differ and run for each point."""
    fixed = {k: v for k, v in FIXED.items() if k != "max_context"}
    data = {"workload": fixed, "axes": {"max_context": ["32k", "48k"]}, "run": {"planners": ["nsp"], "iters": 4}}
    plan, rows = run(parse_spec(data, name="t"), tmp_path / "c")
    a, b = plan.points
    same = [x.content == y.content for x, y in zip(a.batches, b.batches)]
    assert any(same) and not all(same)  # the case has both kinds
    assert plan.units == len(plan.tasks) == 8 - sum(same)
    for i, shared in enumerate(same):
        assert (plan.unit_keys[(0, "nsp", i)] == plan.unit_keys[(1, "nsp", i)]) is shared
    # each point's rows equal compare's on it
    for point, ctx in ((0, 32 * 1024), (1, 48 * 1024)):
        config = CompareConfig(
            workload=WorkloadConfig(model="tiny", cluster="cpu", trace="code", tokens_per_batch=65536, max_context=ctx),
            timeline_iteration=None,
            run=RunSpec(planners=("nsp",), iters=4),
        )
        expected = [r.step_time_s for r in sorted(run_compare(config).records, key=lambda r: r.iteration)]
        assert rows[rows["point"] == point]["step_time_s"].tolist() == pytest.approx(expected, rel=1e-12)


def test_simulator_change_reuses_plans(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = spec_of()
    versions = code_versions()
    _, rows = run(spec, tmp_path / "c", versions=versions)

    def no_planning(*args: Any) -> Any:
        raise AssertionError("planned again although the plan was cached")

    monkeypatch.setattr(work, "plan_batch", no_planning)
    plan, rows2 = run(spec, tmp_path / "c", versions=replace(versions, simulator="edited"))
    assert plan.plans_reused == len(plan.tasks) == plan.units and plan.computed == plan.units and not plan.errors
    pd.testing.assert_frame_equal(stable(rows), stable(rows2))
    # a planner-side change plans again
    replanned = plan_sweep(spec, Cache(tmp_path / "c"), versions=replace(versions, planner="edited"))
    assert replanned.plans_reused == 0 and len(replanned.tasks) == plan.units


def test_interrupted_and_failing_sweeps_resume_to_the_uninterrupted_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = spec_of()
    _, whole = run(spec, tmp_path / "whole")
    real = work.plan_batch
    calls = {"n": 0}

    def interrupted(*args: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(work, "plan_batch", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(spec, tmp_path / "part")
    left = list((tmp_path / "part").rglob("*.tmp"))
    assert left == []  # no half-written entry
    done = len(list((tmp_path / "part" / "sims").rglob("*.json")))
    assert done == 4

    def failing(spec_: Any, *args: Any) -> Any:
        if spec_.label == "static":  # the static label's units (static-best's fixed degrees run)
            raise RuntimeError("solver crashed\nbadly")
        return real(spec_, *args)

    monkeypatch.setattr(work, "plan_batch", failing)
    plan, partial = run(spec, tmp_path / "part")
    assert len(plan.cached) == 4 and len(plan.errors) == 4  # static on 2 points x 2 batches, one line each
    static = partial[partial["planner"] == "static"]
    assert (static["error"] == "RuntimeError: solver crashed badly").all() and static["step_time_s"].isna().all()
    assert not partial[partial["planner"] != "static"]["error"].any()
    assert [s["failed"] for s in summarise(build_rows(plan))] == [0, 2, 0, 0, 2, 0]
    # a corrupt entry counts as missing
    victim = next((tmp_path / "part" / "sims").rglob("*.json"))
    victim.write_text("{not json")
    monkeypatch.setattr(work, "plan_batch", real)
    resumed, rows = run(spec, tmp_path / "part")
    assert resumed.computed == 5 and not resumed.errors  # the 4 failed units and the corrupt one
    pd.testing.assert_frame_equal(stable(whole), stable(rows))


def test_local_pool_gives_the_serial_rows(tmp_path: Path) -> None:
    spec = spec_of()
    _, serial = run(spec, tmp_path / "a")
    _, pooled = run(spec, tmp_path / "b", jobs=2)
    pd.testing.assert_frame_equal(stable(serial), stable(pooled))


@pytest.mark.timeout(120)
def test_ray_engine_gives_the_local_rows(tmp_path: Path) -> None:
    ray = pytest.importorskip("ray", reason="ray (the `distributed` extra) is not installed")
    spec = spec_of(run={"planners": ["static-best", "nsp"]})
    _, local = run(spec, tmp_path / "a")
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        plan, remote = run(spec, tmp_path / "b", engine="ray")
    finally:
        ray.shutdown()
    assert plan.computed == plan.units and not plan.errors
    pd.testing.assert_frame_equal(stable(local), stable(remote))


# ---- results ------------------------------------------------------------------------------------
def test_summary_hand_computed() -> None:
    def row(planner: str, i: int, step: float, base: float, error: str = "") -> dict[str, Any]:
        return {
            "point": 0,
            "point_key": "k",
            **dict.fromkeys(("trace", "model", "cluster", "backend", "profile"), "x"),
            **dict.fromkeys(("gpus", "tokens_per_batch", "max_context", "seed", "token_budget", "spmax"), 1),
            **dict.fromkeys(("training", "checkpointing", "attention_kernel", "fused_elementwise"), None),
            **dict.fromkeys(("expert_parallel", "optimizer_offload", "fsdp_prefetch_layers"), None),
            "planner": planner,
            "baseline": "static-best",
            "iteration": i,
            "step_time_s": step,
            "normalized": step / base if math.isfinite(step) else math.nan,
            "oom": not math.isfinite(step) and not error,
            "error": error,
        }

    rows = [row("static-best", 0, 2.0, 2.0), row("static-best", 1, 4.0, 4.0), row("static-best", 2, 5.0, 5.0)]
    rows += [row("nsp", 0, 1.0, 2.0), row("nsp", 1, 3.0, 4.0), row("nsp", 2, math.nan, 5.0)]
    rows += [row("flexsp", i, math.nan, 1.0, error="boom") for i in range(3)]
    best, nsp, flexsp = summarise(rows)
    assert (best["normalized"], best["normalized_min"], best["speedup"], best["ok_batches"]) == (1.0, 1.0, 1.0, 3)
    assert nsp["normalized"] == 4.0 / 6.0 and nsp["speedup"] == 1.5
    assert (nsp["normalized_min"], nsp["normalized_median"], nsp["normalized_max"]) == (0.5, 0.625, 0.75)
    assert (nsp["batches"], nsp["ok_batches"], nsp["oom_count"], nsp["failed"]) == (3, 2, 1, 0)
    assert nsp["mean_step_time_s"] == 2.0
    assert flexsp["failed"] == 3 and math.isnan(flexsp["normalized"]) and math.isnan(flexsp["speedup"])


# ---- static-paper (the paper's token-packed Static SP) and [run] baseline -----------------------------
def test_static_paper_units_and_baseline_equal_compare(tmp_path: Path) -> None:
    spec = spec_of(
        workload={"token_budget": 12000},
        run={"planners": ["static-best", "static-paper", "nsp"], "baseline": "static-paper"},
    )
    assert spec.run.baseline == "static-paper" and spec.to_dict()["run"]["baseline"] == "static-paper"
    plan, df = run(spec, tmp_path / "c")
    assert not df["error"].any() and set(df["baseline"]) == {"static-paper"}
    points = resolved_config(plan)["points"]
    for point, config in enumerate(spec.points()):
        result = run_compare(spec.compare_config(config))
        assert points[point]["static_paper_degree"] == result.config["static_paper_degree"]
        assert points[point]["static_best_degree"] == result.config["static_best_degree"]
        ours = df[df["point"] == point]
        for record in result.records:
            row = ours[(ours["planner"] == record.planner) & (ours["iteration"] == record.iteration)].iloc[0]
            assert row["step_time_s"] == record.step_time_s and row["plan_hash"] == record.plan_hash
        assert (ours[ours["planner"] == "static-paper"]["normalized"] == 1.0).all()
    with pytest.raises(ValueError, match=r"\[run\]: baseline 'static' is not one of the compared planners"):
        spec_of(run={"baseline": "static", "planners": ["static-best", "nsp"]})
    with pytest.raises(ValueError, match=r"\[run\] baseline: a compared planner label"):
        spec_of(run={"baseline": 3})
