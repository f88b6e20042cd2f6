"""Recompute-aware choice among NSP's final candidates on memory-bound batches (the rung itself,
:func:`~nspsim.planners.estimate.recompute_aware_step`, lives on the estimate ladder).

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

Under expert parallelism the estimate is phase-wise per EP group (:func:`phase_wise`): the EP
dispatch and combine all-to-alls synchronise a group between attention and the experts every
layer, so each group pays its max attention plus its max non-attention; and the beam of a
memory-bound batch also runs on the EP-aligned levels (:func:`candidate_levels`), whose nodes
never make a group's GPUs unequal.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from nspsim.planners.proxy import ProxyLoad

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Route:
    """Degrees and first ranks of the routed samples, its Load under the search proxy, its source; its
    per-GPU stage times under the routing table when they were evaluated there (``loads``, so the
    estimate does not evaluate them again) and its recompute-aware estimate once computed."""

    degrees: IntArray
    firsts: IntArray
    load: float
    source: str
    loads: ProxyLoad | None = field(default=None, compare=False)
    estimate: float | None = field(default=None, compare=False)


def candidate_levels(levels: tuple[int, ...], expert_parallel: int) -> list[tuple[int, ...]]:
    """The level sets a memory-bound batch's beam runs on: the planner's ``levels`` and, under expert
    parallelism, the EP-aligned ones (degree 1 and degrees of at least one EP group) when they
    differ. A node smaller than an EP group but larger than one GPU makes its group's GPUs unequal
    in attention and tokens, which :func:`phase_wise` charges every layer; the aligned beam avoids
    that by construction, and the estimate decides between the routes."""
    out = [levels]
    if expert_parallel > 1:
        aligned = tuple(d for d in levels if d == 1 or d >= expert_parallel)
        if aligned != levels and aligned:
            out.append(aligned)
    return out
