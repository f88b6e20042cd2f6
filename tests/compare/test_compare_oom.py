"""``compare`` with out-of-memory iterations and bad configurations (synthetic records, no simulation):
static-best never picks a degree that ran out of memory, normalisation uses only batches both runs
completed, the text table and the HTML report render an out-of-memory baseline, and every spec and
option is validated before anything runs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from helpers import make_batch
from nspsim.cli.commands.compare import EXIT_ALL_OUT_OF_MEMORY, format_table
from nspsim.cli.main import main
from nspsim.compare import (
    CompareConfig,
    CompareResult,
    IterationRecord,
    PlannerSpec,
    RunSpec,
    parse_planner_spec,
    summarise,
)
from nspsim.compare.runner import _Runner
from nspsim.records import BREAKDOWN_CATEGORIES
from nspsim.simulator import SimOptions
from nspsim.trace.batching import Batch
from nspsim.workload import WorkloadConfig, build_workload

SMALL = WorkloadConfig(gpus=16, tokens_per_batch=512 * 1024, max_context=96 * 1024, seed=3)


def record(planner: str, i: int, step: float | None) -> IterationRecord:
    """One iteration; ``step=None`` is an out-of-memory iteration. The breakdown is all attention."""
    breakdown = {k: (step if k == "attn_fwd" and step is not None else 0.0) for k in BREAKDOWN_CATEGORIES}
    return IterationRecord(
        planner=planner,
        iteration=i,
        batch_index=i,
        plan_hash=f"{planner}{i}",
        step_time_s=step,
        breakdown_s=breakdown if step is not None else {},
        oom=step is None,
        oom_detail="out of memory: GPU 0" if step is None else None,
        planning_time_s=0.01,
        sim_wall_time_s=0.1,
        events=1,
        num_micro_batches=1,
        recompute_policy="keep-all",
        routing={"0-8K": {1: 4}},
    )


def result(runs: dict[str, list[float | None]], baseline: str) -> CompareResult:
    records = [record(p, i, step) for p, steps in runs.items() for i, step in enumerate(steps)]
    summaries = summarise(tuple(runs), records, {}, baseline)
    config = {"workload": SMALL.to_dict(), "run": {"iters": 3, "planners": list(runs)}}
    return CompareResult(config=config, baseline=baseline, summaries=summaries, records=tuple(records), timelines={})


def test_normalisation_uses_only_batches_both_runs_completed() -> None:
    res = result({"static": [1.0, 3.0, None], "nsp": [0.8, None, 2.0]}, "static")
    nsp = res.summaries[1]
    assert nsp.mean_step_time_s == pytest.approx(1.4) and nsp.oom_count == 1
    assert nsp.normalized_to_baseline == pytest.approx(0.8) and nsp.normalized_iterations == 1  # batch 0 only
    assert nsp.speedup_vs_baseline == pytest.approx(1.25)
    never = result({"static": [None, None, None], "nsp": [0.8, 0.9, 1.0]}, "static").summaries
    assert never[0].mean_step_time_s is None and never[1].normalized_to_baseline is None
    assert never[1].normalized_iterations == 0 and never[1].speedup_vs_baseline is None


def test_table_and_report_render_an_out_of_memory_baseline() -> None:
    from nspsim_studies.renderers.compare_report import render

    res = result({"static": [None, None, None], "nsp": [0.8, 0.9, 1.0], "flexsp": [1.0, None, 1.1]}, "static")
    text = format_table(res)
    assert "static" in text and "OOM" in text and " 3/3" in text
    page = render(res)
    assert page.startswith("<!DOCTYPE html>") and "the baseline never fits in memory" in page
    partial = format_table(result({"static": [1.0, 2.0, None], "nsp": [0.8, 0.9, 1.0]}, "static"))  # 1.7 / 3
    assert "0.567*" in partial and "* normalised over the batches" in partial
    assert ">2/3<" in render(result({"static": [1.0, 2.0, None], "nsp": [0.8, 0.9, 1.0]}, "static"))


def test_spread_is_min_median_max_of_the_per_batch_ratios_on_common_batches() -> None:
    """nsp / static per batch: 0.8, 0.5, 0.9, 0.7 (batch 4: the baseline ran out of memory, not counted);
    the summed ratio 6.8 / 9 lies inside the spread; a planner with no common batch has none."""
    runs = {"static": [1.0, 2.0, 4.0, 2.0, None], "nsp": [0.8, 1.0, 3.6, 1.4, 1.0], "never": [None] * 5}
    records = [record(p, i, step) for p, steps in runs.items() for i, step in enumerate(steps)]
    static, nsp, never = summarise(tuple(runs), records, {"static": "a long note " * 30}, "static")
    assert (nsp.normalized_min, nsp.normalized_median, nsp.normalized_max) == pytest.approx((0.5, 0.75, 0.9))
    assert nsp.normalized_to_baseline == pytest.approx(6.8 / 9) and nsp.normalized_iterations == 4
    assert (static.normalized_min, static.normalized_median, static.normalized_max) == (1.0, 1.0, 1.0)
    assert (never.normalized_min, never.normalized_median, never.normalized_max) == (None, None, None)
    config = {"workload": SMALL.to_dict(), "run": {"iters": 5, "planners": list(runs)}}
    res = CompareResult(
        config=config, baseline="static", summaries=(static, nsp, never), records=tuple(records), timelines={}
    )
    table = format_table(res).splitlines()
    # per-batch speedups 1.25, 2, 1.11, 1.43: median (1.25 + 1.43) / 2, min-max 1.11-2.00
    assert "med" in table[0] and "min-max" in table[0] and "1.34x  1.11-2.00x" in table[2]
    assert table[3].split()[3:5] == ["-", "-"]  # speedup and spread of a planner with no common batch


def test_report_table_keeps_notes_out_of_the_rows_and_shows_the_spread() -> None:
    """The static-best note made its row several times taller and the table wider than 1400 px: notes
    are a list below the table, breakdown columns go by their short names."""
    from nspsim_studies.renderers.compare_report import results_table

    runs = {"static": [1.0, 2.0], "nsp": [0.8, 1.0]}
    records = [record(p, i, step) for p, steps in runs.items() for i, step in enumerate(steps)]
    note = "fastest fixed degree SP8 (SP2 13.5 s, SP4 6.27 s); not eligible: SP1 cannot hold a sample"
    summaries = summarise(tuple(runs), records, {"static": note}, "static")
    config = {"workload": SMALL.to_dict(), "run": {"iters": 2, "planners": list(runs)}}
    page = results_table(
        CompareResult(config=config, baseline="static", summaries=summaries, records=tuple(records), timelines={})
    )
    table, after = page.split("</table>", 1)
    assert note not in table and f"<li><b>static</b>: {note}</li>" in after
    assert "[1.25-2.00x]</td>" in table and "<th title=" in table and ">nonat</th>" in table  # speedups 1.25, 2
    cells = 11 + len(BREAKDOWN_CATEGORIES)
    assert table.count("<tr>") == 3 and all(row.count("<td>") == cells for row in table.split("<tr>")[2:])


def test_report_figures_show_the_spread_and_their_batch_count() -> None:
    from nspsim_studies.renderers.compare_report import breakdown_figure, normalized_figure

    res = result({"static": [1.0, 2.0, 4.0], "nsp": [0.8, 1.0, 3.6]}, "static")  # ratios 0.8, 0.5, 0.9
    bar, median = normalized_figure(res).data
    assert list(bar.y) == pytest.approx([1.0, 5.4 / 7])
    assert list(bar.error_y.array) == pytest.approx([0.0, 0.9 - 5.4 / 7])  # up to the per-batch max
    assert list(bar.error_y.arrayminus) == pytest.approx([0.0, 5.4 / 7 - 0.5])  # down to the min
    assert list(median.y) == pytest.approx([1.0, 0.8])
    assert normalized_figure(res).layout.title.text.startswith("Normalised step time over 3 batch(es)")
    assert "mean of up to 3 batches" in breakdown_figure(res).layout.title.text


class _FakeRunner(_Runner):
    """A runner whose fixed-degree runs are canned: {degree: step times}, ``None`` = out of memory."""

    canned: dict[int, list[float | None]]

    def _run_fixed(self, spec: PlannerSpec) -> tuple[list[IterationRecord], Any, Any]:
        steps = self.canned[spec.options["degree"]]
        return [record(spec.label, i, step) for i, step in enumerate(steps)], None, []


def _static_best(
    canned: dict[int, list[float | None]], batches: list[Batch] | None = None
) -> tuple[list[IterationRecord], str, int | None, dict[int, str]]:
    workload = build_workload(SMALL)
    config = CompareConfig(workload=SMALL, run=RunSpec(planners=("static-best",), iters=3))
    runner = _FakeRunner(workload, batches or [], config, None)
    runner.canned = {d: canned.get(d, [9.0, 9.0, 9.0]) for d in workload.tree.degrees}
    records, note = runner.run(parse_planner_spec("static-best"))
    return records, note, runner.best_degree, runner.ineligible


def test_static_best_never_picks_a_degree_that_ran_out_of_memory() -> None:
    # SP2 is fastest on the batches it fits but runs out of memory on one: it cannot be the fixed degree.
    records, note, best, ineligible = _static_best({2: [1.0, None, 1.0], 4: [2.0, 2.0, 2.0]})
    assert best == 4 and [r.step_time_s for r in records] == [2.0, 2.0, 2.0]
    assert ineligible == {2: "out of memory on 1 of 3 batches (batch 1)"}
    assert "not eligible: SP2 out of memory on 1 of 3 batches (batch 1)" in note
    # no degree runs every batch: the one out of memory least is shown, its out-of-memory rows kept, so the
    # other planners' results stand (it used to end the whole comparison)
    every = {d: [5.0, None, 5.0] for d in build_workload(SMALL).tree.degrees}
    records, note, best, _ = _static_best(every | {1: [1.0, None, None], 2: [3.0, None, 3.0], 4: [1.0, None, 1.0]})
    assert best == 4 and [r.step_time_s for r in records] == [1.0, None, 1.0]
    assert note.startswith("no fixed SP degree runs every batch; shown: SP4, the one out of memory least")


def test_static_best_says_which_degrees_cannot_hold_a_sample() -> None:
    """A degree that cannot hold the longest sample of some batch is not planned, and the note (and
    the result's ``static_best_ineligible``, which --json prints) says so, naming the batch and length:
    it used to vanish from the note."""
    budget = build_workload(SMALL).token_budget
    long = make_batch([budget + 1, 100])  # SP1 cannot hold it; SP2 and up can
    batches = [make_batch([100, 100]), replace(long, index=1), make_batch([100])]
    _, note, best, ineligible = _static_best({2: [2.0, 2.0, 2.0], 4: [1.0, 1.0, 1.0]}, batches)
    assert best == 4 and set(ineligible) == {1}
    assert ineligible[1].startswith(f"cannot hold a sample of length {budget + 1:,}") and "in batch 1" in ineligible[1]
    assert f"not eligible: SP1 cannot hold a sample of length {budget + 1:,}" in note
    res = replace(result({"static-best": [1.0, 1.0, 1.0]}, "static-best"), static_best_ineligible=ineligible)
    assert res.to_dict()["static_best_ineligible"] == {"1": ineligible[1]}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"mode": "bogus"}, "unknown simulation mode 'bogus'"),
        ({"timeline_iteration": -5}, "timeline_iteration must be None, .widest. or an iteration in 0..2"),
        ({"timeline_iteration": 3}, "timeline_iteration must be None, .widest. or an iteration in 0..2"),
        ({"iters": 2.5}, "iters must be a positive integer"),
        ({"iters": True}, "iters must be a positive integer"),
        ({"iters": 10**9}, "iters must be at most 100,000 batches per comparison, got 1,000,000,000"),
        ({"first_batch": -1}, "first_batch an integer >= 0"),
        ({"planners": ("static-best", "nsp:beam_width=-3")}, "beam_width must be a positive integer"),
        ({"planners": ("static", "flexsp:time_limit=0")}, "time_limit must be a positive number"),
        ({"planners": ("static", "nsp:wizardry=1")}, "has no option 'wizardry'"),
        ({"planners": ("static",), "planner_options": {"wizard": {}}}, "planner_options names 'wizard'"),
        ({"planners": ("static",), "planner_options": {"flexsp": {"time_limit": -1}}}, "time_limit must be a positive"),
    ],
)
def test_compare_config_is_validated_when_built(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        settings = {"iters": 3, **kwargs}
        timeline = {k: settings.pop(k) for k in ("timeline_iteration",) if k in settings}
        CompareConfig(workload=SMALL, run=RunSpec(**settings), **timeline)


def test_planner_spec_and_sim_options_are_validated_when_built() -> None:
    with pytest.raises(ValueError, match="planner spec 'x': planner 'magic' is not registered"):
        PlannerSpec(label="x", planner="magic")
    with pytest.raises(ValueError, match="unknown mode 'fast'"):
        PlannerSpec(label="x", planner="static", mode="fast")
    with pytest.raises(ValueError, match="has no option 'beam'"):
        PlannerSpec(label="x", planner="nsp", options={"beam": 2})
    for bad in (
        {"sim_layers": 12.5},
        {"sim_layers": True},
        {"jitter": float("nan")},
        {"jitter": "0.1"},
        {"timeline": 1},
    ):
        with pytest.raises(ValueError):
            SimOptions(**bad)  # type: ignore[arg-type]


def test_a_token_budget_above_memory_warns_and_a_run_with_no_result_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's case: --token-budget 2G on Qwen3-235B/H200 exited 0 with "OOM 1/1" and 0.0% shares
    everywhere and a report that did not say so. Now: a warning, "-" shares, a NO RESULT line, a
    banner in the report, and exit status 1. (NSP is not among the planners: on a memory-bound batch
    its token-balance ratio caps the tokens per GPU whatever the budget, so it finds a plan that fits.)"""
    report = tmp_path / "r.html"
    argv = [
        *("--model", "qwen3-235b-a22b", "--cluster", "h200", "--training", "paper-235b"),
        *("--tokens-per-batch", "4M", "--token-budget", "2G"),
    ]
    planners = "static,static:degree=32"
    code = main(["compare", *argv, "--iters", "1", "--planners", planners, "--quiet", "-o", str(report)])
    out, err = capsys.readouterr()
    assert code == EXIT_ALL_OUT_OF_MEMORY == 1
    lines = err.splitlines()
    assert len(lines) == 2 and lines[0].startswith(
        "nspsim: warning: --token-budget 2,147,483,648 is above the memory model's B_tok=53,870 tokens per GPU"
    )
    assert lines[1].startswith("nspsim: every planner ran out of memory on every batch")
    assert "lower --token-budget 2,147,483,648 to at most the memory model's B_tok=53,870" in lines[1]
    assert "NO RESULT: every planner ran out of memory" in out and "0.0%" not in out
    assert "No result: every planner ran out of memory on every batch" in report.read_text()


def test_a_result_says_when_no_planner_ran() -> None:
    from nspsim_studies.renderers.compare_report import render

    none_ran = result({"static": [None, None, None], "nsp": [None, None, None]}, "static")
    assert none_ran.all_out_of_memory and none_ran.no_result is not None
    data = none_ran.to_dict()
    assert data["all_out_of_memory"] is True and data["no_result"] == none_ran.no_result
    table = format_table(none_ran)
    assert "NO RESULT" in table and "%" not in table.splitlines()[1]  # no breakdown share of a step that never ran
    some_ran = result({"static": [None, None, None], "nsp": [None, 1.0, None]}, "static")
    assert not some_ran.all_out_of_memory and some_ran.no_result is None and "NO RESULT" not in format_table(some_ran)
    assert "No result" not in render(some_ran) and "No result" in render(none_ran)


def test_plan_warns_when_the_token_budget_is_above_memory(capsys: pytest.CaptureFixture[str]) -> None:
    tiny = ["plan", "--planner", "static", "--model", "tiny", "--cluster", "cpu", "--gpus", "2"]
    fits = build_workload(WorkloadConfig(model="tiny", cluster="cpu", gpus=2)).memory.derived_token_budget
    assert main([*tiny, "--token-budget", str(fits)]) == 0
    assert capsys.readouterr().err == ""
    assert main([*tiny, "--token-budget", str(fits + 1)]) == 0
    err = capsys.readouterr().err
    assert err.startswith(f"nspsim: warning: --token-budget {fits + 1:,} is above the memory model's B_tok={fits:,}")
    assert err.count("\n") == 1
