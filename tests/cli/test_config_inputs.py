"""A re-run from a side file is the run it records, or it says why not (break-it findings of issue 24):
one ``X.config.json`` per output name, the input files a config recorded, the plan a simulate config
simulated, every setting present; a plan finds its cluster file from any folder; static-best that
fits no batch leaves the other planners' results standing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nspsim.cli.main import main

T = ["--model", "tiny", "--tokens-per-batch", "16k", "--max-context", "8k"]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_two_commands_cannot_share_one_config_file(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["plan", *T, "--cluster", "cpu", "--gpus", "4", "-o", "o/run.json"], capsys)[0] == 0
    before = Path("o/run.config.json").read_text()
    code, _, err = run(
        ["compare", *T, "--cluster", "cpu", "--gpus", "2", "--iters", "1", "--planners", "nsp", "-o", "o/run.html"],
        capsys,
    )
    assert code == 2 and "o/run.config.json is the config nspsim plan wrote for another output" in err
    assert Path("o/run.config.json").read_text() == before and not Path("o/run.html").exists()


def test_a_config_refuses_input_files_that_are_not_the_recorded_ones(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    Path("rt").mkdir()
    Path("rt/c.toml").write_text('extends = "cpu"\nname = "rt"\ngpus_per_node = 2\n')
    Path("lens.txt").write_text("1000\n2000\n3000\n4000\n500\n8000\n")
    argv = ["compare", *T, "--cluster", "rt/c.toml", "--trace", "lens.txt", "--gpus", "4", "--iters", "1"]
    assert run([*argv, "--planners", "nsp", "-o", "r.html", "--quiet"], capsys)[0] == 0
    recorded = json.loads(Path("r.config.json").read_text())["inputs"]
    assert set(recorded) == {"cluster", "trace"} and recorded["trace"][0] == "lens.txt"
    assert run(["compare", "--config", "r.config.json", "--quiet"], capsys)[0] == 0  # the same files: reruns
    Path("rt/c.toml").write_text('extends = "cpu"\nname = "rt"\ngpus_per_node = 2\nnic_bw = "0.01 GB/s"\n')
    code, _, err = run(["compare", "--config", "r.config.json", "--quiet"], capsys)
    assert code == 2 and "the cluster file rt/c.toml is not the one the recorded run read" in err
    code, _, err = run(["compare", "--config", "r.config.json", "--cluster", "cpu", "--quiet"], capsys)
    assert code == 0  # a flag that replaces the file is the user's choice
    Path("lens.txt").unlink()
    code, _, err = run(["compare", "--config", "r.config.json", "--cluster", "cpu", "--quiet"], capsys)
    assert code == 2 and "the trace file lens.txt of the recorded run is not there" in err


def test_simulate_config_refuses_a_plan_file_that_now_holds_another_plan(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for planner in ("nsp", "static"):
        assert (
            run(["plan", *T, "--cluster", "cpu", "--gpus", "6", "--planner", planner, "-o", f"{planner}.json"], capsys)[
                0
            ]
            == 0
        )
    assert run(["simulate", "nsp.json", "--timeline", "tl/t.json"], capsys)[0] == 0
    Path("nsp.json").write_text(Path("static.json").read_text())
    code, _, err = run(["simulate", "--config", "tl/t.config.json"], capsys)
    assert code == 2 and "nsp.json now holds plan" in err and "that the config simulated" in err


@pytest.mark.parametrize("drop", ["workload", "run", "workload.model", "run.iters"])
def test_an_edited_config_missing_a_setting_is_refused(
    drop: str, here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        run(
            [
                "compare",
                *T,
                "--cluster",
                "cpu",
                "--gpus",
                "2",
                "--iters",
                "1",
                "--planners",
                "nsp",
                "-o",
                "r.html",
                "--quiet",
            ],
            capsys,
        )[0]
        == 0
    )
    data = json.loads(Path("r.config.json").read_text())
    *parents, last = drop.split(".")
    target = data
    for key in parents:
        target = target[key]
    del target[last]
    Path("e.json").write_text(json.dumps(data))
    code, _, err = run(["compare", "--config", "e.json"], capsys)
    assert code == 2 and f"{drop}: missing" in err and err.count("\n") == 1


def test_a_plan_finds_its_cluster_file_from_another_folder(
    here: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    Path("rt").mkdir()
    Path("rt/c.toml").write_text('extends = "cpu"\nname = "rt"\ngpus_per_node = 2\n')
    assert run(["plan", *T, "--cluster", "rt/c.toml", "--gpus", "4", "-o", "rt/plan.json"], capsys)[0] == 0
    assert json.loads(Path("rt/plan.json").read_text())["cluster"]["file"] == str((here / "rt" / "c.toml").resolve())
    (here / "elsewhere").mkdir()
    monkeypatch.chdir(here / "elsewhere")
    code, out, _ = run(["simulate", str(here / "rt" / "plan.json"), "--json"], capsys)
    assert code == 0 and json.loads(out)["step_time_s"] > 0


def test_static_best_that_fits_no_batch_keeps_the_other_results(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Path("s.toml").write_text('extends = "cpu"\nname = "small"\n[gpu]\nhbm_bytes = "4470 MiB"\n')
    argv = ["compare", *T, "--cluster", "s.toml", "--gpus", "2", "--iters", "2", "--planners", "nsp,static-best"]
    code, out, _ = run([*argv, "--token-budget", "6k", "--json", "--quiet"], capsys)
    data = json.loads(out)
    steps = {r["planner"]: r["mean_step_time_s"] for r in data["results"]}
    assert code == 0 and steps["nsp"] is not None and steps["static-best"] is None
    assert data["config"]["static_best_degree"] == 2
