"""The cost-model interface (docs/simulator.md): the one narrow, typed boundary that planners and the
simulator depend on. Implementations: :mod:`nspsim.cost.analytic` (from FLOPs, bytes and bandwidths,
optionally overridden by a measured JSON profile, :mod:`nspsim.cost.profile`).

Levels of the hierarchy and where they live:

* backend level - :meth:`CostModel.attention`: per tree node and layer, the (prologue, compute,
  epilogue) phase times of the attention core in forward and backward, per GPU of the group, and
  :meth:`CostModel.recompute_attention`, the extra backward pass of samples whose attention state was
  not kept (tree-level recomputation);
* model level - :meth:`CostModel.non_attention`: projections, FFN/MoE (and the expert-parallel
  all-to-all) for the tokens a GPU holds;
* tree and iteration level - the planners' :class:`~nspsim.planners.proxy.CostTable` sums these over
  each GPU's active chain and forms Load(a) = max_p D_p^fwd + max_p D_p^bwd;
* FSDP, layout change, output head and optimizer - :meth:`fsdp`, :meth:`alltoall_time`,
  :meth:`head` and :meth:`optimizer_time`, used by the simulator and micro-batch-aware planners.

All times are seconds. Planners use the additive per-sample view (:meth:`attention_sample_costs`
plus a per-node :meth:`node_overhead`); for Ulysses it equals :meth:`attention` exactly, for Ring it
is a conservative upper bound (per-sample overlap instead of whole-node overlap).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class Phases:
    """Communication prologue, local compute and communication epilogue of one attention pass."""

    prologue: float
    compute: float
    epilogue: float

    @property
    def comm(self) -> float:
        """Prologue plus epilogue."""
        return self.prologue + self.epilogue

    @property
    def total(self) -> float:
        """Serial sum of the three phases (the conservative tree-level aggregate)."""
        return self.prologue + self.compute + self.epilogue


ZERO_PHASES = Phases(0.0, 0.0, 0.0)


@dataclass(frozen=True)
class AttentionCost:
    """Phase times of one tree node for one decoder layer, per GPU of its group."""

    fwd: Phases
    bwd: Phases


@dataclass(frozen=True)
class SampleCosts:
    """Additive per-sample attention cost (all three phases, no per-collective latency), per layer."""

    fwd: np.ndarray
    bwd: np.ndarray


@dataclass(frozen=True)
class NonAttentionCost:
    """Per-layer, per-GPU non-attention work: GEMM compute and expert-parallel all-to-all time.

    ``bwd_compute`` includes what activation checkpointing reruns (matmuls and element-wise work).
    """

    fwd_compute: float
    bwd_compute: float
    fwd_comm: float
    bwd_comm: float

    @property
    def fwd(self) -> float:
        """Serial forward time."""
        return self.fwd_compute + self.fwd_comm

    @property
    def bwd(self) -> float:
        """Serial backward time."""
        return self.bwd_compute + self.bwd_comm


@dataclass(frozen=True)
class FsdpCost:
    """Per-layer FSDP collectives: parameter all-gather (done in forward and again in backward)
    and gradient reduce-scatter (backward)."""

    allgather: float
    reduce_scatter: float


def recompute_phases(forward: Phases) -> Phases:
    """What recomputing attention for backward costs, given the recomputed samples' forward phases.

    The backward kernel needs Q, K, V, O and the log-sum-exp in head layout: the prologue re-sends
    Q, K, V and the kernel reruns to regenerate O and LSE. No epilogue: the output in sequence layout
    (the o_proj input) is kept by autograd, so nothing goes back. Implementations of
    :meth:`CostModel.recompute_attention` that derive the pass from their forward phases use this.
    """
    return Phases(forward.prologue, forward.compute, 0.0)


@runtime_checkable
class CostModel(Protocol):
    """What planners and the simulator may ask about costs. Lengths are token counts (int arrays)."""

    @property
    def num_layers(self) -> int:
        """Decoder layers per forward pass."""
        ...

    def attention(self, lengths: np.ndarray, degree: int) -> AttentionCost:
        """Phase times of one node of SP ``degree`` holding samples ``lengths``, one layer."""
        ...

    def recompute_attention(self, lengths: np.ndarray, degree: int) -> Phases:
        """Phase times of recomputing, in backward, the forward attention of samples ``lengths`` kept
        at SP ``degree`` (tree-level recomputation), one layer; see :func:`recompute_phases`."""
        ...

    def attention_sample_costs(self, lengths: np.ndarray, degree: int) -> SampleCosts:
        """Additive per-sample totals (prologue + compute + epilogue) at ``degree``, one layer."""
        ...

    def node_overhead(self, degree: int) -> tuple[float, float]:
        """Fixed (fwd, bwd) cost of a non-empty node per layer: collective latencies."""
        ...

    def non_attention(self, tokens: float) -> NonAttentionCost:
        """Non-attention time of one layer on a GPU that holds ``tokens`` sharded tokens."""
        ...

    def fsdp(self) -> FsdpCost:
        """FSDP collective times of one layer (independent of the batch)."""
        ...

    def alltoall_time(self, bytes_per_gpu: float, group_size: int) -> float:
        """One all-to-all in which every GPU of an aligned group sends ``bytes_per_gpu`` in total."""
        ...

    def latency(self, group_size: int) -> float:
        """Fixed per-collective latency of an aligned group of ``group_size`` ranks (0 for one rank).

        Every collective time above is this latency plus a bandwidth term; the simulator slows only
        the bandwidth term down when collectives share a link.
        """
        ...

    def head(self, tokens: float) -> tuple[float, float]:
        """(fwd, bwd) time of embedding and output head for ``tokens`` tokens on one GPU."""
        ...

    def optimizer_time(self) -> float:
        """Optimizer step time per GPU (including offload traffic when optimizer states are offloaded)."""
        ...

    def compute_slots(self) -> float | None:
        """Kernels a host can run at full speed at once when its ranks share cores (a CPU host under
        gloo), or ``None`` when every rank has its own device (:mod:`nspsim.simulator.sharing`)."""
        ...

    def step_overhead(self) -> float:
        """Fixed time per GPU of one step beyond its work (control traffic: plan exchange, barriers)."""
        ...

    def micro_batch_overhead(self) -> float:
        """Fixed time per GPU of one micro-batch beyond its layers and head (host-side set-up, launches)."""
        ...

    def lockstep_waits(self) -> Callable[[int, float], float] | None:
        """``wait(group_size, work_s)``: the mean time a collective of ``group_size`` ranks starts late
        because its members, after ``work_s`` seconds of equal work since their previous collective,
        do not arrive together (ranks sharing a host's cores are descheduled unevenly); ``None`` where
        ranks run in lockstep (every rank its own device, or nothing measured)."""
        ...
