"""``nspsim_runtime.train --config R.config.json`` (issue 24, item 3) runs a run again: the same batches, plans,
losses and predictions (a world of one under gloo, two steps; measured times differ, as any two runs')."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def train(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``python -m nspsim_runtime.train ARGV`` as one process, outside any torchrun."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    return subprocess.run(
        [sys.executable, "-m", "nspsim_runtime.train", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**env, "OMP_NUM_THREADS": "1"},
        timeout=240,
    )


def steps(records: Path) -> list[tuple[Any, ...]]:
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    return [(r["batch_index"], r["plan_hash"], r["loss"], r["simulated_step_time_s"]) for r in rows]


def test_a_run_repeated_from_its_config_trains_the_same_steps(tmp_path: Path) -> None:
    first, again = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    argv = ["--planner", "nsp", "--model", "tiny", "--steps", "2", "--start-batch", "1", "--seed", "4"]
    argv += ["--tokens-per-batch", "4k", "--max-context", "4k", "--lr", "0.01"]
    ran = train([*argv, "--records", str(first)])
    assert ran.returncode == 0, ran.stderr
    ran = train(["--config", str(tmp_path / "a.config.json"), "--records", str(again)])
    assert ran.returncode == 0, ran.stderr
    assert steps(again) == steps(first) and [s[0] for s in steps(first)] == [1, 2]
    configs = [json.loads((tmp_path / f"{name}.config.json").read_text()) for name in ("a", "b")]
    assert configs[0]["command"] == "nspsim_runtime.train"
    assert [c["runtime"].pop("records") for c in configs] == [str(first), str(again)] and configs[0] == configs[1]


def test_a_config_of_another_command_is_one_line_and_exit_status_2(tmp_path: Path) -> None:
    (tmp_path / "p.config.json").write_text(json.dumps({"command": "nspsim plan", "planner": "nsp"}))
    ran = train(["--config", str(tmp_path / "p.config.json")])
    lines = ran.stderr.splitlines()
    assert ran.returncode == 2 and len(lines) == 1, ran.stderr
    assert lines[0] == (
        f"nspsim_runtime.train: error: --config {tmp_path / 'p.config.json'}: written by nspsim plan, "
        "but nspsim_runtime.train reads only its own configs; give it to nspsim plan --config"
    )
