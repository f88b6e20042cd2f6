"""FlexSP's per-micro-batch MILP (docs/planners.md): disjoint power-of-two SP groups and a bucket assignment.

Slots are the potential groups: for every allowed size s (powers of two from ``min_size``, 2 by
default as in the artifact, up to spmax) there are P/s slots. Variables: makespan M; integer
A[b, k] = how many sequences of bucket b go to slot k (only where the slot's size holds the bucket's
longest sequence in memory: the minimum-degree constraint); binary m[k] = slot k is used.

    min M  s.t.  sum_k A[b,k] = n_b                         (every sequence placed)
                 sum_b A[b,k] t(b, s_k) + lat(s_k) m[k] <= M (time per slot)
                 sum_b A[b,k] len_b / s_k <= B_tok m[k]      (memory per GPU, also links A > 0 to m)
                 m[k] <= sum_b A[b,k]                        (a used slot holds a sequence)
                 sum_k s_k m[k] <= P                         (GPU count)
                 m[s, i] >= m[s, i+1]                        (symmetry breaking within a size)

t(b, s) is the proxy cost per GPU of one sequence of the bucket's longest length at degree s, lat(s)
the node's collective latency. The GPU-count row is ``<= P`` rather than the artifact's ``= P``: it
admits the same solutions plus idle GPUs, which matters only when a micro-batch has too few
sequences to occupy every GPU (otherwise the optimum uses them all). Solved with HiGHS
(:mod:`nspsim.planners.flexsp.highs_solve`: single-threaded, stopped by a deterministic work limit before a
wall-clock safety limit) or, when installed and asked for, PySCIPOpt (SCIP, the artifact's solver;
its node limit plays the work limit); the best solution found is used if a limit stops the search.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import sparse

from nspsim.planners.flexsp.highs_solve import solve_highs

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
SOLVERS = ("highs", "scip")
DEFAULT_WORK_LIMIT = 10  # HiGHS limit checks per solve; measured in docs/planners.md


@dataclass(frozen=True)
class MilpProblem:
    """Inputs: per bucket count, max length, time per size; per size latency; cluster limits."""

    counts: IntArray
    lengths: IntArray
    time: dict[int, FloatArray]
    latency: dict[int, float]
    sizes: tuple[int, ...]
    num_gpus: int
    token_budget: float
    upper: float | None = None
    start: tuple[IntArray, IntArray] | None = None  # a feasible point: slot sizes, (slots, buckets) counts
    slot_limit: dict[int, int] | None = None  # at most this many slots of a size (default P / s)

    def slots_of(self, size: int) -> int:
        """How many slots (potential groups) of ``size`` the MILP has: P / size, or fewer if limited."""
        return min(self.num_gpus // size, (self.slot_limit or {}).get(size, self.num_gpus))


@dataclass(frozen=True)
class MilpSolution:
    """Per used slot: its size and the count of each bucket; the makespan; solver facts (``status``
    is the stop reason, ``work`` the work units used: HiGHS limit checks or SCIP nodes)."""

    slot_sizes: IntArray
    assignment: IntArray
    makespan: float
    status: str
    solve_time_s: float
    solver: str
    work: int = 0


@dataclass(frozen=True)
class _Layout:
    slot_size: IntArray
    pairs: IntArray  # (variable index) -> (bucket, slot)

    @property
    def num_a(self) -> int:
        return int(self.pairs.shape[0])


def _layout(p: MilpProblem) -> _Layout:
    slot_size = np.concatenate([np.full(p.slots_of(s), s, dtype=np.int64) for s in p.sizes])
    fits = p.lengths[:, None] <= slot_size[None, :] * p.token_budget
    bucket, slot = np.nonzero(fits)
    return _Layout(slot_size, np.stack([bucket, slot], axis=1).astype(np.int64))


def check_coverable(p: MilpProblem) -> None:
    """``ValueError`` if some bucket fits no allowed group size (cannot happen after feasibility)."""
    largest = max(p.sizes)
    bad = np.flatnonzero(p.lengths > largest * p.token_budget)
    if bad.size:
        raise ValueError(
            f"FlexSP: a sequence of length {int(p.lengths[bad[0]])} fits no group of size <= {largest} "
            f"under B_tok={p.token_budget:g}"
        )


def _matrix(p: MilpProblem, lay: _Layout) -> tuple[sparse.csr_matrix, FloatArray, FloatArray]:
    """Constraint rows over x = [A pairs..., m slots..., M]."""
    na, ns = lay.num_a, lay.slot_size.size
    b, k = lay.pairs[:, 0], lay.pairs[:, 1]
    size = lay.slot_size[k]
    t = np.array([p.time[int(s)][bb] for s, bb in zip(size.tolist(), b.tolist())])
    lat = np.array([p.latency[int(s)] for s in lay.slot_size.tolist()])
    nb = p.counts.size
    rows, cols, vals, lo, hi = [], [], [], [], []

    def add(r: npt.ArrayLike, c: npt.ArrayLike, v: npt.ArrayLike) -> None:
        rows.append(np.asarray(r, dtype=np.int64))
        cols.append(np.asarray(c, dtype=np.int64))
        vals.append(np.asarray(v, dtype=np.float64))

    r0 = 0  # placement: sum_k A[b,k] = n_b
    add(r0 + b, np.arange(na), np.ones(na))
    lo.append(p.counts.astype(np.float64))
    hi.append(p.counts.astype(np.float64))
    r1 = r0 + nb  # time: sum A t + lat m - M <= 0
    add(r1 + k, np.arange(na), t)
    add(r1 + np.arange(ns), na + np.arange(ns), lat)
    add(r1 + np.arange(ns), np.full(ns, na + ns), -np.ones(ns))
    lo.append(np.full(ns, -np.inf))
    hi.append(np.zeros(ns))
    r2 = r1 + ns  # memory: sum A len / s - B m <= 0
    add(r2 + k, np.arange(na), p.lengths[b] / size)
    add(r2 + np.arange(ns), na + np.arange(ns), np.full(ns, -p.token_budget))
    lo.append(np.full(ns, -np.inf))
    hi.append(np.zeros(ns))
    r3 = r2 + ns  # linking: m - sum A <= 0
    add(r3 + k, np.arange(na), -np.ones(na))
    add(r3 + np.arange(ns), na + np.arange(ns), np.ones(ns))
    lo.append(np.full(ns, -np.inf))
    hi.append(np.zeros(ns))
    r4 = r3 + ns  # GPU count
    add(np.full(ns, r4), na + np.arange(ns), lay.slot_size)
    lo.append(np.array([0.0]))
    hi.append(np.array([float(p.num_gpus)]))
    r5 = r4 + 1  # symmetry: m[s,i+1] - m[s,i] <= 0 within a size
    same = np.flatnonzero(lay.slot_size[1:] == lay.slot_size[:-1])
    add(r5 + np.arange(same.size), na + same + 1, np.ones(same.size))
    add(r5 + np.arange(same.size), na + same, -np.ones(same.size))
    lo.append(np.full(same.size, -np.inf))
    hi.append(np.zeros(same.size))
    r6 = r5 + same.size  # work cut: sum_k s_k (time of slot k) <= P M
    add(np.full(na, r6), np.arange(na), size * t)
    add(np.full(ns, r6), na + np.arange(ns), lay.slot_size * lat)
    add([r6], [na + ns], [-float(p.num_gpus)])
    lo.append(np.array([-np.inf]))
    hi.append(np.array([0.0]))
    r7 = r6 + 1
    if p.upper is not None:  # time of slot k <= U m_k
        add(r7 + k, np.arange(na), t)
        add(r7 + np.arange(ns), na + np.arange(ns), lat - p.upper)
        lo.append(np.full(ns, -np.inf))
        hi.append(np.zeros(ns))
        r7 += ns
    shape = (r7, na + ns + 1)
    mat = sparse.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=shape)
    return mat, np.concatenate(lo), np.concatenate(hi)


@dataclass(frozen=True)
class Limits:
    """When a solve stops: ``work_limit`` deterministic work units (HiGHS limit checks, SCIP nodes),
    ``time_limit`` wall-clock seconds (safety net), relative gap ``mip_gap``."""

    time_limit: float = 10.0
    work_limit: int = DEFAULT_WORK_LIMIT
    mip_gap: float = 1e-4


@dataclass(frozen=True)
class MilpRun:
    """One solve: the best solution found (``None``: none within the limits) and why it stopped."""

    solution: MilpSolution | None
    status: str
    solve_time_s: float
    work: int
    solver: str


def solve(p: MilpProblem, *, solver: str = "highs", limits: Limits = Limits()) -> MilpRun:
    """Solve the MILP within ``limits``."""
    check_coverable(p)
    lay = _layout(p)
    mat, lo, hi = _matrix(p, lay)
    start = time.perf_counter()
    if solver == "scip":
        x, status, work = solve_scip(mat, lo, hi, _bounds(lay, p), limits)
    else:
        x, status, work = _solve_highs(mat, lo, hi, lay, p, limits)
    elapsed = time.perf_counter() - start
    solution = None if x is None else _solution(x, lay, p, status, elapsed, solver, work)
    return MilpRun(solution=solution, status=status, solve_time_s=elapsed, work=work, solver=solver)


def _bounds(lay: _Layout, p: MilpProblem) -> tuple[FloatArray, FloatArray, FloatArray]:
    na, ns = lay.num_a, lay.slot_size.size
    upper = np.concatenate([p.counts[lay.pairs[:, 0]].astype(np.float64), np.ones(ns), [np.inf]])
    integrality = np.concatenate([np.ones(na + ns), [0.0]])
    return np.zeros(na + ns + 1), upper, integrality


def _solve_highs(
    mat: sparse.csr_matrix, lo: FloatArray, hi: FloatArray, lay: _Layout, p: MilpProblem, limits: Limits
) -> tuple[FloatArray | None, str, int]:
    lower, upper, integrality = _bounds(lay, p)
    c = np.zeros(lower.size)
    c[-1] = 1.0
    res = solve_highs(
        c,
        mat,
        (lo, hi),
        (lower, upper),
        integrality,
        time_limit=limits.time_limit,
        work_limit=limits.work_limit,
        mip_gap=limits.mip_gap,
        start=_start_vector(lay, p),
    )
    return res.x, res.status, res.checks


def _start_vector(lay: _Layout, p: MilpProblem) -> FloatArray | None:
    """``p.start`` as a point x = [A pairs..., m slots..., M]: the i-th start slot of size s is the
    i-th layout slot of that size (the symmetry-breaking order)."""
    if p.start is None:
        return None
    sizes, counts = p.start
    na, ns = lay.num_a, lay.slot_size.size
    pair_of = np.full((p.counts.size, ns), -1, dtype=np.int64)
    pair_of[lay.pairs[:, 0], lay.pairs[:, 1]] = np.arange(na)
    x = np.zeros(na + ns + 1)
    makespan = 0.0
    for size in np.unique(sizes).tolist():
        slots = np.flatnonzero(lay.slot_size == size)[: int(np.count_nonzero(sizes == size))]
        for slot, row in zip(slots.tolist(), counts[sizes == size]):
            buckets = np.flatnonzero(row)
            x[pair_of[buckets, slot]] = row[buckets]
            x[na + slot] = 1.0
            makespan = max(makespan, float(row @ p.time[int(size)]) + p.latency[int(size)])
    x[-1] = makespan
    return x


def solve_scip(
    mat: sparse.csr_matrix,
    lo: FloatArray,
    hi: FloatArray,
    bounds: tuple[FloatArray, FloatArray, FloatArray],
    limits: Limits,
) -> tuple[FloatArray | None, str, int]:
    """Minimise the last column s.t. ``lo <= mat @ x <= hi`` and ``bounds`` (lower, upper, integrality) with SCIP."""
    try:
        import pyscipopt
    except ImportError:
        raise ValueError(
            "FlexSP solver 'scip' needs PySCIPOpt: pip install 'nspsim[scip]' (or use solver='highs')"
        ) from None
    lower, upper, integrality = bounds
    model = pyscipopt.Model()
    model.hideOutput()
    model.setParam("limits/time", float(limits.time_limit))
    model.setParam("limits/nodes", int(limits.work_limit))
    model.setParam("limits/gap", float(limits.mip_gap))
    xs = [
        model.addVar(lb=lower[i], ub=None if np.isinf(upper[i]) else upper[i], vtype="I" if integrality[i] else "C")
        for i in range(lower.size)
    ]
    coo = mat.tocoo()
    for r in range(mat.shape[0]):
        sel = coo.row == r
        expr = pyscipopt.quicksum(v * xs[c] for c, v in zip(coo.col[sel].tolist(), coo.data[sel].tolist()))
        if np.isfinite(lo[r]) and lo[r] == hi[r]:
            model.addCons(expr == lo[r])
        else:
            if np.isfinite(lo[r]):
                model.addCons(expr >= lo[r])
            if np.isfinite(hi[r]):
                model.addCons(expr <= hi[r])
    model.setObjective(xs[-1], "minimize")
    model.optimize()
    nodes = int(model.getNTotalNodes())
    scip_status = str(model.getStatus())
    stop = {
        "optimal": "optimal",
        "gaplimit": "optimal",
        "nodelimit": "work-limit",
        "totalnodelimit": "work-limit",
        "timelimit": "time-limit",
        "infeasible": "infeasible",
    }.get(scip_status, scip_status)
    if model.getNSols() == 0:
        return None, stop, nodes
    best = model.getBestSol()
    return np.array([best[v] for v in xs], dtype=np.float64), stop, nodes


def _solution(
    x: FloatArray, lay: _Layout, p: MilpProblem, status: str, elapsed: float, solver: str, work: int
) -> MilpSolution:
    na, ns = lay.num_a, lay.slot_size.size
    counts = np.rint(x[:na]).astype(np.int64)
    table = np.zeros((ns, p.counts.size), dtype=np.int64)
    np.add.at(table, (lay.pairs[:, 1], lay.pairs[:, 0]), counts)
    used = table.sum(axis=1) > 0
    return MilpSolution(
        slot_sizes=lay.slot_size[used],
        assignment=table[used],
        makespan=float(x[-1]),
        status=status,
        solve_time_s=elapsed,
        solver=solver,
        work=work,
    )
