"""Pure layout and schedule logic, checked for every rank in one process."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import make_batch
from nspsim.execution.layout import exchanges, input_tokens, micro_batch_layout, rank_exchange, rank_layout
from nspsim.execution.schedule import order_conflicts, rank_steps, stream_order
from nspsim.execution.shards import (
    NodeShards,
    input_bounds,
    node_shards,
    ranges,
    ring_blocks,
    sample_rows,
    ulysses_gather_order,
)
from nspsim.plan import make_plan
from nspsim.sp_tree import Node
from nspsim.specs.clusters import get_cluster
from nspsim.specs.model import get_model


def plan_of(lengths, nodes, world, micro_batches=None, backend="ulysses"):
    return make_plan(
        planner="hand",
        cluster=get_cluster("cpu", world),
        model=get_model("tiny"),
        batch=make_batch(lengths),
        spmax=world,
        token_budget=10**6,
        nodes=nodes,
        micro_batches=micro_batches,
        backend=backend,
    )


NESTED = dict(
    lengths=[37, 5, 13, 21, 3, 9, 1],
    world=4,
    nodes=[Node(4, 0), Node(1, 0), Node(2, 0), Node(1, 1), Node(2, 1), Node(1, 3), Node(4, 0)],
)


def test_input_bounds_are_even_and_cover_the_stream() -> None:
    b = input_bounds(10, 4)
    assert b.tolist() == [0, 3, 6, 8, 10]


@pytest.mark.parametrize("backend", ["ulysses", "ring"])
def test_every_token_is_held_exactly_once_in_the_execution_layout(backend: str) -> None:
    plan = plan_of(NESTED["lengths"], NESTED["nodes"], 4, backend=backend)
    held = np.concatenate([rank_layout(plan, 0, r).tokens for r in range(4)])
    assert sorted(held.tolist()) == list(range(sum(NESTED["lengths"])))


def test_ulysses_shards_are_contiguous_and_uneven_lengths_split_by_one_token() -> None:
    sh = NodeShards(node=Node(4, 0), backend="ulysses", samples=np.array([0, 1]), lengths=np.array([10, 3]))
    assert sh.rank_tokens.tolist() == [4, 4, 3, 2]  # 10 -> 3,3,2,2 and 3 -> 1,1,1,0
    assert sh.local_positions(0).tolist() == [0, 1, 2, 0]
    assert sh.local_positions(3).tolist() == [8, 9]
    # Received order is (rank 0: s0 s1, rank 1: s0 s1, ...); sequence order puts each sample whole.
    perm = ulysses_gather_order(sh)
    recv_pos = np.concatenate([sh.local_positions(r) for r in range(4)])
    recv_sample = np.concatenate([sh.local_sample_index(r) for r in range(4)])
    assert recv_sample[perm].tolist() == [0] * 10 + [1] * 3
    assert recv_pos[perm].tolist() == list(range(10)) + list(range(3))


def test_ring_zigzag_gives_rank_i_chunks_i_and_2k_minus_1_minus_i() -> None:
    sh = NodeShards(node=Node(2, 0), backend="ring", samples=np.array([0]), lengths=np.array([8]))
    assert sh.local_positions(0).tolist() == [0, 1, 6, 7]
    assert sh.local_positions(1).tolist() == [2, 3, 4, 5]


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(1, 40), min_size=1, max_size=4), k=st.sampled_from([2, 4, 8]))
def test_ring_blocks_cover_the_causal_triangle_exactly_once(lengths: list[int], k: int) -> None:
    sh = NodeShards(
        node=Node(k, 0), backend="ring", samples=np.arange(len(lengths)), lengths=np.array(lengths, dtype=np.int64)
    )
    pos = [sh.local_positions(r) for r in range(k)]
    sample = [sh.local_sample_index(r) for r in range(k)]
    cover = [np.zeros((n, n), dtype=np.int64) for n in lengths]
    for i in range(k):
        for step in range(k):
            src = (i - step) % k
            for blk in ring_blocks(sh, i, step):
                q_seg = np.split(blk.q_rows, np.cumsum(blk.q_lengths)[:-1])
                k_seg = np.split(blk.k_rows, np.cumsum(blk.k_lengths)[:-1])
                for qr, kr in zip(q_seg, k_seg):
                    if qr.size == 0 or kr.size == 0:
                        continue
                    s = int(sample[i][qr[0]])
                    assert np.all(sample[i][qr] == s) and np.all(sample[src][kr] == s)
                    for a, q_row in enumerate(qr):
                        keys = kr[: a + 1] if blk.causal else kr
                        cover[s][pos[i][q_row], pos[src][keys]] += 1
    for n, c in zip(lengths, cover):
        assert np.array_equal(c, np.tril(np.ones((n, n), dtype=np.int64)))


def test_ring_steps_after_the_first_cost_every_rank_the_same() -> None:
    sh = NodeShards(node=Node(4, 0), backend="ring", samples=np.array([0]), lengths=np.array([64]))
    for step in range(1, 4):
        work = {i: sum(int((b.q_lengths * b.k_lengths).sum()) for b in ring_blocks(sh, i, step)) for i in range(4)}
        assert len(set(work.values())) == 1, work


@pytest.mark.parametrize("world", [2, 4, 8])
def test_layout_exchange_round_trips(world: int) -> None:
    rng = np.random.default_rng(world)
    lengths = rng.integers(1, 30, size=9).tolist()
    nodes = [Node(int(d), int(rng.integers(0, world // d))) for d in rng.choice([1, 2, world], size=9)]
    plan = plan_of(lengths, nodes, world)
    total = sum(lengths)
    src = [input_tokens(plan, 0, r, world) for r in range(world)]
    dst = [rank_layout(plan, 0, r).tokens for r in range(world)]
    fwd = exchanges(src, dst, total)
    # Simulate the all-to-all on token ids: each rank's received rows must equal its layout.
    sent = [src[r][fwd[r].send_rows] for r in range(world)]
    for r in range(world):
        pieces = []
        for s in range(world):
            off = int(fwd[s].send_counts[:r].sum())
            pieces.append(sent[s][off : off + int(fwd[s].send_counts[r])])
        received = np.concatenate(pieces)
        assert received.size == fwd[r].recv_counts.sum()
        assert np.array_equal(received[fwd[r].recv_perm], dst[r])
    back = [e.reverse() for e in fwd]
    for r in range(world):
        assert np.array_equal(back[r].send_counts, fwd[r].recv_counts)
        inv = dst[r][back[r].send_rows]
        assert sorted(inv.tolist()) == sorted(dst[r].tolist())


@st.composite
def nested_plans(draw: st.DrawFn):  # type: ignore[no-untyped-def]
    world = draw(st.sampled_from([2, 4, 8]))
    n = draw(st.integers(1, 12))
    lengths = draw(st.lists(st.integers(1, 40), min_size=n, max_size=n))
    degrees = draw(st.lists(st.sampled_from([d for d in (1, 2, 4, 8) if d <= world]), min_size=n, max_size=n))
    nodes = [Node(d, draw(st.integers(0, world // d - 1))) for d in degrees]
    count = draw(st.integers(1, min(3, n)))  # micro-batches, each with at least one sample
    micro = draw(st.permutations([j % count for j in range(n)]))
    backend = draw(st.sampled_from(["ulysses", "ring"]))
    return plan_of(lengths, nodes, world, micro_batches=list(micro), backend=backend)


@settings(max_examples=60, deadline=None)
@given(plan=nested_plans())
def test_one_ranks_exchange_equals_the_all_ranks_construction_for_every_rank(plan) -> None:  # type: ignore[no-untyped-def]
    world, total = plan.cluster.num_gpus, sum(plan.lengths)
    for mb in range(plan.num_micro_batches):
        shards = node_shards(plan, mb)
        layouts = [rank_layout(plan, mb, r, shards) for r in range(world)]
        full = exchanges(
            [input_tokens(plan, mb, r, world) for r in range(world)], [lay.tokens for lay in layouts], total
        )
        for rank in range(world):
            mine = rank_exchange(plan, input_tokens(plan, mb, rank, world), world, shards, layouts[rank])
            for name in ("send_rows", "send_counts", "recv_counts", "recv_perm"):
                assert np.array_equal(getattr(mine, name), getattr(full[rank], name)), (mb, rank, name)
            mbl = micro_batch_layout(plan, mb, rank, world)
            assert np.array_equal(mbl.layout.tokens, layouts[rank].tokens)
            lo = input_bounds(total, world)[rank]
            assert np.array_equal(mbl.input_rows + lo, input_tokens(plan, mb, rank, world))


def test_vectorised_ranges_match_the_loop() -> None:
    starts, lengths = np.array([5, 0, 9, 2]), np.array([3, 0, 1, 2])
    assert ranges(starts, lengths).tolist() == [5, 6, 7, 9, 2, 3]
    assert ranges(np.zeros(0), np.zeros(0)).size == 0
    assert sample_rows(np.array([2, 3, 1]), np.array([False, True, True])).tolist() == [2, 3, 4, 5]


def test_micro_batches_split_the_input_layout() -> None:
    plan = plan_of([8, 8, 8, 8], [Node(2, 0), Node(2, 1), Node(2, 0), Node(2, 1)], 4, micro_batches=[0, 0, 1, 1])
    mb0 = np.concatenate([input_tokens(plan, 0, r, 4) for r in range(4)])
    mb1 = np.concatenate([input_tokens(plan, 1, r, 4) for r in range(4)])
    assert mb0.tolist() == list(range(16)) and mb1.tolist() == list(range(16, 32))


def test_node_shards_follow_the_issue_order() -> None:
    plan = plan_of(NESTED["lengths"], NESTED["nodes"], 4)
    assert list(node_shards(plan, 0)) == list(plan.issue_order[0])
    slots = rank_layout(plan, 0, 1).slots
    assert [s.node for s in slots] == [Node(4, 0), Node(2, 0), Node(1, 1)]
    assert slots[0].start == 0 and all(a.stop == b.start for a, b in zip(slots, slots[1:]))


# ---- schedule ------------------------------------------------------------------------------------
def test_stream_order_issues_the_next_prologue_before_the_current_compute() -> None:
    a, b, c = Node(4, 0), Node(2, 0), Node(1, 0)
    assert [str(s) for s in stream_order([a, b, c])] == [  # default: every prologue first (the paper's queues)
        "P(sp4#0)",
        "P(sp2#0)",
        "P(sp1#0)",
        "C(sp4#0)",
        "E(sp4#0)",
        "C(sp2#0)",
        "E(sp2#0)",
        "C(sp1#0)",
        "E(sp1#0)",
    ]
    assert [str(s) for s in stream_order([a, b, c], lookahead=1)] == [
        "P(sp4#0)",
        "P(sp2#0)",
        "C(sp4#0)",
        "E(sp4#0)",
        "P(sp1#0)",
        "C(sp2#0)",
        "E(sp2#0)",
        "C(sp1#0)",
        "E(sp1#0)",
    ]
    assert [str(s) for s in stream_order([a, b], lookahead=0)] == [
        "P(sp4#0)",
        "C(sp4#0)",
        "E(sp4#0)",
        "P(sp2#0)",
        "C(sp2#0)",
        "E(sp2#0)",
    ]


def _comm_log(order, world, lookahead):
    return {
        r: [
            (tuple(s.node.ranks), str(s))
            for s in rank_steps(order, r, lookahead)
            if s.node.degree > 1 and s.phase != "compute"
        ]
        for r in range(world)
    }


@pytest.mark.parametrize("lookahead", [0, 1, 2, None])
def test_every_pair_of_ranks_issues_shared_collectives_in_the_same_order(lookahead: int | None) -> None:
    rng = np.random.default_rng(lookahead or 7)
    nodes = list({Node(int(d), int(rng.integers(0, 8 // d))) for d in rng.choice([1, 2, 4, 8], size=20)})
    rng.shuffle(nodes)
    assert order_conflicts(_comm_log(nodes, 8, lookahead)) == []


def test_order_conflicts_detects_a_per_rank_greedy_schedule() -> None:
    # A per-rank pipeline (prologue of the rank's *own* next node) reorders shared collectives:
    # rank 0 runs [top, w, y] as P(top) P(w) E(top) P(y)..., rank 1 runs [top, y] as P(top) P(y) E(top).
    top, y = (0, 1, 2, 3), (0, 1)
    logs = {
        0: [(top, "P(top)"), ((0,), "P(w)"), (top, "E(top)"), (y, "P(y)"), (y, "E(y)")],
        1: [(top, "P(top)"), (y, "P(y)"), (top, "E(top)"), (y, "E(y)")],
    }
    conflicts = order_conflicts(logs)
    assert len(conflicts) == 1 and conflicts[0].startswith("ranks 0 and 1 diverge at shared collective #1")
