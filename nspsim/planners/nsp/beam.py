"""The long-prefix tree search of NSP's Algorithm 1 (paper 4.1.3, docs/planners.md), vectorised with numpy.

A beam holds S <= w states, each (a, C, T, active): the partial assignment (back-pointers), the
per-GPU proxy load C_p, the per-GPU token load T_p and which nodes already run (a node's collective
latency is paid once). Expanding the beam by sample j scores every (state, node) pair at once, for
all levels together (nodes laid out level by level, largest degree first):

* block maxima of C and T over the aligned rank blocks of level d are a reshape ``(S, P/d, d)``
  reduced on the last axis, built bottom-up (level 2d from level d);
* placing j on node u adds delta = c_j(d) (+ latency if u is idle) to the block, so the new critical
  load is ``max(max of C outside u, blockmax_u + delta)``; the outside maximum is the larger of a
  prefix maximum before u's first rank and a suffix maximum after its last;
* a candidate is feasible if ``blockmax(T)_u + L_j / d <= B_tok``, L_j fits the degree, and, with
  the monotone-SP option, d is no larger than the degree of the state's previous (longer) sample.

Recompute-aware scoring (memory-bound batches, ``Placing.memory`` given): a state also carries the
attention bytes per GPU its placed samples keep, in placement order (longest first, so roughly the
executor's roots-first marking, :mod:`nspsim.execution.recompute`). Placing j on u keeps its attention
if ``blockmax(saved)_u + bytes_j(d)`` fits the free bytes (activation capacity minus the routing
budget's base activations, what every GPU has once it is filled to the budget); otherwise the sample
will rerun its attention in backward, so delta gains its recompute pass on u. States are then
scored with the recomputation they imply, and the search prefers a node whose memory can still keep
the sample (a larger degree, or a less crowded subtree) when that is cheaper than recomputing.

The w feasible candidates with the smallest *score* survive. The score is the critical load
max_p C'_p, as in the paper; with ``lookahead`` it is max(max_p C'_p, (sum_p C'_p + R) / P), where R
is the remaining samples' cost on single GPUs: the load every GPU must at least reach once the rest
is placed. Without it, the first placements always raise the maximum (every GPU is still empty), so
the myopic choice is the node with the smallest per-GPU cost - the root, which pays the most
communication - even though the tail will later fill every GPU to a common level (measured in
docs/planners.md). Ties, which are common, are broken by the total added work (least communication)
and then by the new block maximum (least-loaded block); candidates equal in all three keys are
symmetric copies (e.g. any empty subtree; such copies are bitwise equal) and are kept once, so the
beam holds w distinct states.

Speed: numpy's per-call overhead dominates at these sizes, so an expansion is written as ~40 array
calls whatever the beam width and level count: block maxima are written level by level into one
preallocated (S, nodes) array; feasibility masks are skipped when nothing can be infeasible; a beam
that keeps every state once is updated in place; with width 1 the ties of the best score (often
hundreds of equivalent nodes) are filtered key by key instead of sorted. (Measured and dropped:
block maxima kept incrementally per state, and one lexsort over all candidates for width 2 - both
cost more calls than they saved.)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from nspsim.planners.packing import BUDGET_RTOL

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
_TIE_RTOL = 1e-12


@dataclass(frozen=True)
class NodeLayout:
    """All nodes of the chosen levels, concatenated level by level (largest degree first)."""

    levels: tuple[int, ...]
    degree: IntArray
    first: IntArray
    offset: dict[int, int]
    ranks: IntArray
    level_of: IntArray
    share: FloatArray

    @property
    def size(self) -> int:
        """Number of nodes."""
        return int(self.degree.size)


@lru_cache(maxsize=64)
def node_layout(num_gpus: int, levels: tuple[int, ...]) -> NodeLayout:
    """Node arrays for ``levels`` (sorted largest first) over ``num_gpus`` ranks."""
    ordered = tuple(sorted(levels, reverse=True))
    degree = np.concatenate([np.full(num_gpus // d, d, dtype=np.int64) for d in ordered])
    first = np.concatenate([np.arange(0, num_gpus, d, dtype=np.int64) for d in ordered])
    sizes = [num_gpus // d for d in ordered]
    offset = dict(zip(ordered, np.cumsum([0, *sizes[:-1]]).tolist()))
    level_of = np.repeat(np.arange(len(ordered), dtype=np.int64), sizes)
    return NodeLayout(
        ordered, degree, first, offset, np.arange(num_gpus, dtype=np.int64), level_of, degree / float(num_gpus)
    )


@dataclass
class Beam:
    """S states over P GPUs; ``idle`` is (S, nodes), True where a node has no sample yet;
    ``steps`` hold (parent, node) per placed sample; ``saved`` (S, P) the attention bytes kept per GPU
    (recompute-aware search only, else ``None``)."""

    loads: FloatArray
    tokens: FloatArray
    idle: BoolArray
    last_degree: IntArray
    steps: list[tuple[IntArray, IntArray]]
    saved: FloatArray | None = None

    @staticmethod
    def empty(num_gpus: int, layout: NodeLayout, track_memory: bool = False) -> Beam:
        """The single empty state (nothing placed); ``track_memory`` for the recompute-aware search."""
        return Beam(
            np.zeros((1, num_gpus)),
            np.zeros((1, num_gpus)),
            np.ones((1, layout.size), dtype=bool),
            np.full(1, max(layout.levels), dtype=np.int64),
            [],
            np.zeros((1, num_gpus)) if track_memory else None,
        )

    @property
    def size(self) -> int:
        """Number of states S."""
        return int(self.loads.shape[0])

    def assignment(self, state: int, layout: NodeLayout) -> tuple[IntArray, IntArray]:
        """(degrees, first ranks) of the prefix samples of ``state``, by back-pointers."""
        nodes = np.empty(len(self.steps), dtype=np.int64)
        for i in range(len(self.steps) - 1, -1, -1):
            parent, node = self.steps[i]
            nodes[i] = node[state]
            state = int(parent[state])
        return layout.degree[nodes], layout.first[nodes]


@dataclass(frozen=True)
class SampleMemory:
    """One prefix sample's memory side, per level (layout order): attention bytes each GPU of the
    node keeps if it is saved, the recompute pass each GPU runs if it is not; and the free bytes
    per GPU for saved attention."""

    attn_bytes: FloatArray
    remat: FloatArray
    free: float


@dataclass(frozen=True)
class Placing:
    """One prefix sample: its length, per-GPU cost per level (layout order), latency per level,
    the single-GPU cost of the samples after it (for the lookahead) and, for the recompute-aware
    search, its :class:`SampleMemory`."""

    length: int
    cost: FloatArray
    latency: FloatArray
    rest: float
    memory: SampleMemory | None = None

    def per_node(self, layout: NodeLayout, budget: float) -> tuple[FloatArray, FloatArray, BoolArray | None]:
        """Per node: cost if active, cost if idle, fits in memory (``None``: every node fits)."""
        cost = self.cost[layout.level_of]
        idle = cost + self.latency[layout.level_of]
        fits = None if self.length <= min(layout.levels) * budget else self.length <= layout.degree * budget
        return cost, idle, fits


@dataclass(frozen=True)
class Prefix:
    """The prefix samples of one search as arrays, rows in placement order, columns in layout level
    order: lengths, per-GPU cost, latency per level, the single-GPU cost after each sample, and for
    the recompute-aware search the attention bytes kept and recompute pass per GPU and the free bytes
    (:class:`SampleMemory`; ``attn``/``remat`` ``None`` otherwise)."""

    lengths: IntArray
    cost: FloatArray
    latency: FloatArray
    rest: FloatArray
    attn: FloatArray | None = None
    remat: FloatArray | None = None
    free: float = 0.0

    def placings(self) -> list[Placing]:
        """The samples as :class:`Placing` items, in order."""
        return [
            Placing(
                int(self.lengths[i]),
                self.cost[i],
                self.latency,
                float(self.rest[i]),
                None
                if self.attn is None or self.remat is None
                else SampleMemory(self.attn[i], self.remat[i], self.free),
            )
            for i in range(self.lengths.size)
        ]


@dataclass(frozen=True)
class Searched:
    """The final beam: per state (rows) the per-GPU loads and tokens, the idle nodes, and per prefix
    sample its node's degree and first rank."""

    loads: FloatArray
    tokens: FloatArray
    idle: BoolArray
    degrees: IntArray
    firsts: IntArray


