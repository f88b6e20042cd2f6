"""``--cluster FILE`` in the commands: a user's 96-GPU cluster file plans, simulates and compares with
every planner; ``info --json`` prints the resolved description; a plan remembers its file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nspsim.cli.main import main
from nspsim.planners import PLANNER_NAMES

LAB = 'extends = "h100"\nname = "lab"\nnic_bw = "200 Gb/s"\n'
SMALL = ["--model", "tiny", "--tokens-per-batch", "384k", "--max-context", "64k"]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "lab.toml"
    path.write_text(LAB)
    return path


def test_a_users_96_gpu_cluster_compares_every_planner(lab: Path, capsys: pytest.CaptureFixture[str]) -> None:
    planners = ",".join([*PLANNER_NAMES, "static-best", "static-paper"])
    code, out, _ = run(
        ["compare", "--cluster", "lab.toml", "--gpus", "96", *SMALL, "--iters", "1", "--planners", planners, "--json"],
        capsys,
    )
    assert code == 0
    data = json.loads(out)
    assert data["config"]["workload"]["cluster"] == "lab.toml" and data["config"]["workload"]["gpus"] == 96
    steps = {s["planner"]: s["mean_step_time_s"] for s in data["results"]}
    assert set(steps) == {*PLANNER_NAMES, "static-best", "static-paper"}
    assert all(t is not None and t > 0 for t in steps.values()), steps


def test_info_prints_the_resolved_cluster(lab: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["info", "--cluster", "lab.toml", "--gpus", "96", *SMALL, "--json"], capsys)
    cluster = json.loads(out)["cluster"]
    assert code == 0
    assert (cluster["name"], cluster["num_gpus"], cluster["num_nodes"], cluster["nic_bw"]) == ("lab", 96, 12, 25e9)
    assert cluster["gpu"]["peak_flops"] == 989e12 and cluster["units"]["gpu.peak_flops"] == "FLOP/s"
    code, out, _ = run(["info", "--cluster", "lab.toml", "--gpus", "96", "--json"], capsys)
    assert json.loads(out)["spmax"] == 32  # Qwen3-30B's 32 heads would allow 32: three trees of 32


def test_a_plan_remembers_its_cluster_file_and_refuses_an_edited_one(
    lab: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, _ = run(
        ["plan", "--cluster", "lab.toml", "--gpus", "96", *SMALL, "--planner", "nsp", "-o", "p.json"], capsys
    )
    assert code == 0 and json.loads(Path("p.json").read_text())["cluster"]["file"] == str(lab.resolve())
    code, out, _ = run(["simulate", "p.json", "--json"], capsys)
    assert code == 0 and json.loads(out)["step_time_s"] > 0
    lab.write_text(LAB.replace("200 Gb/s", "100 Gb/s"))
    code, _, err = run(["simulate", "p.json"], capsys)
    assert code == 2 and "another spec of cluster labx96" in err and "nic_bw" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--cluster", "lab.toml", "--gpus", "100"], "100 GPUs are not a whole number of 8-GPU hosts"),
        (["--cluster", "nope.toml"], "cluster file nope.toml does not exist"),
        (
            ["--cluster", "lab.toml", "--gpus", "96", "--backend", "ring", "--spmax", "64"],
            "96 GPUs form trees of at most 32",
        ),
    ],
)
def test_bad_cluster_input_is_one_line(
    lab: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(["info", *argv, *SMALL], capsys)
    assert code == 2 and message in err and err.count("\n") == 1
