"""Ring attention cost of one SP-tree node of degree k > 1.

k-1 steps pass each GPU's K,V block (in backward also its fp32 dK,dV accumulator) to its
neighbour while the next block is computed; a step takes max(block compute + merge, block transfer +
latency), and the first block is computed, and its result written, before any transfer. A hop's
latency is the cluster's collective latency (no send/receive sweep is in the reference set; it is
small next to long-context steps). The whole node (:meth:`node`) overlaps the summed blocks; the
per-sample view (:meth:`sample_costs`) overlaps each sample on its own, a conservative upper bound.
All of a phase is "compute" (the transfers hide inside it). Any degree up to the GPU count.

The load-balanced (zigzag) ring gives every GPU two chunks of c = L/2k tokens, so each step's kernels
run over blocks of c (what sets their efficiency). Of a GPU's 1/k of the causal pairs, only the two
diagonal blocks of the first step are causal (1/(2k) of its work, at the causal kernel's throughput at
c); the first step's cross block (another 1/(2k)) and every later step (1/k each) are full blocks, at
the full-block throughput (:meth:`~nspsim.cost.backends.base.Coefficients.full_attn_throughput`): a
causal kernel computes and masks the tiles on its diagonal, a full block has none. Measured on the
2-core CPU host (tiny model, torch's CPU flash kernel, one thread, 2026-12-02; two runs of the blocks
of a ring walk interleaved with the Ulysses kernel of the same sample, 4.8K-5.9K tokens, k = 2): full
c x c blocks ran at 1.2-1.6x (forward) and 1.2-1.4x (backward) the FLOP rate of a causal kernel over
c, and the whole walk took 0.93-1.11x the Ulysses kernel's time; every block at the causal rate of
the validation's profile had priced it at 1.4x (forward) and 1.6x (backward) of Ulysses. Trade-off: a
later step's 2c x c blocks are priced at the c x c figure (measured within 25% of it, either way)
rather than from a second table.

After the kernels of every step but the first, the partial results are merged in fp32, as
ring-flash-attention's ``update_out_and_lse`` and its backward accumulation do: forward reads and
rewrites the fp32 output accumulator and reads the step's bf16 output (10 bytes per query-width
element) and the log-sum-exps (12 bytes per head); backward does the same for dQ and for dK and dV.
That memory-bound merge is the ring's per-step overhead over the ideal 1/k of the kernel, at the GPU's
streaming bandwidth (0 when the cost model leaves element-wise work out).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nspsim.cost.backends.base import BWD_ATTN_FLOP_RATIO, BackendCost, Coefficients
from nspsim.cost.interface import AttentionCost, Phases, SampleCosts
from nspsim.specs.model import ModelSpec

MERGE_BYTES_PER_ELEMENT = 4 + 4 + 2
"""fp32 accumulator read and written, the step's bf16 result read."""
LSE_BYTES_PER_HEAD = 3 * 4
GRAD_ACCUMULATOR_BYTES = 4
"""Backward passes each K,V block on with its dK,dV accumulator, kept in fp32 (nspsim_runtime/backends/ring.py and
ring-flash-attention alike): 1 + 4 / act_bytes times the forward's bytes (3x in bf16, 2x in fp32)."""


def ring_kernels(c: Coefficients, lengths: np.ndarray, k: int) -> tuple[np.ndarray, ...]:
    """Per-sample kernel seconds per GPU of the first step (fwd, bwd) and of each later step (fwd, bwd).

    A GPU computes 1/k of a sample's causal FLOPs F. The first step runs the two causal diagonal
    blocks (F / 2k, at the causal throughput at c = L/2k) and one full cross block (F / 2k); every later
    step runs F / k of full blocks (at the full-block throughput at c)."""
    flops = c.model.attention_flops(1.0) * lengths.astype(np.float64) ** 2 / k
    block = np.maximum(lengths // (2 * k), 1)
    half, later = flops / (2 * k), flops / k
    out = []
    for backward in (False, True):
        scale = BWD_ATTN_FLOP_RATIO if backward else 1.0
        causal = c.attn_throughput(block, backward=backward)
        full = c.full_attn_throughput(block, backward=backward)
        out.append((scale * half / causal + scale * half / full, scale * later / full))
    (first_f, later_f), (first_b, later_b) = out
    return first_f, first_b, later_f, later_b


def ring_parts(c: Coefficients, lengths: np.ndarray, k: int) -> tuple[np.ndarray, ...]:
    """Per-sample times per GPU: first-step kernels (fwd, bwd), later-step kernels (fwd, bwd), step
    transfers (fwd, bwd) and the merge of one step's result into the accumulators (fwd, bwd; the first
    step only writes them)."""
    m = c.model
    tokens = lengths.astype(np.float64) / k
    kv_block = tokens * 2 * m.kv_width * c.training.act_bytes
    step_comm = kv_block * c.p2p_seconds_per_byte(k)
    lse = LSE_BYTES_PER_HEAD * m.num_heads
    merge_fwd = tokens * (MERGE_BYTES_PER_ELEMENT * m.q_width + lse) * c.stream_seconds_per_byte()
    merge_bwd = tokens * (MERGE_BYTES_PER_ELEMENT * (m.q_width + 2 * m.kv_width) + lse) * c.stream_seconds_per_byte()
    bwd_comm = step_comm * (1.0 + GRAD_ACCUMULATOR_BYTES / c.training.act_bytes)  # K,V and the fp32 dK,dV
    return (*ring_kernels(c, lengths, k), step_comm, bwd_comm, merge_fwd, merge_bwd)


@dataclass(frozen=True)
class RingCost(BackendCost):
    """See the module docstring."""

    def node(self, c: Coefficients, lengths: np.ndarray, degree: int) -> AttentionCost:
        """The first step's summed blocks, then k-1 steps, each merged and bounded by its transfer."""
        f0, b0, fs, bs, mf, mb, gf, gb = (float(x.sum()) for x in ring_parts(c, lengths, degree))
        lat = c.latency(degree)
        fwd = f0 + (degree - 1) * max(fs + gf, mf + lat)
        bwd = b0 + (degree - 1) * max(bs + gb, mb + lat)
        return AttentionCost(Phases(0.0, fwd, 0.0), Phases(0.0, bwd, 0.0))

    def sample_costs(self, c: Coefficients, lengths: np.ndarray, degree: int) -> SampleCosts:
        """Each sample's own k steps (no latency)."""
        f0, b0, fs, bs, mf, mb, gf, gb = ring_parts(c, lengths, degree)
        k = degree - 1
        return SampleCosts(f0 + k * np.maximum(fs + gf, mf), b0 + k * np.maximum(bs + gb, mb))

    def collectives_per_node(self, degree: int) -> int:
        """One hop per step after the first: k-1."""
        return degree - 1

    def max_degree(self, model: ModelSpec, num_gpus: int) -> int:
        """Every GPU holds all heads: any degree up to the GPU count."""
        return num_gpus
