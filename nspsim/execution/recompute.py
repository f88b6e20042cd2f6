"""Tree-level recomputation (NSP paper section 4.2.2): turn a routed plan into an executable one.

Under an activation budget, attention is cheaper to save for some samples than for others: a long
sample on an upper tree node is expensive to recompute (quadratic compute plus its SP all-to-alls)
and its saved tensors are sharded over a large group. Marking, per micro-batch:

1. every GPU's free bytes = activation capacity - activations with all attention recomputed;
2. visit the active nodes from the roots down (larger degree first); a node is *saved* if its
   attention bytes per rank fit in the free bytes of every one of its ranks (so marks are
   group-uniform), and those bytes are taken from all its ranks;
3. a node cut by the budget is split by sample subset: its samples in decreasing order of recompute
   cost per saved byte (cost-model forward attention time over bytes) are saved while they fit;
4. everything not saved is marked recompute.

If everything fits, nothing is marked (no recomputation). Trade-off: greedy top-down is not an
optimal knapsack over the whole tree, but it follows the length gradient of routed trees and keeps
every decision local to one node, so ranks agree without communication.

What a step executes with (:class:`RecomputeMode`, the runtime's ``--recompute``) is decided by
:func:`recompute_marks`: all, none, or the plan's own marks, else the simulator's per-micro-batch
decision, so the executor and the simulator always run the same marks.
"""

from __future__ import annotations

from dataclasses import replace
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from nspsim.cost.interface import CostModel
from nspsim.execution.activation import base_bytes_per_gpu, plan_activations
from nspsim.plan import Plan
from nspsim.sp_tree import Node
from nspsim.specs.memory import MemoryModel


class RecomputeMode(StrEnum):
    """``--recompute``: the marks the executor runs with. ``plan``: the plan's own marks, else the
    simulator's decision (:class:`~nspsim.execution.activation.RecomputePolicy`); ``all``/``none``:
    every sample's attention recomputed / kept, whatever the plan says."""

    PLAN = "plan"
    ALL = "all"
    NONE = "none"


RECOMPUTE_CHOICES: tuple[str, ...] = tuple(m.value for m in RecomputeMode)
"""The ``--recompute`` choices in order (CLI choices, ``in`` tests and error messages)."""


def recompute_marks(plan: Plan, mode: RecomputeMode, memory: MemoryModel | None = None) -> npt.NDArray[np.bool_]:
    """Per-sample recompute marks: all or none, or (``plan``) the simulator's decision
    (:func:`nspsim.execution.activation.plan_activations`): the plan's own marks, else per micro-batch
    keep all attention if it fits the memory model and recompute that micro-batch's attention otherwise
    (the paper's baseline). Without a memory model an unmarked plan keeps everything."""
    n = plan.num_samples
    if mode == RecomputeMode.ALL:
        return np.ones(n, dtype=bool)
    if mode == RecomputeMode.NONE:
        return np.zeros(n, dtype=bool)
    if plan.recompute is not None:
        return np.asarray(plan.recompute, dtype=bool)
    if memory is None:
        return np.zeros(n, dtype=bool)
    return np.asarray(plan_activations(plan, memory).remat, dtype=bool)


def mark_recompute(plan: Plan, memory: MemoryModel, cost: CostModel) -> Plan:
    """``plan`` with per-sample save/recompute marks for ``memory`` (``True`` = recompute in backward)."""
    remat = np.ones(plan.num_samples, dtype=bool)
    for mb in range(plan.num_micro_batches):
        _mark_micro_batch(plan, memory, cost, mb, remat)
    saved = 1.0 - float(remat.mean())
    meta = {**plan.metadata, "tree_recompute_saved_share": round(saved, 6)}
    return replace(plan, recompute=tuple(bool(r) for r in remat), metadata=meta)


def _mark_micro_batch(plan: Plan, memory: MemoryModel, cost: CostModel, mb: int, remat: np.ndarray) -> None:
    lengths, degrees, firsts, _ = plan.arrays
    samples = np.flatnonzero(plan.sample_mask(mb))
    free = memory.activation_capacity - base_bytes_per_gpu(plan, memory, mb)
    saved = saved_samples(lengths[samples], degrees[samples], firsts[samples], free, memory, cost)
    remat[samples[saved]] = False


def saved_samples(
    lengths: np.ndarray, degrees: np.ndarray, firsts: np.ndarray, free: np.ndarray, memory: MemoryModel, cost: CostModel
) -> np.ndarray:
    """Steps 2-3 for one micro-batch's samples, given as parallel arrays (length, node degree, node's
    first rank): which are saved (``True``). ``free`` (bytes per GPU) is consumed in place. Under full
    activation checkpointing (``memory.keeps_attention`` false) nothing is saved."""
    saved = np.zeros(lengths.size, dtype=bool)
    if not memory.keeps_attention:
        return saved
    for degree, first, members in nodes_top_down(degrees, firsts):
        keep = save_node(
            Node(degree, first // degree), lengths[members], float(free[first : first + degree].min()), memory, cost
        )
        saved[members[keep]] = True
        free[first : first + degree] -= memory.node_attention_bytes(float(lengths[members[keep]].sum()), degree)
    return saved


def nodes_top_down(degrees: np.ndarray, firsts: np.ndarray) -> list[tuple[int, int, np.ndarray]]:
    """(degree, first rank, sample positions) of every node among parallel per-sample arrays, larger
    degree first, then by rank; positions keep their input order."""
    if degrees.size == 0:
        return []
    order = np.lexsort((firsts, -degrees))
    keys = np.stack([degrees[order], firsts[order]], axis=1)
    starts = np.flatnonzero(np.r_[True, np.any(keys[1:] != keys[:-1], axis=1)])
    ends = [*starts[1:].tolist(), order.size]
    return [(int(keys[a, 0]), int(keys[a, 1]), order[a:b]) for a, b in zip(starts.tolist(), ends)]


def save_node(node: Node, lengths: np.ndarray, room: float, memory: MemoryModel, cost: CostModel) -> np.ndarray:
    """Boolean mask of the node's samples to save within ``room`` bytes per rank."""
    sample_bytes = lengths * memory.node_attention_bytes(1.0, node.degree)
    if sample_bytes.sum() <= room:
        return np.ones(lengths.size, dtype=bool)
    value = cost.attention_sample_costs(lengths, node.degree).fwd / np.maximum(sample_bytes, 1e-30)
    keep = np.zeros(lengths.size, dtype=bool)
    for j in np.argsort(-value, kind="stable"):
        if sample_bytes[j] <= room:
            keep[j] = True
            room -= sample_bytes[j]
    return keep
