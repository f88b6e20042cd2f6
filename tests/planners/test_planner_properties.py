"""Hypothesis properties over random batches: every planner's plan is valid, NSP's Load is never
worse than the best static Load, infeasible inputs give a clear error."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nspsim.planners import PLANNER_NAMES, get_planner
from nspsim.planners.nsp.token_balance import effective_budget
from nspsim.workload import Workload
from planner_fixtures import batch_of, check_valid, guarantee_score, model_workload, static_scores, tiny_workload

FAST_OPTIONS = {"flexsp": {"time_limit": 1.0}}
WORKLOADS: dict[tuple[str, int, int], Workload] = {}


def workload(model: str, gpus: int, budget: int) -> Workload:
    key = (model, gpus, budget)
    if key not in WORKLOADS:
        WORKLOADS[key] = (
            tiny_workload(gpus=gpus, token_budget=budget)
            if model == "tiny"
            else model_workload(model, gpus=gpus, token_budget=budget)
        )
    return WORKLOADS[key]


lengths_st = st.lists(st.integers(1, 3) | st.integers(1, 600) | st.integers(600, 30_000), min_size=1, max_size=24)
case_st = st.tuples(
    st.sampled_from(["tiny", "qwen3-30b-a3b"]),
    st.sampled_from([1, 2, 4, 8]),
    st.sampled_from([512, 2048, 16_384, 65_536]),
    lengths_st,
)
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def fits(wl: Workload, lengths: list[int]) -> bool:
    return max(lengths) <= wl.tree.spmax * wl.token_budget


@pytest.mark.parametrize("name", [n for n in PLANNER_NAMES if n != "flexsp"])
@SETTINGS
@given(case=case_st)
def test_every_plan_is_valid_or_the_error_names_the_sample(name: str, case: tuple[str, int, int, list[int]]) -> None:
    check_case(name, case)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=case_st)
def test_every_flexsp_plan_is_valid_or_the_error_names_the_sample(case: tuple[str, int, int, list[int]]) -> None:
    check_case("flexsp", case)  # fewer examples: every one solves up to 15 MILPs


def check_case(name: str, case: tuple[str, int, int, list[int]]) -> None:
    model, gpus, budget, lengths = case
    wl = workload(model, gpus, budget)
    planner = get_planner(name, **FAST_OPTIONS.get(name, {}))
    if not fits(wl, lengths):
        j = int(np.argmax(lengths))
        with pytest.raises(ValueError, match=rf"sample {j} of batch 0 \(length {lengths[j]}\) fits no admissible"):
            planner.plan(batch_of(lengths), wl)
        return
    plan = planner.plan(batch_of(lengths), wl)
    check_valid(plan, wl, lengths)
    if name in ("static", "flexsp", "basp", "megatron-cp"):
        assert plan.is_disjoint()
    if name == "flexsp" and wl.tree.spmax >= 2:
        assert min(n.degree for n in plan.nodes) >= 2
    if name == "nsp2l":
        assert {n.degree for n in plan.nodes} <= {1, wl.tree.spmax}


@SETTINGS
@given(case=case_st)
def test_nsp_load_is_never_worse_than_the_best_static_load(case: tuple[str, int, int, list[int]]) -> None:
    model, gpus, budget, lengths = case
    wl = workload(model, gpus, budget)
    if not fits(wl, lengths) or sum(lengths) > gpus * budget:
        return
    budget = effective_budget("auto", wl, tuple(lengths))
    static = static_scores(lengths, wl, wl, budget)
    nsp = get_planner("nsp").plan(batch_of(lengths), wl)
    if nsp.num_micro_batches == 1 and static:
        assert guarantee_score(nsp, wl, budget) <= min(static) * (1 + 1e-12)


@SETTINGS
@given(case=case_st)
def test_lower_bound_holds_for_every_single_pass_plan(case: tuple[str, int, int, list[int]]) -> None:
    model, gpus, budget, lengths = case
    wl = workload(model, gpus, budget)
    if not fits(wl, lengths):
        return
    for name in ("static", "greedy", "nsp2l", "nsp"):
        plan = get_planner(name).plan(batch_of(lengths), wl)
        assert float(plan.metadata["lower_bound_s"]) <= float(plan.metadata["load_s"]) * (1 + 1e-12)


def test_a_budget_smaller_than_every_shard_is_reported() -> None:
    wl = tiny_workload(gpus=4, token_budget=2)
    with pytest.raises(ValueError, match=r"sample 0 of batch 0 \(length 100\).*shard is 25 tokens.*B_tok=2"):
        get_planner("nsp").plan(batch_of([100, 90, 80]), wl)


@pytest.mark.parametrize("name", PLANNER_NAMES)
def test_single_sample_and_single_gpu(name: str) -> None:
    for gpus in (1, 2):
        wl = tiny_workload(gpus=gpus, token_budget=4096)
        plan = get_planner(name, **FAST_OPTIONS.get(name, {})).plan(batch_of([777]), wl)
        check_valid(plan, wl, [777])


@pytest.mark.parametrize("name", PLANNER_NAMES)
def test_batches_larger_than_one_pass_get_micro_batches(name: str) -> None:
    wl = tiny_workload(gpus=2, token_budget=100)
    lengths = [90, 80, 70, 60, 50, 40, 30, 20, 10, 5]
    plan = get_planner(name, **FAST_OPTIONS.get(name, {})).plan(batch_of(lengths), wl)
    check_valid(plan, wl, lengths)
    assert plan.num_micro_batches >= 3  # 455 tokens over 2 x 100
