"""Packing items (samples) onto units (SP groups) by load: the greedy kernels shared by the planners.

:func:`least_loaded_fill` is the exact greedy rule of the NSP tail and of LPT: items in the given
order (non-increasing cost), each to the least-loaded unit whose token load stays within the budget,
else to the unit with the fewest tokens. Run item by item this is a Python loop; here it runs in
*rounds*: sort the eligible units by load once, tentatively give the next items to the units in that
order, and keep the longest prefix that the item-by-item rule would also produce (item i may go to
the i-th least-loaded unit only if no unit that already received an item this round, nor a unit that
becomes eligible only for this smaller item, is now less loaded). Every round places at least one
item and the result equals the sequential rule (ties broken by lower unit index first), at O(U log U)
numpy work per round. Rounds are long when items are small against the load spread, i.e. on the tail.

:func:`interleave_fill` is a vectorised near-LPT for many small items on few units (Static SP's
groups, where exact rounds would hold ~n/U items each): each unit gets a number of slots proportional
to its deficit below the water level, the slots are interleaved evenly over the sorted item list, so
every unit receives an even sample of large and small items. Its excess over the water level is at
most about one item (measured against exact LPT in docs/planners.md).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from nspsim.planners.compiled import fill_kernel

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BUDGET_RTOL = 1e-9


def _room(tokens: FloatArray, budget: float) -> FloatArray:
    room: FloatArray = budget * (1 + BUDGET_RTOL) - tokens
    return room


def _late_eligible_min(loads: FloatArray, room: FloatArray, others: IntArray, item_tokens: FloatArray) -> FloatArray:
    """For each item, the least load among ``others`` (units not eligible for the round's first item)
    that can take that item; ``inf`` where none can."""
    if others.size == 0:
        return np.full(item_tokens.size, np.inf)
    by_room = others[np.argsort(-room[others], kind="stable")]
    prefix_min = np.minimum.accumulate(loads[by_room])
    count = np.searchsorted(-room[by_room], -item_tokens, side="right")
    out = np.full(item_tokens.size, np.inf)
    has = count > 0
    out[has] = prefix_min[count[has] - 1]
    return out


def _free_round(loads: FloatArray, cost: FloatArray) -> tuple[IntArray, FloatArray]:
    """A round when every unit can take every item of it and no unit pays a surcharge."""
    units = np.argsort(loads, kind="stable")[: cost.size]
    start = loads[units]
    ends = start + cost[: units.size]
    if units.size > 1:
        ok = start[1:] < np.minimum.accumulate(ends)[:-1]
        if not ok.all():
            take = 1 + int(np.argmin(ok))
            return units[:take], ends[:take]
    return units, ends


def _round(
    loads: FloatArray, room: FloatArray, surcharge: FloatArray, cost: FloatArray, item_tokens: FloatArray
) -> tuple[IntArray, FloatArray]:
    """One round: the units the next items go to (a prefix of ``cost``) and their new loads."""
    eligible = room >= item_tokens[0]
    if not eligible.any():
        return np.empty(0, dtype=np.int64), np.empty(0)
    cand = np.flatnonzero(eligible)
    units = cand[np.argsort(loads[cand], kind="stable")][: cost.size]
    m = units.size
    start = loads[units]
    ends = start + cost[:m] + surcharge[units]
    if m == 1:
        return units, ends
    ok = start[1:] < np.minimum.accumulate(ends)[:-1]  # a tie goes to the lower index: next round
    ok &= room[units[1:]] >= item_tokens[1:m]
    if cand.size < loads.size:
        late = _late_eligible_min(loads, room, np.flatnonzero(~eligible), item_tokens[1:m])
        ok &= start[1:] < late
    take = m if ok.all() else 1 + int(np.argmin(ok))
    return units[:take], ends[:take]


def _fill_inputs(
    loads: npt.ArrayLike,
    tokens: npt.ArrayLike,
    cost: npt.ArrayLike,
    item_tokens: npt.ArrayLike,
    surcharge: npt.ArrayLike | None,
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    """Fresh float64 copies of the per-unit arrays and contiguous per-item ones (both fills' inputs)."""
    load = np.array(loads, dtype=np.float64)
    sur = np.zeros(load.size) if surcharge is None else np.array(surcharge, dtype=np.float64)
    c, t = (np.ascontiguousarray(a, dtype=np.float64) for a in (cost, item_tokens))
    return load, np.array(tokens, dtype=np.float64), c, t, sur


def _one_unit(
    load: FloatArray, tok: FloatArray, cost: FloatArray, item_tokens: FloatArray, sur: FloatArray
) -> tuple[IntArray, FloatArray, FloatArray]:
    """One unit takes everything (within the budget or not)."""
    if cost.size:
        load += cost.sum() + sur
        tok += item_tokens.sum()
    return np.zeros(cost.size, dtype=np.int64), load, tok


def least_loaded_fill_rounds(
    loads: npt.ArrayLike,
    tokens: npt.ArrayLike,
    cost: npt.ArrayLike,
    item_tokens: npt.ArrayLike,
    budget: float,
    surcharge: npt.ArrayLike | None = None,
) -> tuple[IntArray, FloatArray, FloatArray]:
    """Greedy least-loaded placement under a token budget in numpy rounds (exact sequential semantics,
    see module doc): the reference :func:`least_loaded_fill` (compiled) must equal.

    ``loads``/``tokens``: per unit; ``cost``/``item_tokens``: per item, in placement order;
    ``surcharge``: extra cost a unit pays on its first item (node latency). Returns the unit of each
    item and the final loads and tokens. An item no unit can take goes to the unit with the fewest
    tokens (the budget is then exceeded; callers check).
    """
    load, tok, c, t, sur = _fill_inputs(loads, tokens, cost, item_tokens, surcharge)
    if load.size == 1:
        return _one_unit(load, tok, c, t, sur)
    out = np.empty(c.size, dtype=np.int64)
    pos = 0
    free = not sur.any()
    while pos < c.size:
        room = _room(tok, budget)
        free = free or not sur.any()
        if free and room.min() >= t[pos : pos + load.size].max():  # every unit can take every item
            units, ends = _free_round(load, c[pos : pos + load.size])
        else:
            units, ends = _round(load, room, sur, c[pos : pos + load.size], t[pos : pos + load.size])
        if units.size == 0:
            units = np.array([int(np.argmin(tok))], dtype=np.int64)
            ends = load[units] + c[pos] + sur[units]
        take = units.size
        out[pos : pos + take] = units
        load[units] = ends
        tok[units] += t[pos : pos + take]
        sur[units] = 0.0
        pos += take
    return out, load, tok


def least_loaded_fill_many_rounds(
    loads: FloatArray,
    tokens: FloatArray,
    cost: FloatArray,
    item_tokens: FloatArray,
    budget: float,
    surcharge: FloatArray,
) -> tuple[IntArray, FloatArray, FloatArray]:
    """:func:`least_loaded_fill_rounds` for S independent states at once (arrays (S, units)), same result.

    While no state pays a surcharge and every unit of every state can take every item of the round,
    rounds run on all states together, each placing the shortest valid prefix over the states;
    otherwise each state finishes alone."""
    load, tok, sur = loads.copy(), tokens.copy(), surcharge.copy()
    states, units = load.shape
    if units == 1:
        if cost.size:
            load += cost.sum() + sur
            tok += item_tokens.sum()
        return np.zeros((states, cost.size), dtype=np.int64), load, tok
    out = np.empty((states, cost.size), dtype=np.int64)
    rows = np.arange(states)[:, None]
    pos = 0
    limit = budget * (1 + BUDGET_RTOL)
    top = float(tok.max()) if cost.size else 0.0  # an upper bound on the token maximum, exact when checked
    free = not sur.any()  # the surcharge never changes in these rounds
    while free and pos < cost.size:
        c, t = cost[pos : pos + units], item_tokens[pos : pos + units]
        biggest = float(t.max())
        if top + biggest > limit:  # a round adds at most one item per unit: re-check exactly
            top = float(tok.max())
            if top + biggest > limit:
                break
        top += biggest
        order = np.argsort(load, axis=1, kind="stable")[:, : c.size]
        start = load[rows, order]
        ends = start + c
        take = c.size
        if c.size > 1:
            ok = start[:, 1:] < np.minimum.accumulate(ends, axis=1)[:, :-1]
            if not ok.all():  # some state's order changes within the round: stop at its first change
                take = 1 + int(np.argmin(ok[~ok.all(axis=1)], axis=1).min())
        chosen = order[:, :take]
        out[:, pos : pos + take] = chosen
        load[rows, chosen] = ends[:, :take]
        tok[rows, chosen] += t[:take]
        pos += take
    for i in range(states if pos < cost.size else 0):
        out[i, pos:], load[i], tok[i] = least_loaded_fill_rounds(
            load[i], tok[i], cost[pos:], item_tokens[pos:], budget, sur[i]
        )
    return out, load, tok


def least_loaded_fill(
    loads: npt.ArrayLike,
    tokens: npt.ArrayLike,
    cost: npt.ArrayLike,
    item_tokens: npt.ArrayLike,
    budget: float,
    surcharge: npt.ArrayLike | None = None,
) -> tuple[IntArray, FloatArray, FloatArray]:
    """Greedy least-loaded placement under a token budget: each item, in order, to the least-loaded
    unit that keeps the budget (ties: the lower index), else to the unit with the fewest tokens (the
    budget is then exceeded; callers check); a unit pays ``surcharge`` (node latency) on its first
    item. ``loads``/``tokens``: per unit; ``cost``/``item_tokens``: per item. Returns the unit of each
    item and the final loads and tokens. Compiled (:mod:`nspsim.planners.compiled`); equal to
    :func:`least_loaded_fill_rounds`."""
    load, tok, c, t, sur = _fill_inputs(loads, tokens, cost, item_tokens, surcharge)
    if load.size == 1:
        return _one_unit(load, tok, c, t, sur)
    out = np.empty(c.size, dtype=np.int64)
    fill_kernel()(load, tok, c, t, budget * (1 + BUDGET_RTOL), sur, out)
    return out, load, tok


def least_loaded_fill_many(
    loads: FloatArray,
    tokens: FloatArray,
    cost: FloatArray,
    item_tokens: FloatArray,
    budget: float,
    surcharge: FloatArray,
) -> tuple[IntArray, FloatArray, FloatArray]:
    """:func:`least_loaded_fill` for S independent states (arrays (S, units)), one compiled call each;
    equal to :func:`least_loaded_fill_many_rounds`."""
    out = np.empty((loads.shape[0], np.size(cost)), dtype=np.int64)
    load, tok = np.empty(loads.shape), np.empty(loads.shape)
    for s in range(loads.shape[0]):
        out[s], load[s], tok[s] = least_loaded_fill(loads[s], tokens[s], cost, item_tokens, budget, surcharge[s])
    return out, load, tok


def water_level(loads: FloatArray, total: float) -> float:
    """Level lambda with sum(max(0, lambda - loads)) == total (all units filled to a common level)."""
    srt = np.sort(loads)
    k = np.arange(1, srt.size + 1)
    levels = (np.cumsum(srt) + total) / k
    last = int(np.flatnonzero(levels >= srt)[-1])  # the first unit always qualifies
    return float(levels[last])


def apportion(weights: FloatArray, n: int) -> IntArray:
    """Integers proportional to ``weights`` summing to ``n`` (largest remainder)."""
    share = weights / weights.sum() * n
    base: IntArray = np.floor(share).astype(np.int64)
    rest = n - int(base.sum())
    if rest > 0:
        base[np.argsort(-(share - base), kind="stable")[:rest]] += 1
    return base


def interleave_fill(loads: npt.ArrayLike, cost: npt.ArrayLike) -> IntArray:
    """Vectorised near-LPT for items sorted by non-increasing cost (see the module docstring)."""
    load = np.asarray(loads, dtype=np.float64)
    c = np.asarray(cost, dtype=np.float64)
    if c.size == 0:
        return np.empty(0, dtype=np.int64)
    deficit = np.maximum(water_level(load, float(c.sum())) - load, 0.0)
    if deficit.sum() <= 0:
        deficit = np.ones(load.size)
    slots = apportion(deficit, c.size)
    unit_of_slot = np.repeat(np.arange(load.size, dtype=np.int64), slots)
    first_slot = np.cumsum(slots) - slots
    rank = np.arange(c.size) - np.repeat(first_slot, slots)
    position = (rank + 0.5) / np.repeat(slots, slots)
    units: IntArray = unit_of_slot[np.argsort(position, kind="stable")]
    return units


HEAD_FRACTION = 1.0 / 32


def pack_balanced(cost: FloatArray, tokens: FloatArray, units: int, budget: float, latency: float) -> IntArray | None:
    """Items sorted by non-increasing cost onto ``units`` empty identical units, balancing load under
    the per-unit token ``budget`` (Static SP's packing); ``None`` if they do not fit.

    Items costing more than ``HEAD_FRACTION`` of a unit's mean load go by the exact greedy rule
    (LPT, ``latency`` paid on a unit's first item); the rest by :func:`interleave_fill`, or by the
    exact rule if interleaving breaks a unit's budget."""
    head = int(np.searchsorted(-cost, -HEAD_FRACTION * float(cost.sum()) / units, side="right"))
    surcharge = np.full(units, float(latency))
    out, loads, toks = least_loaded_fill(
        np.zeros(units), np.zeros(units), cost[:head], tokens[:head], budget, surcharge
    )
    tail = interleave_fill(loads, cost[head:])
    tail_toks = toks + np.bincount(tail, weights=tokens[head:], minlength=units)
    if tail_toks.max() > budget * (1 + BUDGET_RTOL):
        surcharge[out] = 0.0
        tail, _, tail_toks = least_loaded_fill(loads, toks, cost[head:], tokens[head:], budget, surcharge)
    if tail_toks.max() > budget * (1 + BUDGET_RTOL):
        return None
    result: IntArray = np.concatenate([out, tail])
    return result
