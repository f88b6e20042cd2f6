"""Static SP planner, the registry, feasibility errors and the packing kernels."""

from __future__ import annotations

import numpy as np
import pytest

from nspsim.planners import PLANNER_NAMES, get_planner
from nspsim.planners.packing import interleave_fill, least_loaded_fill, water_level
from nspsim.planners.static.token_packing import group_capacity, pack_by_tokens
from nspsim.sp_tree import Node
from planner_fixtures import batch_of, check_valid, exact_load, tiny_workload


def intercept(workload) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """(fwd, bwd) non-attention time every GPU holding tokens pays once (GEMM tile padding), all layers."""
    cost = workload.cost
    one, two = cost.non_attention(1.0), cost.non_attention(2.0)
    return cost.num_layers * (2 * one.fwd - two.fwd), cost.num_layers * (2 * one.bwd - two.bwd)


def per_gpu_cost(workload, length: int, degree: int = 1) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """What one sample adds to each GPU of its group (the per-GPU intercept excluded)."""
    cost = workload.cost
    att = cost.attention_sample_costs(np.array([length]), degree)
    na = cost.non_attention(length / degree)
    layers = cost.num_layers
    fi, bi = intercept(workload)
    return layers * (float(att.fwd[0]) + na.fwd) - fi, layers * (float(att.bwd[0]) + na.bwd) - bi


def test_static_degree_one_is_lpt_by_cost_hand_checked() -> None:
    wl = tiny_workload(gpus=2, token_budget=1000)
    lengths = [40, 30, 30, 20]
    plan = get_planner("static", degree=1).plan(batch_of(lengths), wl)
    # LPT: 40 -> g0, 30 -> g1, 30 -> g1 (c30 < c40), 20 -> g0 (c40 < 2 c30).
    assert plan.nodes[0] == plan.nodes[3] and plan.nodes[1] == plan.nodes[2] != plan.nodes[0]
    f40, b40 = per_gpu_cost(wl, 40)
    f30, b30 = per_gpu_cost(wl, 30)
    f20, b20 = per_gpu_cost(wl, 20)
    fi, bi = intercept(wl)
    assert fi > 0 and bi > 0  # H100 GEMM tiles of 128 rows
    expected = max(f40 + f20, 2 * f30) + fi + max(b40 + b20, 2 * b30) + bi
    assert plan.metadata["load_s"] == pytest.approx(expected, rel=1e-12)
    assert exact_load(plan, wl) == pytest.approx(expected, rel=1e-12)
    assert plan.metadata["static_degree"] == 1 and plan.num_micro_batches == 1


def test_static_full_degree_puts_everything_on_the_root() -> None:
    wl = tiny_workload(gpus=4, token_budget=1000)
    plan = get_planner("static", degree=4).plan(batch_of([100, 50, 7]), wl)
    assert set(plan.nodes) == {Node(4, 0)}
    check_valid(plan, wl, [100, 50, 7])


def test_static_micro_batches_when_one_pass_cannot_hold_the_batch() -> None:
    wl = tiny_workload(gpus=2, token_budget=50)
    lengths = [40, 40, 40]
    plan = get_planner("static", degree=1).plan(batch_of(lengths), wl)
    assert plan.num_micro_batches == 2
    check_valid(plan, wl, lengths)


def test_static_auto_has_the_smallest_step_estimate() -> None:
    wl = tiny_workload(gpus=8, token_budget=4096)
    lengths = [3000, 2500, 900, 700, 400, 300, 200, 120, 100, 90, 80, 64, 50, 40, 33, 20, 17, 9, 5, 1]
    batch = batch_of(lengths)
    auto = get_planner("static").plan(batch, wl)
    check_valid(auto, wl, lengths)
    steps = [get_planner("static", degree=d).plan(batch, wl).metadata["step_estimate_s"] for d in (1, 2, 4, 8)]
    assert auto.metadata["step_estimate_s"] == pytest.approx(min(steps))


