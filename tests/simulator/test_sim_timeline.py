"""Timeline events and their Chrome-trace export (one process per GPU, one thread per queue)."""

from __future__ import annotations

import json

import pytest

from nspsim.records import BREAKDOWN_CATEGORIES
from nspsim.simulator import chrome_trace, chrome_trace_json
from nspsim.simulator.timeline import TRACKS
from nspsim.sp_tree import Node
from sim_helpers import Setup, StubCost


def simulated():  # type: ignore[no-untyped-def]
    setup = Setup(
        StubCost(
            layers=2,
            lat=1e-5,
            comp=1e-9,
            pro=2e-7,
            epi=1e-7,
            nonattn=1e-7,
            allgather=1e-3,
            reduce_scatter=1e-3,
            optimizer=1e-4,
        )
    )
    plan = setup.plan([Node(4, 0), Node(2, 2), Node(1, 0), Node(1, 5)], [4000, 1500, 800, 300])
    return setup.simulator(timeline=True).simulate(plan)


def test_compute_and_exposed_tracks_tile_each_gpu() -> None:
    result = simulated()
    for gpu in range(8):
        spans = sorted(
            (e.start, e.end)
            for e in result.timeline
            if e.gpu == gpu and (e.track == "exposed" or (e.track == "compute" and not e.name.startswith("wait")))
        )
        covered = sum(b - a for a, b in spans)
        ends = [b for _, b in spans]
        assert all(b1 <= a2 + 1e-12 for (_, b1), (a2, _) in zip(spans, spans[1:]))  # no overlaps
        assert covered == pytest.approx(max(ends), rel=1e-9)
    crit = result.critical_gpu
    by_cat = {k: 0.0 for k in BREAKDOWN_CATEGORIES}
    for e in result.timeline:
        if e.gpu == crit and (e.track == "exposed" or (e.track == "compute" and not e.name.startswith("wait"))):
            by_cat[e.category] += e.end - e.start
    assert by_cat == pytest.approx(dict(result.breakdown_s), abs=1e-12)


def test_chrome_trace_has_one_process_per_gpu_and_one_thread_per_track() -> None:
    result = simulated()
    doc = json.loads(chrome_trace_json(result.timeline, metadata={"plan": result.plan_hash}))
    assert doc["otherData"] == {"plan": result.plan_hash}
    meta = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    assert {e["args"]["name"] for e in meta if e["name"] == "process_name"} == {f"GPU {g}" for g in range(8)}
    assert {e["args"]["name"] for e in meta if e["name"] == "thread_name"} == set(TRACKS)
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == len(result.timeline)
    assert all(e["dur"] >= 0 and 0 <= e["tid"] < len(TRACKS) for e in spans)
    assert max(e["ts"] + e["dur"] for e in spans) == pytest.approx(result.step_time_s * 1e6, rel=1e-9)
    assert any(" L1" in e["name"] for e in spans) and chrome_trace([])["traceEvents"] == []
