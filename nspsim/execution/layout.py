"""Which tokens each rank holds, before and during NSP execution (pure numpy; no torch).

A batch is a *packed stream*: samples in plan order, concatenated; token ``g`` of the stream is
position ``g - start[j]`` of its sample ``j``. Two layouts of that stream matter (docs/simulator.md):

* **Input layout** (the conventional one the data pipeline delivers and the loss is computed in):
  rank ``r`` holds the contiguous slice ``[bounds[r], bounds[r+1])`` of the stream, sizes as even as
  possible. It is the layout of one fixed SP group over all ranks, so no rank ever holds more than
  ``ceil(N / P)`` tokens however long the longest sample is.
* **Execution layout** (the plan's): for micro-batch ``m``, a sample on node ``u`` of degree ``k`` is
  cut into chunks and group rank ``i`` of ``u`` holds its chunks (:mod:`nspsim.execution.shards`).
  A rank's execution buffer lists its nodes in the plan's issue order, and inside a node each
  sample's chunks in plan order.

:func:`exchange` turns any two layouts of the same tokens into the all-to-all that converts one into
the other (split sizes, the rows each rank sends, the permutation each rank applies on receipt).
Everything is computed from the plan alone, identically on every rank, with ``rank`` and ``world``
as plain arguments. :func:`micro_batch_layout` derives only the calling rank's share: its execution
layout and its side of the layout-change all-to-all (:func:`rank_exchange`: where each of its input
tokens goes, by chunk arithmetic, and where each of its execution rows comes from), without building
any other rank's layout; :func:`exchanges` is the all-ranks construction it is tested against.
Trade-off: per-token index arrays (8 bytes per token) keep the arithmetic vectorised and exact for
any lengths; a rank holds only its own ``~N/P`` tokens' worth.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from nspsim.execution.shards import IntArray, NodeShards, input_bounds, node_shards, sample_of, sample_starts
from nspsim.plan import Plan
from nspsim.sp_tree import Node


@dataclass(frozen=True, kw_only=True)
class Slot:
    """One node a rank takes part in: its shards and the rank's rows ``[start, stop)`` in its
    execution buffer."""

    shards: NodeShards
    group_rank: int
    start: int
    stop: int

    def __post_init__(self) -> None:
        if not 0 <= self.group_rank < self.shards.degree or not 0 <= self.start <= self.stop:
            raise ValueError(
                f"{self.shards.node}: bad slot (group rank {self.group_rank}, rows [{self.start}, {self.stop}))"
            )

    @property
    def node(self) -> Node:
        """The SP-tree node."""
        return self.shards.node

    @property
    def rows(self) -> int:
        """Local rows of this slot."""
        return self.stop - self.start


@dataclass(frozen=True, kw_only=True)
class RankLayout:
    """A rank's execution layout for one micro-batch: its slots and the stream index of every row."""

    rank: int
    slots: tuple[Slot, ...]
    tokens: IntArray
    positions: IntArray

    @property
    def num_rows(self) -> int:
        """Rows of the execution buffer."""
        return int(self.tokens.size)


def rank_layout(plan: Plan, micro_batch: int, rank: int, shards: dict[Node, NodeShards] | None = None) -> RankLayout:
    """Execution layout of ``rank`` for ``micro_batch`` (see the module docstring)."""
    shards = shards if shards is not None else node_shards(plan, micro_batch)
    starts = sample_starts(plan)
    slots: list[Slot] = []
    tokens: list[IntArray] = []
    positions: list[IntArray] = []
    row = 0
    for node in plan.issue_order[micro_batch]:
        if not node.contains_rank(rank):
            continue
        sh = shards[node]
        gr = rank - node.first_rank
        pos = sh.local_positions(gr)
        tokens.append(starts[sh.samples][sh.local_sample_index(gr)] + pos)
        positions.append(pos)
        slots.append(Slot(shards=sh, group_rank=gr, start=row, stop=row + pos.size))
        row += pos.size
    return RankLayout(rank=rank, slots=tuple(slots), tokens=_cat(tokens), positions=_cat(positions))


def _cat(parts: list[IntArray]) -> IntArray:
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)


def input_tokens(plan: Plan, micro_batch: int, rank: int, world: int) -> IntArray:
    """Stream indices of ``micro_batch`` that ``rank`` holds in the input layout (increasing)."""
    bounds = input_bounds(int(plan.arrays[0].sum()), world)
    tokens = np.arange(int(bounds[rank]), int(bounds[rank + 1]), dtype=np.int64)
    keep = plan.arrays[3][sample_of(plan, tokens)] == micro_batch
    return np.asarray(tokens[keep], dtype=np.int64)


