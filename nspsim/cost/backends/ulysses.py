"""Ulysses (all-to-all) attention cost of one SP-tree node of degree k > 1.

Prologue = all-to-all of Q, K, V (KV heads replicated up to k), epilogue = all-to-all of the output;
backward mirrors it (dO in, dQ dK dV out). A GPU holds L/k tokens and sends (k-1)/k of them, so it
sends L/k * width * bytes * (k-1)/k per sample and collective; the kernel runs over whole samples
for H/k heads. Each phase is additive over samples, so the per-sample view (:meth:`sample_costs`)
plus two latencies per pass equals :meth:`node` exactly. Degree is capped by the attention heads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nspsim.cost.backends.base import BackendCost, Coefficients, attention_compute
from nspsim.cost.interface import AttentionCost, Phases, SampleCosts
from nspsim.specs.model import ModelSpec


def widths(c: Coefficients, degree: int) -> tuple[float, float]:
    """Bytes per token of the QKV all-to-all and of the output all-to-all."""
    m, ab = c.model, c.training.act_bytes
    kv = max(m.num_kv_heads, degree) * m.head_dim
    return (m.q_width + 2 * kv) * ab, m.q_width * ab


def ulysses_parts(c: Coefficients, lengths: np.ndarray, k: int) -> tuple[np.ndarray, ...]:
    """Per-sample phases without latency: fwd (pro, comp, epi), bwd (pro, comp, epi)."""
    qkv, out = widths(c, k)
    sent = lengths.astype(np.float64) / k * (k - 1) / k * c.alltoall_seconds_per_byte(k)
    fwd, bwd = attention_compute(c, lengths, k, lengths, heads=max(c.model.num_heads // k, 1))
    return sent * qkv, fwd, sent * out, sent * out, bwd, sent * qkv


@dataclass(frozen=True)
class UlyssesCost(BackendCost):
    """See the module docstring."""

    def node(self, c: Coefficients, lengths: np.ndarray, degree: int) -> AttentionCost:
        """Summed phases plus one all-to-all latency on each prologue and epilogue."""
        lat = c.alltoall_latency(degree)
        fp, fc, fe, bp, bc, be = (float(x.sum()) for x in ulysses_parts(c, lengths, degree))
        return AttentionCost(Phases(fp + lat, fc, fe + lat), Phases(bp + lat, bc, be + lat))

    def sample_costs(self, c: Coefficients, lengths: np.ndarray, degree: int) -> SampleCosts:
        """Prologue + compute + epilogue per sample."""
        fp, fc, fe, bp, bc, be = ulysses_parts(c, lengths, degree)
        return SampleCosts(fp + fc + fe, bp + bc + be)

    def forward_parts(
        self, c: Coefficients, lengths: np.ndarray, degree: int
    ) -> tuple[np.ndarray, np.ndarray, float] | None:
        """The forward prologue and compute of :func:`ulysses_parts` and one all-to-all latency (:meth:`node`)."""
        fp, fc, *_ = ulysses_parts(c, lengths, degree)
        return fp, fc, c.alltoall_latency(degree)

    def collectives_per_node(self, degree: int) -> int:
        """Two all-to-alls per pass."""
        return 2

    def collective_latency(self, c: Coefficients, degree: int) -> float:
        """An all-to-all's latency (per-peer latencies included)."""
        return c.alltoall_latency(degree)

    def max_degree(self, model: ModelSpec, num_gpus: int) -> int:
        """Heads are split over the group: the largest degree that, with every smaller power of two,
        splits them (:attr:`~nspsim.specs.model.ModelSpec.max_ulysses_degree`)."""
        return min(num_gpus, model.max_ulysses_degree)
