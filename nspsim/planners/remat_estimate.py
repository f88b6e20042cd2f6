"""Recompute-aware choice among NSP's final candidates on memory-bound batches.

The routing proxy (Load) does not see tree-level recomputation, the paper's deliberate choice. On a
memory-bound batch that blind spot picks wrong: on Qwen3-235B / 64 H200s / wikipedia batch 4 the
beam's nested plan had the smallest Load, yet its simulated step (23.32 s) lost to NSP's own
static-8 seed packed under the same token cap (19.86 s), because its degree-1 and degree-2 nodes
holding 28-35K-token samples cannot keep their attention and recompute it in backward. (The
estimate below does not see comm wait either, and on that batch picks a static-2 packing, 23.58 s;
over the 11 distinct Qwen3-235B batches of the closing study it still improves the mean, see
docs/planners.md.)

So when the batch is memory-bound, the final candidates (the beam's best state and the static
seeds) are compared by Load plus an estimate of that recomputation: the executor's top-down marking
(:func:`nspsim.execution.recompute.saved_samples`, roots first, same free bytes per GPU) is replayed on the
candidate's arrays, and every node's unkept samples add their recompute pass - the cost model's
``recompute_attention`` of their forward attention (Q/K/V re-send and kernel, no epilogue), times the
layers - to each GPU of the node's backward stage. Estimate = max_p D_p^fwd + max_p (D_p^bwd + R_p).
Trade-off: a few extra milliseconds per memory-bound batch (one marking per candidate); the choice
can pick a candidate whose bare Load is higher, so on memory-bound batches NSP's guarantee is stated
on this estimate (never worse than the best static seed's), not on Load.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from nspsim.cost.interface import CostModel
from nspsim.execution.recompute import nodes_top_down, saved_samples
from nspsim.planners.proxy import CostTable, ProxyLoad
from nspsim.specs.memory import MemoryModel

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def selected_loads(table: CostTable, select: IntArray, degrees: IntArray, firsts: IntArray) -> ProxyLoad:
    """Proxy stage times and tokens per GPU of the selected samples on ``(degrees, firsts)``
    (``degrees[i]``/``firsts[i]`` belong to sample ``select[i]``)."""
    full_deg = np.zeros(table.num_samples, dtype=np.int64)
    full_first = np.zeros(table.num_samples, dtype=np.int64)
    mask = np.zeros(table.num_samples, dtype=bool)
    full_deg[select], full_first[select], mask[select] = degrees, firsts, True
    return table.evaluate(full_deg, full_first, mask)


def remat_per_gpu(
    table: CostTable,
    memory: MemoryModel,
    cost: CostModel,
    select: IntArray,
    degrees: IntArray,
    firsts: IntArray,
    tokens: FloatArray,
) -> FloatArray:
    """Seconds of recomputation per GPU if the selected samples run on ``(degrees, firsts)`` (one
    micro-batch) with ``tokens`` sharded tokens per GPU (``selected_loads(...).tokens``)."""
    lengths = table.lengths[select].astype(np.float64)
    free = memory.activation_capacity - memory.base_bytes(1.0) * tokens
    lost = ~saved_samples(lengths, degrees, firsts, free, memory, cost)
    remat = np.zeros(table.tree.num_gpus)
    for d, first, members in nodes_top_down(degrees[lost], firsts[lost]):
        redo = cost.recompute_attention(lengths[lost][members], d)
        remat[first : first + d] += cost.num_layers * (redo.prologue + redo.compute)
    return remat


def remat_aware_load(
    table: CostTable, memory: MemoryModel, cost: CostModel, select: IntArray, degrees: IntArray, firsts: IntArray
) -> float:
    """max_p D_p^fwd + max_p (D_p^bwd + R_p) of the selected samples on ``(degrees, firsts)``."""
    loads = selected_loads(table, select, degrees, firsts)
    extra = remat_per_gpu(table, memory, cost, select, degrees, firsts, loads.tokens)
    return float(loads.d_fwd.max() + (loads.d_bwd + extra).max())
