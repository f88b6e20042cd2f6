"""Ring attention cost of one SP-tree node of degree k > 1.

k-1 steps pass each GPU's K,V block (in backward also its fp32 dK,dV accumulator) to its
neighbour while the next block is computed; a step takes max(block compute + merge, block transfer +
latency), and the first block is computed, and its result written, before any transfer. A hop's
latency is the cluster's collective latency (no send/receive sweep is in the reference set; it is
small next to long-context steps). The whole node (:meth:`node`) overlaps the summed blocks; the
per-sample view (:meth:`sample_costs`) overlaps each sample on its own, a conservative upper bound.
All of a phase is "compute" (the transfers hide inside it). Any degree up to the GPU count.

The load-balanced (zigzag) ring gives every GPU two chunks of L/2k tokens, so each step's kernels run
over blocks of L/2k (what sets their efficiency). After the kernels of every step but the first,
the partial results are merged in fp32, as ring-flash-attention's ``update_out_and_lse`` and its
backward accumulation do: forward reads and rewrites the fp32 output accumulator and reads the step's
bf16 output (10 bytes per query-width element) and the log-sum-exps (12 bytes per head); backward
does the same for dQ and for dK and dV. That memory-bound merge is the ring's
per-step overhead over the ideal 1/k of the kernel, at the GPU's streaming bandwidth (0 when the cost
model leaves element-wise work out).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nspsim.cost.backends.base import BackendCost, Coefficients, attention_compute
from nspsim.cost.interface import AttentionCost, Phases, SampleCosts
from nspsim.specs.model import ModelSpec

MERGE_BYTES_PER_ELEMENT = 4 + 4 + 2
"""fp32 accumulator read and written, the step's bf16 result read."""
LSE_BYTES_PER_HEAD = 3 * 4
GRAD_ACCUMULATOR_BYTES = 4
"""Backward passes each K,V block on with its dK,dV accumulator, kept in fp32 (nspsim_runtime/backends/ring.py and
ring-flash-attention alike): 1 + 4 / act_bytes times the forward's bytes (3x in bf16, 2x in fp32)."""


def ring_parts(c: Coefficients, lengths: np.ndarray, k: int) -> tuple[np.ndarray, ...]:
    """Per-sample times per GPU: step kernels (fwd, bwd), step transfers (fwd, bwd) and the merge of
    one step's result into the accumulators (fwd, bwd; the first step only writes them)."""
    m = c.model
    tokens = lengths.astype(np.float64) / k
    kv_block = tokens * 2 * m.kv_width * c.training.act_bytes
    step_comm = kv_block * c.p2p_seconds_per_byte(k)
    fwd, bwd = attention_compute(c, lengths, k, np.maximum(lengths // (2 * k), 1))
    lse = LSE_BYTES_PER_HEAD * m.num_heads
    merge_fwd = tokens * (MERGE_BYTES_PER_ELEMENT * m.q_width + lse) * c.stream_seconds_per_byte()
    merge_bwd = tokens * (MERGE_BYTES_PER_ELEMENT * (m.q_width + 2 * m.kv_width) + lse) * c.stream_seconds_per_byte()
    bwd_comm = step_comm * (1.0 + GRAD_ACCUMULATOR_BYTES / c.training.act_bytes)  # K,V and the fp32 dK,dV
    return fwd / k, bwd / k, step_comm, bwd_comm, merge_fwd, merge_bwd


@dataclass(frozen=True)
class RingCost(BackendCost):
    """See the module docstring."""

    def node(self, c: Coefficients, lengths: np.ndarray, degree: int) -> AttentionCost:
        """k steps of the summed blocks, the last k-1 merged and bounded by their transfer."""
        cf, cb, mf, mb, gf, gb = (float(x.sum()) for x in ring_parts(c, lengths, degree))
        lat = c.latency(degree)
        fwd = cf + (degree - 1) * max(cf + gf, mf + lat)
        bwd = cb + (degree - 1) * max(cb + gb, mb + lat)
        return AttentionCost(Phases(0.0, fwd, 0.0), Phases(0.0, bwd, 0.0))

    def sample_costs(self, c: Coefficients, lengths: np.ndarray, degree: int) -> SampleCosts:
        """Each sample's own k steps (no latency)."""
        cf, cb, mf, mb, gf, gb = ring_parts(c, lengths, degree)
        k = degree - 1
        return SampleCosts(cf + k * np.maximum(cf + gf, mf), cb + k * np.maximum(cb + gb, mb))

    def collectives_per_node(self, degree: int) -> int:
        """One hop per step after the first: k-1."""
        return degree - 1

    def max_degree(self, model: ModelSpec, num_gpus: int) -> int:
        """Every GPU holds all heads: any degree up to the GPU count."""
        return num_gpus
