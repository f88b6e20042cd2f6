"""Analytic cost model: times from FLOPs, bytes, throughputs and bandwidths (docs/simulator.md).

Attention core (per layer, per GPU of a node of SP degree k, samples of lengths L_j):

* FLOPs: forward 2 * L^2 * q_width per sample (causal), backward 2.5x forward; a GPU does 1/k.
  Kernel throughput grows with length, ``attn_flops * L / (L + attn_half_length)``, unless a profile
  gives a measured table.
* A sliding window W scales each sample's FLOPs by the share of causal query-key pairs it keeps
  (:func:`nspsim.specs.model.causal_pairs`, averaged over the layers that use it), and the kernel
  runs at the throughput of the sample's own length L, from the curve or a measured table alike: a
  windowed sample costs its full-attention time times that share. Why the sample's length and not
  the full-attention length with the same pair count (sqrt of twice the pairs, ~32K for L = 128K,
  W = 4K): a banded flash kernel still runs all L / tile query tiles of the sample, each over a band
  of about W keys, so its parallelism, and the tile count its fixed costs are paid over, are those of
  length L; the equal-pairs length would price it as a shorter kernel with fewer tiles, below the
  saturated rate. Where the band is narrower than the kernel's tiles (W well under 128) the kernel
  computes masked tiles too and this under-prices it. Ring attention with a window is refused
  (:func:`nspsim.specs.backend.window_refusal`).
* The SP backend decides how a node of degree k > 1 splits and overlaps that work: one file per
  backend under :mod:`nspsim.cost.backends` (Ulysses: all-to-all prologue and epilogue; Ring: k-1
  overlapped K/V hops), looked up once per model; degree-1 nodes are the plain local kernel.

Attention kernels run at the published curve of the training's kernel on the GPU's family
(:mod:`nspsim.specs.kernels`), or the GPU spec's saturation curve (``attention_kernel = "spec"``, or a
device without published kernels).

Non-attention work: GEMM FLOPs of the projections and active FFN at ``nonattn_flops`` (the GPU's
measured best-shape matmul rate; MoE grouped GEMMs at ``moe_gemm_efficiency`` of it), plus the
element-wise work as HBM traffic (:mod:`nspsim.cost.elementwise`); backward is 2x forward plus what
activation checkpointing reruns (:meth:`AnalyticCostModel.recompute_flops_per_token`); expert
parallelism adds two all-to-alls per FFN pass (four in backward when the FFN forward reruns).
Small inputs: a GEMM over M rows computes ceil(M / tile) tiles of
``gpu.gemm_tile_rows`` rows, so on average it wastes (tile - 1) / 2 rows (the residue of M is
spread evenly over the tile). A GPU holding tokens pays that once per dense GEMM and once per *local
expert* in the grouped GEMM (every one of its E / EP experts gets a ragged last tile), per layer and
micro-batch: an intercept in the tokens, which is how micro-batching and few tokens per expert cost
efficiency (Qwen3-30B-A3B on H100, 128 local experts: about 2% of a 32K-token micro-batch's
non-attention time, 6% at 10K tokens). A GPU's kernel launches are asynchronous and hide behind its
queued work, so the analytic per-micro-batch fixed cost is 0; a profile's measured ``micro_batch_s``
replaces it (a CPU runtime launches synchronously).

FSDP: ring all-gather of one layer's bf16 parameters (experts sharded over their EP replicas), ring
reduce-scatter of its gradients, with one ring per NIC rail across hosts.

A measured profile (:mod:`nspsim.cost.profile`, what ``python -m nspsim_runtime.calibrate`` writes) replaces
coefficients where it has them: attention throughput by length (and by query heads per rank: a
Ulysses node of degree k runs H/k heads), non-attention and output-head time per layer against the
tokens a rank holds, a fixed cost per micro-batch, the optimizer step's time, every
collective as latency + bytes / bandwidth per group size, and the lockstep waits of ranks that share
a host's cores (:meth:`AnalyticCostModel.lockstep_waits`, applied by the simulator's engine).
Time tables enter as their affine least-squares fit (intercept + slope per token, relative error
weighted), because the planners' arithmetic needs non-attention time affine in the tokens
(:func:`nspsim.planners.proxy.fit_non_attention`); the calibration records that fit's error.

Trade-off: closed forms make planning cheap and explainable; accuracy comes from a measured profile.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from nspsim.cost.backends import LOCAL, BackendCost, NodeCost, backend_cost
from nspsim.cost.comm import alltoall_traffic, collective_time, ring_collective_traffic, ring_traffic
from nspsim.cost.elementwise import elementwise_traffic
from nspsim.cost.interface import AttentionCost, FsdpCost, NonAttentionCost, Phases, SampleCosts, recompute_phases
from nspsim.cost.profile import Profile
from nspsim.cost.profile.consistency import check_rates
from nspsim.cost.profile.tables import AffineFit, lookup_degree
from nspsim.specs.backend import window_refusal
from nspsim.specs.cluster import ClusterSpec
from nspsim.specs.kernels import AttentionCurves, attention_curves
from nspsim.specs.memory import gathered_layer_params
from nspsim.specs.model import ModelSpec
from nspsim.specs.training import AttentionKernel, Checkpointing, TrainingSpec


@dataclass(frozen=True, kw_only=True)
class AnalyticCostModel:
    """The default :class:`~nspsim.cost.interface.CostModel`; a :class:`Profile` overrides coefficients."""

    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec
    profile: Profile = field(default_factory=Profile)
    attn_half_length: float = 512.0
    dense_gemm_efficiency: float = 1.0
    moe_gemm_efficiency: float = 0.6
    elementwise: bool = True
    _backend: BackendCost = field(init=False, repr=False, compare=False)
    _padding: tuple[float, float] = field(init=False, repr=False, compare=False)
    _elementwise: tuple[float, float] = field(init=False, repr=False, compare=False)
    _recompute: float = field(init=False, repr=False, compare=False)
    _curves: AttentionCurves | None = field(init=False, repr=False, compare=False)
    _loss: tuple[float, float] = field(init=False, repr=False, compare=False)
    _affine: dict[str, tuple[AffineFit | None, AffineFit | None]] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        if self.attn_half_length < 0:
            raise ValueError("attn_half_length must be >= 0")
        if not (0 < self.dense_gemm_efficiency <= 1 and 0 < self.moe_gemm_efficiency <= 1):
            raise ValueError("GEMM efficiencies must be in (0, 1]")
        refusal = window_refusal(self.training.backend, self.model.sliding_window)
        if refusal is not None:
            raise ValueError(refusal)
        check_rates(
            self.profile, dense_flops_per_token=self.model.dense_flops_per_token_layer, heads=self.model.num_heads
        )
        object.__setattr__(self, "_backend", backend_cost(self.training.backend))
        object.__setattr__(self, "_curves", self._attention_curves())
        object.__setattr__(self, "_recompute", self._recompute_flops())
        object.__setattr__(self, "_padding", self._tile_padding())
        object.__setattr__(self, "_elementwise", self._elementwise_times())
        loss = elementwise_traffic(self.model, self.training.fused_elementwise).loss
        per_element = self.training.act_bytes / self.hbm_bandwidth if self.elementwise else 0.0
        object.__setattr__(self, "_loss", (loss[0] * per_element, loss[1] * per_element))

    @property
    def num_layers(self) -> int:
        """Decoder layers per forward pass."""
        return self.model.num_layers

    # ---- coefficients ---------------------------------------------------------------------------
    def attn_throughput(self, lengths: np.ndarray, backward: bool, heads: int | None = None) -> np.ndarray:
        """Achieved attention FLOP/s for sequences of ``lengths`` with ``heads`` query heads per rank
        (profile table or saturation curve)."""
        table = self.profile.attention_table(backward, self.model.num_heads if heads is None else heads)
        if table is not None:
            return table(lengths)
        if self._curves is not None:
            curve = self._curves.bwd if backward else self._curves.fwd
            return curve(lengths) * self.cluster.gpu.kernel_scale
        peak = self.cluster.gpu.attn_bwd_flops if backward else self.cluster.gpu.attn_fwd_flops
        lengths = np.asarray(lengths, dtype=np.float64)
        return peak * lengths / (lengths + self.attn_half_length)

    def _attention_curves(self) -> AttentionCurves | None:
        """The published curves of the training's attention kernel on this GPU family; ``None`` for the
        GPU spec's own saturation curve (``attention_kernel = "spec"``, or a device with no published
        kernels, such as the CPU preset); ``ValueError`` for a kernel never measured on this family."""
        kernel, family = self.training.attention_kernel, self.cluster.gpu.family
        if kernel is AttentionKernel.SPEC or not family:
            return None
        return attention_curves(family, kernel, self.model.head_dim)

    @property
    def nonattn_flops(self) -> float:
        """Achieved FLOP/s of the non-attention GEMMs."""
        if self.profile.nonattn_flops is not None:
            return self.profile.nonattn_flops
        eff = self.moe_gemm_efficiency if self.model.moe else self.dense_gemm_efficiency
        return self.cluster.gpu.matmul_flops * eff

    def full_attn_throughput(self, lengths: np.ndarray, backward: bool) -> np.ndarray:
        """Achieved FLOP/s of non-causal ``L x L`` blocks over all the model's heads: the profile's
        full-block table, else the causal throughput at ``L`` (the only figure there is)."""
        table = self.profile.full_attention_table(backward)
        return table(lengths) if table is not None else self.attn_throughput(lengths, backward)

    def latency(self, group_size: int) -> float:
        """Per-collective latency of an aligned group (a profile's all-to-all fit when it has one)."""
        if group_size <= 1:
            return 0.0
        fit = self.profile.link("alltoall", group_size)
        if fit is not None:
            return fit.latency_s
        measured = Profile.lookup(self.profile.latency_s_by_degree, group_size)
        return measured if measured is not None else self.cluster.latency(group_size)

    def alltoall_latency(self, group_size: int) -> float:
        """Latency of an all-to-all of an aligned group: a profile's all-to-all fit when it has one, else
        the cluster's latency plus its per-peer latency for every peer."""
        if group_size <= 1:
            return 0.0
        if self.profile.link("alltoall", group_size) is not None or self.profile.latency_s_by_degree:
            return self.latency(group_size)
        return self.cluster.alltoall_latency(group_size)

    def alltoall_seconds_per_byte(self, group_size: int) -> float:
        """Bandwidth part of an all-to-all per byte sent by each GPU."""
        if group_size <= 1:
            return 0.0
        fit = self.profile.link("alltoall", group_size)
        if fit is not None:
            return 1.0 / fit.bandwidth
        measured = Profile.lookup(self.profile.alltoall_bw_by_degree, group_size)
        if measured is not None:
            return 1.0 / measured
        return alltoall_traffic(1.0, group_size, self.cluster.gpus_per_node).time(self.cluster)

    def p2p_seconds_per_byte(self, group_size: int) -> float:
        """Bandwidth part of one ring hop per byte inside a group of ``group_size``."""
        if group_size <= 1:
            return 0.0
        fit = self.profile.link("p2p", group_size)
        if fit is not None:
            return 1.0 / fit.bandwidth
        measured = Profile.lookup(self.profile.p2p_bw_by_degree, group_size)
        if measured is not None:
            return 1.0 / measured
        return ring_traffic(1.0, group_size, self.cluster.gpus_per_node).time(self.cluster)

    # ---- collectives -----------------------------------------------------------------------------
    def alltoall_time(self, bytes_per_gpu: float, group_size: int) -> float:
        """One all-to-all in which each GPU sends ``bytes_per_gpu`` to its peers."""
        return self.alltoall_latency(group_size) + bytes_per_gpu * self.alltoall_seconds_per_byte(group_size)

    def ring_collective_time(self, bytes_moved: float, group_size: int, collective: str = "allgather") -> float:
        """Ring all-gather / reduce-scatter (``collective``) moving ``bytes_moved`` per GPU over the group."""
        if group_size <= 1:
            return 0.0
        fit = self.profile.link(collective, group_size)
        if fit is not None:
            return fit.time(bytes_moved)
        if self.profile.allgather_bw is not None:
            return self.latency(group_size) + bytes_moved / self.profile.allgather_bw
        traffic = ring_collective_traffic(bytes_moved, group_size, self.cluster.gpus_per_node)
        return collective_time(traffic, self.cluster, group_size)

    # ---- backend level (per-backend formulas in nspsim.cost.backends) -------------------------
    def _node_cost(self, degree: int) -> NodeCost:
        """Degree-1 nodes cost the same under every backend; larger ones are the backend's."""
        return self._backend if degree > 1 else LOCAL

    def attention(self, lengths: np.ndarray, degree: int) -> AttentionCost:
        """Phase times of one node of ``degree`` holding ``lengths``, one layer, per GPU."""
        lengths = np.asarray(lengths, dtype=np.int64)
        if lengths.size == 0:
            return AttentionCost(Phases(0.0, 0.0, 0.0), Phases(0.0, 0.0, 0.0))
        return self._node_cost(degree).node(self, lengths, degree)

    def recompute_attention(self, lengths: np.ndarray, degree: int) -> Phases:
        """Re-send Q/K/V and rerun the forward kernel (:func:`recompute_phases`)."""
        return recompute_phases(self.attention(lengths, degree).fwd)

    def recompute_sample_parts(self, lengths: np.ndarray, degree: int) -> tuple[np.ndarray, np.ndarray, float] | None:
        """Per-sample (prologue, compute) of the recompute pass at ``degree`` and its prologue latency:
        :meth:`recompute_attention` of any non-empty subsequence S of ``lengths`` is exactly
        ``Phases(float(pro[S].sum()) + latency, float(comp[S].sum()), 0.0)`` (the backend's
        :meth:`~nspsim.cost.backends.base.NodeCost.forward_parts`); ``None`` for a backend whose node
        is not additive that way (Ring)."""
        return self._node_cost(degree).forward_parts(self, np.asarray(lengths, dtype=np.int64), degree)

    def attention_sample_costs(self, lengths: np.ndarray, degree: int) -> SampleCosts:
        """Additive per-sample totals at ``degree`` (all phases, no latency), one layer."""
        lengths = np.asarray(lengths, dtype=np.int64)
        return self._node_cost(degree).sample_costs(self, lengths, degree)

    def node_overhead(self, degree: int) -> tuple[float, float]:
        """Latency of a non-empty node per layer: two all-to-alls (Ulysses) or k-1 ring steps."""
        if degree <= 1:
            return 0.0, 0.0
        lat = self._backend.collectives_per_node(degree) * self._backend.collective_latency(self, degree)
        return lat, lat

    # ---- model level ---------------------------------------------------------------------------
    def _ffn_fwd_flops_per_token(self) -> float:
        return 2.0 * self.model.active_ffn_params_per_layer

    def _ep_alltoall(self, tokens: float) -> float:
        """One expert-parallel dispatch (or combine) all-to-all for ``tokens`` local tokens."""
        ep = self.training.expert_parallel
        if self.model.moe is None or ep <= 1:
            return 0.0
        sent = tokens * self.model.moe.top_k * self.model.hidden * self.training.act_bytes * (ep - 1) / ep
        return self.alltoall_time(sent, ep)

    def tile_padding_flops(self) -> tuple[float, float]:
        """(fwd, bwd) GEMM FLOPs one layer wastes on ragged last tiles on a GPU that holds tokens
        (module doc): (tile - 1) / 2 rows per dense GEMM and per local expert, i.e. that many rows of
        every weight the GPU multiplies by; backward redoes it for the data and weight gradients and
        for the matmuls activation checkpointing reruns."""
        return self._padding

    def _tile_padding(self) -> tuple[float, float]:
        pad_rows = (self.cluster.gpu.gemm_tile_rows - 1) / 2.0
        model, moe = self.model, self.model.moe
        if moe is None:
            ffn = float(model.active_ffn_params_per_layer)
            other = float(model.attention_params_per_layer)
        else:  # the local experts' weights, the shared expert; the router is a dense GEMM
            local_experts = max(moe.num_experts // self.training.expert_parallel, 1)
            ffn = 3.0 * model.hidden * (local_experts * moe.expert_ffn + moe.shared_expert_ffn)
            other = float(model.attention_params_per_layer + model.hidden * moe.num_experts)
        fwd = 2.0 * pad_rows * (other + ffn)
        op_share = (
            self.recompute_flops_per_token() / model.dense_flops_per_token_layer
            if self.training.checkpointing is Checkpointing.OP
            else 0.0
        )
        recomputed = {
            Checkpointing.NONE: 0.0,
            Checkpointing.SELECTIVE: 2.0 * pad_rows * ffn,
            Checkpointing.OP: fwd * op_share,  # the rerun matmuls' share of the layer's FLOPs
            Checkpointing.FULL: fwd,
        }[self.training.checkpointing]
        return fwd, 2.0 * fwd + recomputed

    def recompute_flops_per_token(self) -> float:
        """Forward matmul FLOPs per token and layer that backward reruns under the training's activation
        checkpointing (:class:`~nspsim.specs.training.Checkpointing`): none; the FFN (selective); every
        second matmul in execution order (op: torchtitan's policy, which for Llama reruns wk, wo and w3);
        the whole layer outside the attention core (full, whose attention core reruns through the
        recompute pass the simulator charges every sample). Computed once per cost model."""
        return self._recompute

    def _recompute_flops(self) -> float:
        dense = self.model.dense_flops_per_token_layer
        every_second = sum(flops for flops, _ in self.model.forward_matmuls()[1::2])
        return {
            Checkpointing.NONE: 0.0,
            Checkpointing.SELECTIVE: self._ffn_fwd_flops_per_token(),
            Checkpointing.OP: every_second,
            Checkpointing.FULL: dense,
        }[self.training.checkpointing]

    def elementwise_seconds_per_token(self) -> tuple[float, float]:
        """(fwd, bwd) seconds per token and layer of the memory-bound element-wise work
        (:mod:`nspsim.cost.elementwise`), backward including what checkpointing reruns."""
        return self._elementwise

    def _elementwise_times(self) -> tuple[float, float]:
        if not self.elementwise:
            return 0.0, 0.0
        traffic = elementwise_traffic(self.model, self.training.fused_elementwise)
        rerun = {
            Checkpointing.NONE: 0.0,
            Checkpointing.SELECTIVE: traffic.ffn_fwd,
            Checkpointing.OP: traffic.fwd,
            Checkpointing.FULL: traffic.fwd,
        }[self.training.checkpointing]
        per_element = self.training.act_bytes / self.hbm_bandwidth
        return traffic.fwd * per_element, (traffic.bwd + rerun) * per_element

    def stream_seconds_per_byte(self) -> float:
        """HBM seconds per byte of element-wise kernels (0 with ``elementwise`` off)."""
        return 1.0 / self.hbm_bandwidth if self.elementwise else 0.0

    @property
    def hbm_bandwidth(self) -> float:
        """Achieved HBM bandwidth of streaming kernels (B/s): the GPU's measured stream efficiency."""
        return self.cluster.gpu.hbm_bw * self.cluster.gpu.hbm_stream_efficiency

    def non_attention(self, tokens: float) -> NonAttentionCost:
        """Non-attention time of one layer for ``tokens`` sharded tokens on one GPU."""
        if tokens <= 0:
            return NonAttentionCost(0.0, 0.0, 0.0, 0.0)
        fwd_fit, bwd_fit = self._fits("nonattn")
        a2a = self._ep_alltoall(tokens)
        bwd_a2a = (2 if self.training.checkpointing is Checkpointing.NONE else 4) * a2a  # + the rerun FFN's
        if fwd_fit is not None and bwd_fit is not None:
            return NonAttentionCost(fwd_fit(tokens), bwd_fit(tokens), 2 * a2a, bwd_a2a)
        pad_fwd, pad_bwd = self.tile_padding_flops()
        fwd_flops = tokens * self.model.dense_flops_per_token_layer + pad_fwd
        bwd_flops = 2.0 * tokens * self.model.dense_flops_per_token_layer + tokens * self.recompute_flops_per_token()
        bwd_flops += pad_bwd
        ew_fwd, ew_bwd = self.elementwise_seconds_per_token()
        return NonAttentionCost(
            fwd_flops / self.nonattn_flops + tokens * ew_fwd,
            bwd_flops / self.nonattn_flops + tokens * ew_bwd,
            2 * a2a,
            bwd_a2a,
        )

    def head(self, tokens: float) -> tuple[float, float]:
        """Output head (logits) time; the embedding lookup is negligible (a profile's measured
        embedding, head and loss time when it has one)."""
        fwd_fit, bwd_fit = self._fits("head")
        if fwd_fit is not None and bwd_fit is not None:
            return (fwd_fit(tokens), bwd_fit(tokens)) if tokens > 0 else (0.0, 0.0)
        fwd = tokens * self.model.head_flops_per_token / (self.cluster.gpu.matmul_flops * self.dense_gemm_efficiency)
        loss_fwd, loss_bwd = self._loss
        return fwd + tokens * loss_fwd, 2.0 * fwd + tokens * loss_bwd

    # ---- FSDP and optimizer ---------------------------------------------------------------------
    def fsdp(self) -> FsdpCost:
        """Per-layer all-gather of bf16 parameters and reduce-scatter of gradients."""
        p, ep = self.cluster.num_gpus, self.training.expert_parallel
        dense = self.model.params_per_layer - self.model.expert_params_per_layer
        experts = self.model.expert_params_per_layer / ep
        replicas = max(p // ep, 1)
        moved = dense * (p - 1) / p + experts * (replicas - 1) / replicas
        gather = self.ring_collective_time(moved * self.training.param_bytes, p, "allgather")
        scatter = self.ring_collective_time(moved * self.training.grad_bytes, p, "reduce_scatter")
        return FsdpCost(allgather=gather, reduce_scatter=scatter)

    def optimizer_time(self) -> float:
        """AdamW step: HBM-bound on the GPU, or PCIe transfers plus host Adam when offloaded."""
        params = self.model.total_params / self.cluster.num_gpus
        if self.profile.optimizer_s is not None:  # measured for this model at this rank count
            return self.profile.optimizer_s
        if self.training.optimizer_offload:
            moved = params * (self.training.grad_bytes + self.training.param_bytes)
            return moved / self.cluster.host_bw + params / self.training.cpu_adam_params_per_s
        touched = params * (2 * self.training.optim_bytes + self.training.param_bytes + self.training.grad_bytes)
        return touched / self.cluster.gpu.hbm_bw

    def compute_slots(self) -> float | None:
        """A profile's measured cores per host when its ranks share them (``host_cores``), else ``None``."""
        return self.profile.host_cores

    def step_overhead(self) -> float:
        """Fixed time of one step per GPU beyond its work: control traffic (a profile's measurement; 0
        analytically, where it is microseconds next to a step of seconds)."""
        return self.profile.step_s or 0.0

    def micro_batch_overhead(self) -> float:
        """Fixed time of one micro-batch per GPU beyond its layers and head (a profile's measurement;
        0 analytically: a GPU's per-micro-batch launches are negligible next to its kernels)."""
        return self.profile.micro_batch_s or 0.0

    def lockstep_waits(self) -> Callable[[int, float], float] | None:
        """A profile's measured lockstep-wait tables by group size (nearest smaller measured size), or
        ``None``: analytically ranks own their devices and arrive together."""
        tables = self.profile.lockstep_wait_by_size
        if not tables:
            return None

        def wait(group_size: int, work_s: float) -> float:
            table = lookup_degree(tables, group_size)
            return 0.0 if table is None or group_size <= 1 else table(work_s)

        return wait

    def _fits(self, part: str) -> tuple[AffineFit | None, AffineFit | None]:
        """The profile's affine fits of ``part`` (``nonattn`` or ``head``) time per token, fwd and bwd."""
        if part not in self._affine:
            tables = [getattr(self.profile, f"{part}_{d}_s_by_tokens") for d in ("fwd", "bwd")]
            self._affine[part] = tuple(None if t is None else AffineFit.of(t) for t in tables)  # type: ignore[assignment]
        return self._affine[part]

    def gathered_layer_bytes(self) -> float:
        """Bytes of one layer's gathered parameters (what FSDP materialises per GPU)."""
        return gathered_layer_params(self.model, self.training) * self.training.param_bytes
