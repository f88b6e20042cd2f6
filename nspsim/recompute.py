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
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from nspsim.cost_model import CostModel
from nspsim.memory import MemoryModel
from nspsim.plan import Plan
from nspsim.simulator.activation import base_bytes_per_gpu
from nspsim.sp_tree import Node


def mark_recompute(plan: Plan, memory: MemoryModel, cost: CostModel) -> Plan:
    """``plan`` with per-sample save/recompute marks for ``memory`` (``True`` = recompute in backward)."""
    remat = np.ones(plan.num_samples, dtype=bool)
    for mb in range(plan.num_micro_batches):
        _mark_micro_batch(plan, memory, cost, mb, remat)
    saved = 1.0 - float(remat.mean())
    meta = {**plan.metadata, "tree_recompute_saved_share": round(saved, 6)}
    return replace(plan, recompute=tuple(bool(r) for r in remat), metadata=meta)


def _mark_micro_batch(plan: Plan, memory: MemoryModel, cost: CostModel, mb: int, remat: np.ndarray) -> None:
    lengths = np.asarray(plan.lengths, dtype=np.int64)
    free = memory.activation_capacity - base_bytes_per_gpu(plan, memory, mb)
    members: dict[Node, list[int]] = {}
    for j in np.flatnonzero(plan.sample_mask(mb)):
        members.setdefault(plan.nodes[j], []).append(int(j))
    for node in sorted(members, key=lambda n: (-n.degree, n.index)):
        samples = np.array(members[node])
        saved = save_node(node, lengths[samples], free[node.first_rank:node.end_rank].min(), memory, cost)
        remat[samples[saved]] = False
        free[node.first_rank:node.end_rank] -= memory.node_attention_bytes(float(lengths[samples[saved]].sum()),
                                                                           node.degree)


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
