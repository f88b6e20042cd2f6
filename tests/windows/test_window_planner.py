"""The window planner and its candidate assignments: every candidate is a permutation within the batch
budget, per-step gives the per-step plans, the estimate or the judge picks, ties keep per-step."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nspsim.api import workload_of
from nspsim.plan import Plan
from nspsim.planners import get_planner
from nspsim.planners.window import CANDIDATES, WindowPlanner, plan_estimate
from nspsim.planners.window.assign import HEAD_SHARE, assign
from nspsim.trace.batching import Batch
from nspsim.workload import Workload


@cache
def _workload() -> Workload:
    return workload_of(gpus=8, tokens_per_batch=131072, max_context=32768, trace="code")


def _sources(count: int = 4) -> list[Batch]:
    return [_workload().sampler.batch(i) for i in range(count)]


@given(
    sizes=st.lists(st.integers(1, 12), min_size=1, max_size=5),
    seed=st.integers(0, 2**16),
    name=st.sampled_from(CANDIDATES),
)
def test_every_candidate_places_each_sample_once_within_the_budget(sizes: list[int], seed: int, name: str) -> None:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 1000, size=sum(sizes)).astype(np.int64)
    budget = int(max(lengths[a : a + n].sum() for a, n in zip(np.cumsum([0, *sizes[:-1]]), sizes)))
    work = lengths.astype(np.float64) ** 2
    ids = assign(name, sizes, lengths, work, budget)
    if name == "per-step":
        assert ids is not None
    if ids is None:
        return
    assert sorted(i for pass_ in ids for i in pass_) == list(range(lengths.size))
    assert all(pass_ and lengths[list(pass_)].sum() <= budget for pass_ in ids)
    assert all(list(pass_) == sorted(pass_) for pass_ in ids)
    assert assign(name, sizes, lengths.copy(), work.copy(), budget) == ids  # deterministic


def test_grouped_puts_the_longest_samples_together() -> None:
    lengths = np.array([10, 90, 20, 80, 30, 70], dtype=np.int64)
    ids = assign("grouped", [3, 3], lengths, lengths.astype(np.float64), 200)
    # first fit, longest first: 90, 80 to pass 0 (30 left), 70 to pass 1, 30 fills pass 0, 20 and 10 to pass 1
    assert ids == ((1, 3, 4), (0, 2, 5))


def test_balanced_spreads_the_work() -> None:
    lengths = np.array([100, 100, 5, 5, 5, 5], dtype=np.int64)  # both long samples drawn in batch 0
    ids = assign("balanced", [3, 3], lengths, lengths.astype(np.float64) ** 2, 130)
    assert ids is not None and {0, 1} not in [set(p) for p in ids]
    assert ids[0].count(0) + ids[0].count(1) == 1


def test_graded_fills_each_pass_with_the_longest_left_and_spreads_the_rest() -> None:
    # HEAD_SHARE x 100 = 80 tokens of longest samples per pass, in pass order:
    # pass 0: 50 (50 + 40 > 80); pass 1: 40, 30 (70; + 20 > 80); pass 2: 20, 15, the three 10s and the 5s of
    # ids 1, 4, 7 (80 exactly); the 5s of ids 8 and 12 go worst fit by room (pass 0 has 50, pass 1 30): to pass 0
    lengths = np.array([50, 5, 10, 40, 5, 10, 30, 5, 5, 20, 15, 10, 5], dtype=np.int64)
    ids = assign("graded", [4, 4, 5], lengths, lengths.astype(np.float64) ** 2, 100)
    assert HEAD_SHARE == 0.8
    assert ids == ((0, 8, 12), (3, 6), (1, 2, 4, 5, 7, 9, 10, 11))


def test_graded_heads_a_pass_with_a_sample_longer_than_its_share() -> None:
    lengths = np.array([95, 5, 50, 50], dtype=np.int64)  # 95 > 0.8 x 100: pass 0's head is that sample alone
    # pass 1: 50 (50 + 50 > 80); rest 50, 5 worst fit: 50 -> pass 1 (room 50 against 5), 5 -> pass 0 (5 against 0)
    assert assign("graded", [2, 2], lengths, lengths.astype(np.float64), 100) == ((0, 1), (2, 3))
    assert assign("graded", [2, 2], lengths, lengths.astype(np.float64), 90) is None  # 95 fits no pass


def test_graded_is_not_offered_when_heads_use_up_the_samples() -> None:
    lengths = np.array([10, 10, 10], dtype=np.int64)  # all three fit pass 0's 80 tokens: passes 1 and 2 are empty
    assert assign("graded", [1, 1, 1], lengths, lengths.astype(np.float64), 100) is None


def test_an_impossible_candidate_is_not_offered() -> None:
    lengths = np.array([60, 60, 60, 20], dtype=np.int64)  # per step: (60, 60) and (60, 20) in 120 tokens
    assert assign("grouped", [2, 2], lengths, lengths.astype(np.float64), 120) == ((0, 1), (2, 3))
    assert assign("balanced", [2, 2], lengths, lengths.astype(np.float64), 120) is not None
    with pytest.raises(ValueError, match="unknown window candidate"):
        assign("random", [2, 2], lengths, lengths.astype(np.float64), 120)


@pytest.mark.parametrize("planner", ["nsp", "static"])
def test_per_step_candidate_gives_the_per_step_plans(planner: str) -> None:
    step = get_planner(planner)
    window = WindowPlanner(step=step, candidates=("per-step",)).plan(_sources(), _workload())
    assert window.is_per_step and window.metadata["window_candidate"] == "per-step"
    per_step = [step.plan(b, _workload()) for b in _sources()]
    assert [p.content_hash for p in window.plans] == [p.content_hash for p in per_step]


def test_the_lowest_estimate_wins_and_never_loses_to_per_step() -> None:
    window = WindowPlanner(step=get_planner("nsp")).plan(_sources(), _workload())
    estimates = {k: float(v) for k, v in window.metadata.items() if k.startswith("window_estimate_s[")}
    chosen = estimates[f"window_estimate_s[{window.metadata['window_candidate']}]"]
    assert chosen == min(estimates.values()) <= estimates["window_estimate_s[per-step]"]
    assert chosen == pytest.approx(sum(plan_estimate(p) for p in window.plans), rel=1e-12)
    assert window.metadata["window_candidates_routed"] == len(CANDIDATES)  # none duplicates another on these batches


def _judge_by_name(times: dict[bool, float]) -> tuple[list[bool], object]:
    """A judge that says ``times[per_step]`` for a window, recording which kind it was asked about."""
    asked: list[bool] = []

    def judge(plans: Sequence[Plan]) -> float:
        per_step = [p.batch.fingerprint for p in plans] == [b.fingerprint() for b in _sources()]
        asked.append(per_step)
        return times[per_step]

    return asked, judge


@pytest.mark.parametrize(
    ("per_step_s", "other_s", "kept"), [(10.0, 9.0, False), (10.0, 11.0, True), (10.0, 10.0, True)]
)
def test_the_judge_disposes_and_ties_keep_per_step(per_step_s: float, other_s: float, kept: bool) -> None:
    asked, judge = _judge_by_name({True: per_step_s, False: other_s})
    window = WindowPlanner(step=get_planner("nsp")).plan(_sources(), _workload(), judge=judge)  # type: ignore[arg-type]
    proposed = max(
        (k for k in window.metadata if k.startswith("window_estimate_s[")), key=lambda k: -float(window.metadata[k])
    )
    if proposed == "window_estimate_s[per-step]":
        pytest.skip("the estimate already keeps per-step on these batches: the judge is not asked")
    assert sorted(asked) == [False, True]
    assert window.is_per_step == kept
    assert window.metadata["window_judged_s[per-step]"] == per_step_s


def test_bad_candidate_sets_are_refused() -> None:
    with pytest.raises(ValueError, match="must include per-step"):
        WindowPlanner(step=get_planner("nsp"), candidates=("grouped",))
    with pytest.raises(ValueError, match="among per-step, grouped, balanced"):
        WindowPlanner(step=get_planner("nsp"), candidates=("per-step", "shuffle"))
    with pytest.raises(ValueError, match="at least one batch"):
        WindowPlanner(step=get_planner("nsp")).plan([], _workload())


def test_per_step_is_the_reference_whatever_order_the_candidates_are_given_in() -> None:
    asked, judge = _judge_by_name({True: 10.0, False: 10.0})  # a tie: per-step must be kept
    planner = WindowPlanner(step=get_planner("nsp"), candidates=("grouped", "per-step"))
    window = planner.plan(_sources(), _workload(), judge=judge)  # type: ignore[arg-type]
    assert window.is_per_step
    if asked:  # the judge was asked: per-step against grouped, not grouped against itself
        assert sorted(asked) == [False, True]
