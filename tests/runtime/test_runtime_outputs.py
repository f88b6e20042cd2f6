"""runtime.train's output files: one run per ``--records`` at a time (two runs would share the
``.partial`` names and the one that finishes first would lose its records)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from nspsim.workload import build_workload
from runtime.training.args import parse_args
from runtime.training.distributed import Dist
from runtime.training.outputs import Outputs, partial_path


def opened(records: Path) -> Outputs:
    args = parse_args(["--planner", "static", "--model", "tiny", "--steps", "1", "--records", str(records)])
    d = Dist(rank=0, world=1, local_rank=0, device=torch.device("cpu"), control_group=None)
    return Outputs.open(args, d, build_workload(args.workload_on(world=1, device_type="cpu")))


def test_a_second_run_on_the_same_records_fails_before_touching_the_first_runs_files(tmp_path: Path) -> None:
    records = tmp_path / "r.jsonl"
    first = opened(records)
    config = partial_path(records.with_name("r.config.json"))
    written = config.read_text()
    with pytest.raises(ValueError, match="another runtime.train run with these --records is writing"):
        opened(records)
    assert config.read_text() == written  # the first run's partial files are untouched
    first.close(complete=True)
    assert records.exists() and not partial_path(records).exists()
    again = opened(records)  # free once the first run closed its outputs
    again.close(complete=False)


def test_records_named_with_and_without_jsonl_share_one_lock(tmp_path: Path) -> None:
    """R and R.jsonl write the same R.config.json and R.plans.jsonl, so they are one output."""
    first = opened(tmp_path / "R.jsonl")
    with pytest.raises(ValueError, match="another runtime.train run with these --records is writing"):
        opened(tmp_path / "R")
    first.close(complete=False)