def search_reference(
    prefix: Prefix, layout: NodeLayout, budget: int, width: int, monotone: bool, lookahead: bool
) -> Searched | None:
    """The final beam of placing the ``prefix`` samples in order with :func:`expand` (``None`` when
    one of them fits no state): the numpy reference the compiled search
    (:mod:`~nspsim.planners.nsp.beam_kernel`) equals."""
    num_gpus = int(layout.ranks.size)
    beam: Beam | None = Beam.empty(num_gpus, layout, track_memory=prefix.attn is not None)
    for item in prefix.placings():
        assert beam is not None
        beam = expand(beam, item, layout, budget, width, monotone, lookahead)
        if beam is None:
            return None
    assert beam is not None
    pairs = [beam.assignment(s, layout) for s in range(beam.size)]
    k = prefix.lengths.size
    degrees = np.array([d for d, _ in pairs], dtype=np.int64).reshape(beam.size, k)
    firsts = np.array([f for _, f in pairs], dtype=np.int64).reshape(beam.size, k)
    return Searched(beam.loads, beam.tokens, beam.idle, degrees, firsts)


def _block_max(values: FloatArray, layout: NodeLayout) -> FloatArray:
    """(S, nodes): max of ``values`` over every node's ranks; level 2d is the pairwise max of level d."""
    out = np.empty((values.shape[0], layout.size))
    level, deg = values, 1
    while True:
        start = layout.offset.get(deg)
        if deg == layout.levels[0]:
            out[:, start : start + level.shape[1]] = level
            return out
        nxt = np.maximum(level[:, 0::2], level[:, 1::2])
        if start is not None:
            out[:, start : start + level.shape[1]] = level
        level, deg = nxt, 2 * deg


