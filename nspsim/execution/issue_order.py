"""Issue-order optimiser for inter-level phase streaming (NSP paper section 4.2.1).

The executor streams a GPU's active nodes in one global issue order: its communication queue runs
every prologue, then every epilogue, in that order; its compute queue every attention kernel. The
order decides which communication stays exposed: the first node's prologue at the head (nothing to
hide it behind) and the last node's epilogue at the tail. Backward runs the order reversed; a
recompute-marked node's recompute pass (Q/K/V re-send, forward kernel) streams right before its
backward phases, as the runtime and the simulator execute it.

Nodes of one level never share a GPU, so on every GPU only the order of *levels* matters within one
tree of the forest. Per tree we score every permutation of its levels (exhaustively up to
``MAX_EXHAUSTIVE_LEVELS`` levels, else a few structured candidates) with the streaming recurrence of
each of its GPUs (vectorised over permutations and GPUs), per pass::

    P_i = a_1 + ... + a_i                 (prologues back to back)
    C_i = max(C_{i-1}, P_i) + b_i         (kernel i after its prologue)
    E_i = max(E_{i-1}, C_i) + c_i, E_0 = P_m   (epilogues after all prologues)

and keep the permutation minimising max_p (E_m + non-attention)_fwd + max_p (E_m + non-attention)_bwd;
ties keep the planner's roots-first order. Trade-off: the score ignores waits between GPUs and link
sharing with FSDP traffic (the simulator has them), in exchange for scoring thousands of orders in
milliseconds. So :func:`optimize_issue_order` optionally takes an ``evaluate`` function (``compare``
passes the simulator's step time): it then scores the proxy's best few whole-plan candidates and the
planner's own order with it and keeps the best, so the result is never worse than the input there.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from nspsim.cost.interface import CostModel
from nspsim.plan import Plan
from nspsim.sp_tree import Node

MAX_EXHAUSTIVE_LEVELS = 7


def optimize_issue_order(
    plan: Plan, cost: CostModel, evaluate: Callable[[Plan], float] | None = None, candidates: int = 3
) -> Plan:
    """``plan`` with each micro-batch's issue order replaced by the best-scoring level order per tree.

    With ``evaluate`` (lower is better), the ``candidates`` best proxy orders and ``plan``'s own order
    are scored by it and the best is returned.
    """
    ranked = [_micro_batch_orders(plan, cost, mb, candidates) for mb in range(plan.num_micro_batches)]
    best = replace(plan, issue_order=tuple(r[0] for r in ranked))
    if evaluate is None:
        return best
    options = [plan, best] + [
        replace(plan, issue_order=tuple(r[min(k, len(r) - 1)] for r in ranked)) for k in range(1, candidates)
    ]
    unique = list({p.content_hash: p for p in options}.values())
    return min(unique, key=evaluate)


def stream_finish(phases: np.ndarray) -> np.ndarray:
    """Streaming finish time per row of ``phases[..., node, (pro, comp, epi)]`` (nodes in issue order)."""
    prologues = np.cumsum(phases[..., 0], axis=-1)
    computes, c = [], np.zeros(phases.shape[:-2])
    for i in range(phases.shape[-2]):
        c = np.maximum(c, prologues[..., i]) + phases[..., i, 1]
        computes.append(c)
    e = prologues[..., -1] if phases.shape[-2] else c
    for i, c in enumerate(computes):
        e = np.maximum(e, c) + phases[..., i, 2]
    return e


TreeScores = tuple[list[int], np.ndarray, np.ndarray]


def _micro_batch_orders(plan: Plan, cost: CostModel, mb: int, count: int) -> list[tuple[Node, ...]]:
    """Up to ``count`` distinct issue orders of micro-batch ``mb``, best proxy score first.

    The first takes every tree's best level permutation; the others apply the next-best
    permutations (by score summed over trees) to every tree.
    """
    nodes = plan.active_nodes(mb)
    lengths = np.asarray(plan.lengths, dtype=np.int64)
    by_node: dict[Node, list[int]] = {n: [] for n in nodes}
    for j in np.flatnonzero(plan.sample_mask(mb)):
        by_node[plan.nodes[j]].append(int(j))
    tokens = plan.tokens_per_gpu(mb)
    trees: dict[int, list[Node]] = {}
    for n in nodes:
        trees.setdefault(plan.tree.tree_of(n), []).append(n)
    scored = {t: _tree_scores(plan, cost, members, lengths, by_node, tokens) for t, members in trees.items()}
    orders = [_order(plan, nodes, scored, {t: int(np.argmin(sc[2])) for t, sc in scored.items()})]
    for index in _shared_ranking(list(scored.values())):
        orders.append(_order(plan, nodes, scored, {t: index for t in scored}))
        if len(set(orders)) >= count:
            break
    return list(dict.fromkeys(orders))[:count]


def _order(
    plan: Plan, nodes: tuple[Node, ...], scored: dict[int, TreeScores], choice: dict[int, int]
) -> tuple[Node, ...]:
    """Issue order with permutation ``choice[t]`` in tree t (trees never share a GPU: they interleave freely)."""
    rank: dict[tuple[int, int], int] = {}
    for t, (levels, perms, _) in scored.items():
        rank.update({(t, levels[k]): pos for pos, k in enumerate(perms[choice[t]])})
    return tuple(sorted(nodes, key=lambda n: (rank[(plan.tree.tree_of(n), n.degree)], n.first_rank)))


def _shared_ranking(scored: list[TreeScores]) -> list[int]:
    """Permutation indices by score summed over trees (trees must have equally many levels)."""
    if any(len(levels) != len(scored[0][0]) for levels, _, _ in scored):
        return []
    return [int(i) for i in np.argsort(np.sum([score for _, _, score in scored], axis=0), kind="stable")]


def _tree_scores(
    plan: Plan,
    cost: CostModel,
    nodes: list[Node],
    lengths: np.ndarray,
    by_node: dict[Node, list[int]],
    tokens: np.ndarray,
) -> tuple[list[int], np.ndarray, np.ndarray]:
    """(levels largest first, candidate permutations, proxy score per permutation) of one tree."""
    levels = sorted({n.degree for n in nodes}, reverse=True)
    first = min(n.first_rank for n in nodes) // plan.spmax * plan.spmax
    span = range(first, first + plan.spmax)
    fwd, bwd = _phase_tables(plan, cost, nodes, levels, lengths, by_node, span)
    extra_f, extra_b = _non_attention(cost, tokens[first : first + plan.spmax])
    perms = _candidate_perms(len(levels))
    score = (stream_finish(fwd[:, perms].transpose(1, 0, 2, 3)) + extra_f).max(axis=1)
    backward = bwd[:, perms[:, ::-1]].transpose(1, 0, 2, 3, 4)  # [perm, gpu, level, (remat, bwd), phase]
    score += (stream_finish(backward.reshape(*backward.shape[:2], -1, 3)) + extra_b).max(axis=1)
    return levels, perms, score


def _phase_tables(
    plan: Plan,
    cost: CostModel,
    nodes: list[Node],
    levels: list[int],
    lengths: np.ndarray,
    by_node: dict[Node, list[int]],
    span: range,
) -> tuple[np.ndarray, np.ndarray]:
    """fwd [gpu, level, phase] and bwd [gpu, level, (recompute, backward), phase] of one tree; zeros where a
    GPU has no node of a level or a node has no recompute-marked sample. In backward a marked node's
    recompute pass (Q/K/V re-send and kernel) runs right before its backward pass, as executed."""
    fwd, bwd = np.zeros((len(span), len(levels), 3)), np.zeros((len(span), len(levels), 2, 3))
    marks = np.asarray(plan.recompute, dtype=bool) if plan.recompute is not None else None
    for node in nodes:
        samples = np.asarray(by_node[node], dtype=np.int64)
        c = cost.attention(lengths[samples], node.degree)
        rows = slice(node.first_rank - span.start, node.end_rank - span.start)
        k = levels.index(node.degree)
        fwd[rows, k] = (c.fwd.prologue, c.fwd.compute, c.fwd.epilogue)
        bwd[rows, k, 1] = (c.bwd.prologue, c.bwd.compute, c.bwd.epilogue)
        if marks is not None and marks[samples].any():
            redo = cost.recompute_attention(lengths[samples[marks[samples]]], node.degree)
            bwd[rows, k, 0] = (redo.prologue, redo.compute, redo.epilogue)
    return fwd, bwd


def _non_attention(cost: CostModel, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    per = {float(t): cost.non_attention(float(t)) for t in set(tokens.tolist())}
    return (np.array([per[float(t)].fwd for t in tokens]), np.array([per[float(t)].bwd for t in tokens]))


def _candidate_perms(n: int) -> np.ndarray:
    """Level permutations to score; the first is roots-first (the default order, preferred on ties)."""
    if n <= MAX_EXHAUSTIVE_LEVELS:
        return np.array(list(itertools.permutations(range(n))), dtype=np.int64).reshape(-1, n)
    down = list(range(n))
    return np.array([down, down[::-1], [n - 1, *down[:-1]], [*down[1:], 0]], dtype=np.int64)
