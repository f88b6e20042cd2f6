"""nspsim_runtime.train's output files: one run per ``--records`` at a time (two runs would share the
``.partial`` names and the one that finishes first would lose its records)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from nspsim.workload import build_workload
from nspsim_runtime.training.args import parse_args
from nspsim_runtime.training.distributed import Dist
from nspsim_runtime.training.outputs import Outputs, partial_path


def opened(records: Path) -> Outputs:
    args = parse_args(["--planner", "static", "--model", "tiny", "--steps", "1", "--records", str(records)])
    d = Dist(rank=0, world=1, local_rank=0, device=torch.device("cpu"), control_group=None)
    return Outputs.open(args, d, build_workload(args.workload_on(world=1, device_type="cpu")))


def test_a_second_run_on_the_same_records_fails_before_touching_the_first_runs_files(tmp_path: Path) -> None:
    records = tmp_path / "r.jsonl"
    first = opened(records)
    config = partial_path(records.with_name("r.config.json"))
    written = config.read_text()
    with pytest.raises(ValueError, match="^--records .*r.jsonl: another nspsim_runtime.train run with these --records"):
        opened(records)  # named by its records, not by their folder ('.: another ...' from the current folder)
    assert config.read_text() == written  # the first run's partial files are untouched
    first.close(complete=True)
    assert records.exists() and not partial_path(records).exists()
    again = opened(records)  # free once the first run closed its outputs
    again.close(complete=False)


def test_records_named_with_and_without_jsonl_share_one_lock(tmp_path: Path) -> None:
    """R and R.jsonl write the same R.config.json and R.plans.jsonl, so they are one output."""
    first = opened(tmp_path / "R.jsonl")
    with pytest.raises(ValueError, match="another nspsim_runtime.train run with these --records is writing"):
        opened(tmp_path / "R")
    first.close(complete=False)


def test_a_runs_config_reads_back_as_the_same_arguments(tmp_path: Path) -> None:
    """``nspsim_runtime.train --config R.config.json`` parses to the run's own arguments (issue 24, item 3),
    but for ``--records``: a re-run writes where its own flags say, never over the first run."""
    records = tmp_path / "r.jsonl"
    argv = ["--planner", "static:degree=1", "--planner-option", "packing=tokens", "--model", "tiny", "--seed", "7"]
    argv += ["--steps", "3", "--start-batch", "2", "--lookahead", "1", "--recompute", "all", "--lr", "0.01"]
    argv += ["--tokens-per-batch", "16k", "--no-simulate", "--plan-ahead", "all", "--records", str(records)]
    args = parse_args(argv)
    d = Dist(rank=0, world=1, local_rank=0, device=torch.device("cpu"), control_group=None)
    Outputs.open(args, d, build_workload(args.workload_on(world=1, device_type="cpu"))).close(complete=True)
    config = str(tmp_path / "r.config.json")
    assert parse_args(["--config", config]) == replace(args, records=None)
    assert parse_args(["--config", config, "--steps", "5"]) == replace(args, steps=5, records=None)
    (tmp_path / "p.config.json").write_text('{"command": "nspsim plan", "planner": "nsp"}')
    with pytest.raises(ValueError, match="written by nspsim plan, but nspsim_runtime.train reads only its own configs"):
        parse_args(["--config", str(tmp_path / "p.config.json")])
    bad = json.loads(Path(config).read_text())
    bad["runtime"]["execution"]["lookahead"] = "all"
    (tmp_path / "bad.config.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match=r"runtime.execution.lookahead: 'all' is not a value --lookahead writes"):
        parse_args(["--config", str(tmp_path / "bad.config.json")])
    del bad["runtime"]["execution"]["lookahead"]  # an edited config missing a setting: never today's default
    (tmp_path / "bad.config.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match=r"runtime.execution.lookahead: missing"):
        parse_args(["--config", str(tmp_path / "bad.config.json")])