def _token_feasible(beam: Beam, item: Placing, layout: NodeLayout, budget: float) -> BoolArray | None:
    """(S, nodes) token feasibility, or ``None`` when every node fits in every state."""
    limit = budget * (1 + BUDGET_RTOL)
    if float(beam.tokens.max()) + item.length <= limit:
        return None
    out: BoolArray = _block_max(beam.tokens, layout) + item.length / layout.degree <= limit
    return out


def _kept(beam: Beam, item: Placing, layout: NodeLayout) -> BoolArray | None:
    """(S, nodes): whether the sample's attention still fits the free bytes of every rank of the node
    (``None`` outside the recompute-aware search)."""
    if item.memory is None or beam.saved is None:
        return None
    mem = item.memory
    out: BoolArray = _block_max(beam.saved, layout) + mem.attn_bytes[layout.level_of] <= mem.free
    return out


def _scores(
    beam: Beam, item: Placing, layout: NodeLayout, budget: float, monotone: bool, lookahead: bool
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, BoolArray | None, BoolArray | None]:
    """Per (state, node): score, total work added / P, new block max, delta, feasibility (possibly
    (nodes,) when it is the same for every state, ``None`` when everything is feasible) and whether
    the sample's attention is kept (``None`` outside the recompute-aware search).

    The critical load after adding delta to node u is ``max(M, blockmax_u + delta)`` with M the
    state's current maximum: if u holds the critical GPU its block max is M and the sum dominates
    everything outside u; otherwise the outside maximum is M.
    """
    cost, cost_idle, fits = item.per_node(layout, budget)
    delta = np.where(beam.idle, cost_idle, cost)
    kept = _kept(beam, item, layout)
    if kept is not None and item.memory is not None:
        delta += np.where(kept, 0.0, item.memory.remat[layout.level_of])
    new_block = _block_max(beam.loads, layout)
    new_block += delta
    score = np.maximum(beam.loads.max(axis=1)[:, None], new_block)
    added = delta * layout.share
    if lookahead:
        base = (beam.loads.sum(axis=1) + item.rest) / beam.loads.shape[1]
        np.maximum(score, added + base[:, None], out=score)
    feasible: BoolArray | None = fits
    if monotone:
        feasible = (
            (layout.degree <= beam.last_degree[:, None])
            if fits is None
            else fits & (layout.degree <= beam.last_degree[:, None])
        )
    tokens = _token_feasible(beam, item, layout, budget)
    if tokens is not None:
        feasible = tokens if feasible is None else feasible & tokens
    return score, added, new_block, delta, feasible, kept