def test_fixed_degree_that_cannot_hold_a_sample_names_it() -> None:
    wl = tiny_workload(gpus=4, token_budget=100)
    with pytest.raises(ValueError, match=r"degree 1 cannot hold sample 1 \(length 150\).*B_tok=100.*is 2"):
        get_planner("static", degree=1).plan(batch_of([20, 150, 30]), wl)


def test_degree_above_spmax_or_not_power_of_two_is_rejected() -> None:
    wl = tiny_workload(gpus=4)
    with pytest.raises(ValueError, match="not admissible"):
        get_planner("static", degree=8).plan(batch_of([10]), wl)
    with pytest.raises(ValueError, match="degree must be 'auto' or a power of two"):
        get_planner("static", degree=3)


@pytest.mark.parametrize("name", PLANNER_NAMES)
def test_sample_that_fits_no_group_is_named_with_the_limit(name: str) -> None:
    wl = tiny_workload(gpus=4, token_budget=100)
    with pytest.raises(ValueError, match=r"sample 2 of batch 0 \(length 900\) fits no admissible SP group.*B_tok=100"):
        get_planner(name).plan(batch_of([10, 20, 900]), wl)


def test_registry_errors_list_names_and_options() -> None:
    with pytest.raises(ValueError, match="unknown planner 'nope'.*static"):
        get_planner("nope")
    with pytest.raises(ValueError, match="planner 'static' has no option 'beam'.*degree"):
        get_planner("static", beam=3)


def sequential_reference(loads, tokens, cost, item_tokens, budget):  # type: ignore[no-untyped-def]
    loads, tokens, out = list(loads), list(tokens), []
    for c, t in zip(cost, item_tokens):
        ok = [u for u in range(len(loads)) if tokens[u] + t <= budget * (1 + 1e-9)]
        u = min(ok, key=lambda u: (loads[u], u)) if ok else min(range(len(loads)), key=lambda u: (tokens[u], u))
        out.append(u)
        loads[u] += c
        tokens[u] += t
    return out


def test_least_loaded_fill_equals_the_item_by_item_rule() -> None:
    rng = np.random.default_rng(7)
    for _ in range(400):
        units, n = int(rng.integers(1, 9)), int(rng.integers(1, 40))
        toks = np.sort(rng.integers(1, 50, n))[::-1].astype(float)
        cost = np.round(toks * rng.uniform(0.5, 1.5) + 0.01 * toks**2)
        order = np.argsort(-cost, kind="stable")
        cost, toks = cost[order], toks[order]
        loads = np.round(rng.uniform(0, 100, units)) * rng.integers(0, 2)
        start_tok = rng.uniform(0, 30, units)
        budget = float(rng.uniform(30, 200))
        got, _, _ = least_loaded_fill(loads, start_tok, cost, toks, budget)
        assert got.tolist() == sequential_reference(loads, start_tok, cost, toks, budget)


def test_interleave_fill_lands_within_one_item_of_the_water_level() -> None:
    rng = np.random.default_rng(3)
    for _ in range(50):
        units = int(rng.integers(2, 40))
        cost = np.sort(rng.pareto(2.0, 2000) + 1.0)[::-1]
        cost = cost[cost < 5]
        loads = rng.uniform(0, 30, units)
        got = interleave_fill(loads, cost)
        final = loads + np.bincount(got, weights=cost, minlength=units)
        level = water_level(loads, float(cost.sum()))
        assert final.max() <= max(level, loads.max()) + 2 * cost.max()


# ---- packing="tokens": the FlexSP artifact's token packing (nspsim.planners.static.token_packing) ----------
def test_token_packing_is_best_fit_decreasing_then_fills_empty_groups_hand_checked() -> None:
    """8 GPUs at SP1, B_tok=100: capacity 90. Best fit decreasing opens 4 bins
    {80,10} {60,30} {50,40} {25,20}; the 4 empty groups of the one micro-batch then take, from the
    last bin holding two, its first sample in batch order: 20 (id 4), 50 (id 0), 30 (id 2), 80 (id 1)."""
    wl = tiny_workload(gpus=8, token_budget=100)
    lengths = [50, 80, 30, 40, 20, 10, 60, 25]
    plan = get_planner("static", degree=1, packing="tokens").plan(batch_of(lengths), wl)
    check_valid(plan, wl, lengths)
    assert [n.index for n in plan.nodes] == [5, 7, 6, 2, 4, 0, 1, 3]
    assert plan.num_micro_batches == 1 and plan.metadata["packing"] == "tokens"
    load = get_planner("static", degree=1).plan(batch_of(lengths), wl)
    assert [n.index for n in load.nodes] != [n.index for n in plan.nodes]  # LPT by cost packs otherwise


