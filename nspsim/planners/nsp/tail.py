"""Greedy short-tail completion of NSP's Algorithm 1 (paper 4.1.3, docs/planners.md).

After the prefix search, each surviving state is completed by placing the tail samples, longest
first, each on the least-loaded *effective leaf unit* that keeps B_tok, else on the unit with the
smallest token load. Effective leaf units are the nodes of the smallest admissible level that can
hold the sample: degree 1 normally (the smallest level of the planner, e.g. 1 for NSP-2L too), a
larger degree for a tail sample longer than B_tok. A unit's load is the maximum C_p over its ranks;
placing a sample adds the same cost to all of them, so the unit's load rises by exactly that cost.
Tail samples come sorted, so their effective degree is non-increasing: the tail is processed in
segments of equal degree, each one compiled call for all of the beam's states
(:func:`~nspsim.planners.compiled.fill_states_kernel`:
per state, the units' loads and tokens, the surcharge of inactive nodes, the compiled greedy fill of
:mod:`nspsim.planners.compiled`, the units' increments added back to their GPUs). The numpy form
(:func:`_fill_level_reference`: the same steps in numpy calls and :func:`least_loaded_fill_many`) stays
as the reference ``tests/planners/test_tail_kernel.py`` holds it to, bit for bit, and runs the
one-unit level (the root), which the kernel leaves to it. Trade-off: a second implementation of the
level fill, for ~15 numpy calls per segment and state that profiled at ~10% of a memory-bound batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from nspsim.planners.compiled import fill_states_kernel
from nspsim.planners.nsp.beam import NodeLayout
from nspsim.planners.packing import BUDGET_RTOL, least_loaded_fill_many
from nspsim.planners.proxy import CostTable

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass
class TreeStates:
    """S states' per-GPU loads and tokens (S, P) and active nodes (S, nodes), mutated in place."""

    loads: FloatArray
    tokens: FloatArray
    active: npt.NDArray[np.bool_]
    layout: NodeLayout


def effective_degrees(lengths: IntArray, budget: int, levels: tuple[int, ...]) -> IntArray:
    """Per sample, the smallest level whose shard fits B_tok (the largest level if none does)."""
    ascending = np.array(sorted(levels), dtype=np.int64)
    at = np.searchsorted(ascending * budget, lengths, side="left")  # first level with d * budget >= length
    out: IntArray = ascending[np.minimum(at, ascending.size - 1)]
    return out


def complete(states: TreeStates, table: CostTable, items: IntArray) -> tuple[IntArray, IntArray]:
    """Place the sorted samples ``items`` greedily in every state; returns (degrees, first ranks),
    each (S, len(items))."""
    lengths = table.lengths[items]
    eff = effective_degrees(lengths, table.token_budget, states.layout.levels)
    shape = (states.loads.shape[0], items.size)
    degrees = np.empty(shape, dtype=np.int64)
    firsts = np.empty(shape, dtype=np.int64)
    start = 0
    while start < items.size:
        d = int(eff[start])
        stop = start + int(np.searchsorted(-eff[start:], -d, side="right"))
        degrees[:, start:stop] = d
        firsts[:, start:stop] = _fill_level(states, table, items[start:stop], d) * d
        start = stop
    return degrees, firsts


def _fill_level(states: TreeStates, table: CostTable, items: IntArray, d: int) -> IntArray:
    """Least-loaded fill of ``items`` onto the nodes of degree ``d`` in every state; block indices
    (one compiled call, :func:`~nspsim.planners.compiled.fill_states_kernel`; the numpy form for a
    single unit)."""
    count, units = states.loads.shape[0], states.loads.shape[1] // d
    if units == 1:
        return _fill_level_reference(states, table, items, d)
    blocks = np.empty((count, items.size), dtype=np.int64)
    fill_states_kernel()(
        states.loads,
        states.tokens,
        states.active,
        states.layout.offset[d],
        d,
        np.ascontiguousarray(table.total(d)[items]),
        table.lengths[items] / d,
        table.token_budget * (1 + BUDGET_RTOL),
        table.overhead_total(d),
        blocks,
    )
    return blocks


def _fill_level_reference(states: TreeStates, table: CostTable, items: IntArray, d: int) -> IntArray:
    """:func:`_fill_level` in numpy calls (the reference; the one-unit level)."""
    count, units = states.loads.shape[0], states.loads.shape[1] // d
    unit_loads = states.loads.reshape(count, units, d).max(axis=2)
    unit_tokens = states.tokens.reshape(count, units, d).max(axis=2)
    nodes = slice(states.layout.offset[d], states.layout.offset[d] + units)
    surcharge = np.where(states.active[:, nodes], 0.0, table.overhead_total(d))
    blocks, new_loads, new_tokens = least_loaded_fill_many(
        unit_loads, unit_tokens, table.total(d)[items], table.lengths[items] / d, table.token_budget, surcharge
    )
    states.loads += np.repeat(new_loads - unit_loads, d, axis=1)
    states.tokens += np.repeat(new_tokens - unit_tokens, d, axis=1)
    rows = np.arange(count)[:, None]
    states.active[rows, states.layout.offset[d] + blocks] = True
    return blocks


def warm_tail() -> None:
    """Compile (or load from the disk cache) the level fill once per process, before a planner's clock starts."""
    one = np.zeros((1, 2))
    fill_states_kernel()(
        one,
        one.copy(),
        np.zeros((1, 3), dtype=bool),
        1,
        2,
        np.ones(1),
        np.ones(1),
        1.0,
        0.0,
        np.zeros((1, 1), dtype=np.int64),
    )
