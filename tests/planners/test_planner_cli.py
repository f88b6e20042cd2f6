"""``nspsim plan``: text and JSON output, plan files with their config, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nspsim.cli.main import main
from nspsim.plan import Plan

TINY = ["--model", "tiny", "--gpus", "8", "--tokens-per-batch", "64k", "--max-context", "16k", "--token-budget", "32k"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_plan_json_has_the_contract_fields(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", "--planner", "nsp", *TINY, "--batch-index", "3", "--json")
    assert code == 0
    data = json.loads(out)
    for key in (
        "planner",
        "num_samples",
        "load_s",
        "lower_bound_s",
        "planning_time_s",
        "max_tokens_per_gpu",
        "token_budget",
        "samples_per_degree",
        "plan_hash",
    ):
        assert key in data
    assert data["planner"] == "nsp" and data["config"]["batch_index"] == 3
    assert sum(data["samples_per_degree"].values()) == data["num_samples"]
    assert data["max_tokens_per_gpu"] <= data["token_budget"] == 32 * 1024
    assert data["lower_bound_s"] <= data["load_s"]


def test_plan_text_summary_and_output_files(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out_file = tmp_path / "p.json"
    code, out, _ = run(capsys, "plan", "--planner", "static", *TINY, "-O", "degree=2", "-o", str(out_file))
    assert code == 0
    for word in ("levels", "SP2:", "tokens", "lower bound", "planning"):
        assert word in out
    plan = Plan.load(out_file)
    assert plan.planner == "static" and {n.degree for n in plan.nodes} == {2}
    config = json.loads((tmp_path / "p.config.json").read_text())
    assert config["planner_options"] == {"degree": 2} and config["model"] == "tiny"


@pytest.mark.parametrize(
    "argv,message",
    [
        (["-O", "beam_width=0"], "option beam_width must be a positive integer"),
        (["-O", "beam=3"], "has no option 'beam'"),
        (["-O", "nonsense"], "must look like KEY=VALUE"),
        (["--token-budget", "10"], "fits no admissible SP group"),
        (["-o", ""], "-o: the output path is empty"),
        (["-o", "."], "is a directory; give a file name"),
        (["-o", "pyproject.toml/p.json"], "pyproject.toml is a file, not a directory"),  # a missing folder is made
        (["--seed", "-1"], "argument --seed: must be >= 0"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    base = [a for a in TINY if a not in ("--token-budget", "32k")] if "--token-budget" in argv else TINY
    code, _, err = run(capsys, "plan", "--planner", "nsp", *base, *argv)
    assert code == 2
    assert err.startswith("nspsim: error:") and message in err and err.count("\n") == 1


def test_unknown_planner_is_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "plan", "--planner", "magic", *TINY)
    assert code == 2 and "invalid choice" in err


@pytest.mark.parametrize(
    "trace_name, output_name", [("lengths.txt", "lengths.txt"), ("lengths.config.json", "lengths.json")]
)
def test_plan_output_never_overwrites_its_trace_file(
    trace_name: str, output_name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Neither the plan nor the .config.json written beside it may replace the trace it was made from."""
    trace = tmp_path / trace_name
    trace.write_text("1000\n2000\n")
    code, out, err = run(
        capsys, "plan", "--planner", "static", *TINY, "--trace", str(trace), "-o", str(tmp_path / output_name)
    )
    assert code == 2 and out == "" and "would overwrite the input file" in err and err.count("\n") == 1
    assert trace.read_text() == "1000\n2000\n"
