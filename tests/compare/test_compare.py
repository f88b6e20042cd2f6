"""``compare``: planner specs, the static-best sweep, normalisation, routing records, the CLI and the
HTML report (on a small workload: Qwen3-30B on 16 H100s, 512K-token batches)."""

from __future__ import annotations

import importlib
import io
import json
from pathlib import Path

import pytest

import nspsim.cli.commands.compare as command
from nspsim.cli.commands.compare import format_table
from nspsim.cli.main import main
from nspsim.compare import (
    ABLATIONS,
    CompareConfig,
    CompareResult,
    RunSpec,
    default_planners,
    parse_planner_spec,
    routing_counts,
    run_compare,
)
from nspsim.execution.prepare import AS_PLANNED, NESTED_PREPARATION, Preparation
from nspsim.plan import Plan
from nspsim.planners import PLANNER_NAMES, get_planner
from nspsim.simulator import Simulator, StepResult
from nspsim.units import format_seconds
from nspsim.workload import WorkloadConfig

SMALL = WorkloadConfig(gpus=16, tokens_per_batch=512 * 1024, max_context=96 * 1024, seed=3)
SMALL_ARGS = ["--gpus", "16", "--tokens-per-batch", "512k", "--max-context", "96k", "--seed", "3"]


PROGRESS: list[str] = []


@pytest.fixture(scope="module")
def static_run() -> CompareResult:
    PROGRESS.clear()
    return run_compare(
        CompareConfig(workload=SMALL, run=RunSpec(planners=("static", "static-best", "static-2", "static-8"), iters=2)),
        progress=lambda done, total, label: PROGRESS.append(label),
    )


def test_planner_specs() -> None:
    assert parse_planner_spec("static-8").options == {"degree": 8}
    best = parse_planner_spec("static-best")
    assert best.planner == "static" and best.preparation == AS_PLANNED
    if "nsp" in PLANNER_NAMES:
        assert parse_planner_spec("nsp").preparation == NESTED_PREPARATION
        assert parse_planner_spec("nsp-no-overlap").mode == "no-stream"
        assert not parse_planner_spec("nsp-no-recompute").preparation.tree_recompute
        assert parse_planner_spec("nsp-attn-fwd").options == {"proxy": "attn-fwd"}
    assert default_planners()[0] == "static-best"
    flex = parse_planner_spec("flexsp:time_limit=2.5+max_micro_batches=3", defaults={"flexsp": {"time_limit": 0.5}})
    assert flex.label == "flexsp:time_limit=2.5+max_micro_batches=3"
    assert flex.options == {"time_limit": 2.5, "max_micro_batches": 3}
    assert parse_planner_spec("flexsp", defaults={"flexsp": {"time_limit": 0.5}}).options == {"time_limit": 0.5}
    with pytest.raises(ValueError, match="must look like KEY=VALUE"):
        parse_planner_spec("nsp:beam_width")
    with pytest.raises(ValueError, match="not a finite number"):
        parse_planner_spec("flexsp:time_limit=nan")
    with pytest.raises(ValueError, match="takes no options"):
        parse_planner_spec("static-best:degree=4")
    with pytest.raises(ValueError, match="planner 'magic' is not available"):
        parse_planner_spec("magic")
    with pytest.raises(ValueError, match="expected static-<degree>"):
        parse_planner_spec("static-x")
    with pytest.raises(ValueError, match="without repeats"):
        CompareConfig(workload=SMALL, run=RunSpec(planners=("static", "static")))


def test_swept_static_labels_keep_their_packing_whatever_the_static_defaults() -> None:
    """planner_options for ``static`` (packing, degree) must not turn static-best into static-paper."""
    defaults = {"static": {"packing": "tokens", "degree": 4}}
    assert parse_planner_spec("static-best", defaults=defaults).options == {}
    assert parse_planner_spec("static-paper", defaults={"static": {"packing": "load"}}).options == {"packing": "tokens"}
    assert parse_planner_spec("static", defaults=defaults).options == {"packing": "tokens", "degree": 4}


