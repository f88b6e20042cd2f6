"""What an SP backend's cost model is: the :class:`BackendCost` interface that
:class:`~nspsim.cost.analytic.AnalyticCostModel` delegates the attention core of a node to, and the
:class:`Coefficients` it may read from the analytic model (throughputs, per-byte link times,
latencies), so backends never import the analytic model (no import cycle).

Every backend prices one layer of one node of SP degree k > 1 per GPU of the group; degree-1 nodes
are the same for every backend (:mod:`nspsim.cost.backends.local`). Trade-off: an extra indirection
per call, in exchange for one file per backend instead of ``if backend == ...`` branches.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Protocol

import numpy as np

from nspsim.cost.interface import AttentionCost, SampleCosts
from nspsim.specs.model import ModelSpec
from nspsim.specs.training import TrainingSpec

BWD_ATTN_FLOP_RATIO = 2.5


class Coefficients(Protocol):
    """The analytic model's coefficients a backend cost reads."""

    @property
    def model(self) -> ModelSpec:
        """The model being trained."""
        ...

    @property
    def training(self) -> TrainingSpec:
        """Precisions and the SP backend."""
        ...

    def attn_throughput(self, lengths: np.ndarray, backward: bool, heads: int | None = None) -> np.ndarray:
        """Achieved attention FLOP/s for kernels over sequences of ``lengths`` with ``heads`` query heads
        per rank (``None``: the model's)."""
        ...

    def full_attn_throughput(self, lengths: np.ndarray, backward: bool) -> np.ndarray:
        """Achieved FLOP/s of non-causal (full) ``L x L`` blocks over all the model's query heads
        (FLOPs counted as two causal samples of length ``L``)."""
        ...

    def latency(self, group_size: int) -> float:
        """Per-collective latency of an aligned group."""
        ...

    def alltoall_latency(self, group_size: int) -> float:
        """Latency of one all-to-all of an aligned group (per-peer latencies included)."""
        ...

    def alltoall_seconds_per_byte(self, group_size: int) -> float:
        """Bandwidth part of an all-to-all per byte sent by each GPU."""
        ...

    def p2p_seconds_per_byte(self, group_size: int) -> float:
        """Bandwidth part of one ring hop per byte."""
        ...

    def stream_seconds_per_byte(self) -> float:
        """HBM time per byte of a memory-bound element-wise kernel (0 when the model leaves such work out)."""
        ...


def attention_compute(
    c: Coefficients, lengths: np.ndarray, degree: int, block: np.ndarray, heads: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample (fwd, bwd) attention compute seconds on one GPU of a degree-``degree`` node (1/k of
    each sample's FLOPs, a sliding window's share of them where the model has one:
    :meth:`~nspsim.specs.model.ModelSpec.attention_sq_lengths`); kernel efficiency from the ``block``
    lengths the kernel runs over with ``heads`` query heads per rank (``None``: all of the model's)."""
    flops = c.model.attention_flops(1.0) * c.model.attention_sq_lengths(lengths) / degree
    fwd = flops / c.attn_throughput(block, backward=False, heads=heads)
    bwd = BWD_ATTN_FLOP_RATIO * flops / c.attn_throughput(block, backward=True, heads=heads)
    return fwd, bwd


class NodeCost(ABC):
    """Attention-core cost of the nodes of one kind (stateless; one shared instance per kind)."""

    @abstractmethod
    def node(self, c: Coefficients, lengths: np.ndarray, degree: int) -> AttentionCost:
        """Phase times of one non-empty node of ``degree`` holding int64 ``lengths``, one layer, per GPU
        (latencies included)."""

    @abstractmethod
    def sample_costs(self, c: Coefficients, lengths: np.ndarray, degree: int) -> SampleCosts:
        """Additive per-sample totals at ``degree`` (all phases, no latency), one layer."""

    @abstractmethod
    def collectives_per_node(self, degree: int) -> int:
        """Latency-bearing collectives of a non-empty node per pass (what ``sample_costs`` leaves out)."""

    def collective_latency(self, c: Coefficients, degree: int) -> float:
        """Latency of one of those collectives (a point-to-point step by default)."""
        return c.latency(degree)

    def forward_parts(
        self, c: Coefficients, lengths: np.ndarray, degree: int
    ) -> tuple[np.ndarray, np.ndarray, float] | None:
        """Per-sample forward (prologue, compute) seconds without latency and the prologue's latency,
        when :meth:`node`'s forward is exactly ``Phases(float(pro[S].sum()) + latency,
        float(comp[S].sum()), ...)`` for the samples S of any node (element-wise parts, numpy sums);
        ``None`` (the default) when it is not additive that way."""
        return None


class BackendCost(NodeCost):
    """The cost of one SP backend's nodes of degree > 1, and the degrees it admits."""

    @abstractmethod
    def max_degree(self, model: ModelSpec, num_gpus: int) -> int:
        """Largest SP degree this backend admits for ``model`` on ``num_gpus`` GPUs."""
