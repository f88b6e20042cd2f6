"""``compare`` with out-of-memory iterations and bad configurations (synthetic records, no simulation):
static-best never picks a degree that ran out of memory, normalisation uses only batches both runs
completed, the text table and the HTML report render an out-of-memory baseline, and every spec and
option is validated before anything runs."""

from __future__ import annotations

from typing import Any

import pytest

from nspsim.compare import (
    CompareConfig,
    CompareResult,
    IterationRecord,
    PlannerSpec,
    parse_planner_spec,
    summarise,
)
from nspsim.compare.runner import _Runner
from nspsim.records import BREAKDOWN_CATEGORIES
from nspsim.simulator import SimOptions
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
    config = {"workload": SMALL.to_dict(), "iters": 3, "planners": list(runs)}
    return CompareResult(config=config, baseline=baseline, summaries=summaries, records=tuple(records), timelines={})


def test_normalisation_uses_only_batches_both_runs_completed() -> None:
    res = result({"static": [1.0, 3.0, None], "nsp": [0.8, None, 2.0]}, "static")
    nsp = res.summaries[1]
    assert nsp.mean_step_time_s == pytest.approx(1.4) and nsp.oom_count == 1
    assert nsp.normalized_to_static == pytest.approx(0.8) and nsp.normalized_iterations == 1  # batch 0 only
    assert nsp.speedup_vs_static == pytest.approx(1.25)
    never = result({"static": [None, None, None], "nsp": [0.8, 0.9, 1.0]}, "static").summaries
    assert never[0].mean_step_time_s is None and never[1].normalized_to_static is None
    assert never[1].normalized_iterations == 0 and never[1].speedup_vs_static is None


def test_table_and_report_render_an_out_of_memory_baseline() -> None:
    from nspsim.cli.commands.compare import format_table
    from studies.compare_report import render

    res = result({"static": [None, None, None], "nsp": [0.8, 0.9, 1.0], "flexsp": [1.0, None, 1.1]}, "static")
    text = format_table(res)
    assert "static" in text and "OOM" in text and " 3/3" in text
    page = render(res)
    assert page.startswith("<!DOCTYPE html>") and "the baseline never fits in memory" in page
    partial = format_table(result({"static": [1.0, 2.0, None], "nsp": [0.8, 0.9, 1.0]}, "static"))  # 1.7 / 3
    assert "0.567*" in partial and "* normalised over the batches" in partial
    assert ">2/3<" in render(result({"static": [1.0, 2.0, None], "nsp": [0.8, 0.9, 1.0]}, "static"))


class _FakeRunner(_Runner):
    """A runner whose fixed-degree runs are canned: {degree: step times}, ``None`` = out of memory."""

    canned: dict[int, list[float | None]]

    def _run_fixed(self, spec: PlannerSpec) -> tuple[list[IterationRecord], Any]:
        steps = self.canned[spec.options["degree"]]
        return [record(spec.label, i, step) for i, step in enumerate(steps)], None


def _static_best(canned: dict[int, list[float | None]]) -> tuple[list[IterationRecord], str, int | None]:
    workload = build_workload(SMALL)
    runner = _FakeRunner(workload, [], CompareConfig(workload=SMALL, planners=("static-best",), iters=3), None)
    runner.canned = {d: canned.get(d, [9.0, 9.0, 9.0]) for d in workload.tree.degrees}
    records, note = runner.run(parse_planner_spec("static-best"))
    return records, note, runner.best_degree


def test_static_best_never_picks_a_degree_that_ran_out_of_memory() -> None:
    # SP2 is fastest on the batches it fits but runs out of memory on one: it cannot be the fixed degree.
    records, note, best = _static_best({2: [1.0, None, 1.0], 4: [2.0, 2.0, 2.0]})
    assert best == 4 and [r.step_time_s for r in records] == [2.0, 2.0, 2.0]
    assert "SP2 out of memory" in note
    with pytest.raises(ValueError, match="no fixed SP degree runs every batch.*SP2: 1 of 3 batches out of memory"):
        _static_best({d: [1.0, None, 1.0] for d in (1, 2, 4, 8, 16)})


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"mode": "bogus"}, "unknown simulation mode 'bogus'"),
        ({"timeline_iteration": -5}, "timeline_iteration must be None or an iteration in 0..2"),
        ({"timeline_iteration": 3}, "timeline_iteration must be None or an iteration in 0..2"),
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
        CompareConfig(workload=SMALL, **{"iters": 3, **kwargs})


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