def test_token_packing_spreads_the_last_micro_batch_from_sp16_hand_checked() -> None:
    """SP16, B_tok=10: capacity 144. Bins {100,40} {30,20,10,5}; empty groups 2 and 3 take 30 and 20
    from bin 1; then (avg 205 // 4 = 51) group 1 takes 100 from group 0, group 2 takes it from group
    1 and group 3 from group 2, each move the first sample in batch order that fits."""
    units = pack_by_tokens(np.array([100, 40, 30, 20, 10, 5]), np.arange(6), 16, 4, 10)
    assert units.tolist() == [3, 0, 2, 3, 1, 1]
    below = pack_by_tokens(np.array([100, 40, 30, 20, 10, 5]), np.arange(6), 8, 4, 20)  # SP8: no spreading
    assert below.tolist() == [0, 0, 2, 3, 1, 1]


def test_token_packing_fills_micro_batches_in_bin_order() -> None:
    """SP1 on 2 GPUs, B_tok=50 (capacity 45): five bins of one sample each -> 3 micro-batches, the
    last one's empty group left empty (no bin holds two)."""
    units = pack_by_tokens(np.array([40, 40, 40, 40, 40]), np.arange(5), 1, 2, 50)
    assert units.tolist() == [0, 1, 2, 3, 4]
    assert group_capacity(4, 100, 380) == 380.0 and group_capacity(4, 100, 10) == pytest.approx(360.0)


def test_token_packing_never_exceeds_the_group_capacity() -> None:
    rng = np.random.default_rng(11)
    for _ in range(200):
        degree = int(2 ** rng.integers(0, 6))
        groups, budget = int(rng.integers(1, 9)), int(rng.integers(20, 400))
        n = int(rng.integers(1, 60))
        lengths = np.sort(rng.integers(1, degree * budget + 1, n))[::-1].astype(np.int64)
        ids = rng.permutation(n).astype(np.int64)
        units = pack_by_tokens(lengths, ids, degree, groups, budget)
        tokens = np.bincount(units, weights=lengths)
        assert tokens.max() <= group_capacity(degree, budget, int(lengths[0])) <= degree * budget
        used = int(units.max()) + 1
        assert used >= -(-int(lengths.sum()) // (degree * budget))


def test_token_packing_rejects_a_sample_no_group_holds() -> None:
    with pytest.raises(ValueError, match=r"a sample of 401 tokens exceeds a group of 4 GPU\(s\) at B_tok=100"):
        pack_by_tokens(np.array([401, 3]), np.arange(2), 4, 2, 100)
    wl = tiny_workload(gpus=4, token_budget=100)
    with pytest.raises(ValueError, match=r"degree 1 cannot hold sample 1 \(length 150\)"):
        get_planner("static", degree=1, packing="tokens").plan(batch_of([20, 150, 30]), wl)
    with pytest.raises(ValueError, match="packing must be one of load, tokens, got 'lpt'"):
        get_planner("static", packing="lpt")


def test_token_packing_auto_keeps_the_smallest_step_estimate() -> None:
    wl = tiny_workload(gpus=8, token_budget=4096)
    lengths = [3000, 2500, 900, 700, 400, 300, 200, 120, 100, 90, 80, 64, 50, 40, 33, 20, 17, 9, 5, 1]
    batch = batch_of(lengths)
    auto = get_planner("static", packing="tokens").plan(batch, wl)
    check_valid(auto, wl, lengths)
    steps = {
        d: get_planner("static", degree=d, packing="tokens").plan(batch, wl).metadata["step_estimate_s"]
        for d in (1, 2, 4, 8)
    }
    assert auto.metadata["step_estimate_s"] == pytest.approx(min(steps.values()))
