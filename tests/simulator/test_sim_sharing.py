"""Core sharing (nspsim.simulator.sharing): ranks that share a host's cores slow each other's kernels
only while they compute at once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nspsim.planners import get_planner
from nspsim.simulator import Simulator
from nspsim.trace.batching import Batch
from nspsim.workload import WorkloadConfig, build_workload


def _profile(tmp_path: Path, **extra: Any) -> str:
    data = {
        "format": "nspsim-profile",
        "version": 2,
        "name": "share",
        "cluster": "cpu",
        "attn_fwd_flops_by_length": [[64, 5e9], [8192, 5e9]],
        "attn_bwd_flops_by_length": [[64, 4e9], [8192, 4e9]],
        **extra,
    }
    path = tmp_path / f"p{len(extra)}.json"
    path.write_text(json.dumps(data))
    return str(path)


def _step(profile: str, degree: int, lengths: tuple[int, ...]) -> Any:
    w = build_workload(WorkloadConfig(model="tiny", cluster="cpu", gpus=4, profile=profile, max_context=8192))
    batch = Batch(lengths=lengths, trace="t", seed=0, index=0, tokens_per_batch=sum(lengths), max_context=8192)
    plan = get_planner("static", degree=degree).plan(batch, w)
    return Simulator.for_workload(w).simulate(plan)


def test_a_balanced_plan_runs_at_the_profiled_concurrency(tmp_path: Path) -> None:
    # profiled with all 4 ranks busy; a balanced plan keeps all 4 busy: every kernel as profiled
    lengths = (2048, 2048, 2048, 2048)
    plain = _step(_profile(tmp_path), 4, lengths)
    shared = _step(_profile(tmp_path, host_cores=2.0), 4, lengths)
    assert shared.step_time_s == pytest.approx(plain.step_time_s, rel=1e-6)
    assert shared.breakdown_s == pytest.approx(plain.breakdown_s, rel=1e-6)


def test_a_rank_computing_alone_runs_at_the_speed_of_a_free_core(tmp_path: Path) -> None:
    # degree 1: one rank holds the long sample, the others almost nothing; profiled at 4 busy ranks on
    # 2 cores (each kernel at half speed), the lone rank's kernels take half their profiled time
    lengths = (8192, 64, 64, 64)
    plain = _step(_profile(tmp_path), 1, lengths)
    shared = _step(_profile(tmp_path, host_cores=2.0), 1, lengths)
    assert shared.breakdown_s["attn_bwd"] == pytest.approx(plain.breakdown_s["attn_bwd"] / 2, rel=0.05)
    roomy = _step(_profile(tmp_path, host_cores=4.0), 1, lengths)  # as many cores as ranks: no sharing
    assert roomy.step_time_s == pytest.approx(plain.step_time_s, rel=1e-9)
