"""Per-node chunk arithmetic of the execution layout (pure numpy; no torch).

For micro-batch ``m``, a sample on node ``u`` of degree ``k`` is cut into chunks and group rank ``i``
of ``u`` holds its chunks (docs/simulator.md). Ulysses: ``k`` contiguous shards, sizes differing by at
most one token (uneven lengths are split, never rejected). Ring: ``2k`` chunks, rank ``i`` holding
chunks ``i`` and ``2k-1-i`` (zigzag), so every rank gets an equal share of the causal triangle, and
:func:`ring_blocks` names the (query, key) blocks each ring step computes. Tokens are indices into
the *packed stream* (samples in plan order, concatenated; :func:`sample_starts`). Everything derives
from the plan alone, identically on every rank. Trade-off: per-token index arrays (8 bytes a token)
keep the arithmetic vectorised and exact for any lengths.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from nspsim.plan import Plan
from nspsim.sp_tree import Node
from nspsim.specs.backend import SPBackend, backend_layout

IntArray = npt.NDArray[np.int64]


def ranges(starts: npt.ArrayLike, lengths: npt.ArrayLike) -> IntArray:
    """Concatenation of ``arange(s, s + n)`` for every ``(s, n)`` pair, without a Python loop."""
    starts, lengths = np.asarray(starts, dtype=np.int64), np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    out_starts = np.cumsum(lengths) - lengths
    return np.asarray(np.repeat(starts - out_starts, lengths) + np.arange(total, dtype=np.int64), dtype=np.int64)


def sample_rows(lengths: IntArray, mask: npt.NDArray[np.bool_]) -> IntArray:
    """Rows of the selected samples in a buffer of whole samples laid end to end."""
    return ranges((np.cumsum(lengths) - lengths)[mask], lengths[mask])


def even_split(total: int, parts: int) -> IntArray:
    """Sizes of ``parts`` contiguous pieces of ``total`` items, the first ``total % parts`` one larger."""
    sizes = np.full(parts, total // parts, dtype=np.int64)
    sizes[: total % parts] += 1
    return sizes


def input_bounds(total: int, world: int) -> IntArray:
    """Stream offsets ``[0, ..., total]`` of the input layout: rank r owns ``[b[r], b[r+1])``."""
    return np.concatenate([[0], np.cumsum(even_split(total, world))]).astype(np.int64)


def chunk_owners(degree: int, backend: str) -> IntArray:
    """Group rank owning each chunk of a sample, by the backend's layout
    (:func:`~nspsim.specs.backend.backend_layout`): contiguous ``[0..k)`` (Ulysses), zigzag
    ``[0..k, k..0)`` (Ring); ``ValueError`` for an unknown backend."""
    layout = backend_layout(backend)
    if degree == 1 or layout.chunks == "contiguous":
        return np.arange(degree, dtype=np.int64)
    first = np.arange(degree, dtype=np.int64)
    return np.concatenate([first, first[::-1]])


def rank_chunks(degree: int, backend: str, group_rank: int) -> tuple[int, ...]:
    """Chunk ids a group rank holds of every sample, in local order."""
    owners = chunk_owners(degree, backend)
    return tuple(int(c) for c in np.flatnonzero(owners == group_rank))


@dataclass(frozen=True, kw_only=True)
class NodeShards:
    """How the samples of one node (in one micro-batch) are chunked over its group.

    ``chunk_sizes[s, c]`` is the length of chunk ``c`` of the node's ``s``-th sample; chunk offsets are
    cumulative within the sample.
    """

    node: Node
    backend: str
    samples: IntArray
    lengths: IntArray

    def __post_init__(self) -> None:
        if self.samples.shape != self.lengths.shape or np.any(self.lengths < 0):
            raise ValueError(f"{self.node}: samples and lengths must have one entry per sample, lengths >= 0")

    @cached_property
    def key(self) -> tuple[str, int, bytes]:
        """Content key (backend, degree, lengths): equal keys have equal index arrays, so derived
        arrays can be cached under it."""
        return (self.backend, self.degree, self.lengths.tobytes())

    @cached_property
    def owners(self) -> IntArray:
        """Group rank of every chunk."""
        return chunk_owners(self.node.degree, self.backend)

    @cached_property
    def chunk_sizes(self) -> IntArray:
        """``[num_samples, num_chunks]`` chunk lengths (even split of every sample)."""
        n = self.owners.size
        base = self.lengths[:, None] // n
        extra = (np.arange(n)[None, :] < (self.lengths[:, None] % n)).astype(np.int64)
        return (base + extra).astype(np.int64)

    @cached_property
    def chunk_offsets(self) -> IntArray:
        """``[num_samples, num_chunks]`` offset of every chunk inside its sample."""
        sizes = self.chunk_sizes
        return (np.cumsum(sizes, axis=1) - sizes).astype(np.int64)

    @property
    def degree(self) -> int:
        """SP degree of the node."""
        return self.node.degree

    def local_sizes(self, group_rank: int) -> IntArray:
        """Tokens of every sample held by ``group_rank``."""
        cols = list(rank_chunks(self.degree, self.backend, group_rank))
        return np.asarray(self.chunk_sizes[:, cols].sum(axis=1), dtype=np.int64)

    @cached_property
    def rank_tokens(self) -> IntArray:
        """Tokens held by every group rank (the Ulysses split sizes)."""
        return np.array([int(self.local_sizes(i).sum()) for i in range(self.degree)], dtype=np.int64)

    def local_positions(self, group_rank: int) -> IntArray:
        """Position inside its sample of every local row of ``group_rank`` (local order)."""
        cols = list(rank_chunks(self.degree, self.backend, group_rank))
        return ranges(self.chunk_offsets[:, cols].reshape(-1), self.chunk_sizes[:, cols].reshape(-1))

    def local_sample_index(self, group_rank: int) -> IntArray:
        """Node-local sample index (0..num_samples) of every local row of ``group_rank``."""
        return np.repeat(np.arange(self.samples.size), self.local_sizes(group_rank)).astype(np.int64)

    def subset(self, mask: npt.NDArray[np.bool_]) -> NodeShards:
        """The same node restricted to the samples selected by ``mask`` (a recompute subset)."""
        return NodeShards(node=self.node, backend=self.backend, samples=self.samples[mask], lengths=self.lengths[mask])

    def local_rows_of(self, group_rank: int, mask: npt.NDArray[np.bool_]) -> IntArray:
        """Local row indices of ``group_rank`` that belong to the samples selected by ``mask``."""
        return np.flatnonzero(mask[self.local_sample_index(group_rank)]).astype(np.int64)


def ulysses_gather_order(shards: NodeShards) -> IntArray:
    """Permutation from received order to sequence order after the Ulysses all-to-all.

    Received rows come grouped by source rank (each source's rows in its local order: sample by
    sample); whole sequences need, per sample, the shards of ranks 0..k-1 one after another.
    ``seq = received[perm]``.
    """
    sizes = np.stack([shards.local_sizes(r) for r in range(shards.degree)], axis=1)  # [samples, ranks]
    recv_start = np.concatenate([[0], np.cumsum(sizes.T.reshape(-1))[:-1]]).reshape(shards.degree, -1).T
    return ranges(recv_start.reshape(-1), sizes.reshape(-1))


def node_shards(plan: Plan, micro_batch: int, backend: str | None = None) -> dict[Node, NodeShards]:
    """Shards of every active node of ``micro_batch`` (samples in plan order)."""
    backend = backend or plan.backend
    lengths, degrees, firsts, mbs = plan.arrays
    out: dict[Node, NodeShards] = {}
    for node in plan.issue_order[micro_batch]:
        ids = np.flatnonzero((mbs == micro_batch) & (degrees == node.degree) & (firsts == node.first_rank))
        out[node] = NodeShards(node=node, backend=backend, samples=ids.astype(np.int64), lengths=lengths[ids])
    return out


def sample_starts(plan: Plan) -> IntArray:
    """Stream offset of every sample."""
    lengths = plan.arrays[0]
    return np.asarray(np.cumsum(lengths) - lengths, dtype=np.int64)


def sample_of(plan: Plan, tokens: IntArray) -> IntArray:
    """Sample index of each stream token in ``tokens``."""
    ends = np.cumsum(plan.arrays[0])
    return np.asarray(np.searchsorted(ends, tokens, side="right"), dtype=np.int64)


@dataclass(frozen=True, kw_only=True)
class RingBlock:
    """One varlen attention call of a Ring step: local query rows against rows of the key/value
    buffer received at that step, segmented per sample."""

    q_rows: IntArray
    k_rows: IntArray
    q_lengths: IntArray
    k_lengths: IntArray
    causal: bool

    def __post_init__(self) -> None:
        if self.q_rows.size != self.q_lengths.sum() or self.k_rows.size != self.k_lengths.sum():
            raise ValueError("a ring block's rows must add up to its segment lengths")


def _zigzag_halves(shards: NodeShards, group_rank: int) -> tuple[IntArray, IntArray, IntArray]:
    """(start of each sample in the rank's local buffer, length of its early chunk, of its late chunk)."""
    early, late = rank_chunks(shards.degree, SPBackend.RING, group_rank)
    first, second = shards.chunk_sizes[:, early], shards.chunk_sizes[:, late]
    starts = (np.cumsum(first + second) - first - second).astype(np.int64)
    return starts, first.astype(np.int64), second.astype(np.int64)


def ring_blocks(shards: NodeShards, group_rank: int, step: int) -> tuple[RingBlock, ...]:
    """Causal zigzag Ring attention work of ``group_rank`` at ``step`` (keys from rank ``i - step``).

    Rank i holds chunks i (early) and 2k-1-i (late) of every sample. At step 0 both chunks attend to
    themselves causally and the late chunk attends fully to the early one; from an earlier rank
    (s < i) all local queries attend fully to its early chunk; from a later rank (s > i) only the late
    local chunk attends, fully, to both of its chunks. Every step after the first costs every rank
    the same, which is the point of the zigzag layout.
    """
    k = shards.degree
    src = (group_rank - step) % k
    q0, qa, qb = _zigzag_halves(shards, group_rank)
    k0, ka, kb = _zigzag_halves(shards, src)
    if step == 0:
        starts = np.stack([q0, q0 + qa], axis=1).reshape(-1)
        lens = np.stack([qa, qb], axis=1).reshape(-1)
        rows = ranges(starts, lens)
        diag = RingBlock(q_rows=rows, k_rows=rows, q_lengths=lens, k_lengths=lens, causal=True)
        cross = RingBlock(q_rows=ranges(q0 + qa, qb), k_rows=ranges(q0, qa), q_lengths=qb, k_lengths=qa, causal=False)
        return diag, cross
    if src < group_rank:
        return (
            RingBlock(q_rows=ranges(q0, qa + qb), k_rows=ranges(k0, ka), q_lengths=qa + qb, k_lengths=ka, causal=False),
        )
    return (
        RingBlock(
            q_rows=ranges(q0 + qa, qb), k_rows=ranges(k0, ka + kb), q_lengths=qb, k_lengths=ka + kb, causal=False
        ),
    )
