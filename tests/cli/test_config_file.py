"""``--config FILE`` (issue 24, item 3): compare, plan and simulate re-run from the resolved config they
wrote beside their result and reproduce it exactly; flags override the file's values; bad files are
one line and exit status 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nspsim.cli.main import main

WORKLOAD = ["--model", "tiny", "--cluster", "cpu", "--trace", "code", "--gpus", "4", "--tokens-per-batch", "64k"]
WORKLOAD += ["--max-context", "32k", "--seed", "5"]  # none of them the default, so the file must carry them
COMPARE = ["compare", "--quiet", *WORKLOAD, "--iters", "2", "--first-batch", "1", "--planners", "static,static-2,nsp"]
COMPARE += ["--baseline", "static-2", "--mode", "no-stream", "--flexsp-time-limit", "0.5"]


def run_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code = main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


def steps(data: dict[str, Any]) -> list[tuple[str, int, float | None, str, dict[str, float]]]:
    """What a comparison measured, per planner and batch."""
    return [
        (r["planner"], r["batch_index"], r["step_time_s"], r["plan_hash"], r["breakdown_s"]) for r in data["iterations"]
    ]


def test_compare_reruns_from_its_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = run_json([*COMPARE, "-o", str(tmp_path / "x.html")], capsys)
    written = json.loads((tmp_path / "x.config.json").read_text())
    assert written["command"] == "nspsim compare" and first["config"] == written
    again = run_json(
        ["compare", "--quiet", "--config", str(tmp_path / "x.config.json"), "-o", str(tmp_path / "y.html")], capsys
    )
    assert steps(again) == steps(first) and len(steps(first)) == 6
    assert [r["mean_step_time_s"] for r in again["results"]] == [r["mean_step_time_s"] for r in first["results"]]
    assert [r["normalized_to_baseline"] for r in again["results"]] == [
        r["normalized_to_baseline"] for r in first["results"]
    ]
    assert json.loads((tmp_path / "y.config.json").read_text()) == written
    varied = run_json(["compare", "--quiet", "--config", str(tmp_path / "x.config.json"), "--iters", "1"], capsys)
    assert varied["config"]["run"]["iters"] == 1 and varied["config"]["workload"] == written["workload"]
    assert steps(varied) == [s for s in steps(first) if s[1] == 1]  # the flag overrode only the batch count


def test_plan_reruns_from_its_config_and_an_option_overrides_its_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["plan", *WORKLOAD, "--planner", "static", "-O", "degree=2", "-O", "packing=tokens", "--batch-index", "3"]
    first = run_json([*argv, "-o", str(tmp_path / "p.json")], capsys)
    config = str(tmp_path / "p.config.json")
    assert json.loads(Path(config).read_text()) == first["config"] and first["config"]["command"] == "nspsim plan"
    again = run_json(["plan", "--config", config], capsys)
    assert again["plan_hash"] == first["plan_hash"] and again["config"] == first["config"]
    other = run_json(["plan", "--config", config, "-O", "degree=4"], capsys)
    assert other["config"]["planner_options"] == {"degree": 4, "packing": "tokens"}
    assert other["plan_hash"] != first["plan_hash"] and other["samples_per_degree"] == {"4": other["num_samples"]}
    nsp = run_json(["plan", "--config", config, "--planner", "nsp"], capsys)  # without static's options
    assert nsp["planner"] == "nsp" and nsp["config"]["planner_options"] == {} and nsp["config"]["batch_index"] == 3


def test_simulate_reruns_from_its_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = tmp_path / "p.json"
    assert main(["plan", *WORKLOAD, "--planner", "nsp", "-o", str(plan)]) == 0
    capsys.readouterr()
    argv = ["simulate", str(plan), "--mode", "serial", "--jitter", "0.2", "--seed", "9", "--no-extrapolate"]
    first = run_json([*argv, "--checkpointing", "full", "--timeline", str(tmp_path / "t.json")], capsys)
    capsys.readouterr()  # the warning that --checkpointing differs from the plan's
    again = run_json(["simulate", "--config", str(tmp_path / "t.config.json")], capsys)
    assert (again["step_time_s"], again["breakdown_s"]) == (first["step_time_s"], first["breakdown_s"])
    assert first["config"]["simulation"]["jitter"] == 0.2
    assert again["config"] == {**first["config"], "simulation": {**first["config"]["simulation"], "timeline": False}}
    assert again["config"]["checkpointing"] == "full" and again["config"]["simulation"]["extrapolate"] is False
    calm = run_json(["simulate", "--config", str(tmp_path / "t.config.json"), "--jitter", "0"], capsys)
    assert calm["config"]["simulation"]["jitter"] == 0 and calm["step_time_s"] != first["step_time_s"]


def test_a_config_written_before_configs_named_their_command_is_still_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = run_json(["plan", *WORKLOAD, "--planner", "static", "-o", str(tmp_path / "p.json")], capsys)
    old = {k: v for k, v in first["config"].items() if k != "command"}
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert run_json(["plan", "--config", str(tmp_path / "old.json")], capsys)["plan_hash"] == first["plan_hash"]
    assert main(["compare", "--config", str(tmp_path / "old.json")]) == 2
    assert "written by nspsim plan, but nspsim compare reads only" in capsys.readouterr().err


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """A real config of each command (a one-batch static comparison, a static plan, its simulation)."""
    folder = tmp_path_factory.mktemp("configs")
    assert (
        main(["compare", "--quiet", *WORKLOAD, "--iters", "1", "--planners", "static", "-o", f"{folder}/c.html"]) == 0
    )
    assert main(["plan", *WORKLOAD, "--planner", "static", "-o", f"{folder}/p.json"]) == 0
    assert main(["simulate", f"{folder}/p.json", "--timeline", f"{folder}/t.json"]) == 0
    names = {"compare": "c", "plan": "p", "simulate": "t"}
    return {cmd: json.loads((folder / f"{name}.config.json").read_text()) for cmd, name in names.items()}


def _edit(config: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """``config`` with the dotted ``path`` set to ``value``."""
    out = json.loads(json.dumps(config))
    *parents, last = path.split(".")
    node = out
    for key in parents:
        node = node[key]
    node[last] = value
    return out


BAD = [
    ("compare", None, "cannot read config file {file}: No such file or directory"),
    ("compare", "{", "line 1: invalid JSON"),
    ("compare", [1, 2], "a config is a JSON object (what nspsim compare wrote beside its result), got a list"),
    ("compare", {"foo": 1}, "not a resolved config of any command"),
    (
        "compare",
        {"name": "s", "points": []},
        "written by nspsim sweep, but nspsim compare reads only its own configs\n",
    ),
    ("compare", ("plan", "", None), "written by nspsim plan, but nspsim compare reads only its own configs"),
    ("plan", ("compare", "", None), "written by nspsim compare, but nspsim plan reads only its own configs"),
    ("simulate", ("plan", "", None), "give it to nspsim plan --config"),
    ("compare", ("compare", "workload.gpu", 4), "'workload.gpu': unknown key (known: trace, model"),
    ("compare", ("compare", "colour", "red"), "'colour': unknown key"),
    ("plan", ("plan", "options", {}), "'options': unknown key"),
    ("simulate", ("simulate", "simulation.speed", 2), "'simulation.speed': unknown key"),
    ("compare", ("compare", "workload", [1]), "workload: an object, got a list"),
    ("compare", ("compare", "workload.gpus", "many"), "workload.gpus: 'many' is not an integer (--gpus)"),
    ("compare", ("compare", "workload.gpus", True), "workload.gpus: a number (--gpus), got True"),
    ("compare", ("compare", "workload.tokens_per_batch", "64k"), "'64k' is not a value --tokens-per-batch writes"),
    ("compare", ("compare", "workload.trace", None), "workload.trace: null, but --trace takes a value"),
    ("compare", ("compare", "workload.backend", "fast"), "'fast' is not one of ulysses, ring"),
    ("compare", ("compare", "run.iters", 0), "run.iters: must be positive, got '0' (--iters)"),
    ("compare", ("compare", "run.planners", "static"), "run.planners: a list of planner labels"),
    ("compare", ("compare", "run.planner_options", {"nsp": {}}), "compare sets only flexsp's time_limit"),
    ("plan", ("plan", "planner", "wizard"), "planner: 'wizard' is not one of"),
    ("plan", ("plan", "batch_index", -1), "batch_index: must be >= 0"),
    ("plan", ("plan", "planner_options", {"degree": [2]}), "planner_options.degree: [2] is not a planner option"),
    ("simulate", ("simulate", "simulation.extrapolate", "no"), "simulation.extrapolate: true or false"),
    # values that pass their flag's check go on to the dataclasses' own validation
    ("compare", ("compare", "run.baseline", "static-8"), "baseline 'static-8' is not one of the compared planners"),
    ("compare", ("compare", "workload.expert_parallel", 8), "expert_parallel 8 exceeds the 4 GPUs"),
    ("plan", ("plan", "planner_options", {"beam": 2}), "beam"),
]


@pytest.mark.parametrize("command, content, message", BAD, ids=[m[:40] for _, _, m in BAD])
def test_a_bad_config_is_one_line_and_exit_status_2(
    command: str,
    content: Any,
    message: str,
    written: dict[str, dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import nspsim.cli.commands.compare as compare

    monkeypatch.setattr(compare, "run_compare", lambda *a, **k: pytest.fail("the comparison ran"))
    file = tmp_path / "bad.config.json"
    if isinstance(content, tuple):
        source, path, value = content
        file.write_text(json.dumps(written[source] if not path else _edit(written[source], path, value)))
    elif isinstance(content, str):
        file.write_text(content)
    elif content is not None:
        file.write_text(json.dumps(content))
    assert main([command, "--config", str(file)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nspsim: error: ") and err.count("\n") == 1, err
    assert message.format(file=file) in err, err
