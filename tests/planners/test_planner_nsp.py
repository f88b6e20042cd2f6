"""NSP internals: vectorised beam scoring against direct loops, the greedy tail, options, ablations."""

from __future__ import annotations

import numpy as np
import pytest

from nspsim.planners import get_planner
from nspsim.planners.base import make_context
from nspsim.planners.lower_bound import lower_bound
from nspsim.planners.nsp.beam import Beam, Placing, _block_max, _scores, _select, expand, node_layout
from nspsim.planners.nsp.planner import prefix_share, prefix_size
from nspsim.planners.nsp.tail import TreeStates, complete, effective_degrees
from nspsim.planners.packing import least_loaded_fill, least_loaded_fill_many
from nspsim.planners.proxy import CostTable
from planner_fixtures import batch_of, check_valid, model_workload, tiny_workload

LEVELS = (8, 4, 2, 1)


def random_beam(rng: np.random.Generator, states: int, gpus: int = 16) -> Beam:
    layout = node_layout(gpus, LEVELS)
    return Beam(
        rng.uniform(0, 10, (states, gpus)),
        rng.uniform(0, 100, (states, gpus)),
        rng.random((states, layout.size)) < 0.3,
        rng.choice(LEVELS, states).astype(np.int64),
        [],
    )


def test_block_max_matches_a_loop_over_nodes() -> None:
    rng = np.random.default_rng(0)
    layout = node_layout(16, LEVELS)
    values = rng.uniform(0, 1, (3, 16))
    got = _block_max(values, layout)
    for u in range(layout.size):
        d, f = int(layout.degree[u]), int(layout.first[u])
        assert np.array_equal(got[:, u], values[:, f : f + d].max(axis=1))


def test_expand_updates_kept_states_in_place_or_copies_them_consistently() -> None:
    rng = np.random.default_rng(7)
    layout = node_layout(16, LEVELS)
    beam: Beam | None = Beam.empty(16, layout)
    for _ in range(40):
        assert beam is not None
        item = Placing(int(rng.integers(1, 500)), rng.uniform(0, 1, len(LEVELS)), rng.uniform(0, 0.1, len(LEVELS)), 0.0)
        parent_loads = beam.loads.copy()
        beam = expand(beam, item, layout, 1e9, width=int(rng.integers(1, 4)), monotone=False, lookahead=True)
        assert beam is not None
        parent, node = beam.steps[-1]
        for i, (p, u) in enumerate(zip(parent.tolist(), node.tolist())):
            d, f = int(layout.degree[u]), int(layout.first[u])
            added = beam.loads[i] - parent_loads[p]
            assert np.all(added[f : f + d] > 0) and np.all(np.delete(added, np.arange(f, f + d)) == 0)


def test_width_one_picks_the_lexicographic_best_with_the_lowest_index() -> None:
    rng = np.random.default_rng(8)
    for _ in range(200):
        n = int(rng.integers(1, 40))
        score, total, block = (rng.integers(0, 3, n).astype(float) for _ in range(3))
        score[rng.random(n) < 0.2] = np.inf
        got = _select(score[None, :], total[None, :], block[None, :], None, 1)
        finite = np.flatnonzero(score < np.inf)
        if finite.size == 0:
            assert got is None
            continue
        expect = min(finite.tolist(), key=lambda j: (score[j], total[j], block[j], j))
        assert got is not None and got[1].tolist() == [expect]


