"""Planner options are bounded and never clamped silently (issue 15, item 17): a value that would only
cost time has a documented maximum, checked when the planner is built; a value that cannot apply to
the workload (a degree or group above spmax) is refused by ``Planner.check``, which ``plan`` and
``compare`` (before anything runs) call."""

from __future__ import annotations

from typing import Any

import pytest

from nspsim.cli.main import main
from nspsim.compare import CompareConfig, RunSpec, run_compare
from nspsim.planners import PLANNER_NAMES, get_planner
from nspsim.planners.flexsp.bucketing import MAX_BUCKETS
from nspsim.planners.flexsp.planner import MAX_TIME_LIMIT_S, MAX_WORK_LIMIT
from nspsim.planners.microbatch import MAX_MICRO_BATCHES
from nspsim.planners.nsp.planner import MAX_BEAM_WIDTH
from nspsim.workload import WorkloadConfig, build_workload

SMALL = WorkloadConfig(gpus=16, tokens_per_batch=512 * 1024, max_context=96 * 1024, seed=3)  # spmax 16


@pytest.mark.parametrize(
    "name, options, message",
    [
        ("nsp", {"beam_width": MAX_BEAM_WIDTH + 1}, f"option beam_width must be at most {MAX_BEAM_WIDTH}"),
        ("nsp", {"beam_width": 100_000}, "routing time grows with the width"),
        ("nsp2l", {"beam_width": 100_000}, f"at most {MAX_BEAM_WIDTH}"),
        (
            "basp",
            {"max_micro_batches": MAX_MICRO_BATCHES + 1},
            f"max_micro_batches must be at most {MAX_MICRO_BATCHES}",
        ),
        ("flexsp", {"max_micro_batches": 10**6}, f"max_micro_batches must be at most {MAX_MICRO_BATCHES}"),
        ("flexsp", {"buckets": MAX_BUCKETS + 1}, f"option buckets must be at most {MAX_BUCKETS}"),
        ("flexsp", {"work_limit": MAX_WORK_LIMIT + 1}, "option work_limit must be at most 1,000,000"),
        ("flexsp", {"time_limit": MAX_TIME_LIMIT_S + 1}, "option time_limit must be at most 3600 seconds"),
        ("flexsp", {"min_group": 3}, "option min_group must be 'auto' or a power of two"),
        ("flexsp", {"min_group": "big"}, "option min_group must be 'auto' or a power of two"),
    ],
)
def test_options_above_their_maximum_are_refused(name: str, options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        get_planner(name, **options)


@pytest.mark.parametrize(
    "name, options",
    [
        ("nsp", {"beam_width": MAX_BEAM_WIDTH}),
        ("basp", {"max_micro_batches": MAX_MICRO_BATCHES}),
        ("flexsp", {"buckets": MAX_BUCKETS, "work_limit": MAX_WORK_LIMIT, "time_limit": MAX_TIME_LIMIT_S}),
        ("flexsp", {"min_group": 16}),
    ],
)
def test_options_at_their_maximum_are_accepted(name: str, options: dict[str, Any]) -> None:
    get_planner(name, **options).check(build_workload(SMALL))


def test_every_planner_checks_its_options_against_the_workload() -> None:
    workload = build_workload(SMALL)
    for name in PLANNER_NAMES:
        get_planner(name).check(workload)  # the defaults apply everywhere
    with pytest.raises(ValueError, match="flexsp option min_group=64 is above spmax=16.*use min_group <= 16"):
        get_planner("flexsp", min_group=64).check(workload)
    with pytest.raises(ValueError, match="static SP degree 32 is not admissible: use a power of two <= spmax=16"):
        get_planner("static", degree=32).check(workload)


def test_flexsp_min_group_above_spmax_is_refused_not_clamped(capsys: pytest.CaptureFixture[str]) -> None:
    """It used to run with groups of spmax without a word."""
    argv = ["plan", "--planner", "flexsp", "--gpus", "16", "--tokens-per-batch", "512k", "--max-context", "96k"]
    assert main([*argv, "-O", "min_group=64"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nspsim: error: flexsp option min_group=64 is above spmax=16") and err.count("\n") == 1


def test_flexsp_auto_min_group_is_2_or_1_on_a_one_gpu_tree() -> None:
    one = build_workload(WorkloadConfig(model="tiny", cluster="cpu", gpus=1, tokens_per_batch=8192, max_context=2048))
    planner = get_planner("flexsp")
    planner.check(one)
    plan = planner.plan(one.sampler.batch(0), one)
    assert {n.degree for n in plan.nodes} == {1}


def test_compare_checks_options_against_the_workload_before_running() -> None:
    ticks: list[str] = []
    config = CompareConfig(workload=SMALL, run=RunSpec(planners=("static-best", "flexsp:min_group=64"), iters=1))
    with pytest.raises(ValueError, match="min_group=64 is above spmax=16"):
        run_compare(config, progress=lambda done, total, label: ticks.append(label))
    assert ticks == []  # the static-best sweep did not run first
