"""``nspsim_runtime.train --model hf-qwen3-moe-tiny``: a transformers model trains under NSP plans with the same
loss curve for every planner and in one process, and its records name the class that ran."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
import rt_workers

from nspsim.specs.model import get_model
from nspsim_runtime.hf.models import config_of, model_impl, training_model
from nspsim_runtime.launch import run_ranks
from nspsim_runtime.model import DecoderLM
from nspsim_runtime.training.args import parse_args

pytest.importorskip("transformers")  # the optional 'hf' extra (installed by make test)

BASE = [
    "--trace",
    "longtail-paper",
    "--model",
    "hf-qwen3-moe-tiny",
    "--steps",
    "3",
    "--tokens-per-batch",
    "1k",
    "--max-context",
    "512",
    "--seed",
    "1",
    "--token-budget",
    "650",
    "--comm-timeout",
    "60",
]
PLANNERS = ("static", "nsp", "flexsp")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    out = tmp_path_factory.mktemp("hf-train")
    argvs = [["--planner", name, *BASE, "--records", str(out / f"{name}.jsonl")] for name in PLANNERS]
    two = run_ranks(rt_workers.train_runs, 2, argvs, timeout_s=240, comm_timeout_s=60)[0]
    one_argv = ["--planner", "static:degree=1", *BASE, "--records", str(out / "one.jsonl")]
    one = run_ranks(rt_workers.train_runs, 1, [one_argv], timeout_s=240, comm_timeout_s=60)[0]
    lines = {**dict(zip(PLANNERS, two)), "one-process": one[0]}
    return {name: [json.loads(line) for line in recs] for name, recs in lines.items()}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_every_planner_and_one_process_give_the_same_falling_loss_curve(runs: dict) -> None:
    curves = {name: [r["loss"] for r in recs] for name, recs in runs.items()}
    reference = curves["one-process"]
    assert len(reference) == 3 and reference[-1] < reference[0]
    for name, curve in curves.items():
        assert curve == pytest.approx(reference, rel=1e-6, abs=0), name
    assert len({tuple(r["plan_hash"] for r in runs[name]) for name in PLANNERS}) > 1  # different plans ran


@pytest.mark.slow
def test_records_name_the_transformers_class_and_the_model(runs: dict) -> None:
    for recs in runs.values():
        assert {(r["model"], r["model_impl"]) for r in recs} == {
            ("hf-qwen3-moe-tiny", "transformers.Qwen3MoeForCausalLM")
        }


def test_the_builtin_model_names_its_class() -> None:
    assert model_impl(DecoderLM(get_model("tiny"), seed=0)) == "nspsim_runtime.model.DecoderLM"
    assert model_impl(training_model("tiny", get_model("tiny"), seed=0)) == "nspsim_runtime.model.DecoderLM"


def test_without_the_extra_a_transformers_model_is_a_one_line_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    real = importlib.import_module

    def no_transformers(name: str, *args: object) -> object:
        if name == "transformers":
            raise ImportError("No module named 'transformers'")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", no_transformers)
    with pytest.raises(ValueError, match=r"hf-qwen3-tiny.*'hf' extra.*\[hf\]") as err:
        training_model("hf-qwen3-tiny", get_model("tiny"), seed=0)
    assert "\n" not in str(err.value)


@pytest.mark.slow
def test_hf_config_trains_a_users_transformers_config_file(tmp_path: Path) -> None:
    """``--hf-config FILE`` is ``--model FILE``: a user's config.json (here the tiny Qwen3's) trains."""
    config = tmp_path / "my-qwen3.json"
    config.write_text(json.dumps({**config_of("hf-qwen3-tiny"), "architectures": ["Qwen3ForCausalLM"]}))
    argv = ["--planner", "nsp", *BASE[:2], "--steps", "1", *BASE[6:], "--records", str(tmp_path / "r.jsonl")]
    argv = [*argv, "--hf-config", str(config)]
    assert parse_args(argv).workload.model == str(config)
    (lines,) = run_ranks(rt_workers.train_runs, 1, [argv], timeout_s=240, comm_timeout_s=60)[0]
    (record,) = [json.loads(line) for line in lines]
    assert (record["model"], record["model_impl"]) == (str(config), "transformers.Qwen3ForCausalLM")
    with pytest.raises(ValueError, match="give --model or --hf-config, not both"):
        parse_args([*argv, "--model", "tiny"])
    with pytest.raises(ValueError, match="no such file"):
        parse_args(["--planner", "nsp", "--hf-config", str(tmp_path / "missing.json")])


@pytest.mark.parametrize("flag", ["--checkpointing", "--training", "--expert-parallel", "--optimizer-offload"])
def test_runtime_train_has_no_simulator_training_settings(flag: str) -> None:
    """The runtime executes one training setup; a simulator setting there would only change its
    predictions (issue 22), so the flags do not exist on nspsim_runtime.train."""
    with pytest.raises(ValueError, match=f"unrecognized arguments: {flag}"):
        parse_args(["--planner", "nsp", flag, "full" if flag == "--checkpointing" else "1"])
    assert parse_args(["--planner", "nsp"]).workload.training_spec().checkpointing == "selective"
