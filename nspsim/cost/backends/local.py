"""Attention cost of a degree-1 node: whole samples on one GPU, no communication, whatever the SP
backend (the runtime runs them with its local backend too).

Forward and backward are the kernel over each whole sample; no prologue, epilogue or latency. This
is what every backend's formula reduces to at k = 1, computed without the zero terms.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nspsim.cost.backends.base import Coefficients, NodeCost, attention_compute
from nspsim.cost.interface import AttentionCost, Phases, SampleCosts


@dataclass(frozen=True)
class LocalCost(NodeCost):
    """See the module docstring."""

    def node(self, c: Coefficients, lengths: np.ndarray, degree: int) -> AttentionCost:
        """The summed kernel times; no communication phases."""
        fwd, bwd = attention_compute(c, lengths, 1, lengths)
        return AttentionCost(Phases(0.0, float(fwd.sum()), 0.0), Phases(0.0, float(bwd.sum()), 0.0))

    def sample_costs(self, c: Coefficients, lengths: np.ndarray, degree: int) -> SampleCosts:
        """The kernel time of each sample."""
        fwd, bwd = attention_compute(c, lengths, 1, lengths)
        return SampleCosts(fwd, bwd)

    def forward_parts(
        self, c: Coefficients, lengths: np.ndarray, degree: int
    ) -> tuple[np.ndarray, np.ndarray, float] | None:
        """No prologue (zeros, no latency) and the kernel time (:meth:`node`)."""
        fwd, _ = attention_compute(c, lengths, 1, lengths)
        return np.zeros(lengths.size), fwd, 0.0

    def collectives_per_node(self, degree: int) -> int:
        """None."""
        return 0
