"""FlexSP's MILP with identical groups aggregated into counts: a model whose size does not grow with P.

**Why.** The per-slot MILP (:mod:`~nspsim.planners.flexsp.milp`) has a slot for every potential group,
P/s of each size s, and an integer per (bucket, slot): about 2P slots and 64 * P variables at 64
buckets. HiGHS's root work (presolve, cut rounds, heuristics) grows faster than the model, so a
sweep took P^2.9 time (``benchmarks/results/flexsp_scaling.md``). Groups of one size are identical,
so the model only needs *how many* groups of each size there are and *how many* sequences of each
bucket go to that size; which group gets which sequence is a packing problem solved afterwards.

**Model** (sizes s, buckets b; N_s = the slots of size s; U an upper bound on the makespan, the
static incumbent's when there is one)::

    min M  s.t.  sum_s x[b,s] = n_b                              (every sequence placed)
                 sum_b x[b,s] t(b,s) + lat(s) g_s <= M g_s       (size s: its groups' summed time)
                 sum_b x[b,s] len_b / s <= B_tok g_s             (size s: its groups' summed memory)
                 g_s <= sum_b x[b,s],  g_s >= y[b,s],  g_s <= N_s (used groups hold a sequence)
                 x[b,s] <= n_b y[b,s],  (t(b,s) + lat(s)) y[b,s] <= M   (one sequence's own time)
                 sum_s s g_s <= P,  sum_s s (sum_b x t + lat g_s) <= P M   (GPUs; work cut)

with x integer, y binary, g_s = sum_j 2^j z[s,j] in binary digits z, and each product M z[s,j]
replaced by a continuous w[s,j] under the four McCormick rows (exact for binary z, 0 <= M <= U).
About 2 * 64 * 5 + 4 * log2(P) * 5 columns whatever P is.

**Realisation.** The model is a relaxation of the per-slot one (it bounds each size's *summed* time,
not each group's), so the x[b, s] sequences of size s are then packed onto its g_s groups by Static
SP's balanced packing (:func:`~nspsim.planners.packing.pack_balanced`: largest first onto the least
loaded group, under the token budget). The solution's makespan is the packed one; if packing fails
the budget (it cannot when the packing finds room) the solve reports no solution and the planner
keeps its static incumbent, as for a per-slot solve that finds nothing better.

**Trade-off.** The relaxation can be optimistic by up to about one sequence's time per group (the
packing's integrality), so at small P, where groups hold few sequences, it can choose a worse
placement than the per-slot model; that is why ``milp_model="auto"`` keeps the per-slot model up to
:data:`AUTO_SLOTS_UP_TO` GPUs (the Figure 7 scale, plans unchanged) and aggregates above it, where
the per-slot model is too large to solve within its work limit anyway.
"""

from __future__ import annotations

import time

import numpy as np
import numpy.typing as npt
from scipy import sparse

from nspsim.planners.flexsp.highs_solve import solve_highs
from nspsim.planners.flexsp.milp import FloatArray, IntArray, Limits, MilpProblem, MilpRun, MilpSolution, solve_scip
from nspsim.planners.packing import pack_balanced

AUTO_SLOTS_UP_TO = 64
"""``milp_model="auto"`` solves the per-slot MILP up to this many GPUs and the aggregated one above."""


class _Columns:
    """Column layout: x and y per fitting (bucket, size) pair, z and w per (size, binary digit), M last."""

    def __init__(self, p: MilpProblem) -> None:
        self.sizes = np.array(p.sizes, dtype=np.int64)
        fits = p.lengths[:, None] <= self.sizes[None, :] * p.token_budget
        bucket, size = np.nonzero(fits)
        self.bucket, self.size = bucket.astype(np.int64), size.astype(np.int64)  # per pair: bucket, size index
        self.slots = np.array([p.slots_of(int(s)) for s in p.sizes], dtype=np.int64)
        digits = [int(n).bit_length() for n in self.slots.tolist()]
        self.digit_size = np.repeat(np.arange(self.sizes.size), digits).astype(np.int64)  # per digit: size index
        self.digit_value = np.concatenate([2.0 ** np.arange(d) for d in digits]) if digits else np.zeros(0)
        self.na, self.nz = self.bucket.size, self.digit_size.size
        self.x, self.y = 0, self.na
        self.z, self.w = 2 * self.na, 2 * self.na + self.nz
        self.m = 2 * self.na + 2 * self.nz
        self.width = self.m + 1


def _time(p: MilpProblem, cols: _Columns) -> tuple[FloatArray, FloatArray]:
    """Per pair: one sequence's time; per size: the node latency."""
    t = np.array([p.time[int(cols.sizes[s])][b] for b, s in zip(cols.bucket.tolist(), cols.size.tolist())])
    lat = np.array([p.latency[int(s)] for s in cols.sizes.tolist()])
    return t.reshape(cols.na), lat