def _distinct_order(keys: tuple[FloatArray, FloatArray, FloatArray], pool: IntArray, width: int) -> IntArray:
    """The ``width`` best of ``pool`` by the keys in order, candidates equal in every key kept once."""
    ranked = pool[np.lexsort((keys[2][pool], keys[1][pool], keys[0][pool]))]
    a, b, c = keys[0][ranked], keys[1][ranked], keys[2][ranked]
    keep = np.ones(ranked.size, dtype=bool)
    keep[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1]) | (c[1:] != c[:-1])
    chosen: IntArray = ranked[keep][:width]
    return chosen


def _best(score: FloatArray, total: FloatArray, new_block: FloatArray, nodes: int) -> tuple[IntArray, IntArray] | None:
    """The single best candidate (flat arrays): lowest score, then total, then new block max, then
    index - by successive filtering of the ties (often hundreds of equivalent nodes), not sorting."""
    low = score.min()
    if low == np.inf:
        return None
    ties = np.flatnonzero(score == low)
    if ties.size > 1:
        t = total[ties]
        ties = ties[t == t.min()]
        ties = ties[np.argmin(new_block[ties]) :][:1]
    return np.divmod(ties[:1], nodes)


def _select(
    score: FloatArray, total: FloatArray, new_block: FloatArray, feasible: BoolArray | None, width: int
) -> tuple[IntArray, IntArray] | None:
    """(state, node) of the ``width`` best distinct feasible candidates; ``None`` if none is feasible.

    Ranks a pool of the best-scoring candidates, widening it while symmetric copies leave fewer than
    ``width`` distinct ones."""
    masked = (score if feasible is None else np.where(feasible, score, np.inf)).ravel()
    keys = (masked, total.ravel(), new_block.ravel())
    if width == 1:
        return _best(masked, keys[1], keys[2], score.shape[1])
    pool_size = 16 * width
    while True:
        if pool_size >= masked.size:
            pool = np.flatnonzero(masked < np.inf)
            if pool.size == 0:
                return None
            chosen = _distinct_order(keys, pool, width)
            break
        cut = np.partition(masked, pool_size - 1)[pool_size - 1]
        if cut == np.inf:
            pool_size = masked.size
            continue
        chosen = _distinct_order(keys, np.flatnonzero(masked <= cut), width)
        if chosen.size == width:
            break
        pool_size *= 8
    return np.divmod(chosen, score.shape[1])


def expand(
    beam: Beam, item: Placing, layout: NodeLayout, budget: float, width: int, monotone: bool, lookahead: bool
) -> Beam | None:
    """The beam after placing ``item`` every feasible way and keeping the ``width`` best distinct
    states; ``None`` if no state can place it."""
    score, total, new_block, delta, feasible, kept = _scores(beam, item, layout, budget, monotone, lookahead)
    picked = _select(score, total, new_block, feasible, width)
    if picked is None:
        return None
    parent, node = picked
    added = delta[parent, node]
    saved = beam.saved
    if parent.size == beam.size and bool((parent == np.arange(parent.size)).all()):
        loads, tokens, idle = beam.loads, beam.tokens, beam.idle  # every state kept once, in order: in place
    else:
        loads, tokens, idle = beam.loads[parent], beam.tokens[parent], beam.idle[parent]
        saved = None if saved is None else saved[parent]
    # bytes each picked placement keeps per GPU (0 where it recomputes; no memory side: nothing kept)
    kept_bytes = (
        np.where(kept[parent, node], item.memory.attn_bytes[layout.level_of[node]], 0.0)
        if saved is not None and kept is not None and item.memory is not None
        else None
    )
    for i, (u, dl) in enumerate(zip(node.tolist(), added.tolist())):
        d, f = int(layout.degree[u]), int(layout.first[u])
        loads[i, f : f + d] += dl
        tokens[i, f : f + d] += item.length / d
        if saved is not None and kept_bytes is not None:
            saved[i, f : f + d] += kept_bytes[i]
    idle[np.arange(node.size), node] = False
    beam.steps.append((parent, node))  # the parent beam is discarded: its arrays and list are reused
    return Beam(loads, tokens, idle, layout.degree[node], beam.steps, saved)
