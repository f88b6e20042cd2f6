"""Exhaustive optimal SP-tree routing for tiny instances (P <= 8, <= 8 samples): the yardstick that
measures how far NSP's heuristic lands from the optimum of its own objective.

Minimises the proxy Load (max_p D_fwd + max_p D_bwd, one pass, node latencies and the non-attention
intercept included, exactly as :meth:`CostTable.evaluate`) over every assignment of samples to tree
nodes that keeps B_tok. Depth-first over samples, longest first, with

* bound: loads only grow as samples are added, so a partial plan whose Load already reaches the best
  complete Load is cut; so is one whose C-mass could not fit under it even if the remaining samples
  were spread perfectly on single GPUs (sum_p C_p + sum_rest c_j(1) > P * (best Load));
* symmetry: a node is skipped when some ancestor-or-self is a right child whose subtree state (loads,
  tokens, active nodes) equals its left sibling's - swapping the two subtrees maps one plan onto the
  other - and likewise for identical trees of a forest;
* start: the upper bound of the caller's plan (e.g. NSP's), so only strictly better plans are explored.

Pure Python on small lists (numpy call overhead dominates at P <= 8). Exponential: refuses larger
instances.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nspsim.planners.proxy import CostTable

MAX_GPUS = 8
MAX_SAMPLES = 8
_EPS = 1e-12


@dataclass
class _Search:
    table: CostTable
    nodes: list[tuple[int, int]]  # (degree, first rank)
    cost: list[dict[int, tuple[float, float]]]  # per sample: degree -> (fwd, bwd) per GPU
    latency: dict[int, tuple[float, float]]
    intercept: tuple[float, float]
    leaf_rest: list[float]
    best_load: float
    best: list[int] | None = None
    visited: int = 0
    fwd: list[float] = field(default_factory=list)
    bwd: list[float] = field(default_factory=list)
    tokens: list[float] = field(default_factory=list)
    active: set[int] = field(default_factory=set)
    held: list[bool] = field(default_factory=list)


@dataclass(frozen=True)
class OptimalRoute:
    """Optimal (degree, first rank) per sorted sample, its Load, and the DFS size."""

    degrees: tuple[int, ...]
    firsts: tuple[int, ...]
    load: float
    visited: int


def _load(s: _Search) -> float:
    f0, b0 = s.intercept
    return max(f + f0 * h for f, h in zip(s.fwd, s.held)) + max(b + b0 * h for b, h in zip(s.bwd, s.held))


def _subtree_key(s: _Search, first: int, degree: int) -> tuple[object, ...]:
    span = range(first, first + degree)
    act = tuple(
        sorted(
            (d, f - first)
            for i, (d, f) in enumerate(s.nodes)
            if i in s.active and first <= f and f + d <= first + degree
        )
    )
    return (tuple(s.fwd[p] for p in span), tuple(s.bwd[p] for p in span), tuple(s.tokens[p] for p in span), act)


def _redundant(s: _Search, degree: int, first: int) -> bool:
    """True if node (degree, first) mirrors a node in an identical left sibling subtree (or tree)."""
    top = s.table.tree.spmax
    d, f = degree, first
    while d < top:
        if (f // d) % 2 == 1 and _subtree_key(s, f - d, d) == _subtree_key(s, f, d):
            return True
        d, f = 2 * d, f // (2 * d) * (2 * d)
    own = _subtree_key(s, f, top)
    return any(_subtree_key(s, t, top) == own for t in range(0, f, top))


def _dfs(s: _Search, j: int, choice: list[int]) -> None:
    s.visited += 1
    n = s.table.num_samples
    if j == n:
        load = _load(s)
        if load < s.best_load - _EPS:
            s.best_load, s.best = load, list(choice)
        return
    length = int(s.table.lengths[j])
    budget = s.table.token_budget * (1 + 1e-9)
    for u, (d, f) in enumerate(s.nodes):
        if length > d * s.table.token_budget or max(s.tokens[f : f + d]) + length / d > budget:
            continue
        if _redundant(s, d, f):
            continue
        newly = u not in s.active
        _apply(s, j, u, newly, +1.0)
        held = s.held[f : f + d]
        s.held[f : f + d] = [True] * d
        if _load(s) < s.best_load - _EPS and _mass_ok(s, j + 1):
            choice.append(u)
            _dfs(s, j + 1, choice)
            choice.pop()
        s.held[f : f + d] = held
        _apply(s, j, u, newly, -1.0)


def _apply(s: _Search, j: int, u: int, newly: bool, sign: float) -> None:
    d, f = s.nodes[u]
    fw, bw = s.cost[j][d]
    if newly:
        lf, lb = s.latency[d]
        fw, bw = fw + lf, bw + lb
        if sign > 0:
            s.active.add(u)
        else:
            s.active.discard(u)
    length = float(s.table.lengths[j])
    for p in range(f, f + d):
        s.fwd[p] += sign * fw
        s.bwd[p] += sign * bw
        s.tokens[p] += sign * length / d


def _mass_ok(s: _Search, j: int) -> bool:
    p = s.table.tree.num_gpus
    return (sum(s.fwd) + sum(s.bwd) + s.leaf_rest[j]) / p < s.best_load - _EPS


def optimal_route(table: CostTable, upper_bound: float = float("inf")) -> OptimalRoute | None:
    """The Load-optimal one-pass tree plan of the table's samples, or ``None`` if none beats
    ``upper_bound`` (or none keeps B_tok). ``ValueError`` beyond P=8 or 8 samples."""
    tree = table.tree
    if tree.num_gpus > MAX_GPUS or table.num_samples > MAX_SAMPLES:
        raise ValueError(
            f"the exhaustive router handles at most {MAX_GPUS} GPUs and {MAX_SAMPLES} samples, "
            f"got {tree.num_gpus} GPUs and {table.num_samples} samples"
        )
    nodes = [(d, f) for d in tree.degrees for f in range(0, tree.num_gpus, d)]
    cost = [
        {d: (float(table.sample_costs(d)[0][j]), float(table.sample_costs(d)[1][j])) for d in tree.degrees}
        for j in range(table.num_samples)
    ]
    leaf = table.total(1)
    rest = [float(leaf[j:].sum()) for j in range(table.num_samples + 1)]
    p = tree.num_gpus
    search = _Search(
        table=table,
        nodes=nodes,
        cost=cost,
        latency={d: table.overhead(d) for d in tree.degrees},
        intercept=table.intercept,
        leaf_rest=rest,
        best_load=upper_bound * (1 + 1e-12),
        fwd=[0.0] * p,
        bwd=[0.0] * p,
        tokens=[0.0] * p,
        held=[False] * p,
    )
    _dfs(search, 0, [])
    if search.best is None:
        return None
    return OptimalRoute(
        tuple(nodes[u][0] for u in search.best),
        tuple(nodes[u][1] for u in search.best),
        search.best_load,
        search.visited,
    )