def test_specs_are_prepared_as_their_planner_declares() -> None:
    """Marks and issue order follow the planner's ``preparation``; the nesting planners (what compare
    once listed by name) declare both, the baselines neither, and only ablations override it."""
    expected = {
        "nsp": True,
        "nsp2l": True,
        "greedy": True,
        "static": False,
        "flexsp": False,
        "basp": False,
        "megatron-cp": False,
    }
    for name in PLANNER_NAMES:
        declared = get_planner(name).preparation
        spec = parse_planner_spec(name)
        assert spec.preparation == declared
        if name in expected:
            assert declared == Preparation(tree_recompute=expected[name], optimize_order=expected[name]), name
    resolved = {
        label: (s.preparation.tree_recompute, s.preparation.optimize_order, s.mode)
        for label in ABLATIONS
        if (s := parse_planner_spec(label)).planner in PLANNER_NAMES
    }
    assert resolved == {
        "nsp-no-recompute": (False, True, "stream"),
        "nsp-no-overlap": (True, True, "no-stream"),
        "nsp-greedy": (True, True, "stream"),
        "nsp-attn-fwd": (True, True, "stream"),
    }
    with pytest.raises(ValueError, match="tree_recompute must be True or False"):
        Preparation(tree_recompute=1)  # type: ignore[arg-type]


def test_a_prepare_choice_overrides_every_declaration_and_ablations_still_apply() -> None:
    """``prepare`` names one preparation for every spec; ``planner`` (the default) is each planner's
    declaration; an ablation's override applies on top; an unknown choice is one line."""
    for choice, want in (("none", AS_PLANNED), ("all", NESTED_PREPARATION)):
        for label in ("static-best", "nsp", "flexsp"):
            assert parse_planner_spec(label, prepare=choice).preparation == want
    order_only = Preparation(optimize_order=True)
    assert parse_planner_spec("static", prepare="order").preparation == order_only
    assert parse_planner_spec("nsp-no-recompute", prepare="all").preparation == order_only
    assert RunSpec(planners=("nsp",), prepare="none").specs()["nsp"].preparation == AS_PLANNED
    with pytest.raises(
        ValueError, match="unknown preparation 'some' \\(known: planner, none, recompute, order, all\\)"
    ):
        RunSpec(planners=("nsp",), prepare="some")


