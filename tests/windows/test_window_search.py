"""The local-search window candidate (nspsim.planners.window.search): every assignment it returns places
each sample once within the batch budget, its estimate never rises, it is deterministic for a seed, it
finds the hand-computed optimum of a rigged estimate, and the window planner offers it only on request."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

import numpy as np
import pytest

from nspsim.api import workload_of
from nspsim.plan import Plan
from nspsim.plan.window import per_step_assignment
from nspsim.planners import get_planner
from nspsim.planners.window import CANDIDATES, WindowPlanner, plan_estimate
from nspsim.planners.window.search import local_search
from nspsim.trace.batching import Batch
from nspsim.workload import Workload


@cache
def _workload() -> Workload:
    return workload_of(gpus=8, tokens_per_batch=131072, max_context=32768, trace="code")


def _sources(count: int = 4) -> list[Batch]:
    return [_workload().sampler.batch(i) for i in range(count)]


def _batch(lengths: list[int], index: int) -> Batch:
    return Batch(
        lengths=tuple(lengths),
        trace="test",
        seed=0,
        index=index,
        tokens_per_batch=1000,
        max_context=1000,
        dropped_count=0,
        dropped_tokens=0,
    )


def _search(sources: Sequence[Batch], moves: int, seed: int = 0) -> tuple[tuple[tuple[int, ...], ...], list[Plan]]:
    nsp = get_planner("nsp")
    start = per_step_assignment([len(b.lengths) for b in sources])
    plans = [nsp.plan(b, _workload()) for b in sources]
    ids, found = local_search(
        sources, start, plans, lambda b: nsp.plan(b, _workload()), plan_estimate, moves=moves, seed=seed
    )
    return ids, list(found)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_search_keeps_a_valid_assignment_and_never_raises_the_estimate(seed: int) -> None:
    sources = _sources()
    ids, plans = _search(sources, moves=12, seed=seed)
    lengths = np.concatenate([b.lengths_array() for b in sources])
    assert sorted(i for pass_ in ids for i in pass_) == list(range(lengths.size))
    assert all(pass_ and lengths[list(pass_)].sum() <= sources[0].tokens_per_batch for pass_ in ids)
    assert all(list(pass_) == sorted(pass_) for pass_ in ids)
    assert [sorted(p.lengths) for p in plans] == [sorted(lengths[list(pass_)].tolist()) for pass_ in ids]
    start = _search(sources, moves=0)[1]
    assert sum(plan_estimate(p) for p in plans) <= sum(plan_estimate(p) for p in start)


def test_the_search_is_deterministic_and_zero_moves_keep_the_start() -> None:
    sources = _sources()
    first, second = _search(sources, moves=10, seed=3), _search(sources, moves=10, seed=3)
    assert first[0] == second[0] and [p.content_hash for p in first[1]] == [p.content_hash for p in second[1]]
    assert _search(sources, moves=0)[0] == per_step_assignment([len(b.lengths) for b in sources])
    with pytest.raises(ValueError, match="search moves must be at least 0"):
        _search(sources, moves=-1)


def test_the_search_reaches_the_optimum_of_a_rigged_estimate() -> None:
    """Estimate = the pass's longest sample: the sum over two passes is least (100 + 1) once 100 and 90
    share a pass; every sample is movable (6 < 24) and the budget holds all of them, so no sample moves
    back, and hill climbing reaches it from 100 + 90."""
    sources = [_batch([100, 1, 1], 0), _batch([90, 1, 1], 1)]
    planner = get_planner("static", degree=1)
    workload = workload_of(model="tiny", cluster="cpu", gpus=4, tokens_per_batch=1000, max_context=1000, trace="code")

    def longest(plan: Plan) -> float:
        return float(max(plan.lengths))

    start = per_step_assignment([3, 3])
    plans = [planner.plan(b, workload) for b in sources]
    ids, found = local_search(sources, start, plans, lambda b: planner.plan(b, workload), longest, moves=40)
    assert sum(longest(p) for p in found) == 101.0
    assert any({0, 3} <= set(pass_) for pass_ in ids)  # the two long samples share a pass


def test_the_window_planner_offers_search_only_on_request() -> None:
    assert "search" not in CANDIDATES
    nsp = get_planner("nsp")
    sources = _sources()
    plain = WindowPlanner(step=nsp).plan(sources, _workload())
    assert "window_estimate_s[search]" not in plain.metadata
    searched = WindowPlanner(step=nsp, candidates=(*CANDIDATES, "search"), search_moves=8).plan(sources, _workload())
    again = WindowPlanner(step=nsp, candidates=(*CANDIDATES, "search"), search_moves=8).plan(sources, _workload())
    assert searched.content_hash == again.content_hash
    estimates = {k: float(v) for k, v in searched.metadata.items() if k.startswith("window_estimate_s[")}
    assert searched.metadata[f"window_estimate_s[{searched.metadata['window_candidate']}]"] == min(estimates.values())
    if "window_estimate_s[search]" in estimates:  # the search starts from the best structured candidate
        structured = [v for k, v in estimates.items() if k != "window_estimate_s[search]"]
        assert estimates["window_estimate_s[search]"] < min(structured)
    with pytest.raises(ValueError, match="search_moves must be a non-negative integer"):
        WindowPlanner(step=nsp, candidates=("per-step", "search"), search_moves=-1)
    with pytest.raises(ValueError, match="among per-step, grouped, balanced, graded, search"):
        WindowPlanner(step=nsp, candidates=("per-step", "nearby"))
