"""The paper-figure studies (``nspsim_studies/paper_figures``): the decoded paper values and their confidence
marks, each study's config builder, the helpers that turn rows into a figure's numbers (hand-computed
on constructed rows) and two studies end to end at a tiny size (the ``tiny`` models on ``cpu`` GPUs,
64K-token batches of ``code``, one batch) writing their HTML, JSON and resolved config."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from nspsim.compare.summary import baseline_of
from nspsim.sweep import SweepSpec, load_spec

pytest.importorskip("plotly")
from nspsim_studies.paper_figures import fig7, fig8, fig9, fig10  # noqa: E402
from nspsim_studies.paper_figures import paper_values as pv  # noqa: E402

TINY = {"trace": "code", "tokens_per_batch": 65536, "max_context": 32768, "gpus": 4}
TINY_ZIP = {"model": ("tiny", "tiny-moe"), "cluster": ("cpu", "cpu")}


# ---- paper values ------------------------------------------------------------------------------------
def test_paper_values_load_with_their_confidence_marks() -> None:
    values = pv.all_values()
    assert {v.figure for v in values} == {7, 8, 9, 10}
    assert all(v.confidence in ("high", "med", "low") for v in values)
    assert len(pv.FIG7) == 12 * 4 and pv.fig7_value(1, "nsp").value == 1.41 and pv.fig7_value(5, "nsp").value == 1.48
    # the decoding's cross-check: NSP / FlexSP = the printed NSP-vs-FlexSP label, to the labels' rounding
    for g in range(1, 13):
        ratio = pv.fig7_value(g, "nsp").value / pv.fig7_value(g, "flexsp").value
        assert abs(ratio - pv.fig7_value(g, "nsp-vs-flexsp").value) < 0.015, g
    assert sorted(
        g for m in ("qwen3-30b-a3b", "qwen3-235b-a22b") for c in (196608, 393216) for g in pv.fig7_groups(m, c)
    ) == list(range(1, 13))
    assert [v.value for v in pv.FIG8] == [1.00, 0.89, 0.83, 0.69] and {v.confidence for v in pv.FIG8} == {"high"}
    assert sum(v.value for v in pv.FIG9 if v.key.startswith("0-8K/")) == 100  # the decoded 0-8K column sums to 100%
    norm, mark = pv.fig10_normalised("qwen3-235b-a22b", "nsp-no-recompute")
    assert norm == pytest.approx(1.41 / 1.29) and mark == "high"  # the paper's +9.6% time
    assert pv.fig10_normalised("qwen3-30b-a3b", "nsp-attn-fwd")[0] == pytest.approx(1.25 / 0.94)  # +33%
    assert pv.fig10_normalised("qwen3-30b-a3b", "nsp-greedy")[1] == "low"  # weaker of high and low
    assert pv.as_normalised(1.25) == 0.8


def test_paper_value_checks() -> None:
    with pytest.raises(ValueError, match="confidence 'sure' is not one of high, med, low"):
        pv.PaperValue(figure=7, key="x", value=1.0, confidence="sure")
    with pytest.raises(ValueError, match="must be positive"):
        pv.PaperValue(figure=7, key="x", value=0.0, confidence="low")
    with pytest.raises(ValueError, match="no decoded value 'group13/nsp'"):
        pv.fig7_value(13, "nsp")


# ---- config builders ---------------------------------------------------------------------------------
def test_fig7_spec_is_the_merged_toml() -> None:
    full = fig7.build_spec(quick=False)
    points = full.points()
    assert len(points) == 12 and full.run.iters == 20 and full.run.planners == load_spec(fig7.SPEC_PATH).run.planners
    assert {(c.model, c.cluster) for c in points} == {("qwen3-30b-a3b", "h100"), ("qwen3-235b-a22b", "h200")}
    assert {(c.gpus, c.tokens_per_batch) for c in points} == {(64, 2 * 1024**2)}
    assert [(c.model, c.max_context // 1024, c.trace) for c in points[:4]] == [
        ("qwen3-30b-a3b", 192, "wikipedia"),
        ("qwen3-30b-a3b", 192, "code"),
        ("qwen3-30b-a3b", 192, "commoncrawl"),
        ("qwen3-30b-a3b", 384, "wikipedia"),
    ]
    quick = fig7.build_spec(quick=True)
    assert quick.run.iters == 1 and len(quick.points()) == 6 and {c.max_context for c in quick.points()} == {393216}


def test_fig8_fig9_fig10_specs() -> None:
    s8 = fig8.build_spec(quick=False)
    paper_sp32 = "static:degree=32+packing=tokens"
    assert s8.run.planners == (
        paper_sp32,
        "static:degree=64+packing=tokens",
        "static-32",
        "flexsp",
        "flexsp-artifact",
        "nsp",
    )
    assert s8.run.baseline == paper_sp32 == baseline_of(s8.run.planners, s8.run.baseline)
    # every strategy but the load-packed variant stands for one of the paper's decoded bars
    keys = [v.key if (v := fig8.paper_value(p)) else None for p in s8.run.planners]
    assert keys == ["static-32", "static-64", None, "flexsp", "flexsp", "nsp"]
    assert fig8.paper_value("static-32") is None
    (c8,) = s8.points()
    assert (c8.model, c8.cluster, c8.gpus, c8.max_context) == ("qwen3-235b-a22b", "h200", 64, 393216)
    assert s8.run.iters == 5 and fig8.build_spec(quick=True).run.iters == 1
    (c9,) = fig9.build_spec(quick=True).points()
    assert (
        c9.trace == "commoncrawl"
        and c9.model == c8.model
        and fig9.build_spec(quick=True).run.planners == ("nsp", "nsp2l", "flexsp")
    )
    s10 = fig10.build_spec(quick=False)
    assert [(c.model, c.cluster) for c in s10.points()] == [("qwen3-30b-a3b", "h100"), ("qwen3-235b-a22b", "h200")]
    assert s10.run.planners == (
        "static-best",
        "nsp",
        "nsp-no-recompute",
        "nsp-attn-fwd",
        "nsp-no-overlap",
        "nsp-greedy",
    )


# ---- helpers on constructed rows --------------------------------------------------------------------
def test_fig9_grid_rows_buckets_and_shares() -> None:
    rows = fig9.grid_rows(64, (64, 32, 16, 8, 4, 2, 1))
    assert len(rows) == pv.FIG9_NODES == 23
    assert rows[:4] == ["sp64#0", "sp32#0", "sp32#1", "sp16#0"] and rows[-1] == "below sp8#7"
    assert (
        fig9.row_of(4, 5, 64) == "below sp8#2"
        and fig9.row_of(1, 63, 64) == "below sp8#7"
        and fig9.row_of(8, 3, 64) == "sp8#3"
    )
    assert fig9.grid_rows(4, (4, 2, 1)) == ["sp4#0", "below sp4#0"]
    assert [fig9.bucket_of(n) for n in (1, 8192, 8193, 32768, 131072, 131073)] == [
        "0-8K",
        "0-8K",
        "8-32K",
        "8-32K",
        "32-128K",
        "128K+",
    ]
    counted = [{"sp64#0": {"128K+": 1}, "sp8#0": {"0-8K": 3}}, {"sp8#0": {"0-8K": 1}, "sp8#1": {"0-8K": 4, "8-32K": 2}}]
    grid = fig9.shares(counted, ["sp64#0", "sp8#0", "sp8#1"])
    assert grid.tolist() == [[0, 0, 0, 100], [50, 0, 0, 0], [50, 100, 0, 0]]  # 0-8K: 4 of 8 on each SP8 node


def test_fig8_representative_and_breakdown() -> None:
    def r(planner: str, it: int, step: float, norm: float, **bd: float) -> dict[str, Any]:
        cats = {f"bd_{c}": bd.get(c, 0.0) for c in fig8.BREAKDOWN_CATEGORIES}
        return {"planner": planner, "iteration": it, "step_time_s": step, "normalized": norm, **cats}

    rows = pd.DataFrame(
        [r(fig8.BASELINE, i, 10.0, 1.0, non_attn=6.0, comm_wait=4.0) for i in range(3)]
        + [r("nsp", 0, 9.0, 0.9), r("nsp", 1, 7.0, 0.7, non_attn=5.0, attn_fwd=2.0), r("nsp", 2, 8.0, 0.8)]
    )
    assert fig8.representative(rows) == 2  # the median of 0.9, 0.7, 0.8
    assert fig8.representative(rows[rows["iteration"] < 2]) == 1  # even count: the lower middle
    parts = fig8.breakdown(rows, 1)
    assert (
        parts[fig8.BASELINE]["non_attn"] == 0.6
        and parts[fig8.BASELINE]["comm_wait"] == 0.4
        and parts[fig8.BASELINE]["total"] == 1.0
    )
    assert parts["nsp"]["non_attn"] == 0.5 and parts["nsp"]["attn_fwd"] == 0.2 and parts["nsp"]["total"] == 0.7


def test_fig10_ratios_to_nsp_hand_computed() -> None:
    steps = {"static-best": (12.0, 10.0), "nsp": (10.0, 8.0), "nsp-greedy": (11.0, 9.0)}
    rows = pd.DataFrame(
        [
            {"model": "m", "planner": p, "iteration": i, "step_time_s": s}
            for p, both in steps.items()
            for i, s in enumerate(both)
        ]
        + [
            {"model": "m", "planner": "nsp-no-overlap", "iteration": 0, "step_time_s": 12.0},
            {"model": "m", "planner": "nsp-no-overlap", "iteration": 1, "step_time_s": math.nan},
        ]  # out of memory
    )
    out = fig10.to_nsp(rows)["m"]
    assert out["nsp"]["normalized_to_nsp"] == 1.0 and out["nsp"]["speedup_vs_static_best"] == pytest.approx(22 / 18)
    g = out["nsp-greedy"]
    assert (
        g["normalized_to_nsp"] == pytest.approx(20 / 18)
        and g["min"] == pytest.approx(1.1)
        and g["max"] == pytest.approx(9 / 8)
    )
    o = out["nsp-no-overlap"]
    assert o["batches"] == 1 and o["normalized_to_nsp"] == pytest.approx(1.2) and o["speedup_vs_static_best"] == 1.0
    assert "nsp-attn-fwd" not in out  # not run: no entry rather than a made-up one


# ---- end to end, tiny ---------------------------------------------------------------------------------
def _tiny_fig7_toml(tmp_path: Path) -> Path:
    path = tmp_path / "tiny7.toml"
    path.write_text(
        '[workload]\ntrace = "code"\ntokens_per_batch = "64k"\ngpus = 4\n'
        '[zip]\nmodel = ["tiny", "tiny-moe"]\ncluster = ["cpu", "cpu"]\n'
        '[axes]\nmax_context = ["16k", "32k"]\n'
        '[run]\nplanners = ["static-best", "static", "basp", "nsp2l", "nsp"]\niters = 3\n'
    )
    return path


def test_fig7_end_to_end_tiny_writes_html_json_config_and_reruns_warm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(fig7, "SPEC_PATH", _tiny_fig7_toml(tmp_path))
    out = tmp_path / "out"
    assert fig7.main(["--quick", "--jobs", "1", "-o", str(out)]) == 0
    first = capsys.readouterr().out
    assert "2 configurations x 1 batch(es)" in first and "0 cached" in first  # quick: the last context only
    html = (out / "fig7.html").read_text()
    assert "plotly" in html and "static-best" in html and "NSP paper, Figure 7, decoded in nsp-figures.md" in html
    data = json.loads((out / "fig7.json").read_text())
    assert data["baseline"] == "static-best" and len(data["configurations"]) == 2
    assert [c["max_context"] for c in data["configurations"]] == [32768, 32768]
    assert {c["model"] for c in data["configurations"]} == {"tiny", "tiny-moe"}
    best = data["configurations"][0]["planners"]["static-best"]
    assert best["normalized"] == 1.0 and best["spread"] == {"min": 1.0, "median": 1.0, "max": 1.0, "batches": 1}
    assert len(data["paper"]["groups"]) == 48 and data["paper"]["panel_of_group"]["1"]["confidence"] == "low"
    config = json.loads((out / "fig7.config.json").read_text())
    assert (
        config["study"] == "fig7"
        and config["quick"] is True
        and config["sweep"]["zip"]
        == {
            "model": ["tiny", "tiny-moe"],
            "cluster": ["cpu", "cpu"],
        }
    )
    assert (out / "fig7" / "results.parquet").is_file() and (out / "cache" / "sims").is_dir()
    assert fig7.main(["--quick", "--jobs", "1", "-o", str(out)]) == 0
    assert " 0 units computed" in capsys.readouterr().out  # the rerun is warm


def test_fig10_end_to_end_tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fig10, "WORKLOAD", TINY)
    monkeypatch.setattr(fig10, "ZIP", TINY_ZIP)
    out = tmp_path / "o"
    assert fig10.main(["--quick", "--jobs", "1", "-o", str(out)]) == 0
    data = json.loads((out / "fig10.json").read_text())
    assert set(data["ours"]) == {"tiny", "tiny-moe"} and data["ours"]["tiny"]["nsp"]["normalized_to_nsp"] == 1.0
    assert set(data["ours"]["tiny"]) == set(fig10.VARIANTS)
    assert data["paper"]["normalised_to_nsp"]["qwen3-235b-a22b"]["nsp-no-recompute"][1] == "high"
    assert (out / "fig10.html").is_file() and json.loads((out / "fig10.config.json").read_text())["study"] == "fig10"


def test_fig9_routing_from_cached_plans_tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fig9, "WORKLOAD", {**TINY, "model": "tiny", "cluster": "cpu"})
    out = tmp_path / "o"
    assert fig9.main(["--quick", "--jobs", "1", "-o", str(out)]) == 0
    data = json.loads((out / "fig9.json").read_text())
    assert data["rows"] == ["sp4#0", "below sp4#0"]
    for planner, grid in data["share_percent"].items():
        columns = np.array(grid).sum(axis=0)
        assert all(c == pytest.approx(100) or c == 0 for c in columns), planner  # each bucket sums to 100%
        counts = data["per_batch_counts"][planner][0]
        assert sum(n for cells in counts.values() for n in cells.values()) == sum(data["samples_per_bucket"][planner])


@pytest.mark.parametrize("module", [fig7, fig8, fig9, fig10], ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_every_figure_module_has_the_shape(module: Any) -> None:
    """One module per figure: a spec builder, a drawing function, tables and ``main``, run as
    ``python -m nspsim_studies.paper_figures.figN``; no figure reaches outside through ``sys.path``."""
    for name in ("build_spec", "figure", "tables", "main"):
        assert callable(getattr(module, name, None)), f"{module.__name__} has no {name}"
    assert isinstance(module.build_spec(quick=True), SweepSpec)
    source = Path(module.__file__).read_text()
    assert 'if __name__ == "__main__":' in source and "sys.path" not in source
    studies = Path(module.__file__).resolve().parents[1]
    assert not [f for f in studies.rglob("*.py") if "sys.path" in f.read_text()]


def test_fig7_draws_exactly_the_planners_of_its_spec(tmp_path: Path) -> None:
    """Edit the TOML's planner list and the bars follow: no second list in the code."""
    spec_path = tmp_path / "fig7.toml"
    toml = fig7.SPEC_PATH.read_text().replace('"static-paper", "static-best"', '"static-best"')
    spec_path.write_text(toml.replace('baseline = "static-paper"', 'baseline = "static-best"'))
    spec = fig7.build_spec(quick=True, path=spec_path)
    planners = spec.run.planners
    assert "static-paper" not in planners and "nsp" in planners
    flat = {"normalized": 1.0, "spread": {"min": 1.0, "median": 1.0, "max": 1.0, "batches": 1}}
    configs = [
        {"model": "qwen3-30b-a3b", "max_context": 393216, "trace": "wikipedia", "planners": {p: flat for p in planners}}
    ]
    fig = fig7.figure(configs, 1, planners, "static-best")
    drawn = [t.name for t in fig.data if t.type == "bar"]
    assert drawn == list(planners)


