"""One preparation default, the planner's, in every entry point: ``nspsim plan | nspsim simulate``,
``nspsim compare`` and the runtime's plan-ahead thread prepare a plan the same way (same executable
plan hash, same simulated step) unless ``--prepare`` says otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nspsim.cli.main import main
from nspsim.compare import CompareConfig, RunSpec, run_compare
from nspsim.execution.prepare import NESTED_PREPARATION
from nspsim.plan import Plan
from nspsim.workload import WorkloadConfig, build_workload
from nspsim_runtime.training.args import parse_args
from nspsim_runtime.training.plan_ahead import PlanAhead

FLAGS = ["--model", "tiny", "--cluster", "cpu", "--gpus", "4", "--tokens-per-batch", "16k", "--max-context", "4k"]
FLAGS += ["--token-budget", "5k", "--trace", "code", "--seed", "3"]
CONFIG = WorkloadConfig(
    model="tiny",
    cluster="cpu",
    gpus=4,
    tokens_per_batch=16384,
    max_context=4096,
    token_budget=5120,
    trace="code",
    seed=3,
)


def _cli_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:  # type: ignore[type-arg]
    assert main([*argv, "--json"]) == 0
    data: dict = json.loads(capsys.readouterr().out)  # type: ignore[type-arg]
    return data


@pytest.fixture(scope="module")
def compared() -> dict[str, tuple[str, float]]:
    result = run_compare(CompareConfig(workload=CONFIG, run=RunSpec(planners=("nsp", "static"), iters=1)))
    return {r.planner: (r.plan_hash, r.step_time_s) for r in result.records}  # type: ignore[misc]


@pytest.mark.parametrize("planner", ["nsp", "static"])
def test_plan_then_simulate_equals_compare(
    planner: str, compared: dict[str, tuple[str, float]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prepared, routed, unmarked = tmp_path / "prepared.json", tmp_path / "routed.json", tmp_path / "unmarked.json"
    made = _cli_json(["plan", "--planner", planner, *FLAGS, "-o", str(prepared)], capsys)
    _cli_json(["plan", "--planner", planner, *FLAGS, "--prepare", "none", "-o", str(routed)], capsys)
    assert made["config"]["prepare"] == "planner"
    doc = json.loads(routed.read_text())
    assert doc["metadata"].pop("prepared") == "none"
    unmarked.write_text(json.dumps(doc))  # a plan no preparation has seen (another tool's, an old file)
    after_plan = _cli_json(["simulate", str(prepared)], capsys)  # recorded preparation: run as written
    after_simulate = _cli_json(["simulate", str(unmarked)], capsys)  # prepared here, as the planner declares
    want_hash, want_step = compared[planner]
    for run in (after_plan, after_simulate):
        assert (run["config"]["plan_hash"], run["step_time_s"]) == (want_hash, want_step)
    as_routed = _cli_json(["simulate", str(routed)], capsys)  # --prepare none was recorded: runs as routed
    assert as_routed["config"]["preparation"] == "as written (none)"
    assert as_routed["config"]["plan_hash"] == Plan.load(routed).content_hash
    if planner == "nsp":
        assert after_simulate["config"]["preparation"] == "all"
        assert after_plan["config"]["preparation"] == "as written (all)"
        assert as_routed["config"]["plan_hash"] != want_hash  # the preparation changes what runs here
    else:
        assert after_simulate["config"]["preparation"] == "none"


def test_a_recorded_preparation_that_names_none_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.json"
    _cli_json(["plan", "--planner", "static", *FLAGS, "-o", str(path)], capsys)
    doc = json.loads(path.read_text())
    doc["metadata"]["prepared"] = "banana"
    path.write_text(json.dumps(doc))
    assert main(["simulate", str(path)]) == 2
    assert "prepared='banana' is not a preparation" in capsys.readouterr().err


def test_the_runtime_prepares_as_compare_does(compared: dict[str, tuple[str, float]]) -> None:
    args = parse_args(["--planner", "nsp", *[f for f in FLAGS if f not in ("--cluster", "cpu", "--gpus", "4")]])
    assert args.prepare == "planner" and args.preparation == NESTED_PREPARATION
    ahead = PlanAhead(args, build_workload(CONFIG))
    try:
        plan: Plan = ahead.get(0).plan
    finally:
        ahead.close()
    assert plan.content_hash == compared["nsp"][0] and plan.metadata["prepared"] == "all"
    forced = parse_args(["--planner", "nsp", "--recompute", "all"])
    assert forced.preparation.tree_recompute is False and forced.preparation.optimize_order is True


def test_a_removed_preparation_flag_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "x.json", "--optimize-order"]) == 2
    assert "--optimize-order was replaced by --prepare" in capsys.readouterr().err
