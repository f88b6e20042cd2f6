"""Samples dropped by ``--max-context`` are reported wherever a batch is: the Batch itself, plan
metadata (outside the content hash), ``nspsim plan`` / ``simulate`` / ``compare`` (text, ``--json``,
HTML report), with one warning line on stderr when they hold over ``DROPPED_WARN_SHARE`` of the
drawn tokens (issue 15, item 2)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from nspsim.cli.main import main
from nspsim.compare import DROPPED_WARN_SHARE, BatchDrops, CompareConfig, RunSpec, run_compare
from nspsim.plan import Plan
from nspsim.planners import get_planner
from nspsim.workload import WorkloadConfig, build_workload

CODE_4K = ["--trace", "code", "--max-context", "4k"]  # the case: 614 samples, 83.6% of the tokens
TINY = ["--model", "tiny", "--cluster", "cpu", "--gpus", "2", "--tokens-per-batch", "64k"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_batch_exposes_its_drops_under_the_reported_names() -> None:
    batch = build_workload(WorkloadConfig(trace="code", max_context=4096)).sampler.batch(0)
    assert batch.dropped_samples == batch.dropped_count == 614
    drawn = batch.total_tokens + batch.dropped_tokens
    assert batch.dropped_token_share == pytest.approx(batch.dropped_tokens / drawn) == pytest.approx(0.836, abs=1e-3)
    drops = BatchDrops.of_batches([batch, replace(batch, index=1)])
    assert (drops.batches, drops.dropped_samples, drops.kept_samples) == (2, 1228, 2 * batch.num_samples)
    assert drops.dropped_token_share == pytest.approx(batch.dropped_token_share)
    assert drops.warning() is not None and drops.warning(threshold=0.9) is None


def test_plans_record_the_drops_without_changing_their_hash() -> None:
    workload = build_workload(WorkloadConfig(trace="code", max_context=4096))
    batch = workload.sampler.batch(0)
    plan = get_planner("static").plan(batch, workload)
    assert plan.metadata["dropped_samples"] == 614 and plan.metadata["dropped_tokens"] == batch.dropped_tokens
    assert replace(plan, metadata={}).content_hash == plan.content_hash  # metadata is outside the hash
    again = Plan.from_json(plan.to_json())
    assert BatchDrops.of_plan(again) == BatchDrops.of_batches([batch])
    assert BatchDrops.of_plan(replace(plan, metadata={})) is None  # a plan written before drops were recorded


def test_plan_reports_and_warns_about_dropped_samples(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "plan", "--planner", "static", *CODE_4K)
    assert code == 0
    assert "dropped   614 sample(s) longer than max_context 4K" in out and "83.6% of the drawn tokens" in out
    assert err.startswith("nspsim: warning: batch 0: --max-context dropped 614 sample(s)") and err.count("\n") == 1
    assert f"over the {DROPPED_WARN_SHARE:.0%} warning threshold" in err
    code, out, err = run(capsys, "plan", "--planner", "static", *CODE_4K, "--json")
    data = json.loads(out)
    assert data["dropped_samples"] == 614 and data["dropped_token_share"] == pytest.approx(0.836, abs=1e-3)
    code, out, err = run(capsys, "plan", "--planner", "static", "--max-context", "64k", "--json")
    assert code == 0 and err == ""  # 1 sample, 3.1% of the drawn tokens: reported, no warning
    assert json.loads(out)["dropped_samples"] == 1


def test_simulate_reports_the_drops_of_the_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.json"
    assert main(["plan", "--planner", "static", *TINY, "--max-context", "2k", "-o", str(path)]) == 0
    capsys.readouterr()
    drops = BatchDrops.of_plan(Plan.load(path))
    assert drops is not None and drops.dropped_token_share > DROPPED_WARN_SHARE
    code, out, err = run(capsys, "simulate", str(path))
    assert code == 0 and f"dropped    {drops.dropped_samples} sample(s) longer than max_context 2K" in out
    assert "nspsim: warning: --max-context dropped" in err
    code, out, err = run(capsys, "simulate", str(path), "--json")
    data = json.loads(out)
    assert (data["dropped_samples"], data["dropped_tokens"]) == (drops.dropped_samples, drops.dropped_tokens)


def test_compare_reports_the_drops_in_text_json_and_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = CompareConfig(
        workload=WorkloadConfig(model="tiny", cluster="cpu", gpus=2, tokens_per_batch=64 * 1024, max_context=2048),
        run=RunSpec(planners=("static",), iters=2),
    )
    result = run_compare(config)
    assert result.drops is not None and result.drops.batches == 2
    per_batch = [(r.dropped_samples, r.dropped_tokens) for r in result.records]
    assert sum(s for s, _ in per_batch) == result.drops.dropped_samples > 0
    assert sum(t for _, t in per_batch) == result.drops.dropped_tokens
    assert result.to_dict()["batches"]["dropped_samples"] == result.drops.dropped_samples
    report = tmp_path / "r.html"
    argv = ["compare", *TINY, "--max-context", "2k", "--iters", "2", "--planners", "static", "--quiet"]
    code, out, err = run(capsys, *argv, "-o", str(report))
    assert code == 0
    assert f"batches: {result.drops.kept_samples} samples kept; {result.drops.dropped_samples} sample(s)" in out
    assert err.startswith("nspsim: warning: 2 batch(es): --max-context dropped") and err.count("\n") == 1
    assert f"{result.drops.dropped_samples} sample(s) longer than max_context 2K" in report.read_text()
    code, out, _ = run(capsys, *argv, "--json")
    assert json.loads(out)["batches"] == result.drops.to_dict()