@pytest.mark.parametrize("lookahead", [False, True])
def test_scores_equal_the_critical_load_after_each_placement(lookahead: bool) -> None:
    rng = np.random.default_rng(1)
    layout = node_layout(16, LEVELS)
    for _ in range(20):
        beam = random_beam(rng, 3)
        level_cost, level_latency = rng.uniform(0, 3, len(LEVELS)), rng.uniform(0, 0.5, len(LEVELS))
        cost, latency = level_cost[layout.level_of], level_latency[layout.level_of]
        length, budget, rest = int(rng.integers(1, 300)), 150.0, float(rng.uniform(0, 50))
        item = Placing(length, level_cost, level_latency, rest)
        score, added, new_block, delta, feasible, _ = _scores(beam, item, layout, budget, True, lookahead)
        for s in range(beam.size):
            for u in range(layout.size):
                d, f = int(layout.degree[u]), int(layout.first[u])
                dl = cost[u] + latency[u] * beam.idle[s, u]
                after = beam.loads[s].copy()
                after[f : f + d] += dl
                expect = after.max()
                if lookahead:
                    expect = max(expect, (after.sum() + rest) / 16)
                assert score[s, u] == pytest.approx(expect, rel=1e-12)
                assert added[s, u] == pytest.approx(d * dl / 16)
                tok_ok = (beam.tokens[s, f : f + d] + length / d).max() <= budget * (1 + 1e-9)
                ok = tok_ok and length <= d * budget and d <= beam.last_degree[s]
                assert ok if feasible is None else bool(np.broadcast_to(feasible, score.shape)[s, u]) == ok


def test_expand_keeps_distinct_states_and_places_on_the_best_nodes() -> None:
    layout = node_layout(8, (8, 4, 2, 1))
    beam = Beam.empty(8, layout)
    item = Placing(10, np.array([1.0, 1.5, 2.5, 4.0]), np.zeros(4), 0.0)  # per-GPU cost at degree 8, 4, 2, 1
    out = expand(beam, item, layout, 1e9, width=3, monotone=True, lookahead=False)
    assert out is not None and out.size == 3  # every node of one level is equivalent: one per level
    assert out.last_degree.tolist() == [8, 4, 2]
    assert out.loads.max(axis=1).tolist() == [1.0, 1.5, 2.5]


def test_tail_goes_to_the_least_loaded_leaf_that_fits() -> None:
    wl = tiny_workload(gpus=4, token_budget=100)
    table = CostTable(wl.cost, wl.tree, [60, 50, 40, 30], wl.token_budget)
    layout = node_layout(4, wl.tree.degrees)
    state = TreeStates(
        np.array([[5.0, 0.0, 1.0, 2.0]]),
        np.array([[0.0, 60.0, 0.0, 0.0]]),
        np.zeros((1, layout.size), dtype=bool),
        layout,
    )
    degrees, firsts = complete(state, table, np.arange(4))
    assert degrees.tolist() == [[1, 1, 1, 1]]
    # GPU 1 is least loaded but holds 60 tokens: sample 0 (60 tokens) must skip it.
    assert firsts[0, 0] == 2
    assert np.all(state.tokens <= 100)


def test_filling_many_states_at_once_equals_filling_each_alone() -> None:
    rng = np.random.default_rng(4)
    for _ in range(40):
        states, units, n = int(rng.integers(1, 5)), int(rng.integers(1, 9)), int(rng.integers(1, 60))
        tokens = np.sort(rng.integers(1, 40, n))[::-1].astype(float)
        cost = tokens * 0.1 + tokens**2 * 0.002
        loads = rng.uniform(0, 5, (states, units))
        start_tok = rng.uniform(0, 50, (states, units))
        surcharge = rng.uniform(0, 0.3, (states, units)) * (rng.random((states, units)) < 0.3)
        budget = float(rng.uniform(60, 400))
        many, many_loads, _ = least_loaded_fill_many(loads, start_tok, cost, tokens, budget, surcharge)
        for s in range(states):
            one, one_loads, _ = least_loaded_fill(loads[s], start_tok[s], cost, tokens, budget, surcharge[s])
            assert many[s].tolist() == one.tolist()
            assert np.allclose(many_loads[s], one_loads)


def test_effective_degree_is_the_smallest_level_that_holds_the_sample() -> None:
    got = effective_degrees(np.array([250, 100, 99, 1]), 100, (4, 2, 1))
    assert got.tolist() == [4, 1, 1, 1]
    assert effective_degrees(np.array([150]), 100, (4, 1)).tolist() == [4]


