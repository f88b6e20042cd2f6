"""WindowPlan: the per-step assignment gives back the per-step plans, validation on construction, JSON
round trip, content hash, corruption."""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from nspsim.api import workload_of
from nspsim.cli.main import main
from nspsim.plan import Plan
from nspsim.plan.refs import BatchRef
from nspsim.plan.window import (
    Assignment,
    WindowPlan,
    pass_batches,
    per_step_assignment,
    window_plan,
)
from nspsim.planners import get_planner
from nspsim.trace.batching import Batch
from nspsim.workload import Workload


@cache
def _workload() -> Workload:
    return workload_of(gpus=8, tokens_per_batch=131072, max_context=32768, trace="code")


def _sources(count: int = 3) -> tuple[Batch, ...]:
    return tuple(_workload().sampler.batch(i) for i in range(count))


def _window(assignment: Assignment | None = None, count: int = 3) -> WindowPlan:
    sources = _sources(count)
    ids = per_step_assignment([len(b.lengths) for b in sources]) if assignment is None else assignment
    planner = get_planner("static", degree=2)
    plans = [planner.plan(b, _workload()) for b in pass_batches(sources, ids)]
    return window_plan(sources, ids, plans, chosen="test")


def _swapped() -> Assignment:
    """The per-step assignment with one sample of batch 0 and one of batch 1 exchanged: the pair of
    different lengths with the longest sample that keeps both passes within the batch budget."""
    sources = _sources()
    ids = [list(x) for x in per_step_assignment([len(b.lengths) for b in sources])]
    a, b = (np.asarray(s.lengths) for s in sources[:2])
    room_a, room_b = (s.tokens_per_batch - s.total_tokens for s in sources[:2])
    diff = a[:, None] - b[None, :]
    fits = (diff != 0) & (diff <= room_b) & (-diff <= room_a)
    i, j = np.unravel_index(np.argmax(np.where(fits, np.maximum(a[:, None], b[None, :]), -1)), fits.shape)
    ids[0][int(i)], ids[1][int(j)] = ids[1][int(j)], ids[0][int(i)]
    return tuple(tuple(x) for x in ids)


def test_per_step_assignment_routes_the_source_batches() -> None:
    sources = _sources()
    assert pass_batches(sources, per_step_assignment([len(b.lengths) for b in sources])) == sources
    window = _window()
    assert window.is_per_step and window.moved_samples() == 0
    per_step = [get_planner("static", degree=2).plan(b, _workload()) for b in sources]
    assert [p.content_hash for p in window.plans] == [p.content_hash for p in per_step]
    assert window.size == 3 and window.num_samples == sum(len(b.lengths) for b in sources)


def test_a_moved_sample_changes_the_passes_not_the_window() -> None:
    window = _window(_swapped())
    assert not window.is_per_step and window.moved_samples() == 2
    assert window.total_tokens == _window().total_tokens
    assert window.content_hash != _window().content_hash
    assert window.plans[2].content_hash == _window().plans[2].content_hash  # pass 2 untouched


def test_round_trip_and_hash() -> None:
    window = _window(_swapped())
    again = WindowPlan.from_json(window.to_json())
    assert again == window and again.content_hash == window.content_hash
    assert replace(window, metadata={}).content_hash == window.content_hash
    assert again.metadata["chosen"] == "test"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["assignment"][0].append(d["assignment"][1][0]), "exactly one pass"),
        (lambda d: d["assignment"][0].pop(), "exactly one pass"),
        (lambda d: d["source_lengths"][1].__setitem__(0, 7), "fingerprint"),
        (lambda d: d["sources"][2].__setitem__("index", 9), "consecutive"),
        (lambda d: d["plans"].pop(), "needs 2 source batches"),
        (
            lambda d: d.__setitem__("assignment", [d["assignment"][1], d["assignment"][0], d["assignment"][2]]),
            "other lengths",
        ),
        (lambda d: d.__setitem__("content_hash", "0" * 16), "content hash"),
        (lambda d: d.pop("sources"), "missing or malformed field"),
        (lambda d: d.__setitem__("schema", "nspsim-plan"), "not an nspsim window plan"),
    ],
)
def test_a_corrupt_file_is_refused_in_one_line(edit: object, message: str) -> None:
    data = json.loads(_window(_swapped()).to_json())
    edit(data)  # type: ignore[operator]
    with pytest.raises(ValueError, match=message) as info:
        WindowPlan.from_json(json.dumps(data), "w.json")
    assert "\n" not in str(info.value)


def test_an_overfull_pass_is_refused() -> None:
    sources = _sources()
    ids = per_step_assignment([len(b.lengths) for b in sources])
    overfull = ((*ids[0], *ids[1][:5]), ids[1][5:], ids[2])
    with pytest.raises(ValueError, match="exceed tokens_per_batch"):
        pass_batches(sources, overfull)


def test_plans_of_another_planner_are_refused() -> None:
    window = _window()
    other = get_planner("static", degree=4).plan(_sources()[1], _workload())
    nsp_like = replace(other, planner="nsp")
    plans: tuple[Plan, ...] = (window.plans[0], nsp_like, window.plans[2])
    with pytest.raises(ValueError, match="differs from pass 0's in planner"):
        replace(window, plans=plans)


@pytest.mark.parametrize(
    "edit",
    [{"tokens_per_batch": 1 << 20}, {"dropped_count": 1, "dropped_tokens": 40_000}],
    ids=["budget", "dropped"],
)
def test_a_pass_plan_of_another_budget_or_drop_count_is_refused(edit: dict[str, int]) -> None:
    """A plan whose batch reference is consistent in itself (fingerprint recomputed) but is not the
    window's pass batch (another budget lets a pass overfill it; other drops misreport the pass)."""
    window = _window(_swapped())
    batch = pass_batches(_sources(), window.assignment)[1]
    other = replace(window.plans[1], batch=BatchRef.of(replace(batch, **edit)))
    with pytest.raises(ValueError, match="pass 1's plan routes another batch"):
        replace(window, plans=(window.plans[0], other, window.plans[2]))


@pytest.mark.parametrize("sample", [2**70, 2**63 - 1, -1])
def test_an_out_of_range_sample_id_is_refused_in_one_line(sample: int) -> None:
    data = json.loads(_window(_swapped()).to_json())
    data["assignment"][0][0] = sample
    with pytest.raises(ValueError, match=f"names sample {sample}, but the window's samples are 0 to"):
        WindowPlan.from_json(json.dumps(data), "w.json")


@pytest.mark.parametrize("command", ["simulate", "inspect"])
def test_a_window_plan_given_as_a_plan_says_what_it_is(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plan log line of a run with --accumulate W > 1 is a window plan: simulate and inspect name it,
    not "not an nspsim plan"."""
    path = tmp_path / "w.json"
    _window(_swapped()).save(path)
    assert main([command, str(path)]) == 2
    err = capsys.readouterr().err
    assert "is a window plan" in err and "not an nspsim plan" not in err and len(err.splitlines()) == 1