@dataclass(frozen=True, kw_only=True)
class Exchange:
    """One all-to-all that turns layout A into layout B (for one rank).

    The rank sends ``send_rows`` of its A buffer (grouped by destination; ``send_counts[d]`` to rank
    ``d``), receives ``recv_counts[s]`` rows from each source ``s`` in source order, and gets its B
    buffer as ``received[recv_perm]``.
    """

    send_rows: IntArray
    send_counts: IntArray
    recv_counts: IntArray
    recv_perm: IntArray

    def __post_init__(self) -> None:
        if self.send_rows.size != self.send_counts.sum() or self.recv_perm.size != self.recv_counts.sum():
            raise ValueError("an exchange must send sum(send_counts) rows and receive sum(recv_counts) rows")

    def reverse(self) -> Exchange:
        """The all-to-all from B back to A (the backward of this exchange)."""
        inverse = np.empty_like(self.recv_perm)
        inverse[self.recv_perm] = np.arange(self.recv_perm.size, dtype=np.int64)
        back = np.empty_like(self.send_rows)
        back[self.send_rows] = np.arange(self.send_rows.size, dtype=np.int64)
        return Exchange(send_rows=inverse, send_counts=self.recv_counts, recv_counts=self.send_counts, recv_perm=back)


def exchanges(src: Sequence[IntArray], dst: Sequence[IntArray], total: int) -> list[Exchange]:
    """Per-rank all-to-alls turning layout ``src`` into ``dst`` (lists of stream indices per rank).

    Every token must appear exactly once in each layout; ``total`` bounds the stream indices.
    """
    world = len(src)
    src_rank, src_pos = _owner_arrays(src, total)
    dst_rank, dst_pos = _owner_arrays(dst, total)
    present = src_rank >= 0
    if not np.array_equal(present, dst_rank >= 0):
        raise ValueError("the two layouts hold different tokens")
    toks = np.flatnonzero(present)
    counts = np.zeros((world, world), dtype=np.int64)
    np.add.at(counts, (src_rank[toks], dst_rank[toks]), 1)
    order = np.lexsort((dst_pos[toks], dst_rank[toks], src_rank[toks]))  # by source, destination, dst position
    sent = toks[order]
    recv_pos = _recv_positions(sent, src_rank, dst_rank, counts)
    out = []
    for r in range(world):
        mine = sent[src_rank[sent] == r]
        arrived = toks[dst_rank[toks] == r]
        perm = np.empty(arrived.size, dtype=np.int64)
        perm[dst_pos[arrived]] = recv_pos[arrived]
        out.append(Exchange(send_rows=src_pos[mine], send_counts=counts[r], recv_counts=counts[:, r], recv_perm=perm))
    return out


def _owner_arrays(layout: Sequence[IntArray], total: int) -> tuple[IntArray, IntArray]:
    rank = np.full(total, -1, dtype=np.int64)
    pos = np.full(total, -1, dtype=np.int64)
    for r, toks in enumerate(layout):
        if np.any(rank[toks] >= 0):
            raise ValueError(f"rank {r} holds a token that another rank (or itself) already holds")
        rank[toks] = r
        pos[toks] = np.arange(toks.size)
    return rank, pos


def _recv_positions(sent: IntArray, src_rank: IntArray, dst_rank: IntArray, counts: IntArray) -> IntArray:
    """Row of every token in its receiver's buffer (sources in rank order, each in send order)."""
    recv_pos = np.full(src_rank.size, -1, dtype=np.int64)
    offsets = np.cumsum(counts, axis=0) - counts  # offsets[s, d]: where source s starts at receiver d
    pair = src_rank[sent] * counts.shape[0] + dst_rank[sent]
    first = np.searchsorted(pair, pair, side="left")  # sent is sorted by (src, dst)
    recv_pos[sent] = offsets[src_rank[sent], dst_rank[sent]] + (np.arange(sent.size) - first)
    return recv_pos


# ---- one rank's side of the layout change ----------------------------------------------------------


def slot_starts(shards: dict[Node, NodeShards], world: int) -> dict[Node, IntArray]:
    """For every node, the first execution row of its slot on each of its group ranks (a rank's
    buffer holds its nodes in issue order)."""
    rows = np.zeros(world, dtype=np.int64)
    out: dict[Node, IntArray] = {}
    for node, sh in shards.items():
        span = slice(node.first_rank, node.first_rank + node.degree)
        out[node] = rows[span].copy()
        rows[span] += sh.rank_tokens
    return out