def test_study_bad_profile_or_output_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An unreadable profile or an output path that is a file fails before any unit runs."""
    afile = tmp_path / "f.json"
    afile.write_text("{}")
    for argv, message in (
        (["--profile", "nosuch"], "cannot read profile nosuch"),
        (["-o", str(afile)], "it is a file, not a folder"),
        (["-o", str(afile / "sub")], "cannot write there"),
    ):
        with pytest.raises(SystemExit) as exc:
            fig10.main(["--quick", *argv])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and err.count("\n") == 1 and message in err, (argv, err)


def test_a_study_with_failed_rows_exits_1_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from types import SimpleNamespace

    from nspsim_studies.paper_figures.common import exit_status

    rows = pd.DataFrame(
        {"point": [0, 0], "planner": ["nsp", "static"], "batch_index": [0, 0], "error": ["", "cannot read profile x"]}
    )
    assert exit_status("fig7", SimpleNamespace(rows=rows[rows["error"] == ""])) == 0  # type: ignore[arg-type]
    assert exit_status("fig7", SimpleNamespace(rows=rows)) == 1  # type: ignore[arg-type]
    err = capsys.readouterr().err
    assert err == "fig7: 1 of 2 rows failed (first: point 0 static batch 0: cannot read profile x); see fig7.json\n"


def test_study_bad_jobs_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        fig8.main(["--jobs", "0"])
    err = capsys.readouterr().err
    assert (
        exc.value.code == 2
        and err == "python -m nspsim_studies.paper_figures.fig8: error: --jobs must be at least 1, got 0\n"
    )
    with pytest.raises(SystemExit):
        fig8.main(["--jobs", "many"])
    assert capsys.readouterr().err.count("\n") == 1


def test_fig7_bars_start_at_zero_and_the_subtitle_ends_above_the_panel_titles() -> None:
    """Bars from 0.5 made a 0.75 bar look half of 1; the four-line subtitle ran into the panel titles;
    the table ran past a 1400-px window (its cells now wrap at spaces, in a box that scrolls if need be)."""
    planners = ("static-paper", "static-best", "nsp")
    flat = {"normalized": 0.8, "spread": {"min": 0.7, "median": 0.8, "max": 0.9, "batches": 2}}
    configs = [
        {"model": m, "max_context": c, "trace": "code", "planners": {p: flat for p in planners}}
        for m in ("qwen3-30b-a3b", "qwen3-235b-a22b")
        for c in (196608, 393216)
    ]
    fig = fig7.figure(configs, 2, planners)
    axes = [fig.layout[k] for k in fig.layout if k.startswith("yaxis")]
    assert len(axes) == 4 and all(a.range[0] == 0.0 if a.matches is None else a.range is None for a in axes)
    assert sum(a.matches is not None for a in axes) == 2  # the right panels share their row's axis
    lines = fig.layout.title.text.count("<br>") + 1
    assert fig.layout.title.yanchor == "top" and fig.layout.margin.t >= fig7.TITLE_LINE_PX * lines + fig7.PANEL_TITLE_PX
    for c in configs:
        c["nsp_vs_flexsp"] = 1.0
    ours = fig7.tables(configs, 2, planners)[0]
    assert "<div class=table><table>" in ours and "[0.70\u20110.90]" in ours
