"""The simulator's fast paths give bit-identical results to the plain paths they replace.

Each fast path (one-unit port loads without slices; no affected-set or re-timing call when nothing
is oversubscribed; timeouts whose callback reads the value itself; kernels appended by
``Program.add_kernel``; the cost model's latency asked once per group size; the executor's inlined
input rule; timeline values read once per segment) is swapped back
for the plain code below, and a nested plan (Ulysses groups, FSDP, expert parallelism on
Qwen3-235B) is simulated both ways with timelines: step time, every GPU's breakdown, events and
every timeline event (fields, their order, hashes) must be equal, not close.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from nspsim.execution.prepare import prepare_plan
from nspsim.planners import get_planner
from nspsim.simulator import SimOptions, Simulator
from nspsim.simulator import hardware as hw
from nspsim.simulator.engine import Executor, _note_input
from nspsim.simulator.hardware import Collective, Fabric
from nspsim.simulator.periodic import Repeat, shifts
from nspsim.simulator.program import COMPUTE, Program, Task
from nspsim.simulator.results import StepResult, TimelineEvent
from nspsim.simulator.timeline import TRACKS, _copy_layer, _layer_offsets, _raw_events
from nspsim.workload import WorkloadConfig, build_workload


class PlainFabric(Fabric):
    """The fabric as it was before its fast paths: slices for every port update, a set of affected
    collectives on every re-timing, ``env.timeout`` with a closure per event."""

    def _after(self, delay: float, callback: Callable[[Any], None], value: Any) -> None:
        event = self.env.timeout(delay, value)
        event.callbacks.append(lambda ev: callback(ev))
        self.events += 1

    def _begin_transfer(self, event: Any) -> None:
        coll = event.value
        if coll.work <= 0:
            self._complete(coll)
            return
        coll.stamp = self.env.now
        changed = self._add_load(coll, +1.0)
        self._retime(coll, changed)

    def _finish_transfer(self, event: Any) -> None:
        coll, version = event.value
        if version != coll.version:
            return
        coll.work = 0.0
        changed = self._add_load(coll, -1.0)
        self._retime(coll, changed, leaving=True)
        self._complete(coll)

    def _add_load(self, coll: Collective, sign: float) -> list[int]:
        changed = []
        first, end = coll.first, coll.end
        for kind, share in enumerate(coll.shares):
            if share <= 0:
                continue
            load, delta = self.load[kind], sign * share
            before = max(load[first:end])
            for g in range(first, end):
                load[g] += delta
            if max(before, max(load[first:end])) > 1 + hw._EPS:
                changed.append(kind)
            if sign > 0:
                self.active[kind].add(coll)
            else:
                self.active[kind].discard(coll)
        return changed

    def _retime(self, coll: Collective, changed: list[int], leaving: bool = False) -> None:
        affected = set() if leaving else {coll}
        for kind in changed:
            affected.update(c for c in self.active[kind] if c.overlaps(coll))
        for other in sorted(affected, key=lambda c: c.cid):
            self._set_rate(other, self._rate(other))

    def _rate(self, coll: Collective) -> float:
        worst = 1.0
        for kind, share in enumerate(coll.shares):
            if share > 0:
                worst = max(worst, max(self.load[kind][coll.first : coll.end]))
        return 1.0 / worst


def _plain_finish(self: Executor, task: Task) -> None:
    """The executor's release of a finished task's waiters as it was: one :func:`_note_input` per edge."""
    end, ready = task.end, self._ready
    self._finished += 1
    if task.queue == COMPUTE:
        self.free[task.gpu] = end
    for waiter in task.waiters:
        waiter.deps_left -= 1
        _note_input(waiter, task)
        if waiter.deps_left == 0 and waiter.head:
            ready.append(waiter)
    nxt = task.next
    if nxt is not None:
        nxt.head = True
        _note_input(nxt, task)
        if nxt.deps_left == 0:
            ready.append(nxt)


def _plain_timeline(
    program: Program, blame: Any, repeats: list[Repeat], members: list[list[int]] | None = None
) -> tuple[TimelineEvent, ...]:
    """The timeline as it was built before: numpy scalars per event, the dataclass constructor, a sort
    of the events by a key function."""
    move = shifts(list(repeats), len(program.segments))
    copies = {rep.segment: rep for rep in repeats}
    layer_offset = _layer_offsets(program, repeats)
    events: list[TimelineEvent] = []
    for seg, unit, track, name, cat, a, b in _raw_events(program, blame):
        rep = copies.get(seg)
        segment = program.segments[seg]
        for k in range(1 + (rep.copies if rep else 0)):
            dt = float(move[seg]) + (k * rep.shift if rep else 0.0)
            layer = segment.layer + int(layer_offset[seg]) + _copy_layer(segment.kind, k) if segment.layer >= 0 else -1
            for gpu in members[unit] if members is not None else (unit,):
                events.append(
                    TimelineEvent(
                        gpu=gpu,
                        track=track,
                        name=name,
                        category=cat,
                        start=a + dt,
                        end=b + dt,
                        layer=layer,
                        micro_batch=segment.micro_batch,
                    )
                )
    events.sort(key=lambda e: (e.gpu, e.start, TRACKS.index(e.track)))
    return tuple(events)


def _plain_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """Swap every fast path for the plain code."""
    monkeypatch.setattr("nspsim.simulator.simulator.build_timeline", _plain_timeline)
    monkeypatch.setattr("nspsim.simulator.engine.Fabric", PlainFabric)
    monkeypatch.setattr(Executor, "_finish", _plain_finish)
    monkeypatch.setattr(Program, "add_kernel", Program.add)
    original = hw.CollectiveFactory.make

    def make_asking_every_time(self: hw.CollectiveFactory, *args: Any, **kwargs: Any) -> Collective:
        self._latency.clear()
        return original(self, *args, **kwargs)

    monkeypatch.setattr(hw.CollectiveFactory, "make", make_asking_every_time)


def _assert_identical(a: StepResult, b: StepResult) -> None:
    assert a.step_time_s == b.step_time_s
    assert a.critical_gpu == b.critical_gpu
    assert a.events == b.events and a.tasks == b.tasks
    assert a.breakdown_s == b.breakdown_s
    assert np.array_equal(a.per_gpu_breakdown_s, b.per_gpu_breakdown_s)
    assert a.timeline == b.timeline
    assert [vars(e) for e in a.timeline] == [vars(e) for e in b.timeline]  # same fields, in the same order
    assert [list(vars(e)) for e in a.timeline[:3]] == [list(vars(e)) for e in b.timeline[:3]]
    assert all(hash(x) == hash(y) for x, y in zip(a.timeline, b.timeline, strict=True))


@pytest.mark.parametrize(
    ("config", "planner"),
    [
        (WorkloadConfig(gpus=16, tokens_per_batch=512 * 1024), "nsp"),
        (WorkloadConfig(gpus=16, tokens_per_batch=512 * 1024), "static"),
        (
            WorkloadConfig(
                gpus=16,
                tokens_per_batch=512 * 1024,
                model="qwen3-235b-a22b",
                cluster="h200",
                training="paper-235b",
            ),
            "nsp",
        ),
    ],
    ids=["30b-nsp", "30b-static", "235b-nsp"],
)
@pytest.mark.parametrize("mode", ["stream", "serial"])
def test_fast_paths_match_the_plain_paths(
    monkeypatch: pytest.MonkeyPatch, config: WorkloadConfig, planner: str, mode: str
) -> None:
    wl = build_workload(config)
    routing = get_planner(planner)
    plan = prepare_plan(
        routing.plan(wl.sampler.batch(0), wl), memory=wl.memory, cost=wl.cost, preparation=routing.preparation
    )
    options = SimOptions(timeline=True, mode=mode)  # type: ignore[arg-type]
    fast = Simulator.for_workload(wl, options).simulate(plan)
    with monkeypatch.context() as patch:
        _plain_paths(patch)
        plain = Simulator.for_workload(wl, options).simulate(plan)
    assert plain.timeline  # the plain run really ran, with its timeline
    _assert_identical(fast, plain)


def test_one_unit_port_update_matches_the_slice_update() -> None:
    """Random loads, shares and signs: the one-unit path leaves the same bits and the same verdict."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        loads = rng.uniform(0.0, 1.5, size=(2, 4)).tolist()
        fast, plain = Fabric.__new__(Fabric), PlainFabric.__new__(PlainFabric)
        for fabric in (fast, plain):
            fabric.load = ([*loads[0]], [*loads[1]])
            fabric.active = (set(), set())
        unit = int(rng.integers(0, 4))
        shares = (float(rng.uniform(0, 1)), float(rng.choice([0.0, 1.0])))
        coll = Collective(0, "c", unit, unit + 1, 0.0, 1.0, shares, 8)
        for sign in (1.0, -1.0):
            assert fast._add_load(coll, sign) == plain._add_load(coll, sign)
            assert fast.load == plain.load
            assert fast._rate(coll) == plain._rate(coll)
