"""``nspsim simulate``: text and JSON results, the timeline file, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nspsim.cli.main import main
from nspsim.plan import make_plan
from nspsim.records import BREAKDOWN_CATEGORIES
from nspsim.sp_tree import Node
from nspsim.workload import WorkloadConfig, build_workload


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A nested plan for Qwen3-30B on 16 H100s: long samples on the two SP8 roots, the rest on leaves."""
    wl = build_workload(WorkloadConfig(gpus=16, tokens_per_batch=256 * 1024, max_context=64 * 1024))
    batch = wl.sampler.batch(0)
    order = sorted(range(batch.num_samples), key=lambda j: -batch.lengths[j])
    nodes = [Node(1, 0)] * batch.num_samples
    tokens = [0.0] * 16
    for rank, j in enumerate(order):
        if rank < 4:
            nodes[j] = Node(8, rank % 2)
            continue
        g = min(range(16), key=lambda i: tokens[i])
        nodes[j], tokens[g] = Node(1, g), tokens[g] + batch.lengths[j]
    plan = make_plan(
        planner="manual",
        cluster=wl.cluster,
        model=wl.model,
        batch=batch,
        spmax=wl.tree.spmax,
        token_budget=wl.token_budget,
        nodes=nodes,
    )
    path = tmp_path_factory.mktemp("plans") / "plan.json"
    plan.save(path)
    return path


def test_simulate_json_has_the_contract_keys(plan_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(plan_file), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data["breakdown_s"]) == list(BREAKDOWN_CATEGORIES)
    assert sum(data["breakdown_s"].values()) == pytest.approx(data["step_time_s"], rel=1e-9)
    assert len(data["peak_memory_bytes"]) == 16 and data["oom"] is False and data["sim_wall_time_s"] > 0
    assert data["config"]["model"] == "qwen3-30b-a3b" and data["config"]["gpus"] == 16
    assert data["extrapolated"] is True and data["layers_simulated"] == 12


def test_simulate_text_and_timeline(plan_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "trace.json"
    assert main(["simulate", str(plan_file), "--timeline", str(out), "--tree-recompute", "--optimize-order"]) == 0
    text = capsys.readouterr().out
    assert "step time" in text and "breakdown" in text and "48 layers" in text
    trace = json.loads(out.read_text())
    assert trace["otherData"]["config"]["tree_recompute"] is True
    assert {e["pid"] for e in trace["traceEvents"]} == set(range(16))
    assert json.loads((tmp_path / "trace.config.json").read_text())["plan_hash"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["simulate", "missing.json"], "cannot read plan missing.json"),
        (["simulate", "PLAN", "--mode", "fast"], "invalid choice: 'fast'"),
        (["simulate", "PLAN", "--jitter", "2"], "jitter must be in [0, 1)"),
        (["simulate", "PLAN", "--sim-layers", "3"], "sim_layers must be an integer >= 6"),
        (["simulate", "PLAN", "--jitter", "nan"], "argument --jitter: must be a finite number"),
        (["simulate", "PLAN", "--jitter", "inf"], "argument --jitter: must be a finite number"),
        (["simulate", "PLAN", "--seed", "-1"], "argument --seed: must be >= 0"),
        (["simulate", "PLAN", "--timeline", "PLAN"], "would overwrite the input file"),
        (["simulate", "PLAN", "--timeline", ""], "--timeline: the output path is empty"),
        (["simulate", "PLAN", "--timeline", "."], "is a directory; give a file name"),
        (["simulate", "PLAN", "--timeline", "no/such/dir/t.json"], "the directory no/such/dir does not exist"),
    ],
)
def test_simulate_bad_input_is_one_line(
    argv: list[str], message: str, plan_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = plan_file.read_bytes()
    assert main([str(plan_file) if a == "PLAN" else a for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nspsim: error: ") and message in err and err.count("\n") == 1
    assert plan_file.read_bytes() == before


def test_simulate_refuses_a_plan_for_an_unknown_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from helpers import make_batch, toy_cluster, toy_model

    plan = make_plan(
        planner="manual",
        cluster=toy_cluster(),
        model=toy_model(),
        batch=make_batch([100]),
        spmax=4,
        token_budget=1000,
        nodes=[Node(1, 0)],
    )
    plan.save(tmp_path / "toy.json")
    assert main(["simulate", str(tmp_path / "toy.json")]) == 2
    assert "unknown model preset 'toy'" in capsys.readouterr().err


def test_simulate_timeline_never_overwrites_the_plans_sidecar(
    plan_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sidecar = plan_file.with_suffix(".config.json")
    sidecar.write_text('{"planner_options": {}}')
    timeline = plan_file.with_suffix(".html")  # its own sidecar would be the plan's
    assert main(["simulate", str(plan_file), "--timeline", str(timeline)]) == 2
    assert "would overwrite the input file" in capsys.readouterr().err
    assert sidecar.read_text() == '{"planner_options": {}}' and not timeline.exists()