def execution_destinations(
    plan: Plan, shards: dict[Node, NodeShards], world: int, tokens: IntArray
) -> tuple[IntArray, IntArray]:
    """(rank, row in its execution buffer) of each stream token in ``tokens`` (all of the micro-batch
    ``shards`` describe), by chunk arithmetic on the token's sample, without building any rank's layout."""
    lengths = plan.arrays[0]
    sample = sample_of(plan, tokens)
    pos = tokens - sample_starts(plan)[sample]
    where = np.full(lengths.size, -1, dtype=np.int64)  # node-local sample index of every plan sample
    dst_rank = np.full(tokens.size, -1, dtype=np.int64)
    dst_row = np.full(tokens.size, -1, dtype=np.int64)
    starts = slot_starts(shards, world)
    node_of = np.full(lengths.size, -1, dtype=np.int64)
    nodes = list(shards)
    for i, sh in enumerate(shards.values()):
        node_of[sh.samples] = i
        where[sh.samples] = np.arange(sh.samples.size)
    tok_node = node_of[sample]
    for i in np.unique(tok_node):
        sel = np.flatnonzero(tok_node == i)
        sh = shards[nodes[int(i)]]
        rank, row = _node_destinations(sh, where[sample[sel]], pos[sel])
        dst_rank[sel] = sh.node.first_rank + rank
        dst_row[sel] = starts[sh.node][rank] + row
    return dst_rank, dst_row


def _node_destinations(sh: NodeShards, local: IntArray, pos: IntArray) -> tuple[IntArray, IntArray]:
    """(group rank, row in the rank's slot) of position ``pos`` of node sample ``local``."""
    offsets = sh.chunk_offsets[local]  # [tokens, chunks]; empty chunks (short samples) come last
    chunk = (offsets <= pos[:, None]).sum(axis=1) - 1
    offset = offsets[np.arange(local.size), chunk]
    group_rank = sh.owners[chunk]
    early = sh.chunk_sizes[local, group_rank]  # a Ring rank holds its early chunk, then its late one
    in_sample = pos - offset + np.where(chunk == group_rank, 0, early)
    local_sizes = np.stack([sh.local_sizes(r) for r in range(sh.degree)], axis=1)  # [samples, ranks]
    before = np.cumsum(local_sizes, axis=0) - local_sizes
    return group_rank, before[local, group_rank] + in_sample


def rank_exchange(
    plan: Plan, mine: IntArray, world: int, shards: dict[Node, NodeShards], layout: RankLayout
) -> Exchange:
    """One rank's side of the all-to-all from the input layout (its stream tokens ``mine``, from
    :func:`input_tokens`) to its execution layout ``layout``: equal to ``exchanges(inputs, layouts,
    total)[rank]`` but built from this rank's tokens only."""
    dst_rank, dst_row = execution_destinations(plan, shards, world, mine)
    send_rows = np.lexsort((dst_row, dst_rank)).astype(np.int64)  # by destination, then its row order
    bounds = input_bounds(int(plan.arrays[0].sum()), world)
    src = np.searchsorted(bounds, layout.tokens, side="right") - 1
    arrival = np.argsort(src, kind="stable")  # sources in rank order, each in this rank's row order
    recv_perm = np.empty_like(arrival)
    recv_perm[arrival] = np.arange(arrival.size, dtype=np.int64)
    return Exchange(
        send_rows=send_rows,
        send_counts=np.bincount(dst_rank, minlength=world).astype(np.int64),
        recv_counts=np.bincount(src, minlength=world).astype(np.int64),
        recv_perm=recv_perm.astype(np.int64),
    )


@dataclass(frozen=True, kw_only=True)
class MicroBatchLayout:
    """Everything one rank needs for one micro-batch: every node's shards, the rank's execution
    layout, its side of the layout change in, and its input rows that belong to the micro-batch."""

    shards: dict[Node, NodeShards]
    layout: RankLayout
    layout_in: Exchange
    input_rows: IntArray


def micro_batch_layout(plan: Plan, micro_batch: int, rank: int, world: int) -> MicroBatchLayout:
    """``rank``'s :class:`MicroBatchLayout` of ``micro_batch`` (no other rank's layout is built)."""
    shards = node_shards(plan, micro_batch)
    layout = rank_layout(plan, micro_batch, rank, shards)
    lo = int(input_bounds(int(plan.arrays[0].sum()), world)[rank])
    mine = input_tokens(plan, micro_batch, rank, world)
    return MicroBatchLayout(
        shards=shards, layout=layout, layout_in=rank_exchange(plan, mine, world, shards, layout), input_rows=mine - lo
    )