def test_the_report_renderer_is_the_named_module(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``nspsim compare -o`` loads the studies layer only through ``REPORT_RENDERER``, before running."""
    assert callable(importlib.import_module(command.REPORT_RENDERER).render)
    monkeypatch.setattr(command, "REPORT_RENDERER", "nspsim_studies.no_such_renderer")
    monkeypatch.setattr(command, "run_compare", lambda *a, **k: pytest.fail("the comparison ran"))
    assert main(["compare", "--quiet", "--planners", "static", "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert "cannot build the HTML report (-o): nspsim_studies.no_such_renderer is not installed" in err
    assert "plotly" not in err and err.count("\n") == 1  # the real cause, not "install plotly"


def test_every_planner_sees_the_same_batches(static_run: CompareResult) -> None:
    by_planner = {
        p: [r.batch_index for r in static_run.records if r.planner == p] for p in static_run.config["run"]["planners"]
    }
    assert all(v == [0, 1] for v in by_planner.values())
    assert [s.planner for s in static_run.summaries] == ["static", "static-best", "static-2", "static-8"]
    assert PROGRESS[0] == "static-best" and PROGRESS[-1] == "static-8"  # the sweep runs first (it may fail)


def test_static_best_is_the_fastest_fixed_degree(static_run: CompareResult) -> None:
    means = {s.planner: s.mean_step_time_s for s in static_run.summaries}
    best = static_run.config["static_best_degree"]
    assert means["static-best"] == pytest.approx(min(v for v in means.values() if v is not None))
    assert means["static-best"] <= means["static-2"] and means["static-best"] <= means["static-8"]  # type: ignore[operator]
    assert f"SP{best}" in next(s.note for s in static_run.summaries if s.planner == "static-best")


def test_normalisation_and_shares(static_run: CompareResult) -> None:
    assert static_run.baseline == "static-best"
    base = next(s for s in static_run.summaries if s.planner == "static-best")
    for s in static_run.summaries:
        assert s.normalized_iterations == s.iterations == 2 and s.oom_count == 0
        assert s.normalized_to_baseline == pytest.approx(s.mean_step_time_s / base.mean_step_time_s)  # type: ignore[operator]
        assert s.speedup_vs_baseline == pytest.approx(1 / s.normalized_to_baseline)  # type: ignore[operator]
        assert sum(s.breakdown_share.values()) == pytest.approx(1.0, rel=1e-9)
        for shares in s.routing_share.values():
            assert not shares or sum(shares.values()) == pytest.approx(1.0)
    fixed8 = next(s for s in static_run.summaries if s.planner == "static-8")
    assert set().union(*(set(v) for v in fixed8.routing_share.values())) == {8}


def test_routing_counts_cover_every_sample() -> None:
    from nspsim.workload import build_workload

    wl = build_workload(SMALL)
    plan = get_planner("static", degree=4).plan(wl.sampler.batch(0), wl)
    counts = routing_counts(plan)
    assert list(counts) == ["0-8K", "8-32K", "32-128K", "128K+"]
    assert sum(sum(c.values()) for c in counts.values()) == plan.num_samples


def test_compare_cli_json_and_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r" / "report.html"
    argv = ["compare", *SMALL_ARGS, "--iters", "1", "--json", "-o", str(out), "--quiet", "--flexsp-time-limit", "0.05"]
    assert main(argv) == 0
    printed, err = capsys.readouterr()
    data = json.loads(printed)
    assert "wrote" not in err  # --quiet: no progress, no line naming the files
    assert data["config"]["workload"]["gpus"] == 16 and data["config"]["run"]["iters"] == 1
    assert [r["planner"] for r in data["results"]] == list(default_planners())
    for r in data["results"]:
        for key in (
            "planner",
            "mean_step_time_s",
            "normalized_to_baseline",
            "speedup_vs_baseline",
            "breakdown_share",
            "mean_planning_time_s",
            "oom_count",
            "sim_wall_time_s",
        ):
            assert key in r
        assert r["mean_load_over_lower_bound"] >= 1 - 1e-12
    assert all(it["load_over_lower_bound"] >= 1 - 1e-12 for it in data["iterations"])
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "plotly" in page and "Routing" in page and "Timeline" in page
    assert "Load / lower bound" in page and "Normalised step time" in page and "Step-time breakdown" in page
    assert json.loads(out.with_suffix(".config.json").read_text())["workload"]["gpus"] == 16


def test_compare_cli_table_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", *SMALL_ARGS, "--iters", "1", "--planners", "static-4,static", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "normalised to static" in text and "static-4" in text
    assert main(["compare", "--planners", "static,wizard", "--quiet"]) == 2
    assert "planner 'wizard' is not available" in capsys.readouterr().err
    assert main(["compare", "--iters", "0"]) == 2
    assert main(["compare", "--planners", "static", "-o", "report.txt", "--quiet"]) == 2
    assert "must end with .html" in capsys.readouterr().err
    for bad in ("nan", "inf", "0", "-1"):
        assert main(["compare", "--flexsp-time-limit", bad, "--quiet"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("nspsim: error: argument --flexsp-time-limit") and err.count("\n") == 1


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--planners", ""], "no planners given"),
        (["-o", ""], "report path '' must end with .html"),
        (["-o", "{file}/report.html"], "file is a file, not a directory"),
        (["-o", "{file}/sub/report.html"], "cannot create the directory"),
        (["-o", "{dir}.html"], "is a directory; give a file name"),
        (["--trace", "{dir}/t.config.json", "-o", "{dir}/t.html"], "would overwrite the input file"),
        (["--seed", "-1"], "argument --seed: must be >= 0"),
    ],
)
def test_compare_refuses_bad_input_before_running(
    argv: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty planner list or an unusable report path fails at once, not after the whole comparison."""
    import nspsim.cli.commands.compare as command

    monkeypatch.setattr(command, "run_compare", lambda *a, **k: pytest.fail("the comparison ran"))
    (tmp_path / "file").write_text("x")
    (tmp_path / "dir.html").mkdir()
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "t.config.json").write_text("100\n")
    argv = [a.format(file=tmp_path / "file", dir=tmp_path / "dir") for a in argv]
    assert main(["compare", "--quiet", "--planners", "static", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nspsim: error: ") and message in err and err.count("\n") == 1


def test_nsp_executor_and_ablations_run_on_the_same_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    simulated: list[tuple[str, str]] = []
    original = Simulator.simulate

    def counting(self: Simulator, plan: Plan, *, optimizer_step: bool = True) -> StepResult:
        simulated.append((plan.content_hash, self.options.mode))
        return original(self, plan, optimizer_step=optimizer_step)

    monkeypatch.setattr(Simulator, "simulate", counting)
    result = run_compare(
        CompareConfig(
            workload=SMALL,
            timeline_iteration=None,
            run=RunSpec(
                iters=1,
                planners=("static-best", "nsp", "nsp-no-recompute", "nsp-no-overlap", "nsp-greedy", "nsp-attn-fwd"),
            ),
        )
    )
    assert len(simulated) == len(set(simulated))  # every distinct (plan, mode) simulated once
    assert {r.plan_hash for r in result.records} <= {h for h, _ in simulated}
    steps = {s.planner: s.mean_step_time_s for s in result.summaries}
    assert all(v is not None and v > 0 for v in steps.values())
    nsp = next(r for r in result.records if r.planner == "nsp")
    assert nsp.recompute_policy == "tree-marks"
    assert next(r for r in result.records if r.planner == "nsp-no-recompute").recompute_policy != "tree-marks"
    # Streaming can move SP transfers under FSDP ones (link sharing), so "off" may tie or win by a hair.
    assert steps["nsp-no-overlap"] >= 0.99 * steps["nsp"]  # type: ignore[operator]
    assert result.timelines == {}


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_prints_every_tenth_off_a_terminal_and_one_tqdm_bar_on_one() -> None:
    """tqdm draws it: off a terminal a plain line (tqdm's format_meter: counts, elapsed, ETA) at every
    tenth; on one a single bar updated in place that ends with the last step's counts and a newline."""
    from nspsim.cli.commands.compare import ProgressBar

    plain, tty = io.StringIO(), _Tty()
    for stream in (plain, tty):
        bar = ProgressBar(stream)
        for done in range(1, 21):
            bar(done, 20, "nsp")
        bar.close()  # idempotent: the bar closed itself at 20/20
    lines = plain.getvalue().splitlines()
    assert len(lines) == 10 and "\r" not in plain.getvalue()
    assert lines[0].startswith("nsp:  10%|#") and "| 2/20 [" in lines[0] and "<" in lines[0]  # elapsed<ETA
    assert lines[-1].startswith("nsp: 100%|##########| 20/20 [")
    out = tty.getvalue()
    assert out.count("\n") == 1 and out.endswith("\n") and "20/20" in out.rsplit("\r", 1)[-1]


@pytest.mark.parametrize(
    "seconds, text",
    [
        (0.0003, "300 us"),
        (0.00031234, "312 us"),
        (0.0452, "45.2 ms"),
        (0.99996, "1.00 s"),
        (12.345, "12.3 s"),
        (1234.5, "1230 s"),
        (2.5e-7, "250 ns"),
        (0.0, "0 s"),
    ],
)
def test_format_seconds_keeps_three_significant_digits(seconds: float, text: str) -> None:
    assert format_seconds(seconds) == text


def test_step_times_are_formatted_by_magnitude_in_the_table_and_report() -> None:
    """A tiny model's 0.3 ms step printed as 0.0003 in the step(s) column (issue 15, item 25)."""
    from test_compare_oom import result

    from nspsim_studies.renderers.compare_report import results_table

    res = result({"static": [0.0003, 0.0003, 0.0003], "nsp": [0.00025, 0.00025, 0.00025]}, "static")
    rows = format_table(res).splitlines()
    assert rows[0].split()[1] == "step" and "300 us" in rows[1] and "250 us" in rows[2]
    assert "0.0003" not in format_table(res)
    assert "<td>300 us</td>" in results_table(res) and "<td>250 us</td>" in results_table(res)


# ---- static-paper: the paper's Static SP (token packing), and the --baseline choice -----------------
TINY = WorkloadConfig(
    model="tiny",
    cluster="cpu",
    trace="code",
    tokens_per_batch=64 * 1024,
    max_context=32 * 1024,
    gpus=4,
    token_budget=12000,
)  # SP1 cannot hold a 14.5K sample of batch 0 or 1


def test_static_paper_is_the_fastest_token_packed_fixed_degree_and_can_be_the_baseline() -> None:
    assert parse_planner_spec("static-paper").options == {"packing": "tokens"}
    with pytest.raises(ValueError, match="static-paper sweeps the degree and takes no options"):
        parse_planner_spec("static-paper:degree=4")
    fixed = ("static-2:packing=tokens", "static-4:packing=tokens")
    config = CompareConfig(
        workload=TINY,
        timeline_iteration=None,
        run=RunSpec(planners=("static-best", "static-paper", *fixed), iters=2, baseline="static-paper"),
    )
    result = run_compare(config)
    means = {s.planner: s.mean_step_time_s for s in result.summaries}
    assert means["static-paper"] == min(means[f] for f in fixed)  # type: ignore[type-var]
    degree = result.config["static_paper_degree"]
    assert means["static-paper"] == means[f"static-{degree}:packing=tokens"]
    assert result.static_paper_ineligible.keys() == {1} and result.static_best_ineligible.keys() == {1}
    assert result.baseline == result.config["baseline"] == "static-paper"
    norm = {s.planner: s.normalized_to_baseline for s in result.summaries}
    assert norm["static-paper"] == 1.0
    assert norm["static-best"] == pytest.approx(means["static-best"] / means["static-paper"])  # type: ignore[operator]
    data = result.to_dict()
    assert [r["planner"] for r in data["results"]][:2] == ["static-best", "static-paper"]
    assert set(data["static_paper_ineligible"]) == {"1"}
    assert CompareConfig(workload=TINY, run=RunSpec(planners=("nsp", "static-paper"))).run.baseline is None
    with pytest.raises(ValueError, match="baseline 'static-best' is not one of the compared planners"):
        CompareConfig(workload=TINY, run=RunSpec(planners=("static-paper", "nsp"), baseline="static-best"))


def test_cli_baseline_flag(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["compare", "--quiet", "--model", "tiny", "--cluster", "cpu", "--trace", "code", "--gpus", "4"]
    args += ["--tokens-per-batch", "64k", "--max-context", "32k", "--iters", "1"]
    assert main([*args, "--planners", "static-2,static-4", "--baseline", "static-8"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("nspsim: error: baseline 'static-8' is not one of the compared planners")
    assert "\n" not in err
    assert main([*args, "--planners", "static-2,static-4", "--baseline", "static-4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["baseline"] == "static-4" and data["results"][1]["normalized_to_baseline"] == 1.0


def test_flexsp_artifact_label_is_flexsp_with_the_artifact_variant() -> None:
    spec = parse_planner_spec("flexsp-artifact:count_window=4")
    assert spec.planner == "flexsp" and spec.options == {"variant": "artifact", "count_window": 4}
    assert (
        parse_planner_spec("flexsp-artifact", defaults={"flexsp": {"variant": "nspsim"}}).options["variant"]
        == "artifact"
    )
    with pytest.raises(ValueError, match="flexsp-artifact defines variant itself; use flexsp"):
        parse_planner_spec("flexsp-artifact:variant=nspsim")