def test_nsp2l_uses_only_spmax_and_leaves_and_nsp_is_no_worse() -> None:
    wl = model_workload(gpus=8, token_budget=32_768)
    lengths = [90_000, 40_000, 12_000, 9_000, 5_000, 3_000, 2_000, 900, 700, 300, 100, 50]
    batch = batch_of(lengths)
    two = get_planner("nsp2l").plan(batch, wl)
    full = get_planner("nsp").plan(batch, wl)
    assert {n.degree for n in two.nodes} <= {1, 8}
    assert full.metadata["load_s"] <= two.metadata["load_s"] * (1 + 1e-12)
    check_valid(full, wl, lengths)


def test_monotone_option_orders_degrees_by_length() -> None:
    wl = model_workload(gpus=8, token_budget=32_768)
    lengths = [90_000, 40_000, 30_000, 12_000, 9_000, 5_000, 3_000, 2_000, 900, 700, 300]
    plan = get_planner("nsp", seed_static=False, monotone=True, prefix_k=len(lengths)).plan(batch_of(lengths), wl)
    degrees = [n.degree for n in plan.nodes]
    assert all(a >= b for a, b in zip(degrees, degrees[1:]))


def test_attention_forward_proxy_routes_by_attention_only() -> None:
    wl = model_workload(gpus=8, token_budget=32_768)
    lengths = [60_000, 20_000, 4_000, 4_000, 1_000, 500, 500, 200]
    plan = get_planner("nsp", proxy="attn-fwd").plan(batch_of(lengths), wl)
    check_valid(plan, wl, lengths)
    assert plan.metadata["proxy"] == "attn-fwd"
    table = CostTable(wl.cost, wl.tree, lengths, wl.token_budget, kind="attn-fwd")
    assert np.all(table.sample_costs(4)[1] == 0)


def test_auto_prefix_counts_samples_a_leaf_cannot_absorb() -> None:
    wl = model_workload(gpus=8, token_budget=65_536)
    lengths = [60_000] + [500] * 200
    ctx = make_context(batch_of(lengths), wl)
    assert prefix_size(ctx.table, np.arange(len(lengths)), wl.tree.degrees, "auto") == 1
    assert prefix_size(ctx.table, np.arange(len(lengths)), wl.tree.degrees, 7) == 7


def test_auto_prefix_share_grows_above_256_gpus() -> None:
    assert prefix_share(8) == prefix_share(256) == 0.25 and prefix_share(512) == prefix_share(1024) == 0.35
    lengths = [int(x) for x in np.geomspace(500, 60_000, 300)]  # many samples between the two cuts
    for gpus, share in ((256, 0.25), (512, 0.35)):
        wl = model_workload(gpus=gpus, token_budget=65_536)
        ctx = make_context(batch_of(lengths), wl)
        leaf = ctx.table.total(1)
        cut = {s: int(np.count_nonzero(leaf >= s * float(leaf.sum()) / gpus)) for s in (0.25, 0.35)}
        assert cut[0.25] > cut[0.35]  # the two shares give different prefixes here
        assert prefix_size(ctx.table, np.arange(len(lengths)), wl.tree.degrees, "auto") == cut[share]


def test_static_seed_wins_when_the_beam_is_crippled() -> None:
    wl = model_workload(gpus=8, token_budget=65_536)
    lengths = [30_000, 30_000, 30_000, 30_000, 30_000, 30_000, 30_000, 30_000]
    plan = get_planner("nsp", prefix_k=1, beam_width=1, lookahead=False).plan(batch_of(lengths), wl)
    static = get_planner("static").plan(batch_of(lengths), wl)
    assert plan.metadata["load_s"] <= static.metadata["load_s"] * (1 + 1e-12)


def test_lower_bound_is_tight_for_one_sample_on_one_gpu() -> None:
    wl = tiny_workload(gpus=1, token_budget=4096)
    plan = get_planner("nsp").plan(batch_of([1000]), wl)
    table = CostTable(wl.cost, wl.tree, [1000], wl.token_budget)
    assert lower_bound(table) == pytest.approx(plan.metadata["load_s"], rel=1e-12)


@pytest.mark.parametrize("bad", [{"beam_width": 0}, {"prefix_k": -1}, {"proxy": "fast"}, {"monotone": "yes"}])
def test_invalid_options_are_named(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        get_planner("nsp", **bad)