def _rows(p: MilpProblem, cols: _Columns, upper: float) -> tuple[sparse.csr_matrix, FloatArray, FloatArray]:
    """The constraint rows of the module doc over the columns of :class:`_Columns`."""
    t, lat = _time(p, cols)
    ns, na, nz = cols.sizes.size, cols.na, cols.nz
    pair, digit = np.arange(na), np.arange(nz)
    ds, dv = cols.digit_size, cols.digit_value
    size_of_pair = cols.sizes[cols.size].astype(np.float64)
    rows: list[IntArray] = []
    columns: list[IntArray] = []
    values: list[FloatArray] = []
    lo: list[float] = []
    hi: list[float] = []
    count = [0]

    def row(c: npt.ArrayLike, v: npt.ArrayLike, low: float, high: float) -> None:
        c_arr = np.asarray(c, dtype=np.int64)
        rows.append(np.full(c_arr.size, count[0], dtype=np.int64))
        columns.append(c_arr)
        values.append(np.broadcast_to(np.asarray(v, dtype=np.float64), c_arr.shape).copy())
        lo.append(low)
        hi.append(high)
        count[0] += 1

    for b in range(p.counts.size):  # placement
        row(cols.x + pair[cols.bucket == b], 1.0, float(p.counts[b]), float(p.counts[b]))
    for s in range(ns):
        mine, bits = pair[cols.size == s], digit[ds == s]
        size = float(cols.sizes[s])
        row(
            np.concatenate([cols.x + mine, cols.z + bits, cols.w + bits]),
            np.concatenate([t[mine], lat[s] * dv[bits], -dv[bits]]),
            -np.inf,
            0.0,
        )  # time
        row(
            np.concatenate([cols.x + mine, cols.z + bits]),
            np.concatenate([p.lengths[cols.bucket[mine]] / size, -p.token_budget * dv[bits]]),
            -np.inf,
            0.0,
        )  # memory
        row(
            np.concatenate([cols.z + bits, cols.x + mine]),
            np.concatenate([dv[bits], -np.ones(mine.size)]),
            -np.inf,
            0.0,
        )  # used groups hold a sequence
        row(cols.z + bits, dv[bits], 0.0, float(cols.slots[s]))  # at most N_s groups
        for k in mine.tolist():  # a size with a sequence has a group
            row(np.concatenate([cols.z + bits, [cols.y + k]]), np.concatenate([dv[bits], [-1.0]]), 0.0, np.inf)
    row(cols.z + digit, cols.sizes[ds] * dv, 0.0, float(p.num_gpus))  # GPU count
    row(
        np.concatenate([cols.x + pair, cols.z + digit, [cols.m]]),  # work cut
        np.concatenate([size_of_pair * t, cols.sizes[ds] * lat[ds] * dv, [-float(p.num_gpus)]]),
        -np.inf,
        0.0,
    )
    for k in range(na):
        row([cols.x + k, cols.y + k], [1.0, -float(p.counts[cols.bucket[k]])], -np.inf, 0.0)  # x > 0 needs y
        row([cols.y + k, cols.m], [t[k] + lat[cols.size[k]], -1.0], -np.inf, 0.0)  # one sequence's time
    for j in range(nz):  # McCormick: w = M z
        row([cols.w + j, cols.z + j], [1.0, -upper], -np.inf, 0.0)
        row([cols.w + j, cols.m], [1.0, -1.0], -np.inf, 0.0)
        row([cols.m, cols.z + j, cols.w + j], [1.0, upper, -1.0], -np.inf, upper)
    shape = (count[0], cols.width)
    data = (np.concatenate(values), (np.concatenate(rows), np.concatenate(columns)))
    return sparse.csr_matrix(data, shape=shape), np.array(lo), np.array(hi)


def _upper(p: MilpProblem) -> float:
    """A bound no optimal makespan exceeds: ``p.upper``, else every sequence's slowest time plus a latency."""
    if p.upper is not None:
        return float(p.upper)
    slowest = np.max(np.stack([p.time[s] for s in p.sizes]), axis=0)
    return float(p.counts @ slowest) + max(p.latency.values())


def _start(p: MilpProblem, cols: _Columns, upper: float) -> FloatArray | None:
    """``p.start`` (slot sizes, per-slot bucket counts) as a point of the aggregated model."""
    if p.start is None:
        return None
    slot_sizes, table = p.start
    x = np.zeros(cols.width)
    index = {int(s): i for i, s in enumerate(cols.sizes.tolist())}
    pair_of = {(int(b), int(s)): k for k, (b, s) in enumerate(zip(cols.bucket.tolist(), cols.size.tolist()))}
    for size in np.unique(slot_sizes).tolist():
        s = index[int(size)]
        per_bucket = table[slot_sizes == size].sum(axis=0)
        for b in np.flatnonzero(per_bucket).tolist():
            x[cols.x + pair_of[(b, s)]] = per_bucket[b]
            x[cols.y + pair_of[(b, s)]] = 1.0
        groups = int(np.count_nonzero(slot_sizes == size))
        bits = np.flatnonzero(cols.digit_size == s)
        x[cols.z + bits] = (groups >> np.arange(bits.size)) & 1
    loads = [float(row @ p.time[int(s)]) + p.latency[int(s)] for s, row in zip(slot_sizes.tolist(), table)]
    makespan = min(max(loads), upper)
    x[cols.w : cols.w + cols.nz] = makespan * x[cols.z : cols.z + cols.nz]
    x[cols.m] = makespan
    return x


def solve_counts(p: MilpProblem, *, solver: str = "highs", limits: Limits | None = None) -> MilpRun:
    """Solve the aggregated MILP within ``limits`` (default :class:`Limits`) and pack its counts onto groups
    (module doc)."""
    limits = limits or Limits()
    cols = _Columns(p)
    upper = _upper(p)
    mat, lo, hi = _rows(p, cols, upper)
    integer = np.zeros(cols.width)
    integer[: cols.w] = 1.0  # x, y, z
    bound_hi = np.concatenate(
        [p.counts[cols.bucket].astype(np.float64), np.ones(cols.na + cols.nz), np.full(cols.nz, upper), [upper]]
    )
    bounds = (np.zeros(cols.width), bound_hi, integer)
    start = time.perf_counter()
    if solver == "scip":
        x, status, work = solve_scip(mat, lo, hi, bounds, limits)
    else:
        c = np.zeros(cols.width)
        c[cols.m] = 1.0
        res = solve_highs(
            c,
            mat,
            (lo, hi),
            bounds[:2],
            integer,
            time_limit=limits.time_limit,
            work_limit=limits.work_limit,
            mip_gap=limits.mip_gap,
            start=_start(p, cols, upper),
        )
        x, status, work = res.x, res.status, res.checks
    elapsed = time.perf_counter() - start
    solution = None if x is None else pack_counts(p, cols, x, status, elapsed, solver, work)
    return MilpRun(solution=solution, status=status, solve_time_s=elapsed, work=work, solver=solver)


def pack_counts(
    p: MilpProblem, cols: _Columns, x: FloatArray, status: str, elapsed: float, solver: str, work: int
) -> MilpSolution | None:
    """Pack each size's sequences onto its groups (module doc "Realisation"); ``None`` if one does not fit."""
    counts = np.rint(x[cols.x : cols.x + cols.na]).astype(np.int64)
    groups_of = np.zeros(cols.sizes.size, dtype=np.int64)
    np.add.at(groups_of, cols.digit_size, np.rint(x[cols.z : cols.z + cols.nz]).astype(np.int64) << _bit(cols))
    sizes: list[IntArray] = []
    tables: list[IntArray] = []
    makespan = 0.0
    for s in range(cols.sizes.size):
        mine = np.flatnonzero((cols.size == s) & (counts > 0))
        if mine.size == 0:
            continue
        size = int(cols.sizes[s])
        items = np.repeat(cols.bucket[mine], counts[mine])
        cost = p.time[size][items]
        order = np.argsort(-cost, kind="stable")
        items, cost = items[order], cost[order]
        units = int(min(max(groups_of[s], 1), cols.slots[s], items.size))
        slots = pack_balanced(cost, p.lengths[items] / size, units, p.token_budget, p.latency[size])
        if slots is None:
            return None
        table = np.zeros((units, p.counts.size), dtype=np.int64)
        np.add.at(table, (slots, items), 1)
        used = table.sum(axis=1) > 0
        loads = np.bincount(slots, weights=cost, minlength=units)[used] + p.latency[size]
        makespan = max(makespan, float(loads.max()))
        sizes.append(np.full(int(used.sum()), size, dtype=np.int64))
        tables.append(table[used])
    if int(sum(int(s.sum()) for s in sizes)) > p.num_gpus:
        return None
    return MilpSolution(np.concatenate(sizes), np.concatenate(tables), makespan, status, elapsed, solver, work)


def _bit(cols: _Columns) -> IntArray:
    """Per digit column: its place value's exponent."""
    out: IntArray = np.rint(np.log2(cols.digit_value)).astype(np.int64)
    return out
